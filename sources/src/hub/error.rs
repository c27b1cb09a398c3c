//! Hub failures with what the user needs to act: repository, revision, file, HTTP status and
//! the likely cause. The token is never part of a message (hf-hub sends it as a header, and
//! request URLs never carry it).

use std::io;
use std::path::PathBuf;

use hf_hub::api::tokio::ApiError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    #[error("{}: the Hub answered HTTP {status}: {hint}", target(.repo, .revision, .file))]
    Denied {
        repo: String,
        revision: String,
        file: Option<String>,
        status: u16,
        hint: &'static str,
    },
    #[error("{}: request failed after {attempts} attempts", target(.repo, .revision, .file))]
    Network {
        repo: String,
        revision: String,
        file: Option<String>,
        attempts: u32,
        #[source]
        source: ApiError,
    },
    #[error("{}: no file matches {} ({available} files at commit `{commit}`)", target(.repo, .revision, &None), list_patterns(.patterns))]
    NoMatch {
        repo: String,
        revision: String,
        commit: String,
        patterns: Vec<String>,
        available: usize,
    },
    #[error("{}: not in the hub cache `{}` and `HF_HUB_OFFLINE` is set", target(.repo, .revision, .file), .cache_dir.display())]
    NotCached {
        repo: String,
        revision: String,
        file: Option<String>,
        cache_dir: PathBuf,
    },
    #[error("failed to use the hub cache at `{}`", .path.display())]
    Cache {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to set up the hub client")]
    Client(#[source] ApiError),
    #[error("failed to start the download runtime")]
    Runtime(#[source] io::Error),
}

fn target(repo: &str, revision: &str, file: &Option<String>) -> String {
    match file {
        Some(file) => format!("dataset `{repo}` at revision `{revision}`, file `{file}`"),
        None => format!("dataset `{repo}` at revision `{revision}`"),
    }
}

fn list_patterns(patterns: &[String]) -> String {
    patterns
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The HTTP status behind an hf-hub error, if the server answered at all.
pub(super) fn status_of(error: &ApiError) -> Option<u16> {
    match error {
        ApiError::RequestError(e) => e.status().map(|s| s.as_u16()),
        ApiError::TooManyRetries(inner) => status_of(inner),
        _ => None,
    }
}

/// Whether trying again may help: no answer at all (connection reset, timeout), or a server-side
/// or rate-limit status.
pub(super) fn is_transient(error: &ApiError) -> bool {
    match error {
        ApiError::RequestError(e) => match e.status() {
            Some(status) => {
                let status = status.as_u16();
                status >= 500 || status == 408 || status == 429
            }
            None => !e.is_builder(),
        },
        ApiError::TooManyRetries(inner) => is_transient(inner),
        _ => false,
    }
}

/// The likely cause of a refusal, as the Hub uses these statuses.
pub(super) fn hint(status: u16, file: bool, authenticated: bool) -> &'static str {
    match (status, file, authenticated) {
        (401, _, false) => "the dataset is gated or private and no token was sent: set `HF_TOKEN`",
        (401, _, true) => "the token in `HF_TOKEN` was rejected: it may be expired or mistyped",
        (403, _, _) => {
            "access refused: a gated dataset needs its conditions accepted on the Hub by the token's user, or the token lacks read permission"
        }
        (404, false, _) => {
            "no such dataset or revision: check the `repo` spelling and `revision` (a private dataset also answers 404 without a valid token)"
        }
        (404, true, _) => "the file does not exist at this revision",
        _ => "the request was refused",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_repo_revision_file_and_cause() {
        let error = HubError::Denied {
            repo: "o/n".to_owned(),
            revision: "main".to_owned(),
            file: Some("data/a.parquet".to_owned()),
            status: 403,
            hint: hint(403, true, true),
        };
        assert_eq!(
            error.to_string(),
            "dataset `o/n` at revision `main`, file `data/a.parquet`: the Hub answered HTTP 403: access refused: a gated dataset needs its conditions accepted on the Hub by the token's user, or the token lacks read permission"
        );
        let error = HubError::NoMatch {
            repo: "o/n".to_owned(),
            revision: "main".to_owned(),
            commit: "abc".to_owned(),
            patterns: vec!["data/*.parquet".to_owned()],
            available: 3,
        };
        assert_eq!(
            error.to_string(),
            "dataset `o/n` at revision `main`: no file matches `data/*.parquet` (3 files at commit `abc`)"
        );
    }
}
