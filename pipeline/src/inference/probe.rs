//! Asking a server whether it is up and what it serves.

use std::time::Duration;

use serde_json::Value;

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

/// How long `gen run` waits for an external server before it gives up, naming the URL.
pub const REACH_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("inference server at `{url}` is not reachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("inference server at `{url}` lists no model at `/v1/models`")]
    NoModel { url: String },
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
        Err(e) => Err(e.without_url().to_string()),
    }
}

/// The served model: `wanted` if the server lists it (or lists nothing checkable), else the
/// first listed model.
pub async fn model(
    url: &str,
    api_key: Option<&str>,
    wanted: Option<&str>,
) -> Result<String, ProbeError> {
    let unreachable = |reason: String| ProbeError::Unreachable {
        url: redact(url),
        reason,
    };
    let deadline = tokio::time::Instant::now() + REACH_TIMEOUT;
    let mut last_error = String::new();
    while tokio::time::Instant::now() < deadline {
        let mut request = client(Duration::from_secs(3)).get(format!("{url}/v1/models"));
        if let Some(key) = api_key {
            request = request.bearer_auth(key);
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => {
                let body: Value = response.json().await.map_err(|e| {
                    unreachable(format!("unreadable `/v1/models`: {}", e.without_url()))
                })?;
                let ids: Vec<&str> = body
                    .get("data")
                    .and_then(Value::as_array)
                    .map(|d| {
                        d.iter()
                            .filter_map(|m| m.get("id").and_then(Value::as_str))
                            .collect()
                    })
                    .unwrap_or_default();
                return match (wanted, ids.first()) {
                    (Some(w), _) => Ok(w.to_owned()),
                    (None, Some(first)) => Ok((*first).to_owned()),
                    (None, None) => Err(ProbeError::NoModel { url: redact(url) }),
                };
            }
            Ok(response) => {
                last_error = format!("`/v1/models` answered HTTP {}", response.status())
            }
            Err(e) => last_error = e.without_url().to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(unreachable(format!(
        "{last_error} (gave up after {} s)",
        REACH_TIMEOUT.as_secs()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(
            redact("http://user:secret@127.0.0.1:8000"),
            "http://***@127.0.0.1:8000"
        );
        assert_eq!(redact("http://127.0.0.1:8000"), "http://127.0.0.1:8000");
    }
}
