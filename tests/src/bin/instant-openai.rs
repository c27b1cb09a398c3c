//! `instant-openai`: an OpenAI-compatible server that answers every streaming chat completion
//! at once, for measuring a client's own overhead (`scripts/bench-dispatch.sh`).
//!
//! `instant-openai [--threads N] [--harness] [--port P]` prints `http://127.0.0.1:PORT` on
//! stdout once it listens, then serves until killed. `/health`, `/v1/models` (with
//! `max_model_len`) and `/v1/chat/completions`, whose answer is a minimal valid stream: a role +
//! reasoning chunk, a content chunk with `finish_reason`, a usage chunk and `[DONE]`, one
//! precomputed body per request. The request body is read (so keep-alive connections stay in
//! step) but not parsed; one that asks for `"return_token_ids":true` gets the same answer with
//! token ids in vLLM's shape (the prompt's in the first chunk, the answer's with the deltas).
//!
//! `--harness` serves the test harness's [`gen_tests::fake_openai`] server instead (it parses
//! each request and echoes the prompt), to compare the two.

use std::net::SocketAddr;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

const MODEL: &str = "instant-model";

const STREAM: &str = concat!(
    r#"data: {"id":"c","object":"chat.completion.chunk","model":"instant-model","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"thinking"}}]}"#,
    "\n\n",
    r#"data: {"id":"c","object":"chat.completion.chunk","model":"instant-model","choices":[{"index":0,"delta":{"content":"Hello from the instant server."},"finish_reason":"stop"}]}"#,
    "\n\n",
    r#"data: {"id":"c","object":"chat.completion.chunk","model":"instant-model","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

const STREAM_WITH_IDS: &str = concat!(
    r#"data: {"id":"c","object":"chat.completion.chunk","model":"instant-model","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"thinking"},"token_ids":[151667,82260]}],"prompt_token_ids":[151644,872,198,9707,1879,315,279,9867,3538,13,151645,198]}"#,
    "\n\n",
    r#"data: {"id":"c","object":"chat.completion.chunk","model":"instant-model","choices":[{"index":0,"delta":{"content":"Hello from the instant server."},"finish_reason":"stop","token_ids":[151668,9707,504,279,9867,3538]}]}"#,
    "\n\n",
    r#"data: {"id":"c","object":"chat.completion.chunk","model":"instant-model","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

async fn chat(body: Bytes) -> Response {
    const ASKS_FOR_IDS: &[u8] = b"\"return_token_ids\":true";
    let stream = if body.windows(ASKS_FOR_IDS.len()).any(|w| w == ASKS_FOR_IDS) {
        STREAM_WITH_IDS
    } else {
        STREAM
    };
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from(Bytes::from_static(stream.as_bytes())),
    )
        .into_response()
}

fn models() -> String {
    format!(
        r#"{{"object":"list","data":[{{"id":"{MODEL}","object":"model","max_model_len":1000000}}]}}"#
    )
}

struct Args {
    threads: usize,
    harness: bool,
    port: u16,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        threads: 1,
        harness: false,
        port: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--threads" => args.threads = it.next().unwrap_or_default().parse()?,
            "--port" => args.port = it.next().unwrap_or_default().parse()?,
            "--harness" => args.harness = true,
            other => anyhow::bail!(
                "unknown argument `{other}`; usage: instant-openai [--threads N] [--harness] [--port P]"
            ),
        }
    }
    Ok(args)
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
        if args.harness {
            let server =
                gen_tests::fake_openai::FakeOpenAi::start_at(addr, Default::default()).await;
            announce(&server.url());
            std::future::pending::<()>().await;
            return Ok(());
        }
        let app = Router::new()
            .route("/health", get(|| async { r#"{"status":"ok"}"# }))
            .route(
                "/v1/models",
                get(|| async { ([(header::CONTENT_TYPE, "application/json")], models()) }),
            )
            .route("/v1/chat/completions", post(chat));
        let listener = tokio::net::TcpListener::bind(addr).await?;
        announce(&format!("http://{}", listener.local_addr()?));
        axum::serve(listener, app).await?;
        Ok(())
    })
}

fn announce(url: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout();
    writeln!(out, "{url}").ok();
    out.flush().ok();
}
