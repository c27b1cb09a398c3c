//! Hub failures with what the user needs to act: repository, revision, file, HTTP status and
//! the likely cause. The token is never part of a message (hf-hub sends it as a header, and
//! request URLs never carry it).

use std::io;
use std::path::PathBuf;

use hf_hub::api::tokio::ApiError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    #[error("{}: the Hub answered HTTP {status}{}: {hint}", target(.repo, .revision, .file), code_of(.code))]
    Denied {
        repo: String,
        revision: String,
        file: Option<String>,
        status: u16,
        /// The Hub's `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`,
        /// `GatedRepo`): what is missing or refused, which the status alone does not say.
        code: Option<String>,
        hint: String,
    },
    #[error("{}: request failed after {attempts} attempts", target(.repo, .revision, .file))]
    Network {
        repo: String,
        revision: String,
        file: Option<String>,
        attempts: u32,
        #[source]
        source: ApiCause,
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
    Client(#[source] ApiCause),
    #[error("failed to start the download runtime")]
    Runtime(#[source] io::Error),
}

/// An hf-hub error as the cause of a [`HubError`]. hf-hub writes its own cause into its message
/// (`request error: {0}`, `I/O error {0}`) and also returns it as its source, so a rendered
/// chain would print that text twice: the chain goes on from the first cause whose text the
/// message does not already hold.
#[derive(Debug)]
pub struct ApiCause(pub ApiError);

impl From<ApiError> for ApiCause {
    fn from(error: ApiError) -> ApiCause {
        ApiCause(error)
    }
}

impl std::fmt::Display for ApiCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ApiCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let shown = self.0.to_string();
        let mut next = std::error::Error::source(&self.0);
        while let Some(cause) = next {
            if !shown.contains(&cause.to_string()) {
                break;
            }
            next = cause.source();
        }
        next
    }
}

fn target(repo: &str, revision: &str, file: &Option<String>) -> String {
    match file {
        Some(file) => format!("dataset `{repo}` at revision `{revision}`, file `{file}`"),
        None => format!("dataset `{repo}` at revision `{revision}`"),
    }
}

fn code_of(code: &Option<String>) -> String {
    code.as_ref()
        .map_or_else(String::new, |c| format!(" ({c})"))
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

/// What a refusal means: from the Hub's `X-Error-Code` when it sent one (the Hub answers a
/// missing repository with 401 to a request without a token, so the status alone cannot tell a
/// typo from a gated dataset), else the likely cause of the status.
pub(super) fn hint(
    status: u16,
    code: Option<&str>,
    revision: &str,
    file: bool,
    authenticated: bool,
) -> String {
    let token = if authenticated {
        "the token in `HF_TOKEN` cannot see it"
    } else {
        "no `HF_TOKEN` was set"
    };
    match code {
        Some("RepoNotFound") => format!(
            "the dataset does not exist: check the `repo` spelling (a private or gated dataset looks the same when {token})"
        ),
        Some("RevisionNotFound") => format!(
            "the dataset exists but has no revision `{revision}`: check `revision` (a branch, tag or commit)"
        ),
        Some("EntryNotFound") => "the file does not exist at this revision".to_owned(),
        _ => status_hint(status, file, authenticated).to_owned(),
    }
}

/// The likely cause of a refusal, as the Hub uses these statuses.
fn status_hint(status: u16, file: bool, authenticated: bool) -> &'static str {
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
            code: None,
            hint: hint(403, None, "main", true, true),
        };
        assert_eq!(
            error.to_string(),
            "dataset `o/n` at revision `main`, file `data/a.parquet`: the Hub answered HTTP 403: access refused: a gated dataset needs its conditions accepted on the Hub by the token's user, or the token lacks read permission"
        );
        let error = HubError::Denied {
            repo: "o/n".to_owned(),
            revision: "v9".to_owned(),
            file: None,
            status: 404,
            code: Some("RevisionNotFound".to_owned()),
            hint: hint(404, Some("RevisionNotFound"), "v9", false, false),
        };
        assert_eq!(
            error.to_string(),
            "dataset `o/n` at revision `v9`: the Hub answered HTTP 404 (RevisionNotFound): the dataset exists but has no revision `v9`: check `revision` (a branch, tag or commit)"
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
