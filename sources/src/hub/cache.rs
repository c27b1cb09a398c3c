//! The standard hub cache layout, as `huggingface_hub` and hf-hub write it:
//! `datasets--{owner}--{name}/refs/{revision}` holds a commit sha,
//! `snapshots/{sha}/{path}` links to `blobs/{etag}`. Offline mode reads only this.

use std::io;
use std::path::{Path, PathBuf};

use super::download::{HubDownload, HubFile};
use super::error::HubError;
use super::select::select_files;
use super::settings::HubSettings;

pub(super) fn repo_dir(cache_dir: &Path, repo: &str) -> PathBuf {
    cache_dir.join(format!("datasets--{}", repo.replace('/', "--")))
}

pub(super) fn snapshot_dir(cache_dir: &Path, repo: &str, commit: &str) -> PathBuf {
    repo_dir(cache_dir, repo).join("snapshots").join(commit)
}

fn is_commit(revision: &str) -> bool {
    revision.len() == 40 && revision.chars().all(|c| c.is_ascii_hexdigit())
}

/// The commit a revision points at in the cache, if it was ever resolved here.
fn cached_commit(cache_dir: &Path, repo: &str, revision: &str) -> Option<String> {
    if is_commit(revision) {
        return Some(revision.to_owned());
    }
    let path = repo_dir(cache_dir, repo).join("refs").join(revision);
    let commit = fs_err::read_to_string(path).ok()?;
    Some(commit.trim().to_owned()).filter(|c| !c.is_empty())
}

/// Records `revision → commit` as `huggingface_hub` does (never for a commit itself).
pub(super) fn write_ref(
    cache_dir: &Path,
    repo: &str,
    revision: &str,
    commit: &str,
) -> io::Result<()> {
    let refs = repo_dir(cache_dir, repo).join("refs");
    if !is_commit(revision) {
        let path = refs.join(revision);
        if let Some(parent) = path.parent() {
            fs_err::create_dir_all(parent)?;
        }
        fs_err::write(path, commit)?;
    }
    // hf-hub writes a ref named after the commit when asked to download at a commit; Python
    // never does, so it is removed to keep the cache as Python expects it.
    if revision != commit {
        match fs_err::remove_file(refs.join(commit)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The blob name a snapshot entry links to: the file's etag (sha256 for LFS files).
pub(super) fn etag_of(snapshot_file: &Path) -> Option<String> {
    let target = std::fs::read_link(snapshot_file).ok()?;
    target.file_name().map(|n| n.to_string_lossy().into_owned())
}

/// Every file under a snapshot, as repository paths with `/`.
fn list_snapshot(dir: &Path) -> io::Result<Vec<String>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in fs_err::read_dir(&folder)? {
            let entry = entry?;
            let path = entry.path();
            // `metadata` follows the snapshot's symlinks to their blobs.
            if fs_err::metadata(&path)?.is_dir() {
                pending.push(path);
            } else if let Ok(relative) = path.strip_prefix(dir) {
                let parts: Vec<String> = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                files.push(parts.join("/"));
            }
        }
    }
    Ok(files)
}

/// Resolves a source from the cache alone (`HF_HUB_OFFLINE`).
pub(super) fn fetch_offline(
    repo: &str,
    revision: &str,
    patterns: &[String],
    settings: &HubSettings,
) -> Result<HubDownload, HubError> {
    let not_cached = |file: Option<String>| HubError::NotCached {
        repo: repo.to_owned(),
        revision: revision.to_owned(),
        file,
        cache_dir: settings.cache_dir.clone(),
    };
    let commit =
        cached_commit(&settings.cache_dir, repo, revision).ok_or_else(|| not_cached(None))?;
    let snapshot = snapshot_dir(&settings.cache_dir, repo, &commit);
    if !snapshot.is_dir() {
        return Err(not_cached(None));
    }
    let available = list_snapshot(&snapshot).map_err(|source| HubError::Cache {
        path: snapshot.clone(),
        source,
    })?;
    let selected = select_files(available.iter().map(String::as_str), patterns);
    if selected.is_empty() {
        return Err(HubError::NoMatch {
            repo: repo.to_owned(),
            revision: revision.to_owned(),
            commit,
            patterns: patterns.to_vec(),
            available: available.len(),
        });
    }
    let files = selected
        .into_iter()
        .map(|path| {
            let local = snapshot.join(&path);
            HubFile {
                etag: etag_of(&local),
                path,
                local,
            }
        })
        .collect();
    Ok(HubDownload {
        repo: repo.to_owned(),
        revision: revision.to_owned(),
        commit,
        files,
    })
}
