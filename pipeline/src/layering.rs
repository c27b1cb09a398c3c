//! Checks that dependencies point down. Inside `gen-pipeline`, each layer in [`RULES`] names
//! the crate paths its sources may use; anything else — `run`, a command module (`prep`,
//! `doctor`, `verify`, …), an item of `lib.rs`, or a `super::super` that climbs to the crate
//! root — fails this test with `file:line`, because what a layer needs belongs in it or below
//! it. The [`LEAVES`] use nothing of the crate but each other, and every layer may use them.
//! The commands that read a run directory do not use `run`. `gen-sources` and
//! `gen-diagnostics` do not depend on the pipeline at all.

use std::path::{Path, PathBuf};

/// Modules (files or folders) that use nothing of this crate but other leaves, so every layer
/// may use them.
const LEAVES: &[(&str, &str)] = &[
    ("src/sys.rs", "sys"),
    ("src/exit.rs", "exit"),
    ("src/notice.rs", "notice"),
    ("src/scale/shard.rs", "scale::shard"),
    ("src/scale/nodes.rs", "scale::nodes"),
    ("src/inference/kinds", "inference::kinds"),
    (
        "src/inference/signals/prometheus.rs",
        "inference::signals::prometheus",
    ),
];

/// `config` and `store` are the bottom layers: they use only each other and `secrets`.
const BOTTOM: &[&str] = &["config", "store", "secrets"];

/// `inference` uses the bottom layers, `report` and `status`.
const INFERENCE: &[&str] = &["config", "store", "secrets", "report", "status"];

/// `status` uses them too, and `scale`: a sharded job's view reads the records `scale` keeps.
const STATUS: &[&str] = &["config", "store", "secrets", "report", "scale"];

/// What the sources at a path (relative to the package root) may use besides the leaves and
/// their own module.
enum Rule {
    Only(&'static [&'static str]),
    /// Anything but these.
    Not(&'static [&'static str]),
}

/// Commands other than `gen run` read a run directory's files through `store`.
const NOT_RUN: Rule = Rule::Not(&["run"]);

const RULES: &[(&str, Rule)] = &[
    ("src/config", Rule::Only(BOTTOM)),
    ("src/store", Rule::Only(BOTTOM)),
    ("src/inference", Rule::Only(INFERENCE)),
    ("src/status", Rule::Only(STATUS)),
    ("src/diagnose.rs", NOT_RUN),
    ("src/verify.rs", NOT_RUN),
    ("src/export", NOT_RUN),
    ("src/merge.rs", NOT_RUN),
    ("src/scale", NOT_RUN),
];

/// Every `.rs` file at `path` (a file, or a folder searched through), sorted.
fn sources(path: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![path.to_path_buf()];
    while let Some(path) = pending.pop() {
        if !path.is_dir() {
            let rust = path.is_file() && path.extension().is_some_and(|e| e == "rs");
            found.extend(rust.then_some(path));
            continue;
        }
        for entry in fs_err::read_dir(&path).expect("source folder readable") {
            pending.push(entry.expect("folder entry readable").path());
        }
    }
    found.sort();
    found
}

/// The crate paths a line of code reaches for, use groups flattened (`crate::{a, b::{c, d}}`
/// is `a`, `b::c`, `b::d`), and `super::super` (which climbs past the layer).
fn reached_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    if code.contains("super::super") {
        paths.push("super::super".to_owned());
    }
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
        rest = &rest[at + "crate::".len()..];
        if !preceded_by_ident {
            paths.extend(use_tree(rest).0);
        }
    }
    paths
}

/// The paths a use tree at the start of `text` names, and the text after it.
fn use_tree(text: &str) -> (Vec<String>, &str) {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let (path, rest) = text.split_at(end);
    let Some(mut rest) = rest.strip_prefix('{') else {
        return (vec![path.trim_end_matches(':').to_owned()], rest);
    };
    let mut paths = Vec::new();
    loop {
        let (inner, after) = use_tree(rest);
        let named = inner.into_iter().filter(|p| !p.is_empty());
        paths.extend(named.map(|p| format!("{path}{p}")));
        rest = after.trim_start();
        match rest.strip_prefix(',') {
            Some(after) => rest = after,
            None => return (paths, rest.strip_prefix('}').unwrap_or(rest)),
        }
    }
}

/// Whether `path` is one of `modules` or inside one of them.
fn within(path: &str, modules: &[&str]) -> bool {
    modules.iter().any(|a| {
        path.strip_prefix(a)
            .is_some_and(|r| r.is_empty() || r.starts_with("::"))
    })
}

impl Rule {
    /// Whether a source under this rule may use `path`; `always`: its own module and the
    /// leaves that are files of their own (an inline module of `lib.rs` is a `lib.rs` item).
    fn allows(&self, path: &str, always: &[&str]) -> bool {
        match self {
            Rule::Only(modules) => within(path, modules) || within(path, always),
            Rule::Not(modules) => !within(path, modules),
        }
    }
}

/// `file:line: uses path` for every reach a rule or a leaf forbids.
fn violations(root: &Path) -> Vec<String> {
    let leaves: Vec<&str> = LEAVES
        .iter()
        .filter(|(file, _)| root.join(file).exists())
        .map(|(_, module)| *module)
        .collect();
    let leaf_rules = LEAVES.iter().map(|(file, _)| (*file, &Rule::Only(&[])));
    let mut found = Vec::new();
    for (path, rule) in RULES.iter().map(|(p, r)| (*p, r)).chain(leaf_rules) {
        let own = path.trim_start_matches("src/").trim_end_matches(".rs");
        let own = own.replace('/', "::");
        let always = [&leaves[..], &[own.as_str()]].concat();
        if !root.join(path).exists() {
            found.push(format!("{path}: missing"));
        }
        for file in sources(&root.join(path)) {
            let text = fs_err::read_to_string(&file).expect("source file readable");
            let shown = file.strip_prefix(root).unwrap_or(&file).display();
            for (number, line) in text.lines().enumerate() {
                // Doc and plain comments may mention other layers; only code depends on them.
                let code = line.split("//").next().unwrap_or_default();
                for reached in reached_paths(code) {
                    if !rule.allows(&reached, &always) {
                        found.push(format!("{shown}:{}: uses `{reached}`", number + 1));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn every_layer_depends_only_on_what_is_below_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = violations(root);
    assert!(
        found.is_empty(),
        "a layer uses what it may not (the allowed paths are in `RULES` and `LEAVES` of \
         `src/layering.rs`); move what it needs down into it or a leaf:\n{}",
        found.join("\n")
    );
}

#[test]
fn sources_and_diagnostics_do_not_depend_on_the_pipeline() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (package, forbidden) in [
        ("sources", &["gen-pipeline"][..]),
        ("diagnostics", &["gen-pipeline", "gen-sources"]),
        ("tests", &["gen-pipeline", "gen-sources"]),
    ] {
        let manifest = workspace.join(package).join("Cargo.toml");
        let text = fs_err::read_to_string(&manifest).expect("manifest readable");
        let code = text.lines().filter(|l| !l.trim_start().starts_with('#'));
        for line in code {
            let named = forbidden.iter().find(|name| line.contains(*name));
            assert!(
                named.is_none(),
                "`{package}/Cargo.toml` names {named:?}: {line}"
            );
        }
    }
}

#[test]
fn reached_paths_reads_paths_groups_and_climbs() {
    assert_eq!(
        reached_paths("use crate::run::feed::Order;"),
        ["run::feed::Order"]
    );
    assert_eq!(
        reached_paths("use crate::{store::RunDir, status::{self, state}};"),
        ["store::RunDir", "status::self", "status::state"]
    );
    assert_eq!(
        reached_paths("crate::scale::shard::Shard::contains(s, id)"),
        ["scale::shard::Shard::contains"]
    );
    assert!(within("scale::shard::Shard", &["scale::shard"]));
    assert!(!within("scale::sharding", &["scale::shard"]));
    assert!(reached_paths("$crate::report::say(x)").is_empty());
    assert_eq!(reached_paths("use super::super::run;"), ["super::super"]);
    assert!(reached_paths("let x = 1;").is_empty());
}
