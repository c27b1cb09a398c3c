//! The environment variables `gen-sources` reads, in one place (the names and meanings of
//! Python's `huggingface_hub`, so both tools share settings and downloads). Only
//! [`crate::hub::HubSettings::from_env`] reads them; everything else takes settings as values.

/// Hub base URL (default `https://huggingface.co`); tests point it at a fake hub.
pub const HF_ENDPOINT: &str = "HF_ENDPOINT";
/// Access token for gated and private datasets. hf-hub 0.5 ignores it by itself, so it is
/// passed explicitly. Never logged, written or shown in errors.
pub const HF_TOKEN: &str = "HF_TOKEN";
/// The older name of `HF_TOKEN`, still honoured by `huggingface_hub`.
pub const HUGGING_FACE_HUB_TOKEN: &str = "HUGGING_FACE_HUB_TOKEN";
/// A file holding the token (default `$HF_HOME/token`).
pub const HF_TOKEN_PATH: &str = "HF_TOKEN_PATH";
/// Root of Hugging Face state (default `~/.cache/huggingface`); the cache is `$HF_HOME/hub`.
pub const HF_HOME: &str = "HF_HOME";
/// The download cache itself, overriding `$HF_HOME/hub`.
pub const HF_HUB_CACHE: &str = "HF_HUB_CACHE";
/// `1`/`true`/`yes`/`on`: never touch the network, resolve everything from the cache.
pub const HF_HUB_OFFLINE: &str = "HF_HUB_OFFLINE";
/// Used to find `~/.cache/huggingface` when `HF_HOME` is unset.
pub const HOME: &str = "HOME";
