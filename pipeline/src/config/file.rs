//! The raw shape of `datasets.toml`, mirroring the file. Nothing here is validated beyond
//! types and key names; [`super::plan`] does the rest.

use serde::Deserialize;
use toml::Spanned;

/// `[run]`: where the run lives and how much runs at once.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RunTable {
    /// Run directory, relative to the config file (default `runs/<config stem>`).
    pub dir: Option<Spanned<String>>,
    /// Preparation workers at once (default 2).
    pub max_parallel_prep: Option<Spanned<i64>>,
    /// A preparation worker whose log and output do not grow for this long is stopped
    /// (default 1800).
    pub stall_timeout_secs: Option<Spanned<i64>>,
}

/// `[server]`: the OpenAI-compatible inference server, running or launched by `gen`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ServerTable {
    /// Base URL, e.g. `http://127.0.0.1:30000`. `{port}` is replaced by a free port when `gen`
    /// launches the server itself.
    pub url: Option<Spanned<String>>,
    /// Several servers serving the same model (instead of `url`): one shared queue, each
    /// request to the least-loaded healthy server.
    pub urls: Option<Spanned<Vec<String>>>,
    /// Model name to request (default: the first model the server lists).
    pub model: Option<String>,
    /// Name of the environment variable that holds the API key (the key itself never goes in a
    /// file).
    pub api_key_env: Option<Spanned<String>>,
    /// Command that starts the server; `${VAR}` / `${VAR:-default}` and `{port}` are expanded.
    pub launch: Option<Spanned<Vec<Spanned<String>>>>,
    /// Seconds to wait for `/health` after launch (default 300).
    pub health_timeout_secs: Option<Spanned<i64>>,
    /// Restarts of a launched server that dies during the run (default 3; 0 = never).
    pub max_restarts: Option<Spanned<i64>>,
    /// The log of an external server: read for a diagnosis when it goes down.
    pub log: Option<String>,
    /// Host RAM the server takes on this machine beyond its GPUs (e.g. `"150G"` for a
    /// hierarchical KV cache); counted by the preflight (`gen doctor`).
    pub host_memory: Option<Spanned<String>>,
    /// Give up (exit 1, resumable) when every server has been down this long (default: wait
    /// for them forever).
    pub max_outage_secs: Option<Spanned<i64>>,
    /// How long `gen run` waits for an external server that does not answer yet when the run
    /// starts (default 1800: a large model loads for minutes).
    pub startup_timeout_secs: Option<Spanned<i64>>,
    /// A server with requests in flight but no token on any of them for this long is asked
    /// for `/health`; if it does not answer, it is marked down and its requests move on
    /// (default 60).
    pub stall_secs: Option<Spanned<i64>>,
}

/// `[generation]`: what each request asks for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GenerationTable {
    pub max_tokens: Spanned<i64>,
    /// Requests in flight at once: a number, or `"auto"` (default) to let the controller tune
    /// it from the server's own signals.
    pub concurrency: Option<Spanned<toml::Value>>,
    /// Upper bound for `concurrency = "auto"`.
    pub max_concurrency: Option<Spanned<i64>>,
    pub temperature: Option<Spanned<f64>>,
    pub top_p: Option<Spanned<f64>>,
    pub seed: Option<i64>,
    /// Passed through as `chat_template_kwargs` (e.g. `{ enable_thinking = true }`).
    pub chat_template_kwargs: Option<toml::Table>,
    /// Attempts per prompt on transient errors (default 4).
    pub max_attempts: Option<Spanned<i64>>,
}

/// The top-level keys, for "expected one of" messages.
pub const TOP_LEVEL_KEYS: [&str; 4] = ["run", "server", "generation", "source"];

/// The keys of a `[[source]]` entry that say how its worker runs (the rest describe data).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct WorkerTable {
    /// Memory cap of the worker's own cgroup, e.g. `"8G"`.
    pub memory_limit: Option<Spanned<String>>,
    /// A custom worker command (run directly, no shell). It gets `GEN_OUTPUT` (where to write
    /// JSONL prompt rows), `GEN_DONE` (a file to create when complete) and `GEN_SOURCE`.
    pub command: Option<Spanned<Vec<String>>>,
    /// With `command`: rows the worker must write to count as complete.
    pub expected_prompts: Option<Spanned<i64>>,
    /// What to do with answers cut by `max-tokens`: `keep` (default), `drop` or `retry`.
    #[serde(default)]
    pub on_length: super::values::LengthPolicy,
    /// The order prompts are sent in: `file` (default) or `longest-first`.
    #[serde(default)]
    pub order: super::values::Order,
}
