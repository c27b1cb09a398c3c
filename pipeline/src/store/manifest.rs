//! A source's `manifest.json`: the proof that its preparation completed (written atomically,
//! last, by the preparation worker) and what it was prepared from ([`InputState`]), which
//! `gen run` compares with the inputs now, `gen verify` checks and `gen merge` carries over.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::prompts::PromptIds;
use super::{RunDir, atomic};

/// `manifest.json`: the sources crate's counters plus what the pipeline needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrepManifest {
    pub layout: u32,
    /// Number of prompts in `prompts.jsonl.zst`.
    pub prompts: u64,
    /// The settings the prompts were prepared with ([`gen_sources::SourceSpec::settings`]),
    /// so a rerun can name the one that changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Value>,
    /// Size and modification time of each local input (by its name in `checksums`) when it was
    /// read: a rerun hashes a file again only when they differ.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_stats: BTreeMap<String, FileStat>,
    /// The inputs this preparation was kept for after they changed (`--keep-preparation`):
    /// later runs compare with these instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_for: Option<InputState>,
    /// The ids of `prompts.jsonl.zst`, recorded by the first counting pass of `gen run`, so a
    /// restart can tell that every prompt is done or settled without reading them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_ids: Option<PromptIds>,
    #[serde(flatten)]
    pub counters: gen_sources::Manifest,
}

impl PrepManifest {
    /// A warning when one reason dropped more than half the rows read: a setting that does
    /// not fit the data (a filter, a field) more likely than a few bad rows.
    pub fn warning(&self) -> Option<String> {
        let counters = &self.counters;
        let (reason, &count) = counters.dropped.iter().max_by_key(|(_, n)| **n)?;
        (count.saturating_mul(2) > counters.rows_read).then(|| {
            format!(
                "{count} of {} rows ({}%) dropped as `{reason}` (reasons and examples in manifest.json)",
                counters.rows_read,
                count * 100 / counters.rows_read.max(1)
            )
        })
    }
}

impl PrepManifest {
    /// What is wrong with the manifest's own counters: they must add up
    /// (`rows_read = kept + dropped + duplicates + sampled_out`, `prompts = kept`).
    pub fn counter_problems(&self) -> Vec<String> {
        let c = &self.counters;
        let dropped: u64 = c.dropped.values().sum();
        let accounted =
            c.kept + dropped + c.duplicates_within + c.duplicates_across + c.sampled_out;
        let mut problems = Vec::new();
        if c.rows_read != accounted {
            problems.push(format!(
                "manifest: rows_read {} != kept {} + dropped {dropped} + duplicates {} + {} + \
                 sampled_out {} (= {accounted})",
                c.rows_read, c.kept, c.duplicates_within, c.duplicates_across, c.sampled_out
            ));
        }
        if self.prompts != c.kept {
            problems.push(format!(
                "manifest: prompts {} != kept {}",
                self.prompts, c.kept
            ));
        }
        problems
    }

    /// Why this manifest is not the record of the prompts file of `prompts_len` bytes next to
    /// it, if it is not: counters that do not add up (damage), or the size of the file it
    /// counted (another file replaced it, or it is another run's manifest). `gen run` then
    /// prepares the source again; `gen verify` reports it.
    pub fn mismatch(&self, prompts_len: u64) -> Option<String> {
        if let Some(problem) = self.counter_problems().into_iter().next() {
            return Some(format!("does not add up ({problem})"));
        }
        let counted = self.prompt_ids.as_ref()?.bytes;
        (counted != prompts_len).then(|| {
            format!(
                "describes a prompts file of {counted} bytes, but `prompts.jsonl.zst` has \
                 {prompts_len}"
            )
        })
    }
}

/// What a preparation was made from (or kept for, see [`PrepManifest::kept_for`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InputState {
    /// [`gen_sources::SourceSpec::fingerprint_with_tokenizer`].
    pub fingerprint: String,
    /// [`gen_sources::SourceSpec::settings`], to name the setting that changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Value>,
    /// The tokenizer file's checksum, when the source has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_checksum: Option<String>,
    /// Local input files (as the manifest names them): `xxh3-128:<hex>`.
    #[serde(default)]
    pub checksums: BTreeMap<String, String>,
    /// Local input files: size and modification time when they were read.
    #[serde(default)]
    pub stats: BTreeMap<String, FileStat>,
}

/// Size and modification time of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    pub len: u64,
    pub modified_secs: i64,
    pub modified_nanos: i64,
}

impl FileStat {
    pub fn of(path: &Path) -> std::io::Result<FileStat> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = fs_err::metadata(path)?;
        Ok(FileStat {
            len: meta.len(),
            modified_secs: meta.mtime(),
            modified_nanos: meta.mtime_nsec(),
        })
    }
}

/// Reads a source's manifest: `Some` only when its preparation completed.
pub fn read_manifest(run_dir: &RunDir, source: &str) -> anyhow::Result<Option<PrepManifest>> {
    let dir = run_dir.source(source);
    let manifest: Option<PrepManifest> = atomic::read_json(&dir.manifest())?;
    Ok(manifest.filter(|_| dir.prompts().exists()))
}
