//! Asking a server about itself over HTTP: once at the start ([`SignalReader::probe`]: which
//! server it is, which of its endpoints answer, its caps), then every tick of the tuner
//! ([`SignalReader::read`]: its load, and the caps it prints with it). Every endpoint is
//! optional — metrics are off by default and get renamed — so a server that says nothing
//! gives an empty [`Reading`], never an error.
//!
//! Which endpoints to read and how to combine their answers is [`Endpoints`], pure, so the
//! controller's simulation reads a simulated server exactly as `gen run` reads a real one.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::Value;

use super::parse;
use crate::inference::kinds::{Endpoint, Load, Reading, ServerKind};

/// A tick's reads must not hold the tuner up for long.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

const METRICS: &str = "/metrics";

/// Every path asked at the start: each kind's endpoints, then `/metrics`.
pub fn probed() -> Vec<&'static str> {
    let endpoints = ServerKind::ALL.iter().flat_map(|k| k.spec().endpoints);
    let paths = endpoints.flat_map(|e| e.paths.iter().copied());
    paths.chain([METRICS]).collect()
}

/// Which of a server's endpoints answered at the start, and so which a tick reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Endpoints {
    pub kind: Option<ServerKind>,
    metrics: bool,
    /// The kind's endpoints that answered in its shape, each by the path that did.
    answered: Vec<&'static str>,
}

fn json(body: Option<String>) -> Option<Value> {
    serde_json::from_str(&body?).ok()
}

impl Endpoints {
    /// What the answers to [`probed`] say; `body(path)` is the body of a successful answer.
    /// The first kind an endpoint of which tells it is the server's.
    pub fn discover(body: impl Fn(&str) -> Option<String>) -> (Endpoints, Reading) {
        let mut endpoints = Endpoints::default();
        let mut reading = Reading::default();
        for kind in ServerKind::ALL {
            for endpoint in kind.spec().endpoints {
                if !endpoint.tells_kind && endpoints.answered.is_empty() {
                    continue;
                }
                let found = endpoint.paths.iter().find_map(|path| {
                    let found = (endpoint.parse)(&json(body(path))?)?;
                    Some((*path, found))
                });
                if let Some((path, found)) = found {
                    endpoints.answered.push(path);
                    reading = reading.or(Reading {
                        kind: Some(kind),
                        ..found
                    });
                }
            }
            if !endpoints.answered.is_empty() {
                break;
            }
        }
        let metrics = body(METRICS).map_or_else(Reading::default, |t| parse::from_metrics(&t));
        endpoints.metrics = metrics.kind.is_some();
        reading = reading.or(metrics);
        endpoints.kind = reading.kind;
        (endpoints, reading)
    }

    /// The paths one tick reads: the metrics when they answer, else the kind's tick endpoint.
    pub fn tick_paths(&self) -> Vec<&'static str> {
        if self.metrics {
            return vec![METRICS];
        }
        let tick = |path: &&str| self.endpoint(path).is_some_and(|e| e.tick);
        self.answered.iter().copied().filter(tick).collect()
    }

    /// The endpoint of the server's kind at `path`.
    fn endpoint(&self, path: &str) -> Option<&'static Endpoint> {
        let endpoints = self.kind?.spec().endpoints;
        endpoints.iter().find(|e| e.paths.contains(&path))
    }

    /// A tick's reading from the bodies of [`Endpoints::tick_paths`].
    pub fn reading(&self, body: impl Fn(&str) -> Option<String>) -> Reading {
        let mut reading = Reading::default();
        for path in self.tick_paths() {
            let found = match self.endpoint(path) {
                Some(endpoint) => json(body(path))
                    .and_then(|b| (endpoint.parse)(&b))
                    .map(|r| Reading {
                        kind: self.kind,
                        ..r
                    }),
                None => body(path).map(|t| parse::from_metrics(&t)),
            };
            reading = reading.or(found.unwrap_or_default());
        }
        reading
    }

    /// What answered, for the start-up line: "SGLang: /server_info, /v1/loads, /metrics".
    pub fn describe(&self) -> String {
        let answered = self.answered.iter().map(|p| p.split('?').next());
        let mut endpoints: Vec<&str> = answered.flatten().collect();
        if self.metrics {
            endpoints.push(METRICS);
        }
        match (self.kind, endpoints.is_empty()) {
            (_, true) => "no capacity or load endpoint answered".to_owned(),
            (Some(kind), false) => format!("{}: {}", kind.name(), endpoints.join(", ")),
            (None, false) => endpoints.join(", "),
        }
    }
}

/// [`Endpoints`] over HTTP.
#[derive(Debug, Clone)]
pub struct SignalReader {
    base: String,
    http: reqwest::Client,
    api_key: Option<String>,
    endpoints: Endpoints,
}

impl SignalReader {
    fn new(base: &str, api_key: Option<&str>) -> SignalReader {
        SignalReader {
            base: base.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder()
                .timeout(READ_TIMEOUT)
                .build()
                .expect("a client without TLS options always builds"),
            api_key: api_key.map(str::to_owned),
            endpoints: Endpoints::default(),
        }
    }

    /// Finds out which server answers at `base` and what it says about its capacity.
    pub async fn probe(base: &str, api_key: Option<&str>) -> (SignalReader, Reading) {
        let mut reader = SignalReader::new(base, api_key);
        let bodies = reader.fetch(&probed()).await;
        let (endpoints, reading) = Endpoints::discover(|path| lookup(&bodies, path));
        reader.endpoints = endpoints;
        (reader, reading)
    }

    /// The server's load now, and the caps its endpoints print alongside.
    pub async fn read(&self) -> Reading {
        let bodies = self.fetch(&self.endpoints.tick_paths()).await;
        self.endpoints.reading(|path| lookup(&bodies, path))
    }

    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// The bodies of the successful answers to `paths`, asked at once.
    async fn fetch(&self, paths: &[&'static str]) -> Vec<(&'static str, String)> {
        let answers = join_all(paths.iter().map(|path| async move {
            let mut request = self.http.get(format!("{}{path}", self.base));
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key);
            }
            let response = request.send().await.ok()?;
            if !response.status().is_success() {
                return None;
            }
            Some((*path, response.text().await.ok()?))
        }))
        .await;
        answers.into_iter().flatten().collect()
    }
}

fn lookup(bodies: &[(&'static str, String)], path: &str) -> Option<String> {
    bodies
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, b)| b.clone())
}

/// The load from `/metrics` alone (for `gen status`'s queue column).
pub async fn load(base: &str) -> Load {
    let reader = SignalReader::new(base, None);
    let bodies = reader.fetch(&[METRICS]).await;
    lookup(&bodies, METRICS).map_or_else(Load::default, |t| parse::from_metrics(&t).load)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(p, b)| ((*p).to_owned(), (*b).to_owned()))
            .collect();
        move |path| {
            pairs
                .iter()
                .find(|(p, _)| p == path)
                .map(|(_, b)| b.clone())
        }
    }

    #[test]
    fn each_server_is_recognised_and_read_where_it_answers() {
        let (sglang, reading) = Endpoints::discover(answers(&[
            (
                "/server_info",
                r#"{"max_running_requests": 48, "max_total_num_tokens": 400000}"#,
            ),
            (
                "/v1/loads?include=core,memory",
                r#"{"loads": [{"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 0, "num_used_tokens": 10, "max_total_num_tokens": 400000, "max_running_requests": 48}]}"#,
            ),
        ]));
        assert_eq!(sglang.kind, Some(ServerKind::Sglang));
        assert_eq!(reading.max_running, Some(48));
        assert_eq!(sglang.tick_paths(), vec!["/v1/loads?include=core,memory"]);
        assert_eq!(sglang.describe(), "SGLang: /server_info, /v1/loads");

        let (vllm, reading) = Endpoints::discover(answers(&[(
            METRICS,
            "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"25000\"} 1.0\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0.0\n",
        )]));
        assert_eq!(vllm.kind, Some(ServerKind::Vllm));
        assert_eq!(reading.kv_tokens, Some(400_000));
        assert_eq!(vllm.tick_paths(), vec![METRICS]);

        let (llama, reading) = Endpoints::discover(answers(&[
            ("/props", r#"{"total_slots": 4}"#),
            (
                "/slots",
                r#"[{"id": 0, "is_processing": true}, {"id": 1, "is_processing": false}]"#,
            ),
        ]));
        assert_eq!(
            (llama.kind, reading.max_running),
            (Some(ServerKind::LlamaCpp), Some(4))
        );
        let tick = llama.reading(answers(&[(
            "/slots",
            r#"[{"is_processing": true}, {"is_processing": true}]"#,
        )]));
        assert_eq!(tick.load.running, Some(2));

        let (nothing, reading) = Endpoints::discover(answers(&[("/metrics", "<html>")]));
        assert_eq!((nothing.kind, reading), (None, Reading::default()));
        assert!(nothing.tick_paths().is_empty());
        assert_eq!(nothing.describe(), "no capacity or load endpoint answered");
    }
}
