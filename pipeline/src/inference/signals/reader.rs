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

use super::parse::{self, Load, Reading, ServerKind};

/// A tick's reads must not hold the tuner up for long.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

const PROPS: &str = "/props";
const SLOTS: &str = "/slots";
const LOADS: &str = "/v1/loads?include=core,memory";
const METRICS: &str = "/metrics";
const SERVER_INFO: [&str; 2] = ["/server_info", "/get_server_info"];

/// Every path asked at the start.
pub const PROBED: [&str; 6] = [PROPS, SLOTS, SERVER_INFO[0], SERVER_INFO[1], LOADS, METRICS];

/// Which of a server's endpoints answered at the start, and so which a tick reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Endpoints {
    pub kind: Option<ServerKind>,
    metrics: bool,
    loads: bool,
    slots: bool,
    server_info: Option<&'static str>,
}

fn json(body: Option<String>) -> Option<Value> {
    serde_json::from_str(&body?).ok()
}

impl Endpoints {
    /// What the answers to [`PROBED`] say; `body(path)` is the body of a successful answer.
    pub fn discover(body: impl Fn(&str) -> Option<String>) -> (Endpoints, Reading) {
        let mut endpoints = Endpoints::default();
        let mut reading = json(body(PROPS))
            .map_or_else(Reading::default, |props| parse::from_llama_props(&props));
        if reading.kind.is_some() {
            endpoints.slots =
                json(body(SLOTS)).is_some_and(|s| parse::from_llama_slots(&s).kind.is_some());
        } else {
            for path in SERVER_INFO {
                if let Some(info) = json(body(path)) {
                    let found = parse::from_sglang_server_info(&info);
                    if found.kind.is_some() {
                        endpoints.server_info = Some(path);
                        reading = found;
                        break;
                    }
                }
            }
            if let Some(loads) = json(body(LOADS)) {
                let found = parse::from_sglang_loads(&loads);
                if found.kind.is_some() {
                    endpoints.loads = true;
                    reading = reading.or(found);
                }
            }
        }
        let metrics = body(METRICS).map_or_else(Reading::default, |t| parse::from_metrics(&t));
        endpoints.metrics = metrics.kind.is_some();
        reading = reading.or(metrics);
        endpoints.kind = reading.kind;
        (endpoints, reading)
    }

    /// The paths one tick reads: the metrics when they answer, else SGLang's loads or
    /// llama.cpp's slots.
    pub fn tick_paths(&self) -> Vec<&'static str> {
        if self.metrics {
            vec![METRICS]
        } else if self.loads {
            vec![LOADS]
        } else if self.slots {
            vec![SLOTS]
        } else {
            Vec::new()
        }
    }

    /// A tick's reading from the bodies of [`Endpoints::tick_paths`].
    pub fn reading(&self, body: impl Fn(&str) -> Option<String>) -> Reading {
        let mut reading = Reading::default();
        for path in self.tick_paths() {
            let found = match path {
                METRICS => body(path).map(|t| parse::from_metrics(&t)),
                LOADS => json(body(path)).map(|b| parse::from_sglang_loads(&b)),
                _ => json(body(path)).map(|b| parse::from_llama_slots(&b)),
            };
            reading = reading.or(found.unwrap_or_default());
        }
        reading
    }

    /// What answered, for the start-up line: "SGLang: /server_info, /v1/loads, /metrics".
    pub fn describe(&self) -> String {
        let mut endpoints: Vec<&str> = Vec::new();
        if self.kind == Some(ServerKind::LlamaCpp) {
            endpoints.push(PROPS);
        }
        endpoints.extend(self.server_info);
        if self.loads {
            endpoints.push("/v1/loads");
        }
        if self.slots {
            endpoints.push(SLOTS);
        }
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
        let bodies = reader.fetch(&PROBED).await;
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
                LOADS,
                r#"{"loads": [{"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 0, "num_used_tokens": 10, "max_total_num_tokens": 400000, "max_running_requests": 48}]}"#,
            ),
        ]));
        assert_eq!(sglang.kind, Some(ServerKind::Sglang));
        assert_eq!(reading.caps.max_running, Some(48));
        assert_eq!(sglang.tick_paths(), vec![LOADS]);
        assert_eq!(sglang.describe(), "SGLang: /server_info, /v1/loads");

        let (vllm, reading) = Endpoints::discover(answers(&[(
            METRICS,
            "vllm:cache_config_info{block_size=\"16\",engine=\"0\",num_gpu_blocks=\"25000\"} 1.0\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0.0\n",
        )]));
        assert_eq!(vllm.kind, Some(ServerKind::Vllm));
        assert_eq!(reading.caps.kv_tokens, Some(400_000));
        assert_eq!(vllm.tick_paths(), vec![METRICS]);

        let (llama, reading) = Endpoints::discover(answers(&[
            (PROPS, r#"{"total_slots": 4}"#),
            (
                SLOTS,
                r#"[{"id": 0, "is_processing": true}, {"id": 1, "is_processing": false}]"#,
            ),
        ]));
        assert_eq!(
            (llama.kind, reading.caps.max_running),
            (Some(ServerKind::LlamaCpp), Some(4))
        );
        let tick = llama.reading(answers(&[(
            SLOTS,
            r#"[{"is_processing": true}, {"is_processing": true}]"#,
        )]));
        assert_eq!(tick.load.running, Some(2));

        let (nothing, reading) = Endpoints::discover(answers(&[("/metrics", "<html>")]));
        assert_eq!((nothing.kind, reading), (None, Reading::default()));
        assert!(nothing.tick_paths().is_empty());
        assert_eq!(nothing.describe(), "no capacity or load endpoint answered");
    }
}
