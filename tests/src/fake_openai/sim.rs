//! The simulated mode of the fake server ([`SimKnobs`]): a [`SimServer`] on the real clock,
//! `speed` times faster than its virtual time, answering chat completions as streams whose
//! tokens arrive as the engine decodes them, and the capacity and load endpoints of a real
//! server's [`Flavour`]. `gen run` drives it over a socket exactly as it drives SGLang, vLLM
//! or llama.cpp, so a whole job's makespan with `concurrency = "auto"` can be compared with
//! fixed levels, tuner and dispatcher included.
//!
//! Each prompt's lengths are drawn from the knobs' [`Workload`] seeded by the prompt's text, so
//! every run of the same prompts does the same work whatever the concurrency; with
//! [`SimKnobs::prompt_tokens_from_text`] the prompt's tokens are its text's bytes ÷ 4 instead
//! (what a client can estimate before sending it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use serde_json::json;
use tokio::sync::mpsc;

use crate::sim::{Flavour, RequestSpec, ServerConfig, SimServer, Workload};

/// How the simulated server is built.
#[derive(Debug, Clone)]
pub struct SimKnobs {
    pub flavour: Flavour,
    pub server: ServerConfig,
    /// Virtual seconds per real second.
    pub speed: f64,
    /// The request lengths, reseeded per prompt.
    pub workload: Workload,
    /// A prompt's tokens are its text's bytes ÷ 4 (else drawn from `workload`).
    pub prompt_tokens_from_text: bool,
}

impl SimKnobs {
    /// A `flavour` server of shape `server` at `speed`, with the default workload.
    pub fn new(flavour: Flavour, server: ServerConfig, speed: f64) -> SimKnobs {
        SimKnobs {
            flavour,
            server,
            speed,
            workload: Workload::new(0),
            prompt_tokens_from_text: false,
        }
    }
}

/// Output tokens a stream chunk carries at most (the engine decodes several per step).
const CHUNK_TOKENS: u32 = 256;
/// How often the engine catches up with the real clock.
const CATCH_UP: Duration = Duration::from_millis(5);

struct Stream {
    sender: mpsc::UnboundedSender<Bytes>,
    sent: u32,
    spec: RequestSpec,
    max_tokens: u32,
}

struct EngineState {
    server: SimServer,
    workload: Workload,
    prompt_tokens_from_text: bool,
    streams: HashMap<u64, Stream>,
    first_submit: Option<Instant>,
    last_finish: Option<Instant>,
}

/// The engine and the task that drives it; the task stops when this is dropped.
pub(super) struct SimEngine {
    flavour: Flavour,
    state: Arc<Mutex<EngineState>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for SimEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimEngine")
            .field("flavour", &self.flavour)
            .finish_non_exhaustive()
    }
}

impl Drop for SimEngine {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn event(value: &serde_json::Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

fn content(tokens: u32) -> Bytes {
    // About one character per 16 tokens: enough to store, little to copy.
    let text = "x".repeat((tokens / 16).max(1) as usize);
    event(&json!({"choices": [{"index": 0, "delta": {"content": text}}]}))
}

impl SimEngine {
    pub(super) fn start(knobs: &SimKnobs) -> SimEngine {
        let state = Arc::new(Mutex::new(EngineState {
            server: SimServer::new(knobs.server.clone()),
            workload: knobs.workload.clone(),
            prompt_tokens_from_text: knobs.prompt_tokens_from_text,
            streams: HashMap::new(),
            first_submit: None,
            last_finish: None,
        }));
        let speed = knobs.speed;
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                let started = Instant::now();
                loop {
                    tokio::time::sleep(CATCH_UP).await;
                    let target = started.elapsed().as_secs_f64() * speed;
                    let mut state = state.lock().expect("no panic while holding the engine");
                    drive(&mut state, target);
                }
            }
        });
        SimEngine {
            flavour: knobs.flavour,
            state,
            task,
        }
    }

    /// Queues a request for `prompt`; its stream's events come out of the receiver.
    pub(super) fn submit(&self, prompt: &str, max_tokens: u32) -> mpsc::UnboundedReceiver<Bytes> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut state = self
            .state
            .lock()
            .expect("no panic while holding the engine");
        let mut spec = state.workload.reseeded(seed(prompt)).next_request();
        spec.output_tokens = spec.output_tokens.min(max_tokens.max(1));
        if state.prompt_tokens_from_text {
            spec.prompt_tokens = u32::try_from(prompt.len() / 4).unwrap_or(u32::MAX).max(1);
        }
        // The receiver is still here: the first send cannot fail.
        sender
            .send(event(
                &json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            ))
            .ok();
        if let Ok(id) = state.server.submit(spec) {
            state.first_submit.get_or_insert_with(Instant::now);
            state.streams.insert(
                id,
                Stream {
                    sender,
                    sent: 0,
                    spec,
                    max_tokens,
                },
            );
        }
        receiver
    }

    /// The body of a capacity or load endpoint, as the flavour's server answers it.
    pub(super) fn endpoint(&self, path: &str) -> Option<String> {
        let state = self
            .state
            .lock()
            .expect("no panic while holding the engine");
        state.server.endpoint(self.flavour, path)
    }

    /// From the first request to the last answer.
    pub(super) fn makespan(&self) -> Option<Duration> {
        let state = self
            .state
            .lock()
            .expect("no panic while holding the engine");
        Some(state.last_finish?.duration_since(state.first_submit?))
    }
}

/// Runs the engine up to virtual time `target` and sends what it decoded.
fn drive(state: &mut EngineState, target: f64) {
    while state.server.now() < target {
        let outcome = state.server.step();
        for finished in outcome.finished {
            let Some(stream) = state.streams.remove(&finished.id) else {
                continue;
            };
            let rest = finished.output_tokens.saturating_sub(stream.sent);
            let finish = if stream.spec.output_tokens >= stream.max_tokens {
                "length"
            } else {
                "stop"
            };
            let events = [
                content(rest),
                event(&json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})),
                event(&json!({"choices": [], "usage": {
                    "prompt_tokens": finished.prompt_tokens,
                    "completion_tokens": finished.output_tokens,
                    "total_tokens": finished.prompt_tokens + finished.output_tokens}})),
                Bytes::from_static(b"data: [DONE]\n\n"),
            ];
            // A client that went away misses its end; nothing else to do.
            for bytes in events {
                stream.sender.send(bytes).ok();
            }
            state.last_finish = Some(Instant::now());
        }
    }
    let mut gone = Vec::new();
    let progress: Vec<(u64, u32)> = state.server.progress().collect();
    for (id, generated) in progress {
        let Some(stream) = state.streams.get_mut(&id) else {
            continue;
        };
        if generated >= stream.sent + CHUNK_TOKENS {
            if stream
                .sender
                .send(content(generated - stream.sent))
                .is_err()
            {
                gone.push(id);
            }
            stream.sent = generated;
        }
    }
    for id in gone {
        state.streams.remove(&id);
        state.server.abort(id);
    }
}

/// FNV-1a of the prompt: the same prompt always gets the same lengths.
fn seed(prompt: &str) -> u64 {
    prompt.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
