//! The per-source result record: what was read, kept and dropped, and where it came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How many malformed or dropped rows are quoted in the manifest.
pub const MAX_EXAMPLES: usize = 5;

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
    /// [`crate::SourceSpec::fingerprint`] of the settings that produced this result.
    #[serde(default)]
    pub fingerprint: String,
    /// Files read, in order: local paths, or repository paths for a Hub source.
    pub files: Vec<PathBuf>,
    /// The Hub dataset, for a Hub source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// The revision as requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The commit sha the revision resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Per file (as in `files`): for a Hub file its etag, `sha256:<hex>` (LFS) or
    /// `git-sha1:<hex>` (small non-LFS files); for a local file `xxh3-128:<hex>`.
    #[serde(default)]
    pub checksums: BTreeMap<String, String>,
    /// The `tokenizer` file of the token-length filter, and its `xxh3-128:<hex>` checksum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_checksum: Option<String>,
    pub rows_read: u64,
    /// Prompts written to the prompts file.
    pub kept: u64,
    /// Rows dropped, per reason (`bad_json`, `invalid_utf8`, `no_user_turn`, `excluded:input`,
    /// `too_many_tokens`, …).
    pub dropped: BTreeMap<String, u64>,
    /// Repeats of a kept prompt (rows beyond its first). Every row of a prompt the sample left
    /// out counts in `sampled_out`, repeats included.
    pub duplicates_within: u64,
    /// What two prompts must share to be duplicates ([`crate::prompt::DEDUP_KEY`]); absent
    /// without deduplication, and in manifests of older `gen`s, which compared the content as
    /// it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    /// Prompts already kept by an earlier source (only with a shared seen-set).
    #[serde(default)]
    pub duplicates_across: u64,
    /// Valid prompts left out by the sample (`limit`).
    pub sampled_out: u64,
    /// Rows whose conversation was cut before a tool turn: a result that answers no call kept
    /// before it (what follows depends on a call the prompt does not carry), or any tool turn
    /// with `tool-turns = "cut"`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cut_at_tool_turn: u64,
    /// Prompts written that keep tool turns (an assistant's calls and the tools' results).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub with_tool_turns: u64,
    pub examples: Vec<RowExample>,
    /// The datasets `resolve` read prompts from (OpenCodeReasoning's TACO and APPS).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolved_from: Vec<super::ResolvedFrom>,
}

impl Manifest {
    /// Counts a dropped row under `key`; `detail` is rendered only for the first few.
    pub(super) fn drop_row(
        &mut self,
        file: &Path,
        row: u64,
        key: &str,
        detail: impl FnOnce() -> String,
    ) {
        match self.dropped.get_mut(key) {
            Some(count) => *count += 1,
            None => {
                self.dropped.insert(key.to_owned(), 1);
            }
        }
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push(RowExample {
                file: file.to_path_buf(),
                row,
                reason: detail(),
            });
        }
    }
}

/// The manifest form of a Hub etag.
pub(super) fn etag_checksum(etag: &str) -> String {
    match etag.len() {
        64 => format!("sha256:{etag}"),
        40 => format!("git-sha1:{etag}"),
        _ => format!("etag:{etag}"),
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
