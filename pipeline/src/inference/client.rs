//! Streaming OpenAI chat completions.
//!
//! A request succeeds only when its stream ends with `[DONE]` and carries an answer: a finish
//! reason other than `abort` or `error`, and some content or reasoning ([`answer_defect`]).
//! An aborted or empty answer, an error event inside the stream or a 5xx is transient
//! ([`RequestError::Transient`]); a refused connection or a stream cut before `[DONE]` may
//! mean the server is down ([`RequestError::ServerDown`], which the dispatcher confirms with
//! a health probe); a 400 is the prompt's own fault ([`RequestError::Rejected`]);
//! 401/403/404 mean the config is wrong for every prompt ([`RequestError::Fatal`]). There is
//! no total timeout — long reasoning takes many minutes — only a connect timeout and a limit on
//! how long a stream may go without a token. Only a token (content or reasoning) or the finish
//! is progress: empty deltas, role chunks and SSE comments keep a connection alive but never
//! keep a stream that generates nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use gen_sources::Message;

use crate::config::settings::TOKEN_IDS;
use crate::inference::kinds::ServerKind;

// The answer rule and the token counts belong to the stored records; the client applies the
// rule before an answer is accepted and reports usage in the same type.
pub use crate::store::records::{Defect, TokenIds, Usage, answer_defect};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Limit for the response headers, and for the first token after them: queueing and prefill
/// (which may send empty chunks meanwhile) can take a while.
const FIRST_TOKEN_TIMEOUT: Duration = Duration::from_secs(300);
/// Limit between two tokens unless [`ChatClient::with_stall`] sets one (a preempted request
/// pauses while it is recomputed).
const TOKEN_TIMEOUT: Duration = Duration::from_secs(120);

/// A finished generation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// The model the stream's chunks name as the one that wrote the answer (every OpenAI-style
    /// chunk carries `model`); `None` when they name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The prompt's and the answer's token ids, when the request asked for them
    /// (`return_token_ids`) and the server sent them: vLLM sends the prompt's in its first
    /// chunk and the answer's as deltas with the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<TokenIds>,
}

/// A completion with its timing, as [`ChatClient::complete_timed`] measures it.
#[derive(Debug, Clone)]
pub struct TimedCompletion {
    pub completion: Completion,
    /// From sending the request to the first chunk with content or reasoning; `None` when the
    /// answer was empty.
    pub first_token: Option<Duration>,
    /// From sending the request to `[DONE]`.
    pub total: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The server is not there: refused or reset connection, a cut stream, 503 while loading.
    /// Not the prompt's fault; the dispatcher pauses until the server is back.
    #[error("{0}")]
    ServerDown(String),
    /// Worth retrying: an error inside an answering server (5xx, error event, stall).
    #[error("{0}")]
    Transient(String),
    /// The server refused this prompt (e.g. too long for the context).
    #[error("{0}")]
    Rejected(String),
    /// Wrong for every request: bad key, model name or path.
    #[error("{0}")]
    Fatal(String),
}

/// A conversation to answer: its messages and the tool definitions sent with them.
pub type Chat<'a> = (&'a [Message], Option<&'a Value>);

/// A request's JSON, serialized straight from the borrowed messages and params: building a
/// `Value` tree first cost a copy of every prompt per request.
struct RequestBody<'a> {
    params: &'a Map<String, Value>,
    model: &'a str,
    messages: &'a [Message],
    /// The prompt's tool definitions, sent with `tool_choice = "none"`: where the model
    /// answers, its dataset answered in words (see `run::dispatch`).
    tools: Option<&'a Value>,
    max_tokens: u32,
    /// Ask for token ids SGLang's way (see [`ChatClient::sglext_ids`]).
    sglext_ids: bool,
}

impl Serialize for RequestBody<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        #[derive(Serialize)]
        struct StreamOptions {
            include_usage: bool,
        }
        // These win over a sampling parameter of the same name.
        const FIXED: [&str; 7] = [
            "model",
            "messages",
            "tools",
            "tool_choice",
            "max_tokens",
            "stream",
            "stream_options",
        ];
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.params {
            if self.sglext_ids && key == TOKEN_IDS {
                // Answered in a last `sglext` chunk of the stream.
                for flag in ServerKind::Sglang.spec().token_id_flags {
                    map.serialize_entry(flag, value)?;
                }
            } else if !FIXED.contains(&key.as_str()) {
                map.serialize_entry(key, value)?;
            }
        }
        map.serialize_entry("model", self.model)?;
        map.serialize_entry("messages", self.messages)?;
        if let Some(tools) = self.tools {
            map.serialize_entry("tools", tools)?;
            map.serialize_entry("tool_choice", "none")?;
        }
        map.serialize_entry("max_tokens", &self.max_tokens)?;
        map.serialize_entry("stream", &true)?;
        map.serialize_entry(
            "stream_options",
            &StreamOptions {
                include_usage: true,
            },
        )?;
        map.end()
    }
}

/// A client for one server.
#[derive(Debug, Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    url: String,
    /// `url` parsed once (reqwest would parse the string again for every request); `None` when
    /// it does not parse, so the request reports reqwest's own error.
    parsed_url: Option<reqwest::Url>,
    model: String,
    api_key: Option<String>,
    max_tokens: u32,
    params: Map<String, Value>,
    /// When set: the Unix time (ms) of each token (or finish) received, for a stall watchdog.
    activity: Option<Arc<AtomicU64>>,
    /// A stream without a token for this long is abandoned.
    stall: Duration,
    /// Token ids are asked for SGLang's way: set once the server refused vLLM's
    /// `return_token_ids` on a streamed chat, as SGLang does; shared by the clones.
    sglext_ids: Arc<AtomicBool>,
}

impl ChatClient {
    pub fn new(
        base_url: &str,
        model: String,
        api_key: Option<String>,
        max_tokens: u32,
        params: Map<String, Value>,
    ) -> reqwest::Result<ChatClient> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_keepalive(Duration::from_secs(30))
            .build()?;
        Ok(ChatClient {
            http,
            parsed_url: reqwest::Url::parse(&format!("{base_url}/v1/chat/completions")).ok(),
            url: format!("{base_url}/v1/chat/completions"),
            model,
            api_key,
            max_tokens,
            params,
            activity: None,
            stall: TOKEN_TIMEOUT,
            sglext_ids: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Stores the Unix time (ms) of every token (or finish) this client receives in
    /// `activity`.
    pub fn with_activity(mut self, activity: Arc<AtomicU64>) -> ChatClient {
        self.activity = Some(activity);
        self
    }

    /// Abandons a stream that goes `stall` without a token once the first came (before it,
    /// at least [`FIRST_TOKEN_TIMEOUT`]), as [`RequestError::Transient`].
    pub fn with_stall(mut self, stall: Duration) -> ChatClient {
        self.stall = stall;
        self
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn max_tokens(&self) -> u32 {
        self.max_tokens
    }

    /// The parameters each request carries unless it is given others.
    pub fn params(&self) -> &Map<String, Value> {
        &self.params
    }

    fn body<'a>(
        &'a self,
        (messages, tools): Chat<'a>,
        max_tokens: u32,
        params: &'a Map<String, Value>,
        sglext_ids: bool,
    ) -> RequestBody<'a> {
        RequestBody {
            params,
            model: &self.model,
            messages,
            tools,
            max_tokens,
            sglext_ids,
        }
    }

    /// Sends one chat completion and reads its stream to the end.
    pub async fn complete(
        &self,
        messages: &[Message],
        max_tokens: u32,
    ) -> Result<Completion, RequestError> {
        self.complete_with(messages, max_tokens, &self.params).await
    }

    /// [`ChatClient::complete`] with `params` instead of the client's own (a source's
    /// settings, a sample's seed and drawn values).
    pub async fn complete_with(
        &self,
        messages: &[Message],
        max_tokens: u32,
        params: &Map<String, Value>,
    ) -> Result<Completion, RequestError> {
        let timed = self.timed((messages, None), max_tokens, params).await;
        timed.map(|timed| timed.completion)
    }

    /// [`ChatClient::complete_with`] for a conversation with its tool definitions, also
    /// measuring the time to the first generated token (the first chunk that carries content
    /// or reasoning) and to the end of the stream.
    pub async fn timed(
        &self,
        chat: Chat<'_>,
        max_tokens: u32,
        params: &Map<String, Value>,
    ) -> Result<TimedCompletion, RequestError> {
        let started = std::time::Instant::now();
        let asks_ids = params.get(TOKEN_IDS) == Some(&Value::Bool(true));
        let sglext = self.sglext_ids.load(Ordering::Relaxed);
        let response = match self.send(chat, max_tokens, params, sglext).await {
            // SGLang: "return_token_ids is not supported with streaming on
            // /v1/chat/completions"; it takes its own flags instead.
            Err(RequestError::Rejected(why)) if asks_ids && !sglext && why.contains(TOKEN_IDS) => {
                self.sglext_ids.store(true, Ordering::Relaxed);
                self.send(chat, max_tokens, params, true).await?
            }
            other => other?,
        };
        let events = response.bytes_stream().eventsource();
        let (completion, first_token) = self.read_events(events, started).await?;
        if let Some(defect) = answer_defect(
            &completion.content,
            completion.reasoning_content.as_deref(),
            completion.finish_reason.as_deref(),
        ) {
            return Err(RequestError::Transient(defect.to_string()));
        }
        if asks_ids {
            check_token_ids(&completion)?;
        }
        Ok(TimedCompletion {
            completion,
            first_token,
            total: started.elapsed(),
        })
    }

    /// Posts the request; the response once its headers say success.
    async fn send(
        &self,
        chat: Chat<'_>,
        max_tokens: u32,
        params: &Map<String, Value>,
        sglext_ids: bool,
    ) -> Result<reqwest::Response, RequestError> {
        let request = match &self.parsed_url {
            Some(url) => self.http.post(url.clone()),
            None => self.http.post(&self.url),
        };
        let mut request = request.json(&self.body(chat, max_tokens, params, sglext_ids));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = tokio::time::timeout(FIRST_TOKEN_TIMEOUT, request.send())
            .await
            .map_err(|_| RequestError::Transient("no response headers within 300 s".into()))?
            .map_err(|e| {
                if e.is_timeout() {
                    RequestError::Transient(describe_reqwest(&e))
                } else {
                    RequestError::ServerDown(describe_reqwest(&e))
                }
            })?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(classify_status(status.as_u16(), &body));
        }
        Ok(response)
    }

    /// Reads the answer's events to `[DONE]`: the completion, and when (after `started`) the
    /// first generated text came. Only a token or the finish moves the deadline: a server
    /// that sends empty deltas and never finishes is abandoned after `stall` like one that
    /// sends nothing.
    async fn read_events<E: std::fmt::Display>(
        &self,
        mut events: impl futures_util::Stream<Item = Result<eventsource_stream::Event, E>> + Unpin,
        started: std::time::Instant,
    ) -> Result<(Completion, Option<Duration>), RequestError> {
        let mut completion = Completion::default();
        let mut first_token = None;
        let mut progress_at = tokio::time::Instant::now();
        // Chunks since the last token: they say what the stream did while it generated nothing.
        let mut idle_chunks = 0u32;
        loop {
            let limit = match first_token {
                None => FIRST_TOKEN_TIMEOUT.max(self.stall),
                Some(_) => self.stall,
            };
            let event = match tokio::time::timeout_at(progress_at + limit, events.next()).await {
                Err(_) => return Err(RequestError::Transient(no_token(limit, idle_chunks))),
                Ok(None) => {
                    return Err(RequestError::ServerDown(
                        "stream ended without [DONE]".into(),
                    ));
                }
                Ok(Some(Err(e))) => {
                    return Err(RequestError::ServerDown(format!("stream broke: {e}")));
                }
                Ok(Some(Ok(event))) => event,
            };
            if event.data.trim() == "[DONE]" {
                self.progressed();
                return Ok((completion, first_token));
            }
            if event.data.trim().is_empty() {
                idle_chunks += 1;
                continue;
            }
            let chunk: Value = serde_json::from_str(&event.data)
                .map_err(|e| RequestError::Transient(format!("unreadable stream chunk: {e}")))?;
            let generated = generated(&completion);
            let finished = completion.finish_reason.is_some();
            apply_chunk(&chunk, &mut completion)?;
            let grew = self::generated(&completion) > generated;
            if grew && first_token.is_none() {
                first_token = Some(started.elapsed());
            }
            if grew || (!finished && completion.finish_reason.is_some()) {
                progress_at = tokio::time::Instant::now();
                idle_chunks = 0;
                self.progressed();
            } else {
                idle_chunks += 1;
            }
        }
    }

    /// A token (or the finish) arrived: the server is generating.
    fn progressed(&self) {
        if let Some(activity) = &self.activity {
            activity.store(crate::sys::unix_ms(), Ordering::Relaxed);
        }
    }
}

/// An answer asked for with `return_token_ids` must carry both lists, the answer's as long
/// as the server counted it: a server that ignores the key (llama.cpp, a plain OpenAI
/// server) or sends it only without streaming (SGLang) would otherwise fill the run with
/// records that cannot be trained on token for token. Wrong for every request, so fatal.
fn check_token_ids(completion: &Completion) -> Result<(), RequestError> {
    let ids = completion.token_ids.as_ref();
    let missing = match ids {
        None => Some("neither `prompt_token_ids` nor `token_ids`"),
        Some(ids) if ids.prompt.is_empty() => Some("no `prompt_token_ids`"),
        Some(ids) if ids.completion.is_empty() => Some("no `token_ids` for the answer"),
        Some(_) => None,
    };
    if let Some(missing) = missing {
        return Err(RequestError::Fatal(format!(
            "`token-ids = true` asks the server for token ids (vLLM's `return_token_ids`, \
             SGLang's `return_input_ids_in_sglext`), and its streamed answer carried {missing}: \
             the server cannot return them (llama.cpp has no such option, SGLang only since \
             August 2026, a plain OpenAI server ignores the key); serve the model with vLLM or \
             a recent SGLang, or remove `token-ids`"
        )));
    }
    if let (Some(ids), Some(usage)) = (ids, &completion.usage)
        && ids.completion.len() as u64 != usage.completion_tokens
    {
        return Err(RequestError::Transient(format!(
            "the answer's token ids are {} tokens, its usage says {}",
            ids.completion.len(),
            usage.completion_tokens
        )));
    }
    Ok(())
}

/// How much of the answer came so far: its text, and its token ids when they come (a token
/// the server sends without text, with `return_token_ids`, is progress too).
fn generated(completion: &Completion) -> usize {
    let ids = completion
        .token_ids
        .as_ref()
        .map_or(0, |t| t.completion.len());
    let reasoning = completion.reasoning_content.as_ref().map_or(0, String::len);
    completion.content.len() + reasoning + ids
}

/// Why a stream was abandoned: `no token for 120 s (6 chunks without one)`.
fn no_token(limit: Duration, idle_chunks: u32) -> String {
    let chunks = match idle_chunks {
        0 => String::new(),
        1 => " (1 chunk without one)".to_owned(),
        n => format!(" ({n} chunks without one)"),
    };
    format!("no token for {} s{chunks}", limit.as_secs())
}

/// Folds one stream chunk into the completion; an error event is transient.
///
/// Error events come nested (`{"error": {"message": …}}`, vLLM ≥ 0.10.1, llama.cpp), flat
/// (`{"error": "…"}`) or as a flat error object (`{"object": "error", "message": …}`, older vLLM
/// and SGLang); missing the last kind would store a cut answer as complete, since `[DONE]`
/// usually follows.
fn apply_chunk(chunk: &Value, completion: &mut Completion) -> Result<(), RequestError> {
    let error = chunk.get("error").filter(|e| !e.is_null()).or_else(|| {
        (chunk.get("object").and_then(Value::as_str) == Some("error")).then_some(chunk)
    });
    if let Some(error) = error {
        return Err(RequestError::Transient(format!(
            "error event in stream: {}",
            error_message(error)
        )));
    }
    if completion.model.is_none()
        && let Some(model) = chunk
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
    {
        completion.model = Some(model.to_owned());
    }
    // With continuous usage every chunk carries the counts so far; the last readable ones win,
    // and an unreadable one never erases them.
    if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null())
        && let Ok(usage) = serde_json::from_value(usage.clone())
    {
        completion.usage = Some(usage);
    }
    // Each kind reads its own way of carrying token ids.
    let mut carried = completion.token_ids.is_some();
    let ids = completion.token_ids.get_or_insert_with(TokenIds::default);
    for kind in ServerKind::ALL {
        carried |= (kind.spec().stream_ids)(chunk, &mut ids.prompt, &mut ids.completion);
    }
    if !carried {
        completion.token_ids = None;
    }
    let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
        return Ok(());
    };
    if let Some(delta) = choice.get("delta") {
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            completion.content.push_str(text);
        }
        for key in ["reasoning_content", "reasoning"] {
            if let Some(text) = delta.get(key).and_then(Value::as_str)
                && !text.is_empty()
            {
                let reasoning = completion.reasoning_content.get_or_insert_default();
                reasoning.push_str(text);
            }
        }
    }
    if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
        completion.finish_reason = Some(reason.to_owned());
    }
    Ok(())
}

/// `error.message`, else `message`, else the raw JSON.
fn error_message(error: &Value) -> String {
    error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| error.as_str().map(str::to_owned))
        .unwrap_or_else(|| error.to_string())
}

fn classify_status(status: u16, body: &str) -> RequestError {
    let message = serde_json::from_str::<Value>(body)
        .ok()
        .map(|v| {
            v.get("error")
                .map_or_else(|| error_message(&v), error_message)
        })
        .unwrap_or_else(|| body.chars().take(300).collect());
    let text = format!("HTTP {status}: {message}");
    match status {
        401 | 403 | 404 => RequestError::Fatal(text),
        400 | 413 | 422 => RequestError::Rejected(text),
        503 => RequestError::ServerDown(text),
        _ => RequestError::Transient(text),
    }
}

fn describe_reqwest(error: &reqwest::Error) -> String {
    // Without the URL (it may hold credentials); the source chain has the OS reason.
    let mut text = error.to_string();
    if let Some(url) = error.url() {
        text = text.replace(url.as_str(), &super::probe::redact(url.as_str()));
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_request_carries_params_model_messages_budget_and_usage_option() {
        let mut params = Map::new();
        params.insert("temperature".into(), json!(0.6));
        params.insert(
            "chat_template_kwargs".into(),
            json!({"enable_thinking": true}),
        );
        params.insert("max_tokens".into(), json!(1));
        let client =
            ChatClient::new("http://127.0.0.1:1", "m".into(), None, 8, params).expect("client");
        let messages = [Message::new(gen_sources::Role::User, "hi".to_owned())];
        let body = serde_json::to_value(client.body((&messages, None), 16, &client.params, false))
            .expect("serializes");
        assert_eq!(
            body,
            json!({
                "temperature": 0.6,
                "chat_template_kwargs": {"enable_thinking": true},
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 16,
                "stream": true,
                "stream_options": {"include_usage": true},
            })
        );
    }

    /// Tool turns go in OpenAI's shape; the definitions with `tool_choice = "none"`.
    #[test]
    fn a_conversation_with_tool_turns_is_sent_in_openais_shape() {
        let client =
            ChatClient::new("http://127.0.0.1:1", "m".into(), None, 8, Map::new()).expect("client");
        let call = gen_sources::prompt::ToolCall {
            id: "c1".into(),
            kind: "function".into(),
            function: gen_sources::prompt::FunctionCall {
                name: "f".into(),
                arguments: "{}".into(),
            },
        };
        let messages = [
            Message::new(gen_sources::Role::User, "q"),
            Message {
                tool_calls: vec![call],
                ..Message::new(gen_sources::Role::Assistant, "")
            },
            Message {
                tool_call_id: Some("c1".into()),
                ..Message::new(gen_sources::Role::Tool, "1")
            },
        ];
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        let body =
            serde_json::to_value(client.body((&messages, Some(&tools)), 16, &Map::new(), false))
                .expect("serializes");
        assert_eq!(
            (&body["messages"], &body["tools"], &body["tool_choice"]),
            (
                &json!([
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                    {"role": "tool", "content": "1", "tool_call_id": "c1"},
                ]),
                &tools,
                &json!("none")
            )
        );
    }

    /// An event stream on tokio's clock: `head` at once, then `every` one more `idle` chunk,
    /// forever (a server that keeps the connection busy and never finishes).
    fn trickle(
        head: Vec<Value>,
        idle: Value,
        every: Duration,
    ) -> impl futures_util::Stream<Item = Result<eventsource_stream::Event, String>> + Unpin {
        let event = |data: &Value| {
            Ok(eventsource_stream::Event {
                event: "message".into(),
                data: data.to_string(),
                id: String::new(),
                retry: None,
            })
        };
        let head: Vec<_> = head.iter().map(event).collect();
        let idle = event(&idle);
        Box::pin(
            futures_util::stream::iter(head).chain(futures_util::stream::unfold((), move |()| {
                let idle = idle.clone();
                async move {
                    tokio::time::sleep(every).await;
                    Some((idle, ()))
                }
            })),
        )
    }

    fn client() -> ChatClient {
        ChatClient::new("http://127.0.0.1:1", "m".into(), None, 8, Map::new()).expect("client")
    }

    /// Reads `events` to its end or until an hour of tokio time passed (`None`).
    async fn read_for_an_hour(
        client: &ChatClient,
        events: impl futures_util::Stream<Item = Result<eventsource_stream::Event, String>> + Unpin,
    ) -> Option<(Result<Completion, RequestError>, Duration)> {
        let started = tokio::time::Instant::now();
        let read = client.read_events(events, std::time::Instant::now());
        let result = tokio::time::timeout(Duration::from_secs(3600), read)
            .await
            .ok()?;
        Some((result.map(|(c, _)| c), started.elapsed()))
    }

    #[tokio::test(start_paused = true)]
    async fn empty_deltas_without_a_token_are_no_progress() {
        // Every 21 s a chunk with an empty delta, no finish, forever: before the first token
        // the stream gets FIRST_TOKEN_TIMEOUT, however many such chunks keep it busy (the role
        // chunk and 14 empty deltas here).
        let role =
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]});
        let empty =
            json!({"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": null}]});
        let events = trickle(vec![role.clone()], empty.clone(), Duration::from_secs(21));
        let (result, took) = read_for_an_hour(&client(), events)
            .await
            .expect("abandoned, not read forever");
        assert_eq!(
            result,
            Err(RequestError::Transient(
                "no token for 300 s (15 chunks without one)".into()
            ))
        );
        assert_eq!(took, Duration::from_secs(300));

        // After a first token, `stall` without another ends it.
        let token = json!({"choices": [{"index": 0, "delta": {"content": "Hel"}}]});
        let events = trickle(vec![role, token], empty, Duration::from_secs(21));
        let stalled = client().with_stall(Duration::from_secs(60));
        let (result, took) = read_for_an_hour(&stalled, events)
            .await
            .expect("abandoned, not read forever");
        assert_eq!(
            result,
            Err(RequestError::Transient(
                "no token for 60 s (2 chunks without one)".into()
            ))
        );
        assert_eq!(took, Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_stream_that_keeps_generating_is_never_abandoned() {
        // A token every 100 s (a busy server) under a 120 s stall limit, ten times, then the
        // finish and `[DONE]`: 1000 s in all, longer than any single limit.
        let token = json!({"choices": [{"index": 0, "delta": {"content": "a"}}]});
        let tokens = trickle(Vec::new(), token, Duration::from_secs(100)).take(10);
        let end = futures_util::stream::iter([
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).to_string(),
            "[DONE]".to_owned(),
        ])
        .map(|data| {
            Ok(eventsource_stream::Event {
                event: "message".into(),
                data,
                id: String::new(),
                retry: None,
            })
        });
        let (result, took) = read_for_an_hour(&client(), tokens.chain(end))
            .await
            .expect("finished");
        let completion = result.expect("answered");
        assert_eq!(completion.content, "a".repeat(10));
        assert_eq!(completion.finish_reason.as_deref(), Some("stop"));
        assert_eq!(took, Duration::from_secs(1000));
    }

    #[test]
    fn chunks_fold_content_reasoning_and_usage() {
        let mut completion = Completion::default();
        for chunk in [
            json!({"model": "served", "choices": [{"delta": {"reasoning_content": "think "}}]}),
            json!({"choices": [{"delta": {"reasoning": "more"}}]}),
            json!({"choices": [{"delta": {"content": "Hel"}}]}),
            json!({"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}),
        ] {
            apply_chunk(&chunk, &mut completion).expect("chunk");
        }
        assert_eq!(completion.content, "Hello");
        assert_eq!(completion.reasoning_content.as_deref(), Some("think more"));
        assert_eq!(completion.finish_reason.as_deref(), Some("stop"));
        assert_eq!(completion.usage.map(|u| u.completion_tokens), Some(5));
        assert_eq!(completion.model.as_deref(), Some("served"));
    }

    /// vLLM's stream with `return_token_ids` (captured from vLLM 0.32.0): the prompt's ids in
    /// the role chunk, the answer's with each delta, the finish chunk's included.
    #[test]
    fn token_ids_are_gathered_from_a_vllm_stream_and_required_when_asked_for() {
        let mut completion = Completion::default();
        for chunk in [
            json!({"choices": [{"delta": {"role": "assistant", "content": ""}}], "prompt_token_ids": [0, 30, 94, 1024], "prompt_text": null}),
            json!({"choices": [{"delta": {"content": " data"}, "token_ids": [343]}]}),
            json!({"choices": [{"delta": {"content": "ata"}, "finish_reason": "length", "token_ids": [306]}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}}),
        ] {
            apply_chunk(&chunk, &mut completion).expect("chunk");
        }
        let ids = completion.token_ids.clone().expect("token ids");
        assert_eq!(
            (ids.prompt, ids.completion),
            (vec![0, 30, 94, 1024], vec![343, 306])
        );
        assert_eq!(check_token_ids(&completion), Ok(()));
        let mut short = completion.clone();
        short.usage = Some(Usage {
            prompt_tokens: 4,
            completion_tokens: 3,
            total_tokens: 7,
        });
        assert!(matches!(
            check_token_ids(&short),
            Err(RequestError::Transient(_))
        ));
        let ignored = Completion {
            token_ids: None,
            ..completion
        };
        let Err(RequestError::Fatal(message)) = check_token_ids(&ignored) else {
            panic!("a server that ignores `return_token_ids` is fatal");
        };
        assert!(message.contains("remove `token-ids`"), "{message}");
    }

    #[test]
    fn an_unreadable_usage_or_a_null_error_erases_nothing() {
        let mut completion = Completion::default();
        for chunk in [
            json!({"choices": [{"delta": {"content": "a"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
            json!({"choices": [{"delta": {"content": "b"}}], "usage": {"completion_tokens": "?"}, "error": null}),
        ] {
            apply_chunk(&chunk, &mut completion).expect("chunk");
        }
        assert_eq!(completion.content, "ab");
        assert_eq!(
            completion.usage,
            Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 1,
                total_tokens: 0
            })
        );
    }

    #[test]
    fn error_events_and_statuses_are_classified() {
        let mut c = Completion::default();
        let err = apply_chunk(
            &json!({"error": {"code": 500, "message": "Context size has been exceeded."}}),
            &mut c,
        );
        assert_eq!(
            err,
            Err(RequestError::Transient(
                "error event in stream: Context size has been exceeded.".into()
            ))
        );
        for (event, message) in [
            (
                json!({"object": "error", "message": "flat", "code": 500}),
                "flat",
            ),
            (json!({"error": "plain"}), "plain"),
        ] {
            assert_eq!(
                apply_chunk(&event, &mut c),
                Err(RequestError::Transient(format!(
                    "error event in stream: {message}"
                )))
            );
        }
        assert!(
            matches!(classify_status(400, r#"{"error":{"message":"too long"}}"#), RequestError::Rejected(m) if m == "HTTP 400: too long")
        );
        assert!(
            matches!(classify_status(400, r#"{"object":"error","message":"flat"}"#), RequestError::Rejected(m) if m == "HTTP 400: flat")
        );
        assert!(matches!(
            classify_status(503, "Loading model"),
            RequestError::ServerDown(_)
        ));
        assert!(matches!(
            classify_status(500, "boom"),
            RequestError::Transient(_)
        ));
        assert!(matches!(classify_status(401, "{}"), RequestError::Fatal(_)));
    }
}
