//! The raw `[[source]]` table of `datasets.toml`, as written by the user, and its checks.
//!
//! Fields that semantic checks point at keep their [`Spanned`] position so a problem can be
//! reported as `file:line:column`. Parsing (types, unknown keys) is serde's job; [`SourceSpec::check`]
//! finds everything else, all at once.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

/// Prompts kept per source unless `limit` says otherwise.
pub const DEFAULT_LIMIT: u64 = 10_000;
/// Seed of the deterministic sample unless `seed` says otherwise.
pub const DEFAULT_SEED: u64 = 0;

/// One `[[source]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SourceSpec {
    /// Unique short name; used in prompt ids, file names and status.
    pub name: Spanned<String>,
    /// A local file or glob, relative to the config file.
    pub path: Option<Spanned<String>>,
    /// Row format; inferred from the file extension when absent.
    pub format: Option<Format>,
    /// How many prompts to keep (a seeded sample when the source has more).
    pub limit: Option<Spanned<i64>>,
    pub seed: Option<u64>,
    /// Field holding a plain prompt string (default: `prompt`, `instruction`, `question`, `problem`).
    pub prompt_field: Option<String>,
    /// Field holding a list of turns (default: `messages`, `conversations`, `conversation`).
    pub messages_field: Option<String>,
    /// Field holding the dataset's own row key, kept for tracing.
    pub id_field: Option<String>,
    /// Which user turns to keep.
    #[serde(default)]
    pub turns: TurnMode,
    /// What to do with a dataset's system prompt.
    #[serde(default)]
    pub system_prompt: SystemPolicy,
    /// Replacement system prompt, with `system-prompt = "replace"`.
    pub system_prompt_text: Option<Spanned<String>>,
    /// Drop exact duplicates after normalization (default on).
    pub dedup: Option<bool>,
    pub min_chars: Option<Spanned<i64>>,
    pub max_chars: Option<Spanned<i64>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    Jsonl,
    Json,
    Parquet,
}

/// `first`: the first user turn only. `all`: every user turn, for multi-turn regeneration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TurnMode {
    #[default]
    First,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
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

    /// Every semantic problem of this entry (types and unknown keys were already checked by
    /// serde).
    pub fn check(&self) -> Vec<SpecProblem> {
        let mut problems = Vec::new();
        let name = self.name.get_ref();
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            problems.push(SpecProblem {
                span: self.name.span(),
                message: format!(
                    "source name `{name}` must be non-empty and use only letters, digits, `_` and `-`"
                ),
            });
        }
        match &self.path {
            None => problems.push(SpecProblem {
                span: self.name.span(),
                message: format!("source `{name}` needs `path` (a local file or glob)"),
            }),
            Some(path) if path.get_ref().trim().is_empty() => problems.push(SpecProblem {
                span: path.span(),
                message: format!("source `{name}`: `path` is empty"),
            }),
            Some(_) => {}
        }
        if let Some(limit) = &self.limit
            && *limit.get_ref() < 1
        {
            problems.push(SpecProblem {
                span: limit.span(),
                message: format!("source `{name}`: `limit` must be at least 1"),
            });
        }
        for field in [&self.min_chars, &self.max_chars].into_iter().flatten() {
            if *field.get_ref() < 0 {
                problems.push(SpecProblem {
                    span: field.span(),
                    message: format!("source `{name}`: character bounds must not be negative"),
                });
            }
        }
        if let (Some(min), Some(max)) = (&self.min_chars, &self.max_chars)
            && min.get_ref() > max.get_ref()
        {
            problems.push(SpecProblem {
                span: max.span(),
                message: format!("source `{name}`: `max-chars` is below `min-chars`"),
            });
        }
        match (self.system_prompt, &self.system_prompt_text) {
            (SystemPolicy::Replace, None) => problems.push(SpecProblem {
                span: self.name.span(),
                message: format!(
                    "source `{name}`: `system-prompt = \"replace\"` needs `system-prompt-text`"
                ),
            }),
            (SystemPolicy::Keep | SystemPolicy::Drop, Some(text)) => problems.push(SpecProblem {
                span: text.span(),
                message: format!(
                    "source `{name}`: `system-prompt-text` is only used with `system-prompt = \"replace\"`"
                ),
            }),
            _ => {}
        }
        problems
    }
}
