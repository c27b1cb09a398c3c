//! vLLM. No endpoint of its own tells its caps: `/metrics` only — `vllm:num_requests_running`,
//! `num_requests_waiting`, `kv_cache_usage_perc` (before 0.12: `gpu_cache_usage_perc`),
//! `num_preemptions_total`, and `cache_config_info`, an info metric whose labels hold
//! `num_gpu_blocks` (`"None"` in some V1 builds) and `block_size`: the KV capacity is their
//! product, per engine. No vLLM metric carries `max_num_seqs` (0.32.0 checked:
//! `vllm/metrics.txt`), so the running cap comes from `--max-num-seqs` (per engine, times
//! `--data-parallel-size`) or is learnt. The context is `max_model_len` in `/v1/models`.

use serde_json::Value;

use super::reading::token_list;
use super::{KindSpec, Metrics};
use crate::inference::signals::prometheus::Sample;

pub(super) static SPEC: KindSpec = KindSpec {
    name: "vLLM",
    metrics: Metrics {
        prefixes: &["vllm:"],
        running: &["num_requests_running"],
        queued: &["num_requests_waiting"],
        kv_usage: &["kv_cache_usage_perc", "gpu_cache_usage_perc"],
        preemptions: &["num_preemptions_total"],
        kv_capacity,
        ..Metrics::EMPTY
    },
    running_cap_flags: &["--max-num-seqs"],
    engine_flags: &["--data-parallel-size", "-dp"],
    context: Some(super::Context::Listed {
        field: "max_model_len",
        what: "`max_model_len`",
    }),
    context_flag: Some("--max-model-len"),
    version: &[("/version", "version")],
    token_id_flags: &["return_token_ids"],
    stream_ids,
    reasoning_flag: Some("--reasoning-parser NAME"),
    programs: &["vllm"],
    ..KindSpec::EMPTY
};

/// `num_gpu_blocks × block_size` of `vllm:cache_config_info`, summed over engines.
fn kv_capacity(samples: &[Sample<'_>]) -> Option<u64> {
    let mut seen: Vec<Option<&str>> = Vec::new();
    let mut total: Option<u64> = None;
    for sample in samples
        .iter()
        .filter(|s| s.name == "vllm:cache_config_info")
    {
        // One series per engine.
        if seen.contains(&sample.label("engine")) {
            continue;
        }
        seen.push(sample.label("engine"));
        let number = |key: &str| sample.label(key).and_then(|v| v.parse::<u64>().ok());
        if let (Some(blocks), Some(size)) = (number("num_gpu_blocks"), number("block_size")) {
            *total.get_or_insert(0) += blocks.saturating_mul(size);
        }
    }
    total.filter(|t| *t > 0)
}

/// The prompt's ids in the first chunk (`prompt_token_ids`), the answer's with each delta
/// (`choices[0].token_ids`).
fn stream_ids(chunk: &Value, prompt: &mut Vec<u32>, answer: &mut Vec<u32>) -> bool {
    let prompt_ids = chunk.get("prompt_token_ids").and_then(token_list);
    let answer_ids = chunk.pointer("/choices/0/token_ids").and_then(token_list);
    let carried = prompt_ids.is_some() || answer_ids.is_some();
    if let Some(ids) = prompt_ids {
        *prompt = ids;
    }
    answer.extend(answer_ids.into_iter().flatten());
    carried
}
