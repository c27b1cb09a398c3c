//! One file per server kind — `vllm`, `sglang`, `llama_cpp` and `openai`, the plain
//! OpenAI-compatible server — each filling in one [`KindSpec`]: its name, its endpoints and how
//! to read them, its metric names, the launch flags of its running cap, where it says its
//! context, the flag that sets it, where it says its version, how it returns token ids (asked
//! for, and carried in its stream), the flag that separates reasoning and the programs that
//! start it. [`ServerKind::spec`] is the one `match` over the kinds; everything
//! else reads the tables. A leaf: it uses nothing of the crate but the Prometheus text format,
//! so `config` may ask it too. How to add a kind: `ARCHITECTURE.md`, "Adding a server kind".

mod llama_cpp;
mod openai;
mod reading;
mod sglang;
mod vllm;

pub use reading::{Load, Reading};
pub(crate) use reading::{count, tokens};

use serde_json::Value;

use crate::inference::signals::prometheus::Sample;

/// Which server software answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    Vllm,
    Sglang,
    LlamaCpp,
    OpenAi,
}

impl ServerKind {
    /// Every kind, in the order their signals are looked for.
    pub const ALL: [ServerKind; 4] = [
        ServerKind::Vllm,
        ServerKind::Sglang,
        ServerKind::LlamaCpp,
        ServerKind::OpenAi,
    ];

    pub fn spec(self) -> &'static KindSpec {
        match self {
            ServerKind::Vllm => &vllm::SPEC,
            ServerKind::Sglang => &sglang::SPEC,
            ServerKind::LlamaCpp => &llama_cpp::SPEC,
            ServerKind::OpenAi => &openai::SPEC,
        }
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }
}

/// What `gen` knows of one kind of server. Every part may be empty: a server that says
/// nothing about itself still serves (the plain OpenAI kind is all empty).
#[derive(Debug)]
pub struct KindSpec {
    pub name: &'static str,
    /// Its own endpoints besides `/metrics`, asked at the start in this order.
    pub endpoints: &'static [Endpoint],
    pub metrics: Metrics,
    /// The `[server] launch` flags that set its running cap (the last occurrence wins), and
    /// those that multiply it (engines each with that cap).
    pub running_cap_flags: &'static [&'static str],
    pub engine_flags: &'static [&'static str],
    pub context: Option<Context>,
    /// The launch flag that sets its context, named when a refusal says the context is short.
    pub context_flag: Option<&'static str>,
    /// Where it says its version: a path and the JSON field there.
    pub version: &'static [(&'static str, &'static str)],
    /// The request keys that ask for token ids on a streamed chat; none: it cannot return them.
    pub token_id_flags: &'static [&'static str],
    /// Folds the token ids a chunk of its stream carries into the prompt's and the answer's;
    /// whether the chunk carried any of its fields.
    pub stream_ids: fn(&Value, &mut Vec<u32>, &mut Vec<u32>) -> bool,
    /// The launch flag that separates reasoning from the answer, named when reasoning arrives
    /// inside `content`.
    pub reasoning_flag: Option<&'static str>,
    /// The programs that start it, as the first argument of `[server] launch` names them.
    pub programs: &'static [&'static str],
}

impl KindSpec {
    /// A kind that says nothing about itself, to fill in from.
    pub const EMPTY: KindSpec = KindSpec {
        name: "",
        endpoints: &[],
        metrics: Metrics::EMPTY,
        running_cap_flags: &[],
        engine_flags: &[],
        context: None,
        context_flag: None,
        version: &[],
        token_id_flags: &[],
        stream_ids: |_, _, _| false,
        reasoning_flag: None,
        programs: &[],
    };
}

/// One endpoint of a kind, a JSON body.
#[derive(Debug)]
pub struct Endpoint {
    /// Where it answers; older builds may name it otherwise: the first path that answers wins.
    pub paths: &'static [&'static str],
    /// Its answer alone tells the kind; an endpoint that does not is read once another did.
    pub tells_kind: bool,
    /// Read every tick when `/metrics` does not answer.
    pub tick: bool,
    /// The body's reading; `None` when the body is not this kind's.
    pub parse: fn(&Value) -> Option<Reading>,
}

/// A kind's `/metrics` names, without their prefix; where a name changed, the newest first.
#[derive(Debug)]
pub struct Metrics {
    /// How its names start (some SGLang builds print `sglang_` for `sglang:`).
    pub prefixes: &'static [&'static str],
    pub running: &'static [&'static str],
    pub queued: &'static [&'static str],
    /// KV cache in use, 0–1, averaged over replicas.
    pub kv_usage: &'static [&'static str],
    /// KV tokens in use and in all, summed over replicas: their ratio wins over `kv_usage`.
    pub kv_used: &'static [&'static str],
    pub kv_total: &'static [&'static str],
    /// The cumulative preemption (retraction) counter.
    pub preemptions: &'static [&'static str],
    /// The KV capacity where no one sample says it (vLLM's `cache_config_info` labels).
    pub kv_capacity: fn(&[Sample<'_>]) -> Option<u64>,
}

impl Metrics {
    pub const EMPTY: Metrics = Metrics {
        prefixes: &[],
        running: &[],
        queued: &[],
        kv_usage: &[],
        kv_used: &[],
        kv_total: &[],
        preemptions: &[],
        kv_capacity: |_| None,
    };
}

/// Where a kind says its context length, and how `gen` names it.
#[derive(Debug)]
pub enum Context {
    /// A field of its model's entry in `/v1/models`.
    Listed {
        field: &'static str,
        what: &'static str,
    },
    /// A JSON pointer into the body of a path.
    At {
        path: &'static str,
        pointer: &'static str,
        what: &'static str,
    },
}

#[cfg(test)]
mod tests;
