//! A fake OpenAI-compatible server: `/health`, `/version`, `/v1/models`, and streaming
//! `/v1/chat/completions` that answers `echo: <last user message>` in a few chunks, with
//! reasoning, a finish reason and a usage chunk.
//!
//! Fault knobs: the first `fail_first` chat requests get an HTTP error (503 "loading" by
//! default, or a queue-full 503 with [`FailKind::QueueFull`]); a prompt containing `REJECT`
//! gets a 400 (a permanent error); a prompt containing `CUT` gets a stream without `[DONE]`
//! every time; a prompt containing `LONG` finishes with `length` unless `max_tokens` ≥ 100
//! (usage: the whole budget spent);
//! with `answer_bytes` set, each answer is padded to that many bytes (deterministic per prompt,
//! and barely compressible, so outputs fill a disk); `error_event` puts an error event in the
//! stream after the first answer chunk.
//!
//! Protocol-variant knobs, the ways real servers differ on the wire (SGLang, vLLM and llama.cpp each do some of these): the
//! reasoning field's name ([`ReasoningField`]), the error JSON's shape in bodies and events
//! ([`ErrorShape`]), usage in the last chunk or in every chunk ([`UsageMode`]), `: keep-alive`
//! comment lines, `data:` without a space, CRLF line endings, and how the body is cut into
//! writes ([`Writes`]: all at once, one event per write, fixed-size pieces, or split inside a
//! multi-byte UTF-8 character).
//!
//! Answer-fault knobs, shaped like real replies: `abort_first` streams end with
//! `finish_reason: "abort"` then `[DONE]` on HTTP 200, as vLLM ends an engine-aborted request
//! (vllm-project/vllm#57082); `empty_first` streams carry only the role chunk then `[DONE]` (no
//! content, finish reason or usage); `stall_first` streams send the role chunk and a first token,
//! then a chunk with an empty delta every [`STALL_EVERY`] and never finish (no token, no
//! reasoning, no finish reason: busy, but generating nothing); a prompt containing `ABORT`,
//! `EMPTY` or `STALL` gets that every time, one containing `MALFORMED` a chunk cut in the middle
//! of its JSON. `context_length`
//! refuses a request whose prompt words plus `max_tokens` exceed it with vLLM's 400 (body as
//! quoted in ogx-ai/ogx#4534); with `shorten_to_context` it is vLLM 0.32 instead (field notes
//! 5.1): `/v1/models` lists it as `max_model_len`, only a prompt that fills it is refused, and
//! one that fits gets `max_tokens` silently shortened to what the context has left (a word is
//! a token; usage counts the prompt's words), so an answer longer than that ends `length` with
//! prompt + answer = the context; [`FakeOpenAi::set_failing`] makes every chat request fail with
//! a status and message while `/health` stays 200 (vLLM after its engine died answers 500
//! "EngineCore encountered an issue…", vllm-project/vllm#42362).
//!
//! An answer's chunks name the model that wrote it, as real servers' do: `fake-model` (what
//! `/v1/models` lists), or from chat request `answer_model_from` on `answer_model` (a gateway
//! naming its deployment otherwise, or a router switching models mid-run).
//!
//! Every chat request's last user message and arrival time are recorded
//! ([`FakeOpenAi::received`]).
//!
//! With [`Knobs::sim`] it is a simulated continuous-batching server instead ([`sim`]): answers
//! stream as a [`crate::sim::SimServer`] decodes them on the real clock, and it answers the
//! capacity and load endpoints of SGLang, vLLM or llama.cpp.

mod sim;

pub use sim::SimKnobs;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// How often a stalled stream sends a chunk without a token.
pub const STALL_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

#[derive(Debug, Default)]
pub struct Knobs {
    /// Chat requests answered with an error before the server starts answering.
    pub fail_first: usize,
    /// The status of those errors (default 503).
    pub fail_status: Option<u16>,
    /// What those errors say (default: the model is still loading).
    pub fail_kind: FailKind,
    /// Delay before each chat answer, so a run lasts long enough to be interrupted.
    pub delay: std::time::Duration,
    /// Send reasoning inline in `content` (`<think>…</think>`), as a server without a
    /// reasoning parser does.
    pub inline_reasoning: bool,
    /// When non-zero, the answer `echo: <prompt>` is padded with pseudo-random alphanumeric text
    /// (seeded by the prompt, so the same prompt gets the same answer) up to this many bytes.
    pub answer_bytes: usize,
    /// The delta field reasoning is streamed in.
    pub reasoning_field: ReasoningField,
    /// The shape of error JSON, in HTTP error bodies and in error events.
    pub error_shape: ErrorShape,
    /// An error event with this code and message after the first answer chunk (then `[DONE]`,
    /// as vLLM and SGLang do).
    pub error_event: Option<(u16, String)>,
    /// Where usage is reported.
    pub usage: UsageMode,
    /// A `: keep-alive` comment line before every event.
    pub keep_alive_comments: bool,
    /// `data:{…}` instead of `data: {…}`.
    pub data_without_space: bool,
    /// `\r\n` line endings instead of `\n`.
    pub crlf: bool,
    /// How the event stream is cut into writes.
    pub writes: Writes,
    /// Chat requests (after `fail_first`) whose answer is aborted: some content, then
    /// `finish_reason: "abort"` and `[DONE]`.
    pub abort_first: usize,
    /// Chat requests (after those) answered with an empty stream: the role chunk, `[DONE]`.
    pub empty_first: usize,
    /// Chat requests (after those) that stall after their first token: empty deltas every
    /// [`STALL_EVERY`], forever.
    pub stall_first: usize,
    /// The model an answer's chunks name from chat request `answer_model_from` on (before it,
    /// and without it: `fake-model`).
    pub answer_model: Option<String>,
    pub answer_model_from: usize,
    /// The model's context in tokens (a word of the messages is a token): a request whose
    /// messages and `max_tokens` do not fit is refused with vLLM's 400.
    pub context_length: Option<u64>,
    /// With `context_length`: listed as `max_model_len`, and a request whose messages fit but
    /// messages and `max_tokens` do not gets `max_tokens` shortened to fit, as vLLM does.
    pub shorten_to_context: bool,
    /// Answer token ids as SGLang does (since sgl-project/sglang PR #34488, 2026-08): vLLM's
    /// `return_token_ids` on a streamed chat is refused with SGLang's 400, and
    /// `return_input_ids_in_sglext` / `return_output_ids_in_sglext` get a last chunk
    /// `{"choices": [], "sglext": {"input_ids": [...], "output_ids": [[...]]}}` (the shape of
    /// SGLang's own streaming test of those flags).
    pub sglang_token_ids: bool,
    /// Refuses tool turns: `tools` as llama-server without `--jinja` does (HTTP 500 "tools
    /// param requires --jinja flag", measured), a `tool` message or assistant `tool_calls`
    /// as a chat template without a tool role does (400 "Conversation roles must
    /// alternate…").
    pub refuse_tools: bool,
    /// Be a simulated server (the other knobs then do nothing).
    pub sim: Option<SimKnobs>,
}

/// The message of the `fail_first` errors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FailKind {
    /// "Loading model", as llama.cpp says on every endpoint while it loads.
    #[default]
    Loading,
    /// A full request queue, as SGLang reports it.
    QueueFull,
}

/// The delta field reasoning is streamed in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReasoningField {
    /// `reasoning_content` (SGLang, llama.cpp, vLLM before the rename).
    #[default]
    ReasoningContent,
    /// `reasoning` (vLLM after the rename).
    Reasoning,
}

/// The shape of error JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ErrorShape {
    /// `{"error": {"message": …, "code": …}}` (vLLM ≥ 0.10.1, llama.cpp).
    #[default]
    Nested,
    /// `{"object": "error", "message": …, "code": …}` (older vLLM, SGLang chat).
    FlatMessage,
    /// `{"error": "…"}` (some gateways).
    FlatString,
}

/// Where usage is reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UsageMode {
    /// One extra `choices: []` chunk at the end (`stream_options.include_usage`).
    #[default]
    LastChunk,
    /// Cumulative usage on every chunk too (`continuous_usage_stats`), then the final chunk.
    Continuous,
    /// No usage at all.
    Absent,
}

/// How the event stream is cut into writes (HTTP chunks, each flushed on its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Writes {
    /// The whole stream in one write: several events per write.
    #[default]
    Whole,
    /// One write per event.
    PerEvent,
    /// Pieces of this many bytes: events, line endings and characters split across writes.
    Bytes(usize),
    /// Two writes, cut inside the first multi-byte UTF-8 character of the stream.
    InsideChar,
}

#[derive(Debug, Default)]
struct Shared {
    knobs: Knobs,
    chat_requests: AtomicUsize,
    received: Mutex<Vec<Received>>,
    /// While set, every chat request gets this status and message.
    failing: Mutex<Option<(u16, String)>>,
    sim: Option<sim::SimEngine>,
}

/// One chat request as the fake server saw it arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The last user message of the request.
    pub prompt: String,
    pub at: Instant,
    /// The request body as sent.
    pub body: Value,
}

/// What the fake answers at `/version`, in vLLM's shape (`{"version": "0.32.0"}`).
pub const VERSION: &str = "0.32.0-fake";

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
            sim: knobs.sim.as_ref().map(sim::SimEngine::start),
            knobs,
            chat_requests: AtomicUsize::new(0),
            received: Mutex::new(Vec::new()),
            failing: Mutex::new(None),
        });
        let mut app = Router::new();
        for path in [
            "/props",
            "/slots",
            "/server_info",
            "/get_server_info",
            "/v1/loads",
            "/metrics",
        ] {
            app = app.route(path, get(sim_endpoint));
        }
        let app = app
            .route(
                "/version",
                get(|| async { axum::Json(json!({"version": VERSION})) }),
            )
            .route(
                "/health",
                get(|| async { axum::Json(json!({"status": "ok"})) }),
            )
            .route("/v1/models", get(models))
            .route("/v1/chat/completions", post(chat))
            // Real servers read a body of any size (vLLM's uvicorn, llama-server); axum's 2 MB
            // default answered a 4 MB prompt with an early 413, and under load the client could
            // see the connection reset while still sending instead, retry and give up.
            .layer(axum::extract::DefaultBodyLimit::disable())
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

    /// From now on every chat request fails with `status` and `message` (`/health` still
    /// answers 200); `None` ends it.
    pub fn set_failing(&self, failure: Option<(u16, &str)>) {
        *self
            .shared
            .failing
            .lock()
            .expect("no request panicked while holding the lock") =
            failure.map(|(status, message)| (status, message.to_owned()));
    }

    /// With [`Knobs::sim`]: the time from the first request to the last answer.
    pub fn sim_makespan(&self) -> Option<std::time::Duration> {
        self.shared.sim.as_ref()?.makespan()
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

/// The error JSON for `code` and `message` in `shape`.
fn error_json(shape: ErrorShape, code: u16, message: &str) -> Value {
    match shape {
        ErrorShape::Nested => {
            json!({"error": {"message": message, "code": code, "type": "server_error"}})
        }
        ErrorShape::FlatMessage => json!({"object": "error", "message": message, "code": code}),
        ErrorShape::FlatString => json!({"error": message}),
    }
}

fn error_response(knobs: &Knobs, status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(error_json(knobs.error_shape, status.as_u16(), message)),
    )
        .into_response()
}

/// The SSE text of `events` as `knobs` format it.
fn sse_text(knobs: &Knobs, events: &[Value], done: bool) -> Vec<String> {
    let eol = if knobs.crlf { "\r\n" } else { "\n" };
    let prefix = if knobs.data_without_space {
        "data:"
    } else {
        "data: "
    };
    let comment = if knobs.keep_alive_comments {
        format!(": keep-alive{eol}{eol}")
    } else {
        String::new()
    };
    let mut out: Vec<String> = events
        .iter()
        .map(|event| format!("{comment}{prefix}{event}{eol}{eol}"))
        .collect();
    if done {
        out.push(format!("{comment}{prefix}[DONE]{eol}{eol}"));
    }
    out
}

/// Cuts the event texts into writes.
fn cut(writes: Writes, events: Vec<String>) -> Vec<Bytes> {
    let whole = events.concat().into_bytes();
    let pieces: Vec<Vec<u8>> = match writes {
        Writes::Whole => vec![whole],
        Writes::PerEvent => events.into_iter().map(String::into_bytes).collect(),
        Writes::Bytes(n) => whole.chunks(n.max(1)).map(<[u8]>::to_vec).collect(),
        Writes::InsideChar => {
            // The first byte that continues a multi-byte character.
            match whole.iter().position(|b| b & 0b1100_0000 == 0b1000_0000) {
                Some(at) => vec![whole[..at].to_vec(), whole[at..].to_vec()],
                None => vec![whole],
            }
        }
    };
    pieces.into_iter().map(Bytes::from).collect()
}

/// A streaming body that yields between writes, so each one reaches the socket on its own.
fn sse_body(writes: Vec<Bytes>) -> Response {
    let stream = futures_util::stream::unfold(writes.into_iter(), |mut rest| async move {
        let next = rest.next()?;
        tokio::task::yield_now().await;
        Some((Ok::<_, Infallible>(next), rest))
    });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// Splits `text` near its middle, on a character boundary.
fn split_half(text: &str) -> (&str, &str) {
    let mut at = text.len() / 2;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text.split_at(at)
}

/// `/v1/models`: one model, with its context as vLLM lists it when it shortens to it.
async fn models(State(shared): State<Arc<Shared>>) -> axum::Json<Value> {
    let mut model = json!({"id": "fake-model", "object": "model"});
    if let (Some(context), true) = (shared.knobs.context_length, shared.knobs.shorten_to_context) {
        model["max_model_len"] = json!(context);
    }
    axum::Json(json!({"object": "list", "data": [model]}))
}

/// A capacity or load endpoint: the simulated server's flavour answers it, or nothing does.
async fn sim_endpoint(State(shared): State<Arc<Shared>>, uri: axum::http::Uri) -> Response {
    match shared.sim.as_ref().and_then(|e| e.endpoint(uri.path())) {
        Some(body) => body.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn chat(State(shared): State<Arc<Shared>>, axum::Json(body): axum::Json<Value>) -> Response {
    if let Some(engine) = &shared.sim {
        shared.chat_requests.fetch_add(1, Ordering::SeqCst);
        let prompt = body["messages"].to_string();
        let max_tokens = body["max_tokens"]
            .as_u64()
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(u32::MAX);
        let receiver = engine.submit(&prompt, max_tokens);
        let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
            let bytes = receiver.recv().await?;
            Some((Ok::<_, Infallible>(bytes), receiver))
        });
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(stream),
        )
            .into_response();
    }
    let knobs = &shared.knobs;
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
            body: body.clone(),
        });
    if !knobs.delay.is_zero() {
        tokio::time::sleep(knobs.delay).await;
    }
    if n < knobs.fail_first {
        let status = knobs
            .fail_status
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let message = match knobs.fail_kind {
            FailKind::Loading => "Loading model",
            FailKind::QueueFull => "The request queue is full.",
        };
        return error_response(knobs, status, message);
    }
    let failing = shared
        .failing
        .lock()
        .expect("no request panicked while holding the lock")
        .clone();
    if let Some((status, message)) = failing {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error_response(knobs, status, &message);
    }
    let tool_messages = body["messages"].as_array().is_some_and(|messages| {
        messages
            .iter()
            .any(|m| m["role"] == "tool" || m.get("tool_calls").is_some())
    });
    if knobs.refuse_tools && body.get("tools").is_some() {
        return error_response(
            knobs,
            StatusCode::INTERNAL_SERVER_ERROR,
            "tools param requires --jinja flag",
        );
    }
    if knobs.refuse_tools && tool_messages {
        return error_response(
            knobs,
            StatusCode::BAD_REQUEST,
            "Conversation roles must alternate user/assistant/user/assistant/...",
        );
    }
    if last_user.contains("REJECT") {
        return error_response(knobs, StatusCode::BAD_REQUEST, "prompt too long");
    }
    if knobs.sglang_token_ids && body["return_token_ids"] == true {
        // SGLang's words, in its flat error object.
        let message = "return_token_ids is not supported with streaming on /v1/chat/completions. \
                       Please set stream=false when using return_token_ids=true.";
        let body = json!({"object": "error", "message": message, "type": "BadRequestError", "param": null, "code": 400});
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    let mut max_tokens = body["max_tokens"].as_u64().unwrap_or(0);
    let prompt_words: u64 = body["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .map(|c| c.split_whitespace().count() as u64)
                .sum()
        })
        .unwrap_or(0);
    // What usage reports as the prompt: its words when the context is simulated.
    let prompt_tokens = if knobs.shorten_to_context {
        prompt_words
    } else {
        5
    };
    if let Some(limit) = knobs.context_length {
        if knobs.shorten_to_context && prompt_words < limit {
            max_tokens = max_tokens.min(limit - prompt_words);
        } else if prompt_words + max_tokens > limit {
            let message = format!(
                "This model's maximum context length is {limit} tokens. However, you requested \
                 {} tokens ({prompt_words} in the messages, {max_tokens} in the completion). Please \
                 reduce the length of the messages or completion.",
                prompt_words + max_tokens
            );
            let body = json!({"object": "error", "message": message, "type": "BadRequestError", "param": null, "code": 400});
            return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
        }
    }
    let after_failures = n.saturating_sub(knobs.fail_first);
    if last_user.contains("ABORT") || after_failures < knobs.abort_first {
        // vLLM's engine-aborted request: HTTP 200, part of an answer, `abort`, `[DONE]`.
        let events = [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "echo: "}, "logprobs": null, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {"content": ""}, "logprobs": null, "finish_reason": "abort"}]}),
        ];
        return sse_body(cut(knobs.writes, sse_text(knobs, &events, true)));
    }
    if last_user.contains("EMPTY")
        || (after_failures >= knobs.abort_first
            && after_failures - knobs.abort_first < knobs.empty_first)
    {
        let events = [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]}),
        ];
        return sse_body(cut(knobs.writes, sse_text(knobs, &events, true)));
    }
    let stalls_from = knobs.abort_first + knobs.empty_first;
    if last_user.contains("STALL")
        || (after_failures >= stalls_from && after_failures - stalls_from < knobs.stall_first)
    {
        let head = sse_text(
            knobs,
            &[
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
                json!({"choices": [{"index": 0, "delta": {"content": "echo"}, "finish_reason": null}]}),
            ],
            false,
        );
        let idle = sse_text(
            knobs,
            &[json!({"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": null}]})],
            false,
        )
        .concat();
        let head = futures_util::stream::iter([Bytes::from(head.concat())]);
        let idle = futures_util::stream::unfold(Bytes::from(idle), |idle| async move {
            tokio::time::sleep(STALL_EVERY).await;
            Some((idle.clone(), idle))
        });
        let stream = futures_util::StreamExt::map(
            futures_util::StreamExt::chain(head, idle),
            Ok::<_, Infallible>,
        );
        return (
            [(header::CONTENT_TYPE, "text/event-stream")],
            Body::from_stream(stream),
        )
            .into_response();
    }
    if last_user.contains("MALFORMED") {
        let mut text = sse_text(
            knobs,
            &[json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})],
            false,
        );
        text.push(
            "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"ec\n\n".to_owned(),
        );
        text.extend(sse_text(knobs, &[], true));
        return sse_body(cut(knobs.writes, text));
    }
    let mut answer = format!("echo: {last_user}");
    pad(&mut answer, &last_user, knobs.answer_bytes);
    // A prompt containing LONG is cut by max_tokens unless the budget is at least 100; with
    // the context simulated, so is an answer of more words than `max_tokens` (as shortened).
    let over_budget = answer.split_whitespace().count() as u64 > max_tokens;
    let (finish, words) = if last_user.contains("LONG") && max_tokens < 100 {
        ("length", max_tokens)
    } else if knobs.shorten_to_context && over_budget {
        let kept = usize::try_from(max_tokens).unwrap_or(usize::MAX);
        answer = answer
            .split_whitespace()
            .take(kept)
            .collect::<Vec<_>>()
            .join(" ");
        ("length", max_tokens)
    } else {
        ("stop", answer.split_whitespace().count() as u64)
    };
    let (head, tail) = split_half(&answer);
    let reasoning_key = match knobs.reasoning_field {
        ReasoningField::ReasoningContent => "reasoning_content",
        ReasoningField::Reasoning => "reasoning",
    };
    let first = if knobs.inline_reasoning {
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "<think>thinking</think>"}}]})
    } else {
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", reasoning_key: "thinking"}}]})
    };
    let mut events = vec![
        first,
        json!({"choices": [{"index": 0, "delta": {"content": head}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": tail}, "finish_reason": finish}]}),
    ];
    let model = match &knobs.answer_model {
        Some(model) if n >= knobs.answer_model_from => model.as_str(),
        _ => "fake-model",
    };
    for event in &mut events {
        event["model"] = json!(model);
    }
    if let Some((code, message)) = &knobs.error_event {
        events.truncate(2);
        events.push(error_json(knobs.error_shape, *code, message));
    }
    if knobs.usage == UsageMode::Continuous {
        // Cumulative: the answer's words so far (the reasoning chunk counts none).
        let head_words = head.split_whitespace().count() as u64;
        for (event, done) in events.iter_mut().zip([0, head_words, words]) {
            if event.get("choices").is_some() {
                event["usage"] = json!({"prompt_tokens": prompt_tokens, "completion_tokens": done, "total_tokens": prompt_tokens + done});
            }
        }
    }
    if knobs.usage != UsageMode::Absent && knobs.error_event.is_none() {
        events.push(json!({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": words, "total_tokens": prompt_tokens + words}}));
    }
    if knobs.sglang_token_ids && body["return_output_ids_in_sglext"] == true {
        // A token a word: the prompt's ids 1..=prompt_tokens, the answer's from 1000.
        let input: Vec<u64> = (1..=prompt_tokens).collect();
        let output: Vec<u64> = (1000..1000 + words).collect();
        events.push(json!({"choices": [], "sglext": {"input_ids": input, "output_ids": [output]}}));
    }
    let text = sse_text(knobs, &events, !last_user.contains("CUT"));
    sse_body(cut(knobs.writes, text))
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
