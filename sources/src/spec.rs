//! The raw `[[source]]` table of `datasets.toml`, as written by the user, and its checks.
//!
//! Fields that semantic checks point at keep their [`Spanned`] position so a problem can be
//! reported as `file:line:column`. Parsing (types, unknown keys) is serde's job; [`SourceSpec::check`]
//! finds everything else, all at once.

mod check;
mod fingerprint;

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};
use toml::Spanned;

pub use crate::read::Format;

/// Prompts kept per source unless `limit` says otherwise.
pub const DEFAULT_LIMIT: u64 = 10_000;
/// Seed of the deterministic sample unless `seed` says otherwise.
pub const DEFAULT_SEED: u64 = 0;
/// Revision of a Hub source unless `revision` says otherwise.
pub const DEFAULT_REVISION: &str = "main";

/// One `[[source]]` entry.
///
/// A source reads either local files (`path`) or a Hugging Face dataset repository (`repo`,
/// with `revision`, `files` and the `config`/`split` placeholders those patterns may use).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SourceSpec {
    /// Unique short name; used in prompt ids, file names, status and worker arguments: ASCII
    /// letters, digits, `-`, `_` and `.`, not starting with `-` or `.`, at most 64 characters.
    pub name: Spanned<String>,
    /// A local file or glob, relative to the config file.
    pub path: Option<Spanned<String>>,
    /// A Hub dataset repository id (`owner/name`).
    pub repo: Option<Spanned<String>>,
    /// Branch, tag or commit of `repo` (default `main`; `refs/convert/parquet` works too).
    pub revision: Option<Spanned<String>>,
    /// The dataset config; fills `{config}` in `files`.
    pub config: Option<String>,
    /// The dataset split; fills `{split}` in `files`.
    pub split: Option<String>,
    /// Glob patterns selecting files of `repo` at `revision` (`*` stays within a folder).
    pub files: Option<Spanned<Vec<String>>>,
    /// Row format (`jsonl`, `json`, `parquet` or `csv`); when absent, each file's extension
    /// says (`.zst`/`.gz` looked through; see [`crate::read::format_of`]).
    pub format: Option<Format>,
    /// How many prompts to keep (a seeded sample when the source has more).
    pub limit: Option<Spanned<i64>>,
    pub seed: Option<u64>,
    /// Field holding a plain prompt string (default: `prompt`, `instruction`, `question`, `problem`).
    pub prompt_field: Option<Spanned<String>>,
    /// Field holding a list of turns (default: `messages`, `conversations`, `conversation`).
    pub messages_field: Option<Spanned<String>>,
    /// Key of a turn's role (default: `role`, then `from`).
    pub role_key: Option<String>,
    /// Key of a turn's text (default: `content`, then `value`).
    pub content_key: Option<String>,
    /// Field holding the dataset's own row key, kept for tracing.
    pub id_field: Option<String>,
    /// Which turns to keep: `first` (default), `all` or `history` (see [`TurnMode`]).
    #[serde(default)]
    pub turns: TurnMode,
    /// Keep at most this many user turns (later ones are cut, the row is kept).
    pub max_turns: Option<Spanned<i64>>,
    /// What becomes of tool turns: `keep` (default) or `cut` (see [`ToolTurns`]).
    #[serde(default)]
    pub tool_turns: ToolTurns,
    /// What to do with a dataset's system prompt.
    #[serde(default)]
    pub system_prompt: SystemPolicy,
    /// Replacement system prompt, with `system-prompt = "replace"`.
    pub system_prompt_text: Option<Spanned<String>>,
    /// Wraps a plain prompt: `{prompt}` is replaced by the (non-empty) prompt text.
    pub prompt_template: Option<Spanned<String>>,
    /// Tags whose `[TAG]`…`[/TAG]` wrapper is stripped from a plain prompt (R2E-Gym's `ISSUE`).
    pub strip_tags: Option<Vec<String>>,
    /// Keep only rows whose field has one of the listed values (compared as text).
    pub include: Option<Spanned<BTreeMap<String, Vec<String>>>>,
    /// Drop rows whose field has one of the listed values (compared as text).
    pub exclude: Option<Spanned<BTreeMap<String, Vec<String>>>>,
    /// Keep only rows whose `language-field` is one of these (case-insensitive).
    pub languages: Option<Spanned<Vec<String>>>,
    /// Field holding a row's language (default `language`).
    pub language_field: Option<String>,
    /// Drop exact duplicates after normalization (default on).
    pub dedup: Option<bool>,
    /// Bounds on the characters of a prompt's user turns.
    pub min_chars: Option<Spanned<i64>>,
    pub max_chars: Option<Spanned<i64>>,
    /// A Hugging Face `tokenizer.json` (relative to the config file) measuring prompts for
    /// `min-prompt-tokens` / `max-prompt-tokens`. Counted: the tokens of every message's content
    /// of the prompt as sent (system turn included), each encoded on its own without special
    /// tokens; the server's chat template adds its own tokens on top.
    pub tokenizer: Option<Spanned<String>>,
    pub min_prompt_tokens: Option<Spanned<i64>>,
    pub max_prompt_tokens: Option<Spanned<i64>>,
    /// Rows whose `prompt-field` is `resolve-placeholder` keep their prompt in another Hub
    /// dataset (OpenCodeReasoning's `-` inputs point into TACO and APPS): the row's `dataset` field
    /// names an entry here, and the prompt is row `index` (a number or a numeric string) of
    /// that dataset's `split`, in file order. A row that cannot be resolved is dropped and
    /// counted (`unresolved`); a dataset the Hub does not give fails the source.
    pub resolve: Option<Spanned<BTreeMap<String, ResolveSpec>>>,
    /// The prompt value that marks a row to resolve (default `-`).
    pub resolve_placeholder: Option<String>,
}

/// Where the prompts of one `resolve` dataset are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ResolveSpec {
    /// The Hub dataset repository (`owner/name`).
    pub repo: String,
    /// Branch, tag or commit (default `main`).
    pub revision: Option<String>,
    /// Glob patterns of one split's files, read in order; `{split}` is the row's `split`.
    pub files: Vec<String>,
    /// The field holding the prompt (default `question`).
    pub field: Option<String>,
}

/// Default of `resolve-placeholder`.
pub const DEFAULT_RESOLVE_PLACEHOLDER: &str = "-";
/// Default `field` of a `resolve` dataset.
pub const DEFAULT_RESOLVE_FIELD: &str = "question";
/// The row fields a resolved row is looked up by.
pub const RESOLVE_ROW_FIELDS: [&str; 3] = ["dataset", "split", "index"];

/// `first`: the first user turn only. `all`: every user turn, for multi-turn regeneration.
/// `history`: every turn up to the last user turn, the dataset's assistant turns kept as context
/// (Nemotron's `input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TurnMode {
    #[default]
    First,
    All,
    History,
}

/// `keep`: a conversation's tool calls and results are kept as context (and the row's `tools`
/// sent with it); only the answers are regenerated. `cut`: the conversation ends before its
/// first tool turn and the row's `tools` are left out, for trainers whose readers know no
/// tool turns (EAGLE's ShareGPT reader) or servers that mishandle them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolTurns {
    #[default]
    Keep,
    Cut,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SystemPolicy {
    /// Keep a dataset's system turn when it precedes the first user turn.
    #[default]
    Keep,
    /// Never forward a dataset's system turn (control prompts such as "detailed thinking on").
    Drop,
    /// Replace it with `system-prompt-text`.
    Replace,
}

/// A semantic problem in one `[[source]]`, with the byte span it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    pub span: Range<usize>,
    pub message: String,
}

impl SourceSpec {
    pub fn name(&self) -> &str {
        self.name.get_ref()
    }

    pub fn limit(&self) -> u64 {
        self.limit
            .as_ref()
            .map_or(DEFAULT_LIMIT, |l| u64::try_from(*l.get_ref()).unwrap_or(0))
    }

    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or(DEFAULT_SEED)
    }

    pub fn dedup(&self) -> bool {
        self.dedup.unwrap_or(true)
    }

    /// The Hub revision to resolve (`main` unless set).
    pub fn revision(&self) -> &str {
        self.revision
            .as_ref()
            .map_or(DEFAULT_REVISION, |r| r.get_ref().as_str())
    }

    /// `files` with `{config}` and `{split}` filled in.
    pub fn file_patterns(&self) -> Vec<String> {
        let Some(files) = &self.files else {
            return Vec::new();
        };
        files
            .get_ref()
            .iter()
            .map(|pattern| {
                let mut pattern = pattern.clone();
                if let Some(config) = &self.config {
                    pattern = pattern.replace("{config}", config);
                }
                if let Some(split) = &self.split {
                    pattern = pattern.replace("{split}", split);
                }
                pattern
            })
            .collect()
    }

    /// A stable hash of every setting that shapes this source's prompts (`<16 hex digits>`):
    /// equal fingerprints mean a rerun would produce the same prompts from the same files.
    pub fn fingerprint(&self) -> String {
        fingerprint::fingerprint(self, None)
    }

    /// The settings [`SourceSpec::fingerprint`] hashes, as a JSON object keyed by setting
    /// (snake_case), defaults written out: what a rerun compares to say which one changed.
    pub fn settings(&self) -> serde_json::Value {
        fingerprint::canonical(self, None)
    }

    /// [`SourceSpec::fingerprint`] including the checksum of the `tokenizer` file, whose
    /// contents shape the prompts as much as the settings do.
    pub fn fingerprint_with_tokenizer(&self, tokenizer_checksum: Option<&str>) -> String {
        fingerprint::fingerprint(self, tokenizer_checksum)
    }

    /// The `tokenizer` file, resolved against the config file's folder.
    pub fn tokenizer_path(&self, base_dir: &std::path::Path) -> Option<std::path::PathBuf> {
        self.tokenizer
            .as_ref()
            .map(|path| base_dir.join(path.get_ref()))
    }

    /// Every semantic problem of this entry (types and unknown keys were already checked by
    /// serde).
    pub fn check(&self) -> Vec<SpecProblem> {
        check::check(self)
    }
}
