//! A fake OpenAI-compatible server: `/health`, `/v1/models`, and streaming
//! `/v1/chat/completions` that answers `echo: <last user message>` in a few chunks, with
//! reasoning, a finish reason and a usage chunk.
//!
//! Knobs: the first `fail_first` chat requests get a 503; a prompt containing `REJECT` gets a
//! 400 (a permanent error); a prompt containing `CUT` gets a stream without `[DONE]` every time;
//! a prompt containing `LONG` finishes with `length` unless `max_tokens` ≥ 100; with
//! `answer_bytes` set, each answer is padded to that many bytes (deterministic per prompt, and
//! barely compressible, so outputs fill a disk). Every chat request's last user message and
//! arrival time are recorded ([`FakeOpenAi::received`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

#[derive(Debug, Default)]
pub struct Knobs {
    /// Chat requests answered with an error before the server starts answering.
    pub fail_first: usize,
    /// The status of those errors (default 503, "loading").
    pub fail_status: Option<u16>,
    /// Delay before each chat answer, so a run lasts long enough to be interrupted.
    pub delay: std::time::Duration,
    /// Send reasoning inline in `content` (`<think>…</think>`), as a server without a
    /// reasoning parser does.
    pub inline_reasoning: bool,
    /// When non-zero, the answer `echo: <prompt>` is padded with pseudo-random alphanumeric text
    /// (seeded by the prompt, so the same prompt gets the same answer) up to this many bytes.
    pub answer_bytes: usize,
}

#[derive(Debug, Default)]
struct Shared {
    knobs: Knobs,
    chat_requests: AtomicUsize,
    received: Mutex<Vec<Received>>,
}

/// One chat request as the fake server saw it arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The last user message of the request.
    pub prompt: String,
    pub at: Instant,
}

/// A running fake server; it stops when dropped.
#[derive(Debug)]
pub struct FakeOpenAi {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeOpenAi {
    pub async fn start(knobs: Knobs) -> FakeOpenAi {
        FakeOpenAi::start_at("127.0.0.1:0".parse().expect("loopback address"), knobs).await
    }

    /// Starts on `addr` (e.g. the address of a server that was stopped, to simulate a restart).
    pub async fn start_at(addr: SocketAddr, knobs: Knobs) -> FakeOpenAi {
        let shared = Arc::new(Shared {
            knobs,
            chat_requests: AtomicUsize::new(0),
            received: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/health", get(|| async { axum::Json(json!({"status": "ok"})) }))
            .route(
                "/v1/models",
                get(|| async { axum::Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})) }),
            )
            .route("/v1/chat/completions", post(chat))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind on loopback");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("fake OpenAI server stopped: {e}");
            }
        });
        FakeOpenAi { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Chat completion requests received so far.
    pub fn chat_requests(&self) -> usize {
        self.shared.chat_requests.load(Ordering::SeqCst)
    }

    /// Every chat request received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.shared
            .received
            .lock()
            .expect("no test panicked while holding the lock")
            .clone()
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn sse(events: &[Value], done: bool) -> Response {
    let mut body = String::new();
    for event in events {
        body.push_str(&format!("data: {event}\n\n"));
    }
    if done {
        body.push_str("data: [DONE]\n\n");
    }
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

async fn chat(State(shared): State<Arc<Shared>>, axum::Json(body): axum::Json<Value>) -> Response {
    let n = shared.chat_requests.fetch_add(1, Ordering::SeqCst);
    let last_user = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    shared
        .received
        .lock()
        .expect("no request panicked while holding the lock")
        .push(Received {
            prompt: last_user.clone(),
            at: Instant::now(),
        });
    if !shared.knobs.delay.is_zero() {
        tokio::time::sleep(shared.knobs.delay).await;
    }
    if n < shared.knobs.fail_first {
        let status = shared
            .knobs
            .fail_status
            .and_then(|s| StatusCode::from_u16(s).ok());
        return (
            status.unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            axum::Json(json!({"error": {"message": "Loading model", "code": 503}})),
        )
            .into_response();
    }
    if last_user.contains("REJECT") {
        return (StatusCode::BAD_REQUEST, axum::Json(json!({"error": {"message": "prompt too long", "type": "exceed_context_size_error"}})))
            .into_response();
    }
    let mut answer = format!("echo: {last_user}");
    pad(&mut answer, &last_user, shared.knobs.answer_bytes);
    // A prompt containing LONG is cut by max_tokens unless the budget is at least 100.
    let budget = body["max_tokens"].as_u64().unwrap_or(0);
    let finish = if last_user.contains("LONG") && budget < 100 {
        "length"
    } else {
        "stop"
    };
    let (head, tail) = answer.split_at(answer.len() / 2);
    let words = answer.split_whitespace().count() as u64;
    let events = [
        if shared.knobs.inline_reasoning {
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "<think>thinking</think>"}}]})
        } else {
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "thinking"}}]})
        },
        json!({"choices": [{"index": 0, "delta": {"content": head}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": tail}, "finish_reason": finish}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": words, "total_tokens": 5 + words}}),
    ];
    sse(&events, !last_user.contains("CUT"))
}

/// Pads `answer` to `bytes` with alphanumeric text drawn from a PRNG seeded by `prompt`
/// (FNV-1a, then splitmix64): about 6 bits of entropy a byte, so zstd cannot shrink it much.
fn pad(answer: &mut String, prompt: &str, bytes: usize) {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    if answer.len() >= bytes {
        return;
    }
    let mut state = prompt.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    answer.push(' ');
    while answer.len() < bytes {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        for byte in z.to_le_bytes() {
            if answer.len() >= bytes {
                break;
            }
            answer.push(char::from(ALPHABET[usize::from(byte) % ALPHABET.len()]));
        }
    }
}
