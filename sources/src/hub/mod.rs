//! Hugging Face Hub datasets: list a repository's files at a revision, select them by glob and
//! download them into the standard hub cache with hf-hub 0.5 (shared with Python's
//! `huggingface_hub`), or resolve them from that cache alone when offline; or only say how
//! much a source would download ([`listed_size`]).

mod cache;
mod download;
mod error;
mod progress;
mod select;
mod settings;
mod size;

pub use download::{HubDownload, HubFile, fetch};
pub use error::{ApiCause, HubError};
pub use progress::{DownloadProgress, PROGRESS_STEP, ProgressCallback};
pub use select::select_files;
pub use settings::{DEFAULT_ENDPOINT, HubSettings, MAX_BACKOFF};
pub use size::{ListedSize, SizeUnknown, listed_size};
