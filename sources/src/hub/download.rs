//! Online resolution with hf-hub 0.5's async API on a small current-thread runtime (the caller
//! stays synchronous): list the files at a revision, pin the commit, download what the patterns
//! select unless the snapshot already has it. hf-hub has no retries of its own; each request is
//! retried here with exponential backoff, and an interrupted download resumes from its
//! `.sync.part` file.

use std::future::Future;
use std::path::PathBuf;

use hf_hub::api::tokio::{ApiBuilder, ApiError};
use hf_hub::{Cache, Repo, RepoType};

use super::cache::{etag_of, fetch_offline, snapshot_dir, write_ref};
use super::error::{HubError, hint, is_transient, status_of};
use super::progress::Reporter;
use super::select::select_files;
use super::settings::{HubSettings, MAX_BACKOFF};

/// The files of one source, resolved to one commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubDownload {
    pub repo: String,
    /// As requested (`main`, a tag, a commit).
    pub revision: String,
    /// The commit sha the revision pointed at.
    pub commit: String,
    pub files: Vec<HubFile>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubFile {
    /// Path inside the repository.
    pub path: String,
    /// The snapshot path in the hub cache.
    pub local: PathBuf,
    /// The Hub's checksum of the file (sha256 for LFS files, the git blob sha1 otherwise).
    pub etag: Option<String>,
}

/// Resolves `patterns` in dataset `repo` at `revision` to local files, downloading what the cache
/// lacks (or, offline, using the cache only).
pub fn fetch(
    repo: &str,
    revision: &str,
    patterns: &[String],
    settings: &HubSettings,
) -> Result<HubDownload, HubError> {
    if settings.offline {
        return fetch_offline(repo, revision, patterns, settings);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(HubError::Runtime)?;
    runtime.block_on(fetch_online(repo, revision, patterns, settings))
}

async fn fetch_online(
    repo: &str,
    revision: &str,
    patterns: &[String],
    settings: &HubSettings,
) -> Result<HubDownload, HubError> {
    let api = ApiBuilder::from_cache(Cache::new(settings.cache_dir.clone()))
        .with_endpoint(settings.endpoint.clone())
        .with_token(settings.token.clone())
        .with_progress(false)
        .build()
        .map_err(|e| HubError::Client(e.into()))?;
    let fail = async |file: Option<&str>, url: String, (source, attempts): (ApiError, u32)| {
        let file = file.map(str::to_owned);
        match status_of(&source) {
            Some(status @ (401 | 403 | 404)) => {
                let code = error_code(&url, settings).await;
                HubError::Denied {
                    repo: repo.to_owned(),
                    revision: revision.to_owned(),
                    hint: hint(
                        status,
                        code.as_deref(),
                        revision,
                        file.is_some(),
                        settings.token.is_some(),
                    ),
                    code,
                    file,
                    status,
                }
            }
            _ => HubError::Network {
                repo: repo.to_owned(),
                revision: revision.to_owned(),
                file,
                attempts,
                source: source.into(),
            },
        }
    };
    let dataset = |revision| Repo::with_revision(repo.to_owned(), RepoType::Dataset, revision);
    let listing = api.repo(dataset(revision.to_owned()));
    let info = match with_retries(settings, || listing.info()).await {
        Ok(info) => info,
        Err(e) => {
            let url = format!(
                "{}/api/datasets/{repo}/revision/{}",
                settings.endpoint,
                revision.replace('/', "%2F")
            );
            return Err(fail(None, url, e).await);
        }
    };
    let commit = info.sha;
    let selected = select_files(info.siblings.iter().map(|s| s.rfilename.as_str()), patterns);
    if selected.is_empty() {
        return Err(HubError::NoMatch {
            repo: repo.to_owned(),
            revision: revision.to_owned(),
            commit,
            patterns: patterns.to_vec(),
            available: info.siblings.len(),
        });
    }
    // Downloading at the listed commit keeps every file from the same commit even if the
    // branch moves meanwhile.
    let pinned = api.repo(dataset(commit.clone()));
    let snapshot = snapshot_dir(&settings.cache_dir, repo, &commit);
    let mut files = Vec::with_capacity(selected.len());
    for path in selected {
        let cached = snapshot.join(&path);
        let local = if cached.is_file() {
            cached
        } else {
            let downloaded = with_retries(settings, || {
                let reporter = Reporter::new(settings.progress.clone(), repo, &path);
                pinned.download_with_progress(&path, reporter)
            })
            .await;
            match downloaded {
                Ok(local) => local,
                Err(e) => {
                    let url = format!(
                        "{}/datasets/{repo}/resolve/{commit}/{path}",
                        settings.endpoint
                    );
                    return Err(fail(Some(&path), url, e).await);
                }
            }
        };
        files.push(HubFile {
            etag: etag_of(&local),
            path,
            local,
        });
    }
    write_ref(&settings.cache_dir, repo, revision, &commit).map_err(|source| HubError::Cache {
        path: settings.cache_dir.clone(),
        source,
    })?;
    Ok(HubDownload {
        repo: repo.to_owned(),
        revision: revision.to_owned(),
        commit,
        files,
    })
}

/// The Hub's `X-Error-Code` for `url`, asked again after hf-hub reported a refusal (its errors
/// keep the status but not the headers): one request, on the failure path only. `None` when
/// the answer has no such header or the request fails.
async fn error_code(url: &str, settings: &HubSettings) -> Option<String> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ERROR_CODE_TIMEOUT)
        .build()
        .ok()?;
    let mut request = client.get(url);
    if let Some(token) = &settings.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.ok()?;
    let code = response.headers().get("x-error-code")?.to_str().ok()?;
    Some(code.to_owned())
}

/// How long the request for an error code may take.
const ERROR_CODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `attempt` until it succeeds, fails for good, or `max_retries` retries are spent; the
/// error comes back with the number of attempts made.
async fn with_retries<T, F, Fut>(
    settings: &HubSettings,
    mut attempt: F,
) -> Result<T, (ApiError, u32)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ApiError>>,
{
    let mut attempts = 0u32;
    let mut wait = settings.backoff;
    loop {
        attempts += 1;
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) if attempts <= settings.max_retries && is_transient(&error) => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_BACKOFF);
            }
            Err(error) => return Err((error, attempts)),
        }
    }
}
