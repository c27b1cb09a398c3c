//! The preparation of one source: files → rows → normalized, deduplicated, sampled prompts.
//!
//! Sampling is bottom-k on a seeded hash of each prompt's id: deterministic, independent of
//! file order, and bounded to `limit` prompts in memory however large the source is.

use std::collections::{BTreeMap, BinaryHeap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::normalize::Normalizer;
use crate::prompt::{Prompt, content_hash, prompt_id};
use crate::read::JsonlRows;
use crate::spec::{Format, SourceSpec};

/// How many malformed or dropped rows are quoted in the manifest.
const MAX_EXAMPLES: usize = 5;

/// A failure that stops a source's preparation (a bad row never does).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("source `{source_name}`: `{pattern}` matches no file")]
    NoFiles {
        source_name: String,
        pattern: String,
    },
    #[error("source `{source_name}`: invalid glob `{pattern}`: {message}")]
    BadPattern {
        source_name: String,
        pattern: String,
        message: String,
    },
    #[error("failed to read `{}`", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("source `{source_name}`: format `{format:?}` of `{}` is not supported yet", path.display())]
    Unsupported {
        source_name: String,
        path: PathBuf,
        format: Format,
    },
    #[error("failed to write prompts")]
    Sink(#[source] io::Error),
}

/// A row that was skipped, quoted so the user can find it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowExample {
    pub file: PathBuf,
    pub row: u64,
    pub reason: String,
}

/// What preparation read, kept and dropped. Written next to the prompts file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub source: String,
    pub files: Vec<PathBuf>,
    pub rows_read: u64,
    /// Prompts written to the prompts file.
    pub kept: u64,
    /// Rows dropped, per reason (`bad_json`, `no_user_turn`, …).
    pub dropped: BTreeMap<String, u64>,
    pub duplicates_within: u64,
    /// Valid prompts left out by the sample (`limit`).
    pub sampled_out: u64,
    pub examples: Vec<RowExample>,
}

impl Manifest {
    fn drop_row(&mut self, file: &Path, row: u64, reason: &'static str, detail: String) {
        *self.dropped.entry(reason.to_owned()).or_default() += 1;
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push(RowExample {
                file: file.to_path_buf(),
                row,
                reason: detail,
            });
        }
    }
}

/// The files a source reads, in a stable order.
pub fn resolve_files(spec: &SourceSpec, base_dir: &Path) -> Result<Vec<PathBuf>, SourceError> {
    let pattern = spec.path.as_ref().map(|p| p.get_ref().as_str()).unwrap_or("");
    let full = base_dir.join(pattern);
    let full = full.to_string_lossy();
    let bad = |message: String| SourceError::BadPattern {
        source_name: spec.name().to_owned(),
        pattern: pattern.to_owned(),
        message,
    };
    let mut files = Vec::new();
    for entry in glob::glob(&full).map_err(|e| bad(e.to_string()))? {
        files.push(entry.map_err(|e| bad(e.to_string()))?);
    }
    files.sort();
    if files.is_empty() {
        return Err(SourceError::NoFiles {
            source_name: spec.name().to_owned(),
            pattern: full.into_owned(),
        });
    }
    Ok(files)
}

fn format_of(spec: &SourceSpec, path: &Path) -> Format {
    if let Some(format) = spec.format {
        return format;
    }
    let name = path.to_string_lossy();
    let name = name
        .strip_suffix(".zst")
        .or_else(|| name.strip_suffix(".gz"))
        .unwrap_or(&name);
    if name.ends_with(".parquet") {
        Format::Parquet
    } else if name.ends_with(".json") {
        Format::Json
    } else {
        Format::Jsonl
    }
}

/// A kept candidate in the bottom-k sample, ordered by its sampling key.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    key: u64,
    order: u64,
    prompt: PromptOrd,
}

/// `Prompt` does not need an order of its own; candidates are ordered by key and arrival.
struct PromptOrd(Prompt);

impl PartialEq for PromptOrd {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for PromptOrd {}
impl PartialOrd for PromptOrd {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for PromptOrd {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// Prepares one source: every kept prompt is passed to `sink` in input order.
pub fn prepare(
    spec: &SourceSpec,
    base_dir: &Path,
    sink: &mut dyn FnMut(&Prompt) -> io::Result<()>,
) -> Result<Manifest, SourceError> {
    let files = resolve_files(spec, base_dir)?;
    let normalizer = Normalizer::new(spec);
    let limit = usize::try_from(spec.limit()).unwrap_or(usize::MAX);
    let mut manifest = Manifest {
        source: spec.name().to_owned(),
        files: files.clone(),
        ..Manifest::default()
    };
    let mut seen: HashSet<u64> = HashSet::new();
    let mut occurrences: BTreeMap<u64, u32> = BTreeMap::new();
    let mut sample: BinaryHeap<Candidate> = BinaryHeap::new();
    let mut order = 0u64;
    for file in &files {
        let format = format_of(spec, file);
        if format != Format::Jsonl {
            return Err(SourceError::Unsupported {
                source_name: spec.name().to_owned(),
                path: file.clone(),
                format,
            });
        }
        let read_err = |source| SourceError::Read {
            path: file.clone(),
            source,
        };
        for row in JsonlRows::open(file).map_err(read_err)? {
            let (row, parsed) = row.map_err(read_err)?;
            manifest.rows_read += 1;
            let object = match parsed {
                Ok(serde_json::Value::Object(object)) => object,
                Ok(_) => unreachable!("the reader only yields objects"),
                Err(e) => {
                    manifest.drop_row(file, row, e.reason(), e.to_string());
                    continue;
                }
            };
            let messages = match normalizer.normalize(&object) {
                Ok(messages) => messages,
                Err(reason) => {
                    manifest.drop_row(file, row, reason.reason(), reason.detail());
                    continue;
                }
            };
            let hash = content_hash(&messages);
            let occurrence = if spec.dedup() {
                if !seen.insert(hash) {
                    manifest.duplicates_within += 1;
                    continue;
                }
                0
            } else {
                let n = occurrences.entry(hash).or_default();
                *n += 1;
                *n - 1
            };
            let id = prompt_id(spec.name(), hash, occurrence);
            let source_key = spec
                .id_field
                .as_ref()
                .and_then(|f| object.get(f))
                .map(|v| match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
            let key = xxh3_64_with_seed(id.as_bytes(), spec.seed());
            let candidate = Candidate {
                key,
                order,
                prompt: PromptOrd(Prompt {
                    id,
                    source: spec.name().to_owned(),
                    messages,
                    source_key,
                    row,
                }),
            };
            order += 1;
            sample.push(candidate);
            if sample.len() > limit {
                sample.pop();
                manifest.sampled_out += 1;
            }
        }
    }
    let mut kept: Vec<Candidate> = sample.into_vec();
    kept.sort_by_key(|c| c.order);
    for candidate in &kept {
        sink(&candidate.prompt.0).map_err(SourceError::Sink)?;
    }
    manifest.kept = kept.len() as u64;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_source(rows: &[&str], extra: &str) -> (tempfile::TempDir, SourceSpec) {
        let dir = tempfile::tempdir().expect("tempdir");
        fs_err::write(dir.path().join("data.jsonl"), rows.join("\n")).expect("write");
        let spec = toml::from_str(&format!("name = \"t\"\npath = \"data.jsonl\"\n{extra}"))
            .expect("spec");
        (dir, spec)
    }

    fn collect(spec: &SourceSpec, dir: &Path) -> (Vec<Prompt>, Manifest) {
        let mut out = Vec::new();
        let manifest = prepare(spec, dir, &mut |p| {
            out.push(p.clone());
            Ok(())
        })
        .expect("prepare");
        (out, manifest)
    }

    #[test]
    fn counts_drops_and_duplicates() {
        let (dir, spec) = write_source(
            &[
                r#"{"prompt": "a"}"#,
                r#"{"prompt": "a"}"#,
                r#"oops"#,
                r#"{"prompt": ""}"#,
                r#"{"messages": [{"role": "user", "content": "b"}]}"#,
            ],
            "",
        );
        let (prompts, manifest) = collect(&spec, dir.path());
        let texts: Vec<_> = prompts.iter().map(|p| p.messages[0].content.as_str()).collect();
        assert_eq!(texts, ["a", "b"]);
        assert_eq!(manifest.rows_read, 5);
        assert_eq!(manifest.kept, 2);
        assert_eq!(manifest.duplicates_within, 1);
        assert_eq!(manifest.dropped.get("bad_json"), Some(&1));
        assert_eq!(manifest.dropped.get("no_user_turn"), Some(&1));
        assert_eq!(manifest.examples[0].row, 2);
    }

    #[test]
    fn repeats_get_distinct_ids_without_dedup() {
        let (dir, spec) = write_source(&[r#"{"prompt": "a"}"#, r#"{"prompt": "a"}"#], "dedup = false");
        let (prompts, _) = collect(&spec, dir.path());
        assert_eq!(prompts.len(), 2);
        assert_eq!(prompts[1].id, format!("{}-1", prompts[0].id));
    }

    #[test]
    fn sample_is_deterministic_bounded_and_seeded() {
        let rows: Vec<String> = (0..200).map(|i| format!(r#"{{"prompt": "p{i}"}}"#)).collect();
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        let (dir, spec) = write_source(&rows, "limit = 10");
        let (first, manifest) = collect(&spec, dir.path());
        let (second, _) = collect(&spec, dir.path());
        assert_eq!(first.len(), 10);
        assert_eq!(manifest.sampled_out, 190);
        assert_eq!(first, second);
        assert!(first.windows(2).all(|w| w[0].row < w[1].row), "kept in input order");
        let (dir2, reseeded) = write_source(&rows, "limit = 10\nseed = 7");
        let (third, _) = collect(&reseeded, dir2.path());
        assert_ne!(first, third);
    }

    #[test]
    fn missing_files_name_the_pattern() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec: SourceSpec = toml::from_str("name = \"t\"\npath = \"nope/*.jsonl\"").expect("spec");
        let err = prepare(&spec, dir.path(), &mut |_| Ok(())).expect_err("no files");
        assert!(err.to_string().contains("nope/*.jsonl"), "{err}");
    }
}
