//! What goes into the controller and what comes out: the server's [`Caps`], a tick's
//! [`TickObservation`], the [`Decision`] with its [`ControllerPhase`], and what a run [`Reached`].

use serde::{Deserialize, Serialize};

/// What bounds a server's concurrency, as far as it is known. `None` = unknown, no bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caps {
    /// Most requests the server runs at once (SGLang `max_running_requests`, llama.cpp
    /// `total_slots`, vLLM `max_num_seqs` when known).
    pub max_running: Option<u32>,
    /// KV cache capacity in tokens (SGLang `max_total_num_tokens`, vLLM
    /// `num_gpu_blocks × block_size`; not llama.cpp, whose slots own their context).
    pub kv_tokens: Option<u64>,
    /// The user's `concurrency` upper bound, if any.
    pub user_max: Option<u32>,
}

/// One completed request's lengths, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finish {
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

/// What the sampler saw during one tick. Client-side fields are always present; server
/// metrics are `None` when the server does not expose them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TickObservation {
    /// Output tokens (reasoning included) streamed to the client during the tick.
    pub output_tokens: u64,
    /// Requests that completed during the tick.
    pub finishes: Vec<Finish>,
    /// Requests sent during the tick.
    pub sent: u32,
    /// Their prompts' tokens, as estimated from the text before the server counts them: the
    /// length prior takes their mean until the first completion reports real counts.
    pub sent_prompt_tokens: u64,
    /// Retryable server errors (500, error events, `abort`) other than 503.
    pub retryable_errors: u32,
    /// 503 and 429 answers.
    pub overloaded: u32,
    /// Streams the stall watchdog flagged.
    pub stalls: u32,
    /// Requests the server is running.
    pub server_running: Option<u32>,
    /// Requests waiting in the server's queue.
    pub server_queued: Option<u32>,
    /// KV cache usage, 0–1.
    pub kv_usage: Option<f64>,
    /// The server's cumulative preemption (retraction) counter. A drop means a restart.
    pub preemptions_total: Option<u64>,
    /// Requests this client has in flight to the server at the end of the tick.
    pub in_flight: u32,
    /// Requests the job has still to send (to any server), once every source is counted.
    pub unsent: Option<u64>,
}

/// Where the controller is in its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControllerPhase {
    /// Starting: at the ceiling when the server reports caps (following it as the length
    /// statistics fill in, until the first sign of saturation), else growing ×1.5 per window.
    Startup,
    /// Creeping toward the ceiling, probing now and then.
    Steady,
    /// A ±10% probe is being measured.
    Probing,
    /// A guard cut the limit; the next window holds it.
    Backoff,
}

/// The limit to apply now, with a short human line for status and logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub limit: u32,
    pub phase: ControllerPhase,
    pub reason: String,
}

/// Where a controller got to, kept in the run directory (`controller.json`) so that a resumed
/// run, or the same server after a restart, starts there instead of ramping again.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Reached {
    pub limit: u32,
    /// The planned KV utilization it had learnt.
    pub kv_utilization: f64,
    /// The server's caps when it got there; other caps mean another server set-up, and the
    /// limit is checked against the new ones.
    pub caps: Caps,
}
