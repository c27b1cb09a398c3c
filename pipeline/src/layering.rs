//! Checks that dependencies inside `gen-pipeline` point down: `config` and `store` are the
//! bottom layers, so their sources may name only each other, `secrets` and the leaf module
//! `sys`. Anything else (`run`, `inference`, `status`, a command
//! module, or a `super::super` that climbs to the crate root) fails this test with
//! `file:line`, because a type those layers need belongs in them instead.

use std::path::{Path, PathBuf};

/// Crate-root names `config` and `store` may use.
const ALLOWED: &[&str] = &["config", "store", "secrets", "sys"];

/// The bottom layers, relative to the package root.
const LOWER_LAYERS: &[&str] = &["src/config", "src/store"];

/// Every `.rs` file under `dir`, sorted so failures read in a stable order.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = fs_err::read_dir(&dir).expect("source folder readable");
        for entry in entries {
            let path = entry.expect("folder entry readable").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The crate-root names a line of code reaches for: `crate::name…`, each name of a
/// `crate::{a, b::c}` group on that line, and `super::super` (which climbs past the layer).
fn reached_names(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    if code.contains("super::super") {
        names.push("super::super".to_owned());
    }
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
        rest = &rest[at + "crate::".len()..];
        if preceded_by_ident {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or_default();
            names.extend(
                inner
                    .split(',')
                    .map(first_segment)
                    .filter(|n| !n.is_empty()),
            );
        } else {
            names.push(first_segment(rest));
        }
    }
    names
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// `file:line: uses crate::name` for every forbidden reach in the lower layers.
fn violations(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for layer in LOWER_LAYERS {
        for file in sources(&root.join(layer)) {
            let text = fs_err::read_to_string(&file).expect("source file readable");
            let shown = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            for (number, line) in text.lines().enumerate() {
                // Doc and plain comments may mention other layers; only code depends on them.
                let code = line.split("//").next().unwrap_or_default();
                for name in reached_names(code) {
                    if !ALLOWED.contains(&name.as_str()) {
                        found.push(format!("{shown}:{}: uses `{name}`", number + 1));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn config_and_store_depend_on_nothing_above_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = violations(root);
    assert!(
        found.is_empty(),
        "`config` and `store` may use only {ALLOWED:?} of this crate; move what they need \
         down into them or into `sys`:\n{}",
        found.join("\n")
    );
}

#[test]
fn reached_names_reads_paths_groups_and_climbs() {
    assert_eq!(reached_names("use crate::run::feed::Order;"), ["run"]);
    assert_eq!(
        reached_names("use crate::{store::RunDir, status::state};"),
        ["store", "status"]
    );
    assert_eq!(
        reached_names("$crate::report::say(x)"),
        Vec::<String>::new()
    );
    assert_eq!(reached_names("use super::super::run;"), ["super::super"]);
    assert_eq!(reached_names("let x = 1;"), Vec::<String>::new());
}
