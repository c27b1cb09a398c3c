//! Whether a prepared source still matches what it was prepared from: its settings in the
//! config (the manifest's fingerprint), its local input files (their checksums) and its
//! tokenizer file. `gen run` checks every source it touches, every run, and says what changed,
//! one line per change; what it does about it is the orchestrator's decision.
//!
//! A local file is hashed again only when its size or modification time differ from what its
//! preparation recorded (as `make` and `rsync` decide); without that record, always. A Hub
//! source is compared by its settings, `revision` included: its files are not fetched again
//! to see whether a branch moved.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::store::manifest::PrepManifest;
use crate::store::manifest::{FileStat, InputState};

/// What `manifest` says its source was prepared from.
pub fn recorded(manifest: &PrepManifest) -> InputState {
    if let Some(kept) = &manifest.kept_for {
        return kept.clone();
    }
    InputState {
        fingerprint: manifest.counters.fingerprint.clone(),
        settings: manifest.settings.clone(),
        tokenizer_checksum: manifest.counters.tokenizer_checksum.clone(),
        checksums: manifest.counters.checksums.clone(),
        stats: manifest.input_stats.clone(),
    }
}

/// A source's inputs now, and how they differ from `recorded`.
#[derive(Debug)]
pub struct Comparison {
    pub now: InputState,
    /// One line per change (empty: nothing changed).
    pub changes: Vec<String>,
}

/// How a source's prompts are read: from local files or the Hub with the config's settings, or
/// from what its custom worker wrote (`output`, normalized with settings resolved against `/`).
pub enum Reader<'a> {
    Builtin { base_dir: &'a Path },
    Custom { output: &'a Path },
}

/// Compares source `spec`'s inputs now with `recorded`.
pub fn compare(
    spec: &gen_sources::SourceSpec,
    reader: &Reader<'_>,
    recorded: &InputState,
) -> Comparison {
    let mut changes = Vec::new();
    let (spec, base_dir) = match reader {
        Reader::Builtin { base_dir } => (spec.clone(), *base_dir),
        Reader::Custom { output } => {
            let mut spec = spec.clone();
            spec.path = Some(toml::Spanned::new(
                0..0,
                output.to_string_lossy().into_owned(),
            ));
            spec.repo = None;
            (spec, Path::new("/"))
        }
    };
    let tokenizer = spec.tokenizer_path(base_dir);
    let tokenizer_checksum = tokenizer
        .as_deref()
        .map(|path| gen_sources::prepare::file_checksum(path).map_err(|e| (path, e)));
    let tokenizer_checksum = match tokenizer_checksum {
        None => None,
        Some(Ok(checksum)) => Some(checksum),
        Some(Err((path, e))) => {
            changes.push(format!(
                "its tokenizer file `{}` cannot be read: {e}",
                path.display()
            ));
            None
        }
    };
    let settings = spec.settings();
    let fingerprint = spec.fingerprint_with_tokenizer(tokenizer_checksum.as_deref());
    if fingerprint != recorded.fingerprint {
        let before = changes.len();
        if let Some(old) = &recorded.settings {
            changes.extend(setting_changes(old, &settings, reader));
        }
        if tokenizer_checksum.is_some() && tokenizer_checksum != recorded.tokenizer_checksum {
            changes.push(format!(
                "its tokenizer file `{}` changed",
                tokenizer.as_deref().unwrap_or(Path::new("")).display()
            ));
        }
        if changes.len() == before {
            changes.push(format!(
                "its settings changed (fingerprint {}, now {fingerprint})",
                recorded.fingerprint
            ));
        }
    }
    let mut now = InputState {
        fingerprint,
        settings: Some(settings),
        tokenizer_checksum,
        checksums: BTreeMap::new(),
        stats: BTreeMap::new(),
    };
    // Files are compared for local sources whose preparation recorded checksums.
    let local = matches!(reader, Reader::Builtin { .. }) && spec.repo.is_none();
    if local && !recorded.checksums.is_empty() {
        compare_files(&spec, base_dir, recorded, &mut now, &mut changes);
    }
    Comparison { now, changes }
}

/// The settings that differ between `old` and `new`, as `` `limit`: was 100, now 200 ``.
fn setting_changes(old: &Value, new: &Value, reader: &Reader<'_>) -> Vec<String> {
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return Vec::new();
    };
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        // A custom worker's `path` is where `gen` put its output, not a setting.
        .filter(|key| !(matches!(reader, Reader::Custom { .. }) && *key == "path"))
        .filter(|key| old.get(*key) != new.get(*key))
        .map(|key| {
            let show = |v: Option<&Value>| match v {
                None | Some(Value::Null) => "unset".to_owned(),
                Some(v) => v.to_string(),
            };
            format!(
                "`{}`: was {}, now {}",
                key.replace('_', "-"),
                show(old.get(key)),
                show(new.get(key))
            )
        })
        .collect()
}

/// Local files: gone, new, or with other content than when they were read.
fn compare_files(
    spec: &gen_sources::SourceSpec,
    base_dir: &Path,
    recorded: &InputState,
    now: &mut InputState,
    changes: &mut Vec<String>,
) {
    let pattern = spec.path.as_ref().map_or("", |p| p.get_ref().as_str());
    let files = match gen_sources::prepare::resolve_files(spec, base_dir) {
        Ok(files) => files,
        Err(e) => {
            changes.push(format!("its input cannot be listed: {e}"));
            return;
        }
    };
    let mut matched = std::collections::HashSet::new();
    for file in files {
        let relative = file.strip_prefix(base_dir).unwrap_or(&file).to_path_buf();
        let name = file.to_string_lossy().into_owned();
        let key = recorded_name(recorded, &name, &relative);
        let stat = FileStat::of(&file).ok();
        let Some(key) = key else {
            changes.push(format!(
                "`{}` is new (it matches `{pattern}`)",
                relative.display()
            ));
            continue;
        };
        matched.insert(key.clone());
        let old = &recorded.checksums[&key];
        let unchanged_stat = stat.is_some() && recorded.stats.get(&key) == stat.as_ref();
        let checksum = if unchanged_stat {
            old.clone()
        } else {
            match gen_sources::prepare::file_checksum(&file) {
                Ok(checksum) => checksum,
                Err(e) => {
                    changes.push(format!("`{}` cannot be read: {e}", relative.display()));
                    continue;
                }
            }
        };
        if checksum != *old {
            changes.push(format!(
                "`{}` changed since it was read (its content differs)",
                relative.display()
            ));
        }
        now.checksums.insert(name.clone(), checksum);
        if let Some(stat) = stat {
            now.stats.insert(name, stat);
        }
    }
    for gone in recorded.checksums.keys().filter(|k| !matched.contains(*k)) {
        changes.push(format!("`{gone}` is gone (no longer matches `{pattern}`)"));
    }
}

/// The name `recorded` has for a file found now as `name` (`relative` to the config's folder):
/// the same name, or — when `gen` was started from another directory, so the config's folder
/// is spelt differently — the one ending in the same relative path.
fn recorded_name(recorded: &InputState, name: &str, relative: &Path) -> Option<String> {
    if recorded.checksums.contains_key(name) {
        return Some(name.to_owned());
    }
    let mut candidates = recorded
        .checksums
        .keys()
        .filter(|k| PathBuf::from(k).ends_with(relative));
    match (candidates.next(), candidates.next()) {
        (Some(only), None) => Some(only.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> gen_sources::SourceSpec {
        toml::from_str(text).expect("spec")
    }

    /// What a preparation of `spec` would have recorded.
    fn prepared(spec: &gen_sources::SourceSpec, base: &Path) -> InputState {
        let reader = Reader::Builtin { base_dir: base };
        let mut state = compare(spec, &reader, &InputState::default()).now;
        for file in gen_sources::prepare::resolve_files(spec, base).expect("files") {
            let name = file.to_string_lossy().into_owned();
            state.checksums.insert(
                name.clone(),
                gen_sources::prepare::file_checksum(&file).expect("sum"),
            );
            state.stats.insert(name, FileStat::of(&file).expect("stat"));
        }
        state
    }

    #[test]
    fn unchanged_inputs_have_no_changes_and_each_change_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path();
        fs_err::create_dir_all(base.join("data")).expect("mkdir");
        fs_err::write(base.join("data/a.jsonl"), "{\"prompt\": \"one\"}\n").expect("write");
        let before = spec("name = \"a\"\npath = \"data/*.jsonl\"\nlimit = 5");
        let recorded = prepared(&before, base);
        let reader = Reader::Builtin { base_dir: base };
        assert_eq!(
            compare(&before, &reader, &recorded).changes,
            Vec::<String>::new()
        );

        // Same size, other content, and another file: both named.
        fs_err::write(base.join("data/a.jsonl"), "{\"prompt\": \"two\"}\n").expect("write");
        fs_err::write(base.join("data/b.jsonl"), "{\"prompt\": \"new\"}\n").expect("write");
        let after = spec("name = \"a\"\npath = \"data/*.jsonl\"\nlimit = 7");
        let changes = compare(&after, &reader, &recorded).changes;
        assert_eq!(
            changes,
            [
                "`limit`: was 5, now 7",
                "`data/a.jsonl` changed since it was read (its content differs)",
                "`data/b.jsonl` is new (it matches `data/*.jsonl`)",
            ]
        );
        fs_err::remove_file(base.join("data/b.jsonl")).expect("rm");
        fs_err::remove_file(base.join("data/a.jsonl")).expect("rm");
        let changes = compare(&before, &reader, &recorded).changes;
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(
            changes[0].starts_with("its input cannot be listed: "),
            "{changes:?}"
        );
    }

    #[test]
    fn a_config_folder_spelt_another_way_finds_the_same_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().join("project");
        fs_err::create_dir_all(base.join("data")).expect("mkdir");
        fs_err::write(base.join("data/a.jsonl"), "{\"prompt\": \"one\"}\n").expect("write");
        let source = spec("name = \"a\"\npath = \"data/a.jsonl\"");
        let recorded = prepared(&source, &base);
        let other = dir.path().join("project/../project");
        let reader = Reader::Builtin { base_dir: &other };
        assert_eq!(
            compare(&source, &reader, &recorded).changes,
            Vec::<String>::new()
        );
    }
}
