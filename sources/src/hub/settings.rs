//! How to reach the Hub: endpoint, token, cache folder, offline mode and retry policy. Resolved
//! once from the environment (or built by tests, so parallel tests never share process env).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::progress::ProgressCallback;
use crate::env;

/// The public Hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

#[derive(Clone)]
pub struct HubSettings {
    /// Base URL without a trailing slash.
    pub endpoint: String,
    /// Sent as `Authorization: Bearer …`; redacted from `Debug`.
    pub token: Option<String>,
    /// The hub cache (`…/huggingface/hub`), shared with Python's `huggingface_hub`.
    pub cache_dir: PathBuf,
    /// Resolve revisions and files from the cache only.
    pub offline: bool,
    /// Retries of one request after a network error or a 5xx/408/429 answer.
    pub max_retries: u32,
    /// Wait before the first retry; doubled each time, at most [`MAX_BACKOFF`].
    pub backoff: Duration,
    /// Called as large files download.
    pub progress: Option<ProgressCallback>,
}

/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

impl fmt::Debug for HubSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubSettings")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("cache_dir", &self.cache_dir)
            .field("offline", &self.offline)
            .field("max_retries", &self.max_retries)
            .field("backoff", &self.backoff)
            .field("progress", &self.progress.as_ref().map(|_| "<callback>"))
            .finish()
    }
}

impl HubSettings {
    /// Settings from the process environment (see [`crate::env`]).
    pub fn from_env() -> HubSettings {
        HubSettings::from_vars(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// Settings from any variable lookup, with `huggingface_hub`'s precedence.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> HubSettings {
        let hf_home = var(env::HF_HOME).map(PathBuf::from).unwrap_or_else(|| {
            let home = var(env::HOME).map_or_else(|| PathBuf::from("."), PathBuf::from);
            home.join(".cache").join("huggingface")
        });
        let cache_dir = var(env::HF_HUB_CACHE).map_or_else(|| hf_home.join("hub"), PathBuf::from);
        let token = var(env::HF_TOKEN)
            .or_else(|| var(env::HUGGING_FACE_HUB_TOKEN))
            .or_else(|| {
                let path =
                    var(env::HF_TOKEN_PATH).map_or_else(|| hf_home.join("token"), PathBuf::from);
                fs_err::read_to_string(path).ok()
            })
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty());
        let offline = var(env::HF_HUB_OFFLINE).is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        });
        HubSettings {
            endpoint: var(env::HF_ENDPOINT)
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned())
                .trim_end_matches('/')
                .to_owned(),
            token,
            cache_dir,
            offline,
            max_retries: 5,
            backoff: Duration::from_millis(500),
            progress: None,
        }
    }

    pub fn with_endpoint(mut self, endpoint: impl Into<String>) -> HubSettings {
        self.endpoint = endpoint.into().trim_end_matches('/').to_owned();
        self
    }

    pub fn with_token(mut self, token: Option<String>) -> HubSettings {
        self.token = token;
        self
    }

    pub fn with_cache_dir(mut self, cache_dir: impl Into<PathBuf>) -> HubSettings {
        self.cache_dir = cache_dir.into();
        self
    }

    pub fn with_offline(mut self, offline: bool) -> HubSettings {
        self.offline = offline;
        self
    }

    pub fn with_progress(mut self, progress: ProgressCallback) -> HubSettings {
        self.progress = Some(progress);
        self
    }

    pub fn with_retries(mut self, max_retries: u32, backoff: Duration) -> HubSettings {
        self.max_retries = max_retries;
        self.backoff = backoff;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> HubSettings {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        HubSettings::from_vars(|name| vars.get(name).cloned())
    }

    #[test]
    fn defaults_follow_huggingface_hub() {
        let s = settings(&[("HOME", "/home/u")]);
        assert_eq!(s.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(s.cache_dir, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert!(!s.offline);
        assert_eq!(s.token, None);
    }

    #[test]
    fn variables_override_in_order() {
        let s = settings(&[
            ("HF_HOME", "/hf"),
            ("HF_ENDPOINT", "http://127.0.0.1:9/"),
            ("HF_TOKEN", " hf_secret \n"),
            ("HUGGING_FACE_HUB_TOKEN", "older"),
            ("HF_HUB_OFFLINE", "1"),
        ]);
        assert_eq!(s.cache_dir, PathBuf::from("/hf/hub"));
        assert_eq!(s.endpoint, "http://127.0.0.1:9");
        assert_eq!(s.token.as_deref(), Some("hf_secret"));
        assert!(s.offline);
        let s = settings(&[("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/cache")]);
        assert_eq!(s.cache_dir, PathBuf::from("/cache"));
    }

    #[test]
    fn token_file_is_read_when_no_variable_is_set() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs_err::write(dir.path().join("token"), "hf_from_file\n").expect("write");
        let home = dir.path().to_string_lossy().into_owned();
        assert_eq!(
            settings(&[("HF_HOME", &home)]).token.as_deref(),
            Some("hf_from_file")
        );
    }

    #[test]
    fn debug_never_shows_the_token() {
        let s = settings(&[("HF_TOKEN", "hf_secret")]);
        assert!(!format!("{s:?}").contains("hf_secret"));
    }
}
