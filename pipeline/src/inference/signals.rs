//! What a server tells about its own load and capacity, whichever server it is: llama.cpp
//! (`/props` slots and context, `/metrics` `llamacpp:*`), SGLang (`/v1/loads`, `sglang:*`
//! metrics) and vLLM (`vllm:*` metrics). Everything is optional — metrics are off by default
//! and get renamed — so the concurrency controller must work without any of it.

use std::time::Duration;

use serde_json::Value;

use super::controller::Caps;

/// One reading of the server's load.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    pub running: Option<u32>,
    pub queued: Option<u32>,
    pub kv_usage: Option<f64>,
    pub preemptions_total: Option<u64>,
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("a client without TLS options always builds")
}

async fn get_json(url: &str) -> Option<Value> {
    let response = client().get(url).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    response.json().await.ok()
}

/// The server's caps: slots and KV capacity where it says.
pub async fn caps(base: &str) -> Caps {
    let mut caps = Caps::default();
    // llama.cpp: total_slots only. Its KV is no pool the controller can plan against: without
    // `-kvu` each slot owns `n_ctx` (a request too long for it is refused or truncated, never
    // preempted), and `/props` does not say whether the cache is unified. Counting
    // `n_ctx × slots` as shared put the ceiling under the slot count at startup (3 of 4 slots
    // with the long-output prior).
    if let Some(props) = get_json(&format!("{base}/props")).await {
        caps.max_running = props
            .get("total_slots")
            .and_then(Value::as_u64)
            .and_then(|s| u32::try_from(s).ok());
        return caps;
    }
    // SGLang: /v1/loads (per rank) or the older /server_info.
    for path in [
        "/v1/loads?include=core,memory",
        "/server_info",
        "/get_server_info",
    ] {
        if let Some(info) = get_json(&format!("{base}{path}")).await {
            let find = |key: &str| find_number(&info, key);
            caps.max_running =
                find("max_running_requests").and_then(|v| u32::try_from(v as u64).ok());
            caps.kv_tokens = find("max_total_num_tokens").map(|v| v as u64);
            if caps.max_running.is_some() || caps.kv_tokens.is_some() {
                return caps;
            }
        }
    }
    caps
}

/// The first number under `key` anywhere in `value` (SGLang nests it per rank).
fn find_number(value: &Value, key: &str) -> Option<f64> {
    match value {
        Value::Object(map) => map
            .get(key)
            .and_then(Value::as_f64)
            .or_else(|| map.values().find_map(|v| find_number(v, key))),
        Value::Array(items) => items.iter().find_map(|v| find_number(v, key)),
        _ => None,
    }
}

/// Reads `/metrics` (Prometheus text) into a [`Load`].
pub async fn load(base: &str) -> Load {
    let Some(text) = async {
        client()
            .get(format!("{base}/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()
    }
    .await
    else {
        return Load::default();
    };
    parse_metrics(&text)
}

/// Sums a metric over its label sets; `None` when absent.
fn metric(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue;
        }
        if let Some(value) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            *total.get_or_insert(0.0) += value;
        }
    }
    total
}

/// The load from metrics of any of the three servers (newest names first).
pub fn parse_metrics(text: &str) -> Load {
    let first = |names: &[&str]| names.iter().find_map(|n| metric(text, n));
    let count = |v: f64| u32::try_from(v.max(0.0).round() as u64).ok();
    Load {
        running: first(&[
            "vllm:num_requests_running",
            "sglang:num_running_reqs",
            "llamacpp:requests_processing",
        ])
        .and_then(count),
        queued: first(&[
            "vllm:num_requests_waiting",
            "sglang:num_queue_reqs",
            "llamacpp:requests_deferred",
        ])
        .and_then(count),
        kv_usage: first(&[
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "sglang:token_usage",
        ]),
        preemptions_total: first(&[
            "vllm:num_preemptions_total",
            "sglang:num_retracted_requests_total",
        ])
        .map(|v| v as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_of_each_server() {
        let vllm = "# HELP x\nvllm:num_requests_running{model_name=\"m\",engine=\"0\"} 3.0\nvllm:num_requests_running{model_name=\"m\",engine=\"1\"} 2.0\nvllm:num_requests_waiting{model_name=\"m\"} 7.0\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.42\nvllm:num_preemptions_total{model_name=\"m\"} 12.0\n";
        assert_eq!(
            parse_metrics(vllm),
            Load {
                running: Some(5),
                queued: Some(7),
                kv_usage: Some(0.42),
                preemptions_total: Some(12)
            }
        );
        let sglang = "sglang:num_running_reqs{tp_rank=\"0\"} 19\nsglang:num_queue_reqs{tp_rank=\"0\"} 0\nsglang:token_usage{tp_rank=\"0\"} 0.9\n";
        assert_eq!(
            parse_metrics(sglang),
            Load {
                running: Some(19),
                queued: Some(0),
                kv_usage: Some(0.9),
                preemptions_total: None
            }
        );
        let llama = "llamacpp:requests_processing 4\nllamacpp:requests_deferred 1\nllamacpp:requests_processing_total_extra 9\n";
        assert_eq!(
            parse_metrics(llama),
            Load {
                running: Some(4),
                queued: Some(1),
                kv_usage: None,
                preemptions_total: None
            }
        );
        assert_eq!(parse_metrics(""), Load::default());
    }

    #[test]
    fn nested_sglang_numbers_are_found() {
        let loads = serde_json::json!({"ranks": [{"core": {"max_running_requests": 256, "max_total_num_tokens": 400000}}]});
        assert_eq!(find_number(&loads, "max_running_requests"), Some(256.0));
        assert_eq!(find_number(&loads, "max_total_num_tokens"), Some(400000.0));
    }
}
