//! Asking a server whether it is up and what it serves. While a server does not answer yet,
//! the wait is told as a [`Notice`] (redrawn in place on a terminal); nothing here prints.

use std::time::Duration;

use serde_json::Value;

use crate::inference::kinds::ServerKind;
use crate::notice::{Notice, minutes_seconds};
use crate::report::RunReporter;

/// `url` with any user name and password replaced by `***`, for messages, logs and status:
/// credentials in a server URL must never reach the disk or the terminal.
pub fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            parsed.set_username("***").ok();
            parsed.set_password(None).ok();
            parsed.as_str().trim_end_matches('/').to_owned()
        }
        _ => url.to_owned(),
    }
}

/// How long `gen bench` waits for a server before it gives up, naming the URL (`gen run`
/// waits `[server] startup-timeout-secs`).
pub const REACH_TIMEOUT: Duration = Duration::from_secs(10);
/// A server still not answering after this long gets a line saying `gen` waits for it.
const QUIET_WAIT: Duration = Duration::from_secs(2);
/// When stderr is not a terminal, how often that line is repeated.
const PIPED_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("inference server at `{url}` is not reachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("inference server at `{url}` lists no model at `/v1/models`")]
    NoModel { url: String },
    #[error(
        "inference server at `{url}` does not serve `{wanted}`: `/v1/models` lists {}; set `[server] model` to one of them, or leave it out to use the first",
        served.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
    )]
    ModelNotServed {
        url: String,
        wanted: String,
        served: Vec<String>,
    },
}

fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .expect("a client without TLS options always builds")
}

/// `GET /health` once: `Ok(true)` on 200, `Ok(false)` on any other answer (e.g. 503 while
/// loading), `Err` when nothing answers.
pub async fn health(url: &str) -> Result<bool, String> {
    match client(Duration::from_secs(2))
        .get(format!("{url}/health"))
        .send()
        .await
    {
        Ok(response) => Ok(response.status().is_success()),
        Err(e) => Err(request_error(e)),
    }
}

/// Why a request got no answer, in the words an operator knows: `connection refused` (nothing
/// listens yet: a server loading its model), `no answer within 3s`, or the error itself.
pub(crate) fn request_error(e: reqwest::Error) -> String {
    let refused = std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
        .filter_map(|e| e.downcast_ref::<std::io::Error>())
        .any(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
    if refused {
        "connection refused".to_owned()
    } else if e.is_timeout() {
        "no answer in time".to_owned()
    } else {
        e.without_url().to_string()
    }
}

/// The server's version as it reports it, or `None` when it reports none, where each kind says
/// it (`KindSpec::version`: vLLM's and SGLang's `GET /version`, `{"version": "0.32.0"}`,
/// llama.cpp's `/props` `build_info`, e.g. `b6000-0123abc`, …). Asked once, after the server
/// answered `/v1/models`; a server that answers none of them is no error.
pub async fn version(url: &str, api_key: Option<&str>) -> Option<String> {
    let mut asked = Vec::new();
    for &(path, field) in ServerKind::ALL.iter().flat_map(|kind| kind.spec().version) {
        if asked.contains(&path) {
            continue;
        }
        asked.push(path);
        let mut request = client(Duration::from_secs(2)).get(format!("{url}{path}"));
        if let Some(key) = api_key {
            request = request.bearer_auth(key);
        }
        let Ok(response) = request.send().await else {
            continue;
        };
        if !response.status().is_success() {
            continue;
        }
        let Ok(body) = response.json::<Value>().await else {
            continue;
        };
        if let Some(version) = body.get(field).and_then(Value::as_str) {
            return Some(version.to_owned());
        }
    }
    None
}

/// The served model, as the server names it: `wanted` when `/v1/models` lists it (a server
/// that does not would answer another model's completions under that name, or refuse them),
/// else the first listed model. A wait longer than a moment is told to `reporter`.
pub async fn model(
    url: &str,
    api_key: Option<&str>,
    wanted: Option<&str>,
    wait: Duration,
    reporter: &RunReporter,
) -> Result<String, ProbeError> {
    let unreachable = |reason: String| ProbeError::Unreachable {
        url: redact(url),
        reason,
    };
    let started = tokio::time::Instant::now();
    let deadline = started + wait;
    let mut last_error = String::new();
    let mut waiting = Waiting::new(url, wait, reporter);
    while tokio::time::Instant::now() < deadline {
        waiting.show(started.elapsed(), &last_error);
        let mut request = client(Duration::from_secs(3)).get(format!("{url}/v1/models"));
        if let Some(key) = api_key {
            request = request.bearer_auth(key);
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => {
                let body: Value = response.json().await.map_err(|e| {
                    unreachable(format!("unreadable `/v1/models`: {}", e.without_url()))
                })?;
                return choose_model(url, &listed_models(&body), wanted);
            }
            Ok(response) => {
                last_error = format!("`/v1/models` answered HTTP {}", response.status())
            }
            Err(e) => last_error = request_error(e),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(unreachable(format!(
        "{last_error} (waited {} for it to answer; `[server] startup-timeout-secs` waits longer)",
        minutes_seconds(wait)
    )))
}

/// The wait for a server, told now and then: redrawn in place on a terminal, a line a minute
/// otherwise; nothing while the server answers at once.
struct Waiting<'r> {
    url: String,
    wait: Duration,
    reporter: &'r RunReporter,
    /// When a line was last said (not redrawn).
    said: Option<Duration>,
}

impl Waiting<'_> {
    fn new<'r>(url: &str, wait: Duration, reporter: &'r RunReporter) -> Waiting<'r> {
        Waiting {
            url: redact(url),
            wait,
            reporter,
            said: None,
        }
    }

    fn show(&mut self, waited: Duration, last_error: &str) {
        if waited < QUIET_WAIT || self.said.is_some_and(|at| waited < at + PIPED_EVERY) {
            return;
        }
        let notice = Notice::WaitingForServer {
            url: &self.url,
            waited,
            wait: self.wait,
            last_error,
        };
        if !self.reporter.redraw(notice) {
            self.reporter.notice(notice);
            self.said = Some(waited);
        }
    }
}

/// Ends a redrawn line, so what follows starts on a line of its own.
impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.reporter.end_redraw();
    }
}

/// One model of a `/v1/models` answer: its id and the other names it answers to (llama.cpp
/// lists `aliases`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    id: String,
    aliases: Vec<String>,
}

/// The models of a `/v1/models` answer, in order.
fn listed_models(body: &Value) -> Vec<Listed> {
    let names = |m: &Value, key: &str| -> Vec<String> {
        m.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    body.get("data")
        .and_then(Value::as_array)
        .map(|d| {
            d.iter()
                .filter_map(|m| {
                    let id = m.get("id").and_then(Value::as_str)?.to_owned();
                    Some(Listed {
                        aliases: names(m, "aliases"),
                        id,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

fn choose_model(url: &str, listed: &[Listed], wanted: Option<&str>) -> Result<String, ProbeError> {
    let serves = |name: &str| {
        listed
            .iter()
            .any(|m| m.id == name || m.aliases.iter().any(|a| a == name))
    };
    match (wanted, listed.first()) {
        (_, None) => Err(ProbeError::NoModel { url: redact(url) }),
        (Some(wanted), Some(_)) if serves(wanted) => Ok(wanted.to_owned()),
        (Some(wanted), Some(_)) => Err(ProbeError::ModelNotServed {
            url: redact(url),
            wanted: wanted.to_owned(),
            served: listed.iter().map(|m| m.id.clone()).collect(),
        }),
        (None, Some(first)) => Ok(first.id.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_line_fits_the_terminal_and_names_a_refused_connection() {
        let line = Notice::WaitingForServer {
            url: "http://127.0.0.1:30000",
            waited: Duration::from_secs(80),
            wait: Duration::from_secs(1800),
            last_error: "connection refused",
        }
        .to_string();
        assert_eq!(
            line,
            "gen: waiting for http://127.0.0.1:30000: 1m20s of 30m00s, connection refused; a server loading its model takes minutes"
        );
        for width in [80, 120] {
            let drawn = crate::report::redrawn(&line, width);
            assert!(drawn.chars().count() < width, "{width}: {drawn}");
            assert!(drawn.contains(", connection refused"), "{drawn}");
        }
    }

    #[tokio::test]
    async fn nothing_listening_is_said_as_connection_refused() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let err = health(&format!("http://127.0.0.1:{port}"))
            .await
            .expect_err("nothing listens");
        assert_eq!(err, "connection refused");
    }

    #[test]
    fn a_model_the_server_does_not_list_is_refused_naming_what_it_serves() {
        // `/v1/models` of vLLM started with `--served-model-name qwen3-8b`.
        let body = serde_json::json!({"object": "list", "data": [
            {"id": "qwen3-8b", "object": "model", "root": "Qwen/Qwen3-8B", "max_model_len": 40960}
        ]});
        let listed = listed_models(&body);
        let url = "http://127.0.0.1:8000";
        let err = choose_model(url, &listed, Some("Qwen/Qwen3-8B")).expect_err("not listed");
        assert_eq!(
            err.to_string(),
            "inference server at `http://127.0.0.1:8000` does not serve `Qwen/Qwen3-8B`: \
             `/v1/models` lists `qwen3-8b`; set `[server] model` to one of them, or leave it \
             out to use the first"
        );
        assert_eq!(
            choose_model(url, &listed, Some("qwen3-8b")).expect("listed"),
            "qwen3-8b"
        );
        assert_eq!(choose_model(url, &listed, None).expect("first"), "qwen3-8b");
        // llama-server lists the model file as its id, with aliases (`--alias`).
        let llama = listed_models(&serde_json::json!({"object": "list", "data": [
            {"id": "/models/SmolLM2-135M-Instruct.Q4_1.gguf", "aliases": ["smol"], "object": "model"}
        ]}));
        assert_eq!(
            choose_model(url, &llama, Some("smol")).expect("alias"),
            "smol"
        );
        assert!(choose_model(url, &llama, Some("SmolLM2")).is_err());
        let empty = listed_models(&serde_json::json!({"object": "list", "data": []}));
        assert!(matches!(
            choose_model(url, &empty, Some("qwen3-8b")),
            Err(ProbeError::NoModel { .. })
        ));
    }

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(
            redact("http://user:secret@127.0.0.1:8000"),
            "http://***@127.0.0.1:8000"
        );
        assert_eq!(redact("http://127.0.0.1:8000"), "http://127.0.0.1:8000");
    }
}
