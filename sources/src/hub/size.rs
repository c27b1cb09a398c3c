//! What a source would download: the sizes of its selected files as the Hub lists them
//! (`GET /api/datasets/{repo}/revision/{revision}?blobs=true`, one request, no file read),
//! and how much of that the hub cache already holds. For `gen doctor`, before anything
//! downloads; nothing here retries or fails a run.

use std::time::Duration;

use super::cache::snapshot_dir;
use super::select::select_files;
use super::settings::HubSettings;

/// A source's download, as listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedSize {
    /// Bytes of the selected files.
    pub bytes: u64,
    /// Of those, bytes already in the hub cache at the listed commit.
    pub cached: u64,
    pub files: usize,
}

/// Why the sizes are not known.
#[derive(Debug, thiserror::Error)]
#[error("the Hub did not list the sizes of `{repo}` at `{revision}`: {reason}")]
pub struct SizeUnknown {
    pub repo: String,
    pub revision: String,
    pub reason: String,
}

/// How long the listing may take.
const LISTING_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(serde::Deserialize)]
struct Listing {
    sha: String,
    siblings: Vec<Sibling>,
}

#[derive(serde::Deserialize)]
struct Sibling {
    rfilename: String,
    size: Option<u64>,
}

/// The download of `repo` at `revision`, files selected by `patterns` (all when empty).
pub fn listed_size(
    repo: &str,
    revision: &str,
    patterns: &[String],
    settings: &HubSettings,
) -> Result<ListedSize, SizeUnknown> {
    let unknown = |reason: String| SizeUnknown {
        repo: repo.to_owned(),
        revision: revision.to_owned(),
        reason,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| unknown(e.to_string()))?;
    let listing = runtime
        .block_on(list(repo, revision, settings))
        .map_err(unknown)?;
    let names = listing.siblings.iter().map(|s| s.rfilename.as_str());
    let selected = select_files(names, patterns);
    let snapshot = snapshot_dir(&settings.cache_dir, repo, &listing.sha);
    let mut size = ListedSize {
        bytes: 0,
        cached: 0,
        files: selected.len(),
    };
    for path in &selected {
        let sibling = listing.siblings.iter().find(|s| &s.rfilename == path);
        let bytes = sibling
            .and_then(|s| s.size)
            .ok_or_else(|| unknown(format!("no size for `{path}`")))?;
        size.bytes += bytes;
        if snapshot.join(path).is_file() {
            size.cached += bytes;
        }
    }
    Ok(size)
}

async fn list(repo: &str, revision: &str, settings: &HubSettings) -> Result<Listing, String> {
    let url = format!(
        "{}/api/datasets/{repo}/revision/{}?blobs=true",
        settings.endpoint,
        revision.replace('/', "%2F")
    );
    let client = reqwest::Client::builder()
        .timeout(LISTING_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    let mut request = client.get(&url);
    if let Some(token) = &settings.token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("HTTP {}", status.as_u16()));
    }
    let body = response.bytes().await.map_err(|e| e.to_string())?;
    serde_json::from_slice(&body).map_err(|e| e.to_string())
}
