//! Every error this crate returns, rendered as `gen` prints it (the message, then each cause):
//! no cause's text may appear again further up the chain. A cause belongs in `#[source]` or in
//! the message, never both.

use std::error::Error;
use std::io;
use std::path::PathBuf;

use hf_hub::api::tokio::ApiError;

use crate::hub::{ApiCause, HubError};
use crate::normalize::TokenizerError;
use crate::prepare::{FieldNotInData, SourceError};
use crate::read::{DecompressError, InvalidUtf8Column, JsonArrayError, RowError, TempFileError};

/// The message and every cause, outermost first.
fn chain(error: &(dyn Error + 'static)) -> Vec<String> {
    let mut texts = vec![error.to_string()];
    let mut next = error.source();
    while let Some(cause) = next {
        texts.push(cause.to_string());
        next = cause.source();
    }
    texts
}

/// The causes whose text an outer message already holds.
fn repeats(error: &(dyn Error + 'static)) -> Vec<String> {
    let texts = chain(error);
    let mut found = Vec::new();
    for (i, inner) in texts.iter().enumerate() {
        if inner.is_empty() {
            continue;
        }
        if texts[..i]
            .iter()
            .any(|outer| outer.contains(inner.as_str()))
        {
            found.push(format!("{texts:?}: `{inner}` is repeated"));
        }
    }
    found
}

/// hf-hub errors that carry a cause of their own, as the Hub client returns them.
fn api_errors() -> Vec<ApiError> {
    let builder = reqwest::Client::new()
        .get("not a url")
        .build()
        .expect_err("a relative URL is refused");
    vec![
        ApiError::RequestError(builder),
        ApiError::IoError(io::Error::other("connection reset by peer")),
    ]
}

fn hub_errors() -> Vec<HubError> {
    let target = || ("o/n".to_owned(), "main".to_owned());
    let mut errors = vec![
        HubError::Denied {
            repo: target().0,
            revision: target().1,
            file: Some("data/a.parquet".to_owned()),
            status: 404,
            code: Some("EntryNotFound".to_owned()),
            hint: "the file does not exist at this revision".to_owned(),
        },
        HubError::NoMatch {
            repo: target().0,
            revision: target().1,
            commit: "abc".to_owned(),
            patterns: vec!["data/*.parquet".to_owned()],
            available: 3,
        },
        HubError::NotCached {
            repo: target().0,
            revision: target().1,
            file: None,
            cache_dir: PathBuf::from("/cache/hub"),
        },
        HubError::Cache {
            path: PathBuf::from("/cache/hub"),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        },
        HubError::Runtime(io::Error::other("too many open files")),
    ];
    for api in api_errors() {
        errors.push(HubError::Network {
            repo: target().0,
            revision: target().1,
            file: None,
            attempts: 3,
            source: ApiCause(api),
        });
    }
    errors.extend(
        api_errors()
            .into_iter()
            .map(|api| HubError::Client(api.into())),
    );
    errors
}

/// What a reader's `io::Error` can carry.
fn read_errors() -> Vec<io::Error> {
    let data = |e: Box<dyn Error + Send + Sync>| io::Error::new(io::ErrorKind::InvalidData, e);
    vec![
        io::Error::from(io::ErrorKind::NotFound),
        data(Box::new(JsonArrayError::NotAnArray {
            found: "`{`".to_owned(),
        })),
        data(Box::new(JsonArrayError::Truncated { rows: 2, end: 90 })),
        data(Box::new(JsonArrayError::TrailingData { rows: 2, at: 91 })),
        data(Box::new(InvalidUtf8Column {
            column: "prompt".to_owned(),
            row: 3,
            unread_from: 0,
        })),
        data(Box::new(DecompressError {
            source: io::Error::new(io::ErrorKind::UnexpectedEof, "incomplete frame"),
        })),
        io::Error::new(
            io::ErrorKind::StorageFull,
            TempFileError {
                directory: PathBuf::from("/tmp"),
                source: io::Error::from(io::ErrorKind::StorageFull),
            },
        ),
    ]
}

fn source_errors() -> Vec<SourceError> {
    let name = || "s".to_owned();
    let mut errors = vec![
        SourceError::NoFiles {
            source_name: name(),
            pattern: "data/*.jsonl".to_owned(),
        },
        SourceError::BadPattern {
            source_name: name(),
            pattern: "[".to_owned(),
            message: "unclosed character class".to_owned(),
        },
        SourceError::Tokenizer {
            source_name: name(),
            error: TokenizerError {
                path: PathBuf::from("tokenizer.json"),
                message: "no such file".to_owned(),
            },
        },
        SourceError::FieldNotInData(Box::new(FieldNotInData {
            source_name: name(),
            key: Some("prompt-field"),
            fields: vec!["question".to_owned()],
            columns: vec!["input".to_owned()],
            rows: 10,
            span: None,
        })),
        SourceError::NoPrompts {
            source_name: name(),
            summary: "10 rows read, all dropped (empty)".to_owned(),
        },
        SourceError::NoInput {
            source_name: name(),
        },
        SourceError::Sink(io::Error::from(io::ErrorKind::StorageFull)),
        SourceError::Sample(io::Error::from(io::ErrorKind::StorageFull)),
    ];
    for source in read_errors() {
        errors.push(SourceError::Read {
            path: PathBuf::from("data/a.jsonl"),
            source,
        });
    }
    for hub in hub_errors() {
        errors.push(SourceError::Hub {
            source_name: name(),
            source: Box::new(hub),
        });
    }
    for hub in hub_errors() {
        errors.push(SourceError::Resolve {
            source_name: name(),
            dataset: "taco".to_owned(),
            split: "train".to_owned(),
            marker: Box::new(("input".to_owned(), "-".to_owned())),
            source: Box::new(hub),
        });
    }
    errors
}

/// A name per variant; the match has no wildcard, so a new variant must be added here, and to
/// the examples above (the test counts the names it saw).
fn variant(error: &SourceError) -> &'static str {
    match error {
        SourceError::NoFiles { .. } => "NoFiles",
        SourceError::BadPattern { .. } => "BadPattern",
        SourceError::Read { .. } => "Read",
        SourceError::Hub { .. } => "Hub",
        SourceError::Tokenizer { .. } => "Tokenizer",
        SourceError::Resolve { .. } => "Resolve",
        SourceError::FieldNotInData(_) => "FieldNotInData",
        SourceError::NoPrompts { .. } => "NoPrompts",
        SourceError::NoInput { .. } => "NoInput",
        SourceError::Sink(_) => "Sink",
        SourceError::Sample(_) => "Sample",
    }
}

fn hub_variant(error: &HubError) -> &'static str {
    match error {
        HubError::Denied { .. } => "Denied",
        HubError::Network { .. } => "Network",
        HubError::NoMatch { .. } => "NoMatch",
        HubError::NotCached { .. } => "NotCached",
        HubError::Cache { .. } => "Cache",
        HubError::Client(_) => "Client",
        HubError::Runtime(_) => "Runtime",
    }
}

#[test]
fn every_example_covers_every_variant() {
    let sources: std::collections::BTreeSet<_> = source_errors().iter().map(variant).collect();
    assert_eq!(sources.len(), 11, "{sources:?}");
    let hubs: std::collections::BTreeSet<_> = hub_errors().iter().map(hub_variant).collect();
    assert_eq!(hubs.len(), 7, "{hubs:?}");
}

#[test]
fn no_error_prints_a_cause_twice() {
    let mut found = Vec::new();
    for error in source_errors() {
        found.extend(repeats(&error));
    }
    for error in read_errors() {
        found.extend(repeats(&error));
    }
    let rows = [
        RowError::BadJson("expected value at line 1 column 1".to_owned()),
        RowError::NotAnObject,
        RowError::InvalidUtf8 { at: 3 },
    ];
    for error in &rows {
        found.extend(repeats(error));
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn a_tokenizer_error_shows_its_cause_once() {
    let error = SourceError::Tokenizer {
        source_name: "s".to_owned(),
        error: TokenizerError {
            path: PathBuf::from("tokenizer.json"),
            message: "no such file".to_owned(),
        },
    };
    assert_eq!(
        chain(&error),
        ["source `s`: cannot load tokenizer `tokenizer.json`: no such file"]
    );
}

#[test]
fn a_hub_client_error_goes_on_past_the_text_it_repeats() {
    let error = HubError::Network {
        repo: "o/n".to_owned(),
        revision: "main".to_owned(),
        file: None,
        attempts: 3,
        source: ApiCause(ApiError::IoError(io::Error::other("connection reset"))),
    };
    assert_eq!(
        chain(&error),
        [
            "dataset `o/n` at revision `main`: request failed after 3 attempts",
            "I/O error connection reset",
        ]
    );
}
