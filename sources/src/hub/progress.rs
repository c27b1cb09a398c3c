//! Download progress for large files, as plain events to a caller's callback (the library never
//! prints). Events come at most once per [`PROGRESS_STEP`] bytes, plus one when a file starts
//! and one when it finishes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes between two progress events of one file.
pub const PROGRESS_STEP: u64 = 8 << 20;

/// Where one file's download stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadProgress {
    pub repo: String,
    /// Path inside the repository.
    pub file: String,
    /// Bytes on disk, including those of an earlier, interrupted attempt.
    pub downloaded: u64,
    pub total: u64,
}

/// Receives [`DownloadProgress`] events; called from the download thread.
pub type ProgressCallback = Arc<dyn Fn(&DownloadProgress) + Send + Sync>;

/// hf-hub's progress trait, turned into throttled events.
#[derive(Clone)]
pub(super) struct Reporter {
    callback: Option<ProgressCallback>,
    repo: Arc<str>,
    file: Arc<str>,
    downloaded: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
    reported: Arc<AtomicU64>,
}

impl Reporter {
    pub(super) fn new(callback: Option<ProgressCallback>, repo: &str, file: &str) -> Reporter {
        Reporter {
            callback,
            repo: repo.into(),
            file: file.into(),
            downloaded: Arc::default(),
            total: Arc::default(),
            reported: Arc::default(),
        }
    }

    fn report(&self, force: bool) {
        let Some(callback) = &self.callback else {
            return;
        };
        let downloaded = self.downloaded.load(Ordering::Relaxed);
        let reported = self.reported.load(Ordering::Relaxed);
        if !force && downloaded.saturating_sub(reported) < PROGRESS_STEP {
            return;
        }
        self.reported.store(downloaded, Ordering::Relaxed);
        callback(&DownloadProgress {
            repo: self.repo.to_string(),
            file: self.file.to_string(),
            downloaded,
            total: self.total.load(Ordering::Relaxed),
        });
    }
}

impl hf_hub::api::tokio::Progress for Reporter {
    async fn init(&mut self, size: usize, _filename: &str) {
        self.total.store(size as u64, Ordering::Relaxed);
        self.report(true);
    }

    async fn update(&mut self, size: usize) {
        self.downloaded.fetch_add(size as u64, Ordering::Relaxed);
        self.report(false);
    }

    async fn finish(&mut self) {
        self.report(true);
    }
}
