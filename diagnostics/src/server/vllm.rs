//! vLLM's crash signatures: no memory for the KV cache, GPU memory held by another process, a
//! CUDA OOM while capturing graphs. Example logs: `diagnostics/tests/fixtures/server_vllm_*.txt`.

use super::ServerLog;
use crate::text::truncate;
use crate::verdict::{Class, Confidence, Subtype, Verdict};

/// vLLM: no room for the KV cache.
pub(super) fn rule_vllm_kv_cache(log: &ServerLog<'_>) -> Option<Verdict> {
    let line = log
        .find("No available memory for the cache blocks")
        .or(log.find("Available KV cache memory: -"))?;
    let mut verdict = Verdict::new(Class::Oom, Some(Subtype::KvCache), Confidence::High);
    verdict.signature = Some("no memory left for the KV cache".to_string());
    log.quote(&mut verdict, "Available KV cache memory");
    if !line.contains("Available KV cache memory") {
        verdict.note(line);
    }
    log.note_wrappers(&mut verdict);
    verdict.advise("weights and activations leave no room for the KV cache: lower --max-model-len or --max-num-seqs");
    verdict.advise("or raise --gpu-memory-utilization if the GPU is not shared (e.g. 0.90 → 0.95), or use a smaller/quantized model");
    Some(verdict)
}

/// vLLM: another process holds the GPU memory it was told to use.
pub(super) fn rule_vllm_gpu_memory_in_use(log: &ServerLog<'_>) -> Option<Verdict> {
    let line = log.lines.iter().find(|l| {
        l.contains("Free memory on device")
            && l.contains("less than desired GPU memory utilization")
    })?;
    let mut verdict = Verdict::new(Class::Oom, Some(Subtype::GpuMemoryInUse), Confidence::High);
    verdict.signature = Some("GPU memory held by another process".to_string());
    verdict.note(line.trim());
    log.note_wrappers(&mut verdict);
    let fit = free_fraction(line).map_or(String::new(), |f| {
        let most = ((f - 0.02) * 100.0).floor() / 100.0;
        format!(" (free {:.0}% → at most {most:.2})", f * 100.0)
    });
    verdict.advise(format!(
        "another process holds GPU memory: free the GPU (nvidia-smi) or lower --gpu-memory-utilization{fit}"
    ));
    Some(verdict)
}

/// vLLM: a CUDA OOM while capturing CUDA graphs.
pub(super) fn rule_vllm_capture_oom(log: &ServerLog<'_>) -> Option<Verdict> {
    let capturing = log.lower.contains("cuda graph") || log.lower.contains("capturing");
    if !(log.cleaned.contains("CUDA out of memory") && log.lower.contains("vllm") && capturing) {
        return None;
    }
    let subtype = Some(Subtype::CudaGraphCapture);
    let mut verdict = Verdict::new(Class::Oom, subtype, Confidence::Medium);
    verdict.signature = Some("CUDA OOM in graph capture".to_string());
    verdict
        .evidence
        .extend(log.find("CUDA out of memory").map(|l| truncate(l, 300)));
    verdict.advise("lower --max-num-seqs or --max-model-len, or --enforce-eager to skip capture");
    Some(verdict)
}

/// `Free memory on device (10.5/79.19 GiB)` → 0.1326
fn free_fraction(line: &str) -> Option<f64> {
    let inside = line
        .split_once("Free memory on device")?
        .1
        .split_once('(')?
        .1;
    let (free, rest) = inside.split_once('/')?;
    let total = rest.split_whitespace().next()?;
    Some(free.trim().parse::<f64>().ok()? / total.parse::<f64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_fraction_of_shared_gpu() {
        let line = "ValueError: Free memory on device (10.5/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB).";
        let fraction = free_fraction(line).expect("fraction");
        assert!((fraction - 0.1326).abs() < 0.001, "{fraction}");
    }
}
