//! SGLang. `/server_info` (was `/get_server_info`): the CLI args at the top level
//! (`max_running_requests` may be `null` = decided at start, and on hybrid models the CLI value
//! overstates what runs), `max_total_num_tokens`, and per scheduler
//! `internal_states[].effective_max_running_requests_per_dp`, which wins. `/v1/loads`: per DP
//! rank running, waiting, used and total KV tokens, `max_running_requests`. `/metrics` (with
//! `--enable-metrics`): `sglang:num_running_reqs`, `num_queue_reqs`, `token_usage`,
//! `num_used_tokens`, `max_total_num_tokens`, the retraction counter
//! `num_retracted_requests_total` (older: `total_retracted_reqs`). Token ids come in a last
//! `sglext` chunk, asked with its own flags (it refuses `return_token_ids` on a streamed chat).

use serde_json::Value;

use super::reading::{count, number, token_list, tokens};
use super::{Context, Endpoint, KindSpec, Load, Metrics, Reading};

pub(super) static SPEC: KindSpec = KindSpec {
    name: "SGLang",
    endpoints: &[
        Endpoint {
            paths: &["/server_info", "/get_server_info"],
            tells_kind: true,
            tick: false,
            parse: server_info,
        },
        Endpoint {
            paths: &["/v1/loads?include=core,memory"],
            tells_kind: true,
            tick: true,
            parse: loads,
        },
    ],
    metrics: Metrics {
        prefixes: &["sglang:", "sglang_"],
        running: &["num_running_reqs"],
        queued: &["num_queue_reqs"],
        kv_usage: &["token_usage"],
        kv_used: &["num_used_tokens"],
        kv_total: &["max_total_num_tokens"],
        preemptions: &["num_retracted_requests_total", "total_retracted_reqs"],
        ..Metrics::EMPTY
    },
    running_cap_flags: &["--max-running-requests"],
    engine_flags: &[],
    context: Some(Context::Listed {
        field: "max_model_len",
        what: "`max_model_len`",
    }),
    context_flag: Some("--context-length"),
    version: &[("/version", "version"), ("/get_server_info", "version")],
    token_id_flags: &["return_input_ids_in_sglext", "return_output_ids_in_sglext"],
    stream_ids,
    reasoning_flag: Some("--reasoning-parser NAME"),
    programs: &[],
};

/// The last chunk's `sglext`: the prompt's ids, and the answer's per choice.
fn stream_ids(chunk: &Value, prompt: &mut Vec<u32>, answer: &mut Vec<u32>) -> bool {
    let Some(ext) = chunk.get("sglext") else {
        return false;
    };
    if let Some(ids) = ext.get("input_ids").and_then(token_list) {
        *prompt = ids;
    }
    if let Some(ids) = ext.pointer("/output_ids/0").and_then(token_list) {
        *answer = ids;
    }
    true
}

/// `/server_info` (or `/get_server_info`).
pub(super) fn server_info(info: &Value) -> Option<Reading> {
    if info.get("max_total_num_tokens").is_none() && info.get("internal_states").is_none() {
        // vLLM's dev-mode `/server_info` and anything else: not SGLang.
        return None;
    }
    let dp = number(info, "dp_size").unwrap_or(1.0).max(1.0);
    let states: &[Value] = info
        .get("internal_states")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let effective: Vec<f64> = states
        .iter()
        .filter_map(|s| {
            number(s, "effective_max_running_requests_per_dp")
                .or_else(|| number(s, "max_running_requests").map(|m| m / dp))
        })
        .collect();
    // One internal state per DP rank when there are several; else the first stands for all.
    let max_running = if effective.len() as f64 == dp {
        Some(effective.iter().sum())
    } else if let Some(first) = effective.first() {
        Some(first * dp)
    } else {
        number(info, "max_running_requests")
    };
    // Heuristic: the top-level pool size is one rank's, and each DP rank has its own pool.
    let kv = number(info, "max_total_num_tokens").map(|kv| kv * dp);
    Some(Reading {
        max_running: max_running.and_then(count).filter(|m| *m > 0),
        kv_tokens: kv.and_then(tokens),
        ..Reading::default()
    })
}

/// `/v1/loads`: one entry per DP rank, summed.
pub(super) fn loads(body: &Value) -> Option<Reading> {
    let loads = body.get("loads").and_then(Value::as_array)?;
    // Fields sit at the top of each entry; accept them under `core` too.
    let field = |load: &Value, key: &str| {
        number(load, key).or_else(|| load.get("core").and_then(|c| number(c, key)))
    };
    let sum = |key: &str| -> Option<f64> {
        loads
            .iter()
            .filter_map(|l| field(l, key))
            .fold(None, |acc, v| Some(acc.unwrap_or(0.0) + v))
    };
    let used = sum("num_used_tokens");
    let kv = sum("max_total_num_tokens");
    let kv_usage = match (used, kv) {
        (Some(used), Some(kv)) if kv > 0.0 => Some(used / kv),
        _ => {
            let usages: Vec<f64> = loads
                .iter()
                .filter_map(|l| field(l, "token_usage"))
                .collect();
            (!usages.is_empty()).then(|| usages.iter().sum::<f64>() / usages.len() as f64)
        }
    };
    Some(Reading {
        kind: None,
        max_running: sum("max_running_requests")
            .and_then(count)
            .filter(|m| *m > 0),
        kv_tokens: kv.and_then(tokens),
        load: Load {
            running: sum("num_running_reqs").and_then(count),
            queued: sum("num_waiting_reqs").and_then(count),
            kv_usage: kv_usage.map(|u| u.clamp(0.0, 1.0)),
            preemptions_total: None,
        },
    })
}
