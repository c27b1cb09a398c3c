//! From each server's own endpoints to one [`Reading`] (its capacity and its load). Pure: the
//! bodies come from [`super::reader`] or from a test fixture. The formats are the real
//! servers' (samples in the tests name where they were seen):
//!
//! - SGLang: `/server_info` (was `/get_server_info`): the CLI args at the top level
//!   (`max_running_requests` may be `null` = decided at start, and on hybrid models the CLI
//!   value overstates what runs), `max_total_num_tokens`, and per scheduler
//!   `internal_states[].effective_max_running_requests_per_dp`, which wins. `/v1/loads`: per
//!   DP rank running, waiting, used and total KV tokens, `max_running_requests`. `/metrics`
//!   (with `--enable-metrics`): `sglang:num_running_reqs`, `num_queue_reqs`, `token_usage`,
//!   `num_used_tokens`, `max_total_num_tokens`, the retraction counter
//!   `num_retracted_requests_total` (older: `total_retracted_reqs`); some builds print
//!   `sglang_` for `sglang:`.
//! - vLLM: `/metrics` only: `vllm:num_requests_running`, `num_requests_waiting`,
//!   `kv_cache_usage_perc` (before 0.12: `gpu_cache_usage_perc`), `num_preemptions_total`,
//!   and `cache_config_info`, an info metric whose labels hold `num_gpu_blocks` (`"None"` in
//!   some V1 builds) and `block_size`: the KV capacity is their product, per engine. No vLLM
//!   metric carries `max_num_seqs` (0.32.0 checked: `parse/vllm-0.32.0-cpu-metrics.txt`), so
//!   the running cap stays unknown here; the controller takes it from the launch arguments or
//!   learns it.
//! - llama.cpp: `/props` `total_slots`; `/slots` (which slots are busy); `/metrics` (with
//!   `--metrics`): `llamacpp:requests_processing`, `requests_deferred`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::prometheus::{self, Sample};
use crate::inference::controller::Caps;

/// Which server software answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerKind {
    Sglang,
    Vllm,
    LlamaCpp,
}

impl ServerKind {
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Sglang => "SGLang",
            ServerKind::Vllm => "vLLM",
            ServerKind::LlamaCpp => "llama.cpp",
        }
    }
}

/// One reading of the server's load.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    pub running: Option<u32>,
    pub queued: Option<u32>,
    /// KV cache in use, 0–1.
    pub kv_usage: Option<f64>,
    /// The cumulative preemption (retraction) counter; a drop means a restart.
    pub preemptions_total: Option<u64>,
}

/// What one or more endpoints said: capacity, load and which server it is.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    pub kind: Option<ServerKind>,
    pub caps: Caps,
    pub load: Load,
}

impl Reading {
    /// `self`, with what it lacks taken from `other`.
    pub fn or(self, other: Reading) -> Reading {
        Reading {
            kind: self.kind.or(other.kind),
            caps: Caps {
                max_running: self.caps.max_running.or(other.caps.max_running),
                kv_tokens: self.caps.kv_tokens.or(other.caps.kv_tokens),
                user_max: self.caps.user_max.or(other.caps.user_max),
            },
            load: Load {
                running: self.load.running.or(other.load.running),
                queued: self.load.queued.or(other.load.queued),
                kv_usage: self.load.kv_usage.or(other.load.kv_usage),
                preemptions_total: self.load.preemptions_total.or(other.load.preemptions_total),
            },
        }
    }
}

fn count(v: f64) -> Option<u32> {
    (v.is_finite() && v >= 0.0).then(|| v.round().min(f64::from(u32::MAX)) as u32)
}

fn tokens(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 1.0).then(|| v.round() as u64)
}

/// Both spellings of an SGLang metric (`sglang:x`, and `sglang_x` as some builds print it).
fn sglang(name: &str) -> [String; 2] {
    [format!("sglang:{name}"), format!("sglang_{name}")]
}

/// `/metrics` of any of the three servers.
pub fn from_metrics(text: &str) -> Reading {
    let samples = prometheus::parse(text);
    let names = |vllm: &[&str], sglang_names: &[&str], llama: &[&str]| -> Vec<String> {
        vllm.iter()
            .map(|n| format!("vllm:{n}"))
            .chain(sglang_names.iter().flat_map(|n| sglang(n)))
            .chain(llama.iter().map(|n| format!("llamacpp:{n}")))
            .collect()
    };
    let total = |names: Vec<String>| {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        prometheus::total(&samples, &names)
    };
    let mean = |names: Vec<String>| {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        prometheus::mean(&samples, &names)
    };
    let kind = if samples.iter().any(|s| s.name.starts_with("vllm:")) {
        Some(ServerKind::Vllm)
    } else if samples.iter().any(|s| s.name.starts_with("sglang")) {
        Some(ServerKind::Sglang)
    } else if samples.iter().any(|s| s.name.starts_with("llamacpp:")) {
        Some(ServerKind::LlamaCpp)
    } else {
        None
    };

    let sglang_kv = total(sglang("max_total_num_tokens").to_vec());
    let sglang_used = total(sglang("num_used_tokens").to_vec());
    let kv_usage = match (sglang_used, sglang_kv) {
        (Some(used), Some(kv)) if kv > 0.0 => Some(used / kv),
        _ => mean(names(
            &["kv_cache_usage_perc", "gpu_cache_usage_perc"],
            &["token_usage"],
            &["kv_cache_usage_ratio"],
        )),
    };
    Reading {
        kind,
        caps: Caps {
            max_running: None,
            kv_tokens: vllm_kv_tokens(&samples).or(sglang_kv.and_then(tokens)),
            user_max: None,
        },
        load: Load {
            running: total(names(
                &["num_requests_running"],
                &["num_running_reqs"],
                &["requests_processing"],
            ))
            .and_then(count),
            queued: total(names(
                &["num_requests_waiting"],
                &["num_queue_reqs"],
                &["requests_deferred"],
            ))
            .and_then(count),
            kv_usage: kv_usage.map(|u| u.clamp(0.0, 1.0)),
            preemptions_total: total(names(
                &["num_preemptions_total"],
                &["num_retracted_requests_total", "total_retracted_reqs"],
                &[],
            ))
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v.round() as u64),
        },
    }
}

/// Labels of the series of `name`, one per replica (engine).
fn info_labels<'a>(samples: &'a [Sample<'a>], name: &str) -> Vec<&'a Sample<'a>> {
    let mut seen: Vec<Option<&str>> = Vec::new();
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            let engine = s.label("engine");
            let new = !seen.contains(&engine);
            seen.push(engine);
            new
        })
        .collect()
}

/// `num_gpu_blocks × block_size` of `vllm:cache_config_info`, summed over engines.
fn vllm_kv_tokens(samples: &[Sample<'_>]) -> Option<u64> {
    let mut total: Option<u64> = None;
    for sample in info_labels(samples, "vllm:cache_config_info") {
        let number = |key: &str| sample.label(key).and_then(|v| v.parse::<u64>().ok());
        if let (Some(blocks), Some(size)) = (number("num_gpu_blocks"), number("block_size")) {
            *total.get_or_insert(0) += blocks.saturating_mul(size);
        }
    }
    total.filter(|t| *t > 0)
}

fn number(value: &Value, key: &str) -> Option<f64> {
    value.get(key).and_then(Value::as_f64)
}

/// SGLang `/server_info` (or `/get_server_info`).
pub fn from_sglang_server_info(info: &Value) -> Reading {
    if info.get("max_total_num_tokens").is_none() && info.get("internal_states").is_none() {
        // vLLM's dev-mode `/server_info` and anything else: not SGLang.
        return Reading::default();
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
    Reading {
        kind: Some(ServerKind::Sglang),
        caps: Caps {
            max_running: max_running.and_then(count).filter(|m| *m > 0),
            kv_tokens: kv.and_then(tokens),
            user_max: None,
        },
        load: Load::default(),
    }
}

/// SGLang `/v1/loads`: one entry per DP rank, summed.
pub fn from_sglang_loads(body: &Value) -> Reading {
    let Some(loads) = body.get("loads").and_then(Value::as_array) else {
        return Reading::default();
    };
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
    Reading {
        kind: Some(ServerKind::Sglang),
        caps: Caps {
            max_running: sum("max_running_requests")
                .and_then(count)
                .filter(|m| *m > 0),
            kv_tokens: kv.and_then(tokens),
            user_max: None,
        },
        load: Load {
            running: sum("num_running_reqs").and_then(count),
            queued: sum("num_waiting_reqs").and_then(count),
            kv_usage: kv_usage.map(|u| u.clamp(0.0, 1.0)),
            preemptions_total: None,
        },
    }
}

/// llama.cpp `/props`: the slot count. Its KV is no pool the controller can plan against:
/// without `-kvu` each slot owns `n_ctx` (a request too long for it is refused or truncated,
/// never preempted), and `/props` does not say whether the cache is unified, so counting
/// `n_ctx × slots` as shared would put the ceiling under the slot count.
pub fn from_llama_props(props: &Value) -> Reading {
    let slots = number(props, "total_slots")
        .and_then(count)
        .filter(|s| *s > 0);
    if slots.is_none() {
        return Reading::default();
    }
    Reading {
        kind: Some(ServerKind::LlamaCpp),
        caps: Caps {
            max_running: slots,
            kv_tokens: None,
            user_max: None,
        },
        load: Load::default(),
    }
}

/// llama.cpp `/slots`: how many slots are busy (`is_processing`, or `state` ≠ 0 in older
/// builds).
pub fn from_llama_slots(slots: &Value) -> Reading {
    let Some(slots) = slots.as_array() else {
        return Reading::default();
    };
    let busy = slots
        .iter()
        .filter(|slot| {
            slot.get("is_processing")
                .and_then(Value::as_bool)
                .or_else(|| slot.get("state").and_then(Value::as_u64).map(|s| s != 0))
                .unwrap_or(false)
        })
        .count();
    Reading {
        kind: Some(ServerKind::LlamaCpp),
        caps: Caps {
            max_running: u32::try_from(slots.len()).ok().filter(|n| *n > 0),
            kv_tokens: None,
            user_max: None,
        },
        load: Load {
            running: u32::try_from(busy).ok(),
            ..Load::default()
        },
    }
}

#[cfg(test)]
mod tests;
