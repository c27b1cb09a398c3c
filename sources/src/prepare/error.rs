//! What stops a source's preparation (a bad row never does).

use std::io;
use std::ops::Range;
use std::path::PathBuf;

use crate::hub::HubError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The file is unreadable, corrupt or truncated; rows before the fault were counted.
    #[error("failed to read `{}`", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("source `{source_name}`: failed to get the files from the Hub")]
    Hub {
        source_name: String,
        // Boxed: Hub errors are large and rare; every other variant stays cheap to return.
        #[source]
        source: Box<HubError>,
    },
    /// The `tokenizer` file is missing or not a tokenizer. The cause is part of the message
    /// (not a `source`), so a rendered chain shows it once.
    #[error("source `{source_name}`: {error}")]
    Tokenizer {
        source_name: String,
        error: crate::normalize::TokenizerError,
    },
    /// A `resolve` dataset could not be fetched: the rows whose prompt is there would be lost.
    #[error(
        "source `{source_name}`: cannot get `resolve.{dataset}` (split `{split}`), where the \
         prompts of its `{placeholder}` rows are; run again once the Hub gives it, or leave \
         those rows out on purpose with `exclude = {{ {field} = [\"{placeholder}\"] }}`",
        field = .marker.0,
        placeholder = .marker.1
    )]
    Resolve {
        source_name: String,
        dataset: String,
        split: String,
        /// The `prompt-field`, and the placeholder value that marks a row to resolve.
        // Boxed with the cause: the variant stays as small as the others.
        marker: Box<(String, String)>,
        #[source]
        source: Box<HubError>,
    },
    /// No row has the field the prompts are read from: a config error, not a data one.
    // Boxed: the details are large and rare; every other variant stays cheap to return.
    #[error(transparent)]
    FieldNotInData(Box<FieldNotInData>),
    /// Preparation kept no prompt at all.
    #[error("source `{source_name}` has no prompt: {summary}")]
    NoPrompts {
        source_name: String,
        summary: String,
    },
    #[error("source `{source_name}` has neither `path` nor `repo`")]
    NoInput { source_name: String },
    #[error("failed to write prompts")]
    Sink(#[source] io::Error),
    /// The sample's temporary files (a sample larger than memory goes on on disk).
    #[error("failed to keep the sample on disk")]
    Sample(#[source] io::Error),
}

/// No row of a source has the field its prompts are read from.
#[derive(Debug, thiserror::Error)]
#[error(
    "source `{source_name}`: {} ({rows} rows read); the data's fields are {}: {}",
    wanted(.key, .fields),
    quoted(.columns),
    hint(.key)
)]
pub struct FieldNotInData {
    pub source_name: String,
    /// `messages-field` or `prompt-field`; `None` for the default fields.
    pub key: Option<&'static str>,
    pub fields: Vec<String>,
    /// The fields the rows do have (of the first rows, or the Parquet schema).
    pub columns: Vec<String>,
    pub rows: u64,
    /// Where `key` is set in the config.
    pub span: Option<Range<usize>>,
}

impl SourceError {
    /// Where in the config the problem is, when it is a setting (a byte range of the file).
    pub fn span(&self) -> Option<Range<usize>> {
        match self {
            SourceError::FieldNotInData(missing) => missing.span.clone(),
            _ => None,
        }
    }
}

fn wanted(key: &Option<&'static str>, fields: &[String]) -> String {
    match (key, fields) {
        (Some(key), [field]) => format!("`{key} = \"{field}\"` names a field no row has"),
        _ => format!("no row has any of {}", quoted(fields)),
    }
}

fn hint(key: &Option<&'static str>) -> &'static str {
    match key {
        Some("messages-field") => {
            "set `messages-field` to the one holding the turns (or `prompt-field` for a plain prompt)"
        }
        Some(_) => "set `prompt-field` to the one holding the prompt",
        None => {
            "set `prompt-field` (a plain prompt) or `messages-field` (a list of turns) to one of them"
        }
    }
}

fn quoted(names: &[String]) -> String {
    if names.is_empty() {
        return "none".to_owned();
    }
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
