//! The server checks of `gen doctor` and of `gen run`'s start, each a [`Check`]: within
//! [`PROBE_TIMEOUT`], does `/v1/models` serve the model, and does the context (where each kind
//! says it: vLLM's `max_model_len`, llama.cpp's `/props` `n_ctx` per slot, …) hold
//! `max-tokens` plus [`PROMPT_MARGIN`]? Is reasoning separated, and do answers carry token ids
//! when a source asks for them? A server that does not answer is a warning (`gen run` waits
//! for it), not a failure; a server `gen` launches itself is checked when it starts.

use std::time::Duration;

use serde_json::Value;

use crate::config::Plan;
use crate::inference::kinds::{Context, ServerKind};

/// How long a check waits for each answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Tokens kept free for the prompt on top of `max-tokens`.
pub const PROMPT_MARGIN: u64 = 512;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

impl Level {
    pub fn label(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        }
    }
}

/// One line of a report (`gen doctor`'s, or a check `gen run` makes at its start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub level: Level,
    pub message: String,
}

impl Check {
    pub fn new(name: &'static str, level: Level, message: impl Into<String>) -> Check {
        Check {
            name,
            level,
            message: message.into(),
        }
    }
}

/// The server checks, or one line saying why there are none.
pub fn probe(plan: &Plan) -> Vec<Check> {
    if plan.server.launch.is_some() {
        return vec![launch_port(plan.server.url())];
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return vec![Check::new(
                "server",
                Level::Warn,
                format!("not probed: cannot start the async runtime: {e}"),
            )];
        }
    };
    runtime.block_on(probe_async(plan))
}

async fn get_json(
    client: &reqwest::Client,
    url: &str,
    api_key: Option<&str>,
) -> Result<Value, String> {
    let mut request = client.get(url);
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.map_err(super::probe::request_error)?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    response
        .json()
        .await
        .map_err(|e| format!("not JSON: {}", e.without_url()))
}

/// The models the server lists at `/v1/models` (its `data`).
async fn listed_models(
    client: &reqwest::Client,
    url: &str,
    api_key: Option<&str>,
) -> Result<Vec<Value>, String> {
    let models = get_json(client, &format!("{url}/v1/models"), api_key).await?;
    Ok(match models.get("data") {
        Some(Value::Array(listed)) => listed.clone(),
        _ => Vec::new(),
    })
}

async fn probe_async(plan: &Plan) -> Vec<Check> {
    let mut checks = Vec::new();
    for url in &plan.server.urls {
        let mut these = probe_one(plan, url).await;
        if plan.server.urls.len() > 1 {
            // Which server each line is about.
            for check in &mut these {
                check.message = format!("{}: {}", super::probe::redact(url), check.message);
            }
        }
        checks.extend(these);
    }
    checks
}

async fn probe_one(plan: &Plan, url: &str) -> Vec<Check> {
    let Ok(client) = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build() else {
        return vec![Check::new(
            "server",
            Level::Warn,
            "not probed: no HTTP client",
        )];
    };
    let api_key = plan.server.api_key();
    let listed = match listed_models(&client, url, api_key.as_deref()).await {
        Ok(listed) => listed,
        Err(reason) => {
            return vec![Check::new(
                "server",
                Level::Warn,
                format!(
                    "server not reachable at `{url}/v1/models` within {} s ({reason}): `gen run` prepares the sources meanwhile and waits for it (`[server] startup-timeout-secs`)",
                    PROBE_TIMEOUT.as_secs()
                ),
            )];
        }
    };
    let ids: Vec<&str> = listed
        .iter()
        .filter_map(|m| m.get("id").and_then(Value::as_str))
        .collect();
    let (model_check, served) = model_check(url, plan.server.model.as_deref(), &ids);
    let mut checks = vec![model_check];
    checks.push(context(plan, &client, url, served, &listed, api_key.as_deref()).await);
    if let Some(model) = served {
        checks.push(reasoning_probe(plan, url, model, api_key.clone()).await);
        if let Some(check) = token_ids_probe(plan, url, model, api_key).await {
            checks.push(check);
        }
    }
    checks
}

/// Whether the server's context holds `max-tokens` plus a margin for the prompt, asked of
/// the server at `url` serving `model` (what `gen run` checks before generating).
pub(crate) async fn context_at(
    plan: &Plan,
    url: &str,
    model: &str,
    api_key: Option<&str>,
) -> Check {
    let Ok(client) = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build() else {
        return Check::new("context", Level::Warn, "not checked: no HTTP client");
    };
    let listed = listed_models(&client, url, api_key)
        .await
        .unwrap_or_default();
    context(plan, &client, url, Some(model), &listed, api_key).await
}

/// The context in tokens of the server at `url` serving `model`, when it says (what tells an
/// answer the context cut from one `max-tokens` cut, see
/// [`crate::store::records::heuristic_cut_by`]).
pub(crate) async fn context_length(url: &str, model: &str, api_key: Option<&str>) -> Option<u64> {
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .build()
        .ok()?;
    let listed = listed_models(&client, url, api_key).await.ok()?;
    server_context(&client, url, Some(model), &listed, api_key)
        .await
        .map(|(tokens, _)| tokens)
}

async fn context(
    plan: &Plan,
    client: &reqwest::Client,
    url: &str,
    served: Option<&str>,
    listed: &[Value],
    api_key: Option<&str>,
) -> Check {
    match server_context(client, url, served, listed, api_key).await {
        // The largest budget of any source must fit.
        Some((tokens, what)) => {
            let budget = plan.sources.iter().map(|s| s.settings.max_tokens).max();
            context_check(tokens, what, budget.unwrap_or(plan.generation.max_tokens))
        }
        None => Check::new(
            "context",
            Level::Ok,
            "the server does not report its context length: not checked",
        ),
    }
}

/// The context the server reports for `served` among the `listed` models, and where it says
/// it: the first kind's source (`KindSpec::context`) that says it.
async fn server_context(
    client: &reqwest::Client,
    url: &str,
    served: Option<&str>,
    listed: &[Value],
    api_key: Option<&str>,
) -> Option<(u64, &'static str)> {
    let entry = served.and_then(|id| {
        listed
            .iter()
            .find(|m| m.get("id").and_then(Value::as_str) == Some(id))
    });
    for kind in ServerKind::ALL {
        let tokens = match kind.spec().context {
            Some(Context::Listed { field, what }) => {
                let listed = entry.and_then(|m| m.get(field)?.as_u64());
                listed.zip(Some(what))
            }
            Some(Context::At {
                path,
                pointer,
                what,
            }) => {
                let body = get_json(client, &format!("{url}{path}"), api_key).await;
                body.ok()
                    .and_then(|b| b.pointer(pointer)?.as_u64())
                    .zip(Some(what))
            }
            None => None,
        };
        if tokens.is_some() {
            return tokens;
        }
    }
    None
}

/// Whether thinking was asked for through `chat-template-kwargs` (`enable_thinking` for
/// Qwen3/GLM, `thinking` for DeepSeek/Kimi): `None` when the config does not say.
pub(crate) fn thinking_expected(plan: &Plan) -> Option<bool> {
    let kwargs = plan.generation.params.get("chat_template_kwargs")?;
    ["enable_thinking", "thinking"]
        .iter()
        .find_map(|k| kwargs.get(*k).and_then(Value::as_bool))
}

/// One small real request with the run's own parameters: is reasoning separated by the
/// server's reasoning parser, and are the template kwargs honoured?
pub(crate) async fn reasoning_probe(
    plan: &Plan,
    url: &str,
    model: &str,
    api_key: Option<String>,
) -> Check {
    let expected = thinking_expected(plan);
    let params = plan.generation.params.clone();
    let answer = match small_request(url, model, api_key, 64, params).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            let why = format!("probe request failed: {e}");
            return Check::new("reasoning", Level::Warn, why);
        }
        Err(why) => return Check::new("reasoning", Level::Warn, why),
    };
    let separated = answer
        .reasoning_content
        .as_deref()
        .is_some_and(|r| !r.trim().is_empty());
    let inline = answer.content.contains("<think>");
    reasoning_verdict(expected, separated, inline)
}

/// With `token-ids = true` on some source: one small real request with that source's
/// settings, whose streamed answer must carry the prompt's and the answer's token ids
/// (`return_token_ids`). `None` when no source asks for them.
pub(crate) async fn token_ids_probe(
    plan: &Plan,
    url: &str,
    model: &str,
    api_key: Option<String>,
) -> Option<Check> {
    let source = plan.sources.iter().find(|s| s.settings.token_ids())?;
    let (source, settings) = (source.name(), &source.settings);
    let params = settings.request("token-ids-probe", 0).params;
    let (level, message) = match small_request(url, model, api_key, 16, params).await {
        Ok(Ok(_)) => (
            Level::Ok,
            "answers carry their prompt's and their own token ids".to_owned(),
        ),
        Ok(Err(super::RequestError::Fatal(reason))) => {
            (Level::Fail, format!("source `{source}`: {reason}"))
        }
        Ok(Err(e)) => (
            Level::Warn,
            format!("probe request failed: {e}: not checked"),
        ),
        Err(why) => (Level::Warn, why),
    };
    Some(Check::new("token ids", level, message))
}

/// One small real request ("What is 2 + 2?") of at most `budget` tokens with `params`, given
/// six probe timeouts; `Err` saying why it was not made or did not come back in time.
async fn small_request(
    url: &str,
    model: &str,
    api_key: Option<String>,
    budget: u32,
    params: serde_json::Map<String, Value>,
) -> Result<Result<super::Completion, super::RequestError>, String> {
    let client = super::ChatClient::new(url, model.to_owned(), api_key, budget, params)
        .map_err(|e| format!("not probed: {e}"))?;
    let question = [gen_sources::Message::new(
        gen_sources::Role::User,
        "What is 2 + 2? Answer briefly.",
    )];
    tokio::time::timeout(PROBE_TIMEOUT * 6, client.complete(&question, budget))
        .await
        .map_err(|_| "probe request took too long: not checked".to_owned())
}

fn reasoning_verdict(expected: Option<bool>, separated: bool, inline: bool) -> Check {
    let (level, message) = match (expected, separated, inline) {
        (_, _, true) => {
            let level = match expected {
                Some(false) => Level::Warn,
                _ => Level::Fail,
            };
            let message = format!(
                "reasoning arrives inside `content` (`<think>…`): start the server with a \
                 reasoning parser ({})",
                reasoning_flags()
            );
            return Check::new("reasoning", level, message);
        }
        (Some(false), true, false) => (
            Level::Warn,
            "the server returned reasoning although `chat-template-kwargs` turn thinking off: the template ignores the kwargs",
        ),
        (Some(true), false, false) => (
            Level::Warn,
            "no reasoning came back although `chat-template-kwargs` turn thinking on: the model or template may ignore it, or the reasoning parser is off",
        ),
        (_, true, false) => (
            Level::Ok,
            "reasoning arrives separated in `reasoning_content`",
        ),
        (_, false, false) => (Level::Ok, "no reasoning in a probe answer (none asked for)"),
    };
    Check::new("reasoning", level, message)
}

/// Each kind's flag that separates reasoning, kinds with the same flag together:
/// "vLLM/SGLang `--reasoning-parser NAME`, llama.cpp `--reasoning-format deepseek`".
fn reasoning_flags() -> String {
    let mut flags: Vec<(&str, Vec<&str>)> = Vec::new();
    for spec in ServerKind::ALL.map(ServerKind::spec) {
        let Some(flag) = spec.reasoning_flag else {
            continue;
        };
        match flags.iter_mut().find(|(f, _)| *f == flag) {
            Some((_, names)) => names.push(spec.name),
            None => flags.push((flag, vec![spec.name])),
        }
    }
    let each: Vec<String> = flags
        .iter()
        .map(|(flag, names)| format!("{} `{flag}`", names.join("/")))
        .collect();
    each.join(", ")
}

/// Whether the wanted model (or any) is listed; the served model's id when known.
fn model_check<'a>(
    url: &str,
    wanted: Option<&'a str>,
    ids: &[&'a str],
) -> (Check, Option<&'a str>) {
    match (wanted, ids.first()) {
        (Some(wanted), _) if ids.contains(&wanted) => (
            Check::new("server", Level::Ok, format!("`{url}` serves `{wanted}`")),
            Some(wanted),
        ),
        (Some(wanted), None) => (
            Check::new(
                "server",
                Level::Warn,
                format!("`{url}` lists no model at `/v1/models`: cannot check `{wanted}`"),
            ),
            None,
        ),
        (Some(wanted), Some(_)) => (
            Check::new(
                "server",
                Level::Fail,
                format!(
                    "`{url}` does not serve `{wanted}`; it serves {}: fix `[server] model`",
                    ids.iter()
                        .map(|id| format!("`{id}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            None,
        ),
        (None, Some(first)) => (
            Check::new(
                "server",
                Level::Ok,
                format!("`{url}` serves `{first}` (the first it lists; `[server] model` pins one)"),
            ),
            Some(*first),
        ),
        (None, None) => (
            Check::new(
                "server",
                Level::Fail,
                format!("`{url}` lists no model at `/v1/models`"),
            ),
            None,
        ),
    }
}

fn context_check(tokens: u64, what: &str, max_tokens: u32) -> Check {
    let needed = u64::from(max_tokens) + PROMPT_MARGIN;
    if tokens < needed {
        Check::new(
            "context",
            Level::Fail,
            format!(
                "{tokens} tokens ({what}) cannot hold max-tokens {max_tokens} + {PROMPT_MARGIN} for the prompt: lower `max-tokens` or give the server a longer context"
            ),
        )
    } else {
        Check::new(
            "context",
            Level::Ok,
            format!(
                "{tokens} tokens ({what}) hold max-tokens {max_tokens} + {PROMPT_MARGIN} for the prompt"
            ),
        )
    }
}

/// A server `gen` launches: its port, when `url` fixes one, must be free now (`gen run` refuses
/// a port another process holds); the server itself is checked when it starts.
fn launch_port(url: &str) -> Check {
    let later = "the server itself (model, context, reasoning) is checked when `gen run` starts it";
    let port = (!url.contains("{port}"))
        .then(|| reqwest::Url::parse(url).ok())
        .flatten()
        .and_then(|u| Some((u.host_str()?.to_owned(), u.port_or_known_default()?)));
    let Some((host, port)) = port else {
        return Check::new(
            "server",
            Level::Ok,
            format!("launched by `gen` on a free port (`{{port}}`); {later}"),
        );
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let held = std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .ok()
        .and_then(|mut addrs| addrs.next())
        .is_some_and(|addr| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
        });
    if held {
        Check::new(
            "server",
            Level::Fail,
            format!(
                "port {port} of `url` is already in use by another process, so the server `gen` \
                 launches cannot listen on it; stop that process, or write `{{port}}` in \
                 `[server] launch` and `url` so `gen` picks a free port"
            ),
        )
    } else {
        Check::new(
            "server",
            Level::Ok,
            format!("launched by `gen` on port {port}, free now; {later}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wanted_model_must_be_listed() {
        let (ok, served) = model_check("http://s", Some("m"), &["a", "m"]);
        assert_eq!((ok.level, served), (Level::Ok, Some("m")));
        let (missing, _) = model_check("http://s", Some("m"), &["a", "b"]);
        assert_eq!(missing.level, Level::Fail);
        assert_eq!(
            missing.message,
            "`http://s` does not serve `m`; it serves `a`, `b`: fix `[server] model`"
        );
        let (first, served) = model_check("http://s", None, &["a"]);
        assert_eq!((first.level, served), (Level::Ok, Some("a")));
        assert_eq!(model_check("http://s", None, &[]).0.level, Level::Fail);
    }

    #[test]
    fn reasoning_parser_and_template_kwargs() {
        let level = |e, s, i| reasoning_verdict(e, s, i).level;
        assert_eq!(level(Some(true), true, false), Level::Ok);
        assert_eq!(level(Some(true), false, true), Level::Fail, "parser off");
        assert_eq!(
            level(Some(true), false, false),
            Level::Warn,
            "kwargs ignored or no reasoning"
        );
        assert_eq!(
            level(Some(false), true, false),
            Level::Warn,
            "kwargs ignored"
        );
        assert_eq!(level(None, false, false), Level::Ok);
        assert!(reasoning_verdict(None, false, true).message.ends_with(
            "(vLLM/SGLang `--reasoning-parser NAME`, llama.cpp `--reasoning-format deepseek`)"
        ));
    }

    #[test]
    fn the_context_must_hold_max_tokens_and_a_prompt() {
        assert_eq!(context_check(2048, "n_ctx", 1536).level, Level::Ok);
        let short = context_check(2048, "llama.cpp `n_ctx` per slot", 2000);
        assert_eq!(short.level, Level::Fail);
        assert_eq!(
            short.message,
            "2048 tokens (llama.cpp `n_ctx` per slot) cannot hold max-tokens 2000 + 512 for the prompt: lower `max-tokens` or give the server a longer context"
        );
    }
}
