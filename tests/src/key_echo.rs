//! An OpenAI-compatible gateway on `127.0.0.1:0` that quotes the API key it was sent in its
//! error bodies, as some gateways do: LiteLLM's wrong-key 401 reads "Authentication Error,
//! Invalid proxy server token passed. Received API Key = sk-...-key, Key Hash (Token) =..."
//! (BerriAI/litellm#39757; LiteLLM masks the middle of the key, this gateway quotes it whole,
//! the worst case).
//!
//! A prompt containing `REJECT` gets a 400 quoting the key; with [`KeyEcho::unauthorized`] every
//! chat request gets the 401 above; other prompts get a short streamed answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

#[derive(Debug, Default)]
struct Shared {
    unauthorized: AtomicBool,
    chat_requests: AtomicUsize,
}

/// The gateway; stopped when dropped.
#[derive(Debug)]
pub struct KeyEcho {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl KeyEcho {
    pub async fn start() -> KeyEcho {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/health", get(|| async { axum::Json(json!({"status": "ok"})) }))
            .route(
                "/v1/models",
                get(|| async {
                    axum::Json(json!({"object": "list", "data": [{"id": "gateway-model", "object": "model"}]}))
                }),
            )
            .route("/v1/chat/completions", post(chat))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind on loopback");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("key-echo gateway stopped: {e}");
            }
        });
        KeyEcho { addr, shared, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, refuse every chat request with a 401 quoting the key.
    pub fn unauthorized(&self) {
        self.shared.unauthorized.store(true, Ordering::SeqCst);
    }

    pub fn chat_requests(&self) -> usize {
        self.shared.chat_requests.load(Ordering::SeqCst)
    }
}

impl Drop for KeyEcho {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn error(status: StatusCode, message: String) -> Response {
    let body = json!({"error": {"message": message, "type": "auth_error", "param": "None", "code": status.as_str()}});
    (status, axum::Json(body)).into_response()
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    shared.chat_requests.fetch_add(1, Ordering::SeqCst);
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_owned();
    if shared.unauthorized.load(Ordering::SeqCst) {
        return error(
            StatusCode::UNAUTHORIZED,
            format!(
                "Authentication Error, Invalid proxy server token passed. Received API Key = {key}, Key Hash (Token) =d748053a55933f7b. Unable to find token in cache or LiteLLM_VerificationTokenTable"
            ),
        );
    }
    let prompt = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    if prompt.contains("REJECT") {
        return error(
            StatusCode::BAD_REQUEST,
            format!("Invalid request from key {key}: prompt too long for this deployment"),
        );
    }
    let events = [
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}),
    ];
    let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    text.push_str("data: [DONE]\n\n");
    ([(header::CONTENT_TYPE, "text/event-stream")], text).into_response()
}
