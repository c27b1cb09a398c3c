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

/// `[generation]`: how many requests run at once and how often one is tried. What each
/// request asks for is its [`SettingsTable`] keys, written in the same table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GenerationTable {
    /// Requests in flight at once: a number, or `"auto"` (default) to let the controller tune
    /// it from the server's own signals.
    pub concurrency: Option<Spanned<toml::Value>>,
    /// Upper bound for `concurrency = "auto"`.
    pub max_concurrency: Option<Spanned<i64>>,
    /// Attempts per prompt on transient errors (default 4).
    pub max_attempts: Option<Spanned<i64>>,
}

/// What each request asks for: in `[generation]` for every source, and in a source's
/// `[source.generation]`, whose keys replace those of `[generation]` for that source. The
/// sampling keys take one value or a weighted list ([`Drawn`]) drawn per request.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct SettingsTable {
    /// Answer budget in tokens (required in `[generation]`).
    pub max_tokens: Option<Spanned<Drawn<i64>>>,
    pub temperature: Option<Spanned<Drawn<f64>>>,
    pub top_p: Option<Spanned<Drawn<f64>>>,
    pub top_k: Option<Spanned<Drawn<i64>>>,
    pub min_p: Option<Spanned<Drawn<f64>>>,
    /// Passed through as `reasoning_effort` (e.g. `"low"`, `"high"`).
    pub reasoning_effort: Option<Spanned<Drawn<String>>>,
    pub seed: Option<Spanned<Drawn<i64>>>,
    /// Answers per prompt (default 1), each its own record with its own seed.
    pub samples: Option<Spanned<Drawn<i64>>>,
    /// Passed through as `chat_template_kwargs` (e.g. `{ enable_thinking = true }`).
    pub chat_template_kwargs: Option<toml::Table>,
    /// Further keys of the request body, passed through as they are.
    pub extra_body: Option<toml::Table>,
    /// Ask the server for the prompt's and the answer's token ids (`return_token_ids`) and
    /// store them with the answer.
    pub token_ids: Option<Spanned<Drawn<bool>>>,
}

impl SettingsTable {
    /// `self` with each key it lacks taken from `defaults`.
    pub fn or(self, defaults: &SettingsTable) -> SettingsTable {
        let d = defaults.clone();
        SettingsTable {
            max_tokens: self.max_tokens.or(d.max_tokens),
            temperature: self.temperature.or(d.temperature),
            top_p: self.top_p.or(d.top_p),
            top_k: self.top_k.or(d.top_k),
            min_p: self.min_p.or(d.min_p),
            reasoning_effort: self.reasoning_effort.or(d.reasoning_effort),
            seed: self.seed.or(d.seed),
            samples: self.samples.or(d.samples),
            chat_template_kwargs: self.chat_template_kwargs.or(d.chat_template_kwargs),
            extra_body: self.extra_body.or(d.extra_body),
            token_ids: self.token_ids.or(d.token_ids),
        }
    }
}

/// A setting's value as written: one value, or a weighted list to draw from
/// (`[{ value = 0.6, weight = 3 }, { value = 1.0, weight = 1 }]`). Which keys may be drawn is
/// decided at resolution, so a list on any other key gets a message that says so.
#[derive(Debug, Clone, PartialEq)]
pub enum Drawn<T> {
    One(T),
    Weighted(Vec<Spanned<Choice<T>>>),
}

/// One entry of a weighted list.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a `{ value = …, weight = … }` table")]
pub struct Choice<T> {
    pub value: Spanned<T>,
    pub weight: Spanned<f64>,
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Drawn<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DrawnVisitor(std::marker::PhantomData))
    }
}

struct DrawnVisitor<T>(std::marker::PhantomData<T>);

impl<T> DrawnVisitor<T> {
    fn one<'de, E, V>(value: V) -> Result<Drawn<T>, E>
    where
        T: Deserialize<'de>,
        E: serde::de::Error,
        V: serde::de::IntoDeserializer<'de, E>,
    {
        T::deserialize(value.into_deserializer()).map(Drawn::One)
    }
}

impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for DrawnVisitor<T> {
    type Value = Drawn<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a value, or a list of `{ value = …, weight = … }` tables")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Self::one(v)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Self::one(v)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Self::one(v)
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Self::one(v)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Self::one(v.to_owned())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut choices = Vec::new();
        while let Some(choice) = seq.next_element()? {
            choices.push(choice);
        }
        Ok(Drawn::Weighted(choices))
    }
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
