//! Inference-server logs (SGLang, vLLM, llama.cpp) → [`Verdict`].
//!
//! Log prefixes are stripped first (`(EngineCore_DP0 pid=N) ERROR 10-21 08:00:10 [core.py:708] `,
//! `[2025-04-11 10:12:03 TP0] `, `[rank0]: `). Then known signatures are checked from most to least
//! specific; wrappers (`EngineDeadError`, "Engine core initialization failed. See root cause
//! above.") are never the answer: what precedes them is. Advice names the server flag to change.

use crate::native;
use crate::text::{normalize, truncate};
use crate::traceback;
use crate::verdict::{Class, Confidence, Subtype, Verdict};

/// Classifies an inference server's log (stdout + stderr, any order of prefixes).
pub fn classify_server_log(text: &str) -> Verdict {
    let cleaned = strip_prefixes(text);
    let lines: Vec<&str> = cleaned.lines().collect();
    // Prefer the exception line (`ValueError: No available ...`) over the source line that
    // raised it (`raise ValueError("No available ...`), else the first mention.
    let find = |needle: &str| {
        lines
            .iter()
            .rev()
            .filter(|l| l.contains(needle))
            .max_by_key(|l| {
                let l = l.trim_start();
                if l.contains("Error: ") && !l.starts_with("raise ") {
                    2
                } else {
                    u8::from(!l.starts_with("raise "))
                }
            })
            .map(|l| l.trim())
    };
    let lower = cleaned.to_lowercase();
    let cuda_oom = cleaned.contains("CUDA out of memory");

    // SGLang: capture failed; only a CUDA OOM if the wrapped text says so.
    if let Some(at) = lines
        .iter()
        .position(|l| l.to_lowercase().contains("capture cuda graph failed"))
    {
        let line = lines[at].trim();
        // Only the wrapped error (and the traceback that raised it) says what failed; another
        // rank's or an earlier attempt's CUDA OOM elsewhere in the log does not.
        // NCCL says a CUDA allocation failed as `Cuda failure 'out of memory'`.
        let wrapped_oom = lines[at.saturating_sub(40)..=at].iter().any(|l| {
            l.contains("CUDA out of memory")
                || l.contains("OutOfMemoryError")
                || l.contains("Cuda failure 'out of memory'")
        });
        if wrapped_oom {
            let mut verdict = Verdict::new(
                Class::Oom,
                Some(Subtype::CudaGraphCapture),
                Confidence::High,
            );
            verdict.signature = Some("CUDA OOM in graph capture".to_string());
            verdict.evidence.push(truncate(line, 300));
            for needle in [
                "Load weight end",
                "KV Cache is allocated",
                "Capture cuda graph begin",
            ] {
                verdict.evidence.extend(find(needle).map(str::to_string));
            }
            let avail = find("Capture cuda graph begin").and_then(|l| after(l, "avail mem="));
            let at_capture = avail
                .map(|a| format!(" (avail mem {a} at capture)"))
                .unwrap_or_default();
            verdict.advice.push(format!(
                "the model fits; the static fraction left too little memory for CUDA graph capture{at_capture}"
            ));
            let current = after(&cleaned, "mem_fraction_static=")
                .or_else(|| after(&cleaned, "--mem-fraction-static "))
                .and_then(|v| v.trim_end_matches([',', ')']).parse::<f64>().ok());
            verdict.advice.push(match current {
                Some(value) => format!(
                    "lower --mem-fraction-static ({value:.2} → {:.2})",
                    ((value - 0.07) * 100.0).floor() / 100.0
                ),
                None => "lower --mem-fraction-static (e.g. 0.95 → 0.85)".to_string(),
            });
            verdict
                .advice
                .push("if that is not enough, lower --cuda-graph-max-bs (e.g. 16)".to_string());
            verdict
                .advice
                .push("last resort: --disable-cuda-graph (much slower decoding)".to_string());
            return verdict;
        }
        let mut verdict = Verdict::new(
            Class::Other,
            Some(Subtype::CudaGraphCapture),
            Confidence::Medium,
        );
        let wrapped = line.split_once("failed:").map_or(line, |(_, w)| w.trim());
        let lower_wrapped = wrapped.to_lowercase();
        // Drop a source-location prefix such as `[../gloo/transport/tcp/pair.cc:534] `.
        let message = match wrapped.strip_prefix('[').and_then(|w| w.split_once("] ")) {
            Some((_, message)) => message,
            None => wrapped,
        };
        verdict.evidence.push(truncate(line, 300));
        let crashed_rank = lines[..at]
            .iter()
            .rev()
            .find(|l| l.contains(" in ncclAllReduce") || l.contains(" in ncclAllGather"));
        let (kind, what, advice) = if lower_wrapped.contains("gloo") {
            (
                "gloo",
                "a gloo (CPU, TCP) collective between the tensor-parallel ranks failed: a peer rank died or the connection between ranks broke",
                "find the first error of the other ranks (the rank that died first), and check the network interface the ranks use (GLOO_SOCKET_IFNAME)",
            )
        } else if lower_wrapped.contains("nccl") {
            (
                "NCCL",
                "an NCCL collective between the GPUs failed during capture",
                "rerun with NCCL_DEBUG=INFO to see which NCCL call failed and why; check NCCL_SOCKET_IFNAME and peer-to-peer access (NCCL_P2P_DISABLE=1 tells)",
            )
        } else {
            (
                "",
                "the capture itself failed",
                "fix the capture error; --disable-cuda-graph confirms it is the capture",
            )
        };
        verdict.signature = Some(match kind {
            "" => truncate(message, 80),
            kind => {
                // SGLang's pynccl wrapper already says `NCCL error: …`.
                let message = message
                    .strip_prefix(&format!("{kind} error: "))
                    .unwrap_or(message);
                format!("{kind} error: {}", truncate(message, 70))
            }
        });
        verdict.evidence.push(format!(
            "not a memory error: {what} (the wrapped error has no `CUDA out of memory`)"
        ));
        if let Some(frame) = crashed_rank {
            verdict.evidence.push(format!(
                "a rank crashed inside an NCCL collective: {}",
                frame.trim()
            ));
        }
        verdict
            .advice
            .push(format!("{advice} ({})", truncate(message, 80)));
        verdict.advice.push(
            "lowering --mem-fraction-static does not help: memory is not the cause".to_string(),
        );
        return verdict;
    }

    // vLLM: no room for the KV cache.
    if let Some(line) =
        find("No available memory for the cache blocks").or(find("Available KV cache memory: -"))
    {
        let mut verdict = Verdict::new(Class::Oom, Some(Subtype::KvCache), Confidence::High);
        verdict.signature = Some("no memory left for the KV cache".to_string());
        verdict
            .evidence
            .extend(find("Available KV cache memory").map(str::to_string));
        if !line.contains("Available KV cache memory") {
            verdict.evidence.push(line.to_string());
        }
        note_wrappers(&mut verdict, &lines);
        verdict.advice.push(
            "weights and activations leave no room for the KV cache: lower --max-model-len or --max-num-seqs"
                .to_string(),
        );
        verdict.advice.push(
            "or raise --gpu-memory-utilization if the GPU is not shared (e.g. 0.90 → 0.95), or use a smaller/quantized model"
                .to_string(),
        );
        return verdict;
    }
    if let Some(line) = lines.iter().find(|l| {
        l.contains("Free memory on device")
            && l.contains("less than desired GPU memory utilization")
    }) {
        let mut verdict = Verdict::new(Class::Oom, Some(Subtype::GpuMemoryInUse), Confidence::High);
        verdict.signature = Some("GPU memory held by another process".to_string());
        verdict.evidence.push(line.trim().to_string());
        note_wrappers(&mut verdict, &lines);
        let fit = free_fraction(line)
            .map(|f| {
                format!(
                    " (free {:.0}% → at most {:.2})",
                    f * 100.0,
                    ((f - 0.02) * 100.0).floor() / 100.0
                )
            })
            .unwrap_or_default();
        verdict.advice.push(format!(
            "another process holds GPU memory: free the GPU (nvidia-smi) or lower --gpu-memory-utilization{fit}"
        ));
        return verdict;
    }
    if cuda_oom
        && lower.contains("vllm")
        && (lower.contains("cuda graph") || lower.contains("capturing"))
    {
        let mut verdict = Verdict::new(
            Class::Oom,
            Some(Subtype::CudaGraphCapture),
            Confidence::Medium,
        );
        verdict.signature = Some("CUDA OOM in graph capture".to_string());
        verdict
            .evidence
            .extend(find("CUDA out of memory").map(|l| truncate(l, 300)));
        verdict.advice.push(
            "lower --max-num-seqs or --max-model-len, or --enforce-eager to skip capture"
                .to_string(),
        );
        return verdict;
    }

    // llama.cpp: allocation failures while loading.
    let alloc = find("cudaMalloc failed: out of memory")
        .or(find("failed to allocate buffer for kv cache"))
        .or(find("failed to allocate"))
        .or(find("unable to allocate"));
    if let Some(line) = alloc {
        let mut verdict = Verdict::new(Class::Oom, Some(Subtype::GpuAllocation), Confidence::High);
        verdict.signature = Some("buffer allocation failed".to_string());
        verdict.evidence.push(line.to_string());
        verdict
            .evidence
            .extend(find("exiting due to model loading error").map(str::to_string));
        let kv = lower.contains("kv cache");
        verdict.advice.push(if kv {
            "the KV cache does not fit: lower -c (context) or -np (slots), or quantize it (-ctk q8_0 -ctv q8_0)".to_string()
        } else {
            "the model does not fit: lower -ngl (GPU layers) or -c (context), or use a smaller quantization".to_string()
        });
        return verdict;
    }
    if let Some(line) = find("couldn't bind HTTP server socket").or(find("Address already in use"))
    {
        let mut verdict = Verdict::new(Class::Other, Some(Subtype::PortInUse), Confidence::High);
        verdict.signature = Some("port already in use".to_string());
        verdict.evidence.push(line.to_string());
        verdict.advice.push(
            "another process holds the port: pick a free port (gen binds 127.0.0.1:0 in tests)"
                .to_string(),
        );
        return verdict;
    }
    let load = find("failed to open GGUF file")
        .or(find("error: failed to open file"))
        .or(find("error loading model"))
        .or(find("failed to load model"))
        .or(find("exiting due to model loading error"));
    if let Some(line) = load {
        let mut verdict = Verdict::new(Class::Other, Some(Subtype::ModelLoad), Confidence::High);
        // `gguf_init_from_file: failed to open ...`: the function name is noise in a headline.
        let message = match line.split_once(": ") {
            Some((function, message)) if !function.contains(' ') => message,
            _ => line,
        };
        verdict.signature = Some(truncate(message, 60));
        verdict.evidence.push(line.to_string());
        verdict.advice.push(
            "check the model path, file permissions and that the file is a complete GGUF"
                .to_string(),
        );
        return verdict;
    }
    if cuda_oom {
        let mut verdict =
            Verdict::new(Class::Oom, Some(Subtype::GpuAllocation), Confidence::Medium);
        verdict.signature = Some("CUDA out of memory".to_string());
        verdict
            .evidence
            .extend(find("CUDA out of memory").map(|l| truncate(l, 300)));
        verdict
            .advice
            .push("lower the batch (max running requests) or context length".to_string());
        return verdict;
    }

    // A plain Python traceback: the last exception that is not a wrapper.
    let raised = traceback::exceptions(&cleaned);
    if let Some(cause) = raised.iter().rev().find(|r| !is_wrapper(&r.to_string())) {
        let mut report = traceback::parse(&cleaned).expect("exceptions() found a traceback");
        report.exception = cause.clone();
        let mut verdict = Verdict::new(Class::Traceback, Some(Subtype::Python), Confidence::High);
        let at = cause
            .location
            .as_ref()
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        verdict.evidence.push(format!("{cause}{at}"));
        note_wrappers(&mut verdict, &lines);
        verdict
            .advice
            .push(format!("fix the exception: {cause}{at}"));
        verdict.error = Some(report);
        return verdict;
    }
    let mut verdict = Verdict::new(Class::Other, None, Confidence::Low);
    if let Some(line) = native::last_meaningful_line(&cleaned) {
        verdict.evidence.push(format!("last line: {line}"));
        verdict.signature = Some(truncate(&line, 60));
    }
    verdict
        .advice
        .push("no known crash signature: read the end of the server log".to_string());
    verdict
}

/// `EngineDeadError` and "See root cause above" exceptions only point elsewhere.
fn is_wrapper(line: &str) -> bool {
    line.contains("EngineDeadError")
        || line.contains("See root cause above")
        || line.contains("See stack trace (above)")
}

fn note_wrappers(verdict: &mut Verdict, lines: &[&str]) {
    if let Some(line) = lines.iter().rev().find(|l| is_wrapper(l)) {
        verdict.evidence.push(format!(
            "wrapper, classified by what precedes it: {}",
            line.trim()
        ));
    }
}

/// The value after `key` up to the next space: `avail mem=1.12 GB` → `1.12 GB` (keeps a unit).
fn after(text: &str, key: &str) -> Option<String> {
    let rest = &text[text.find(key)? + key.len()..];
    let mut parts = rest.split_whitespace();
    let value = parts.next()?.trim_end_matches(',');
    match parts.next() {
        Some(unit) if ["GB", "GiB", "MB", "MiB"].contains(&unit.trim_end_matches([',', '.'])) => {
            Some(format!("{value} {}", unit.trim_end_matches([',', '.'])))
        }
        _ => Some(value.to_string()),
    }
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

/// Removes server log prefixes, keeping the indentation of what follows.
pub fn strip_prefixes(text: &str) -> String {
    normalize(text)
        .lines()
        .map(strip_line)
        .collect::<Vec<_>>()
        .join("\n")
}

fn strip_line(mut line: &str) -> &str {
    loop {
        let before = line;
        // `(EngineCore_DP0 pid=1234) `, `(VllmWorker rank=0 pid=7) `
        if line.starts_with('(')
            && let Some((inside, rest)) = line[1..].split_once(") ")
            && inside.contains("pid=")
        {
            line = rest;
        }
        // `ERROR 10-21 08:00:10 [core.py:708] ` (vLLM); the message keeps its indentation.
        if let Some((level, rest)) = line.split_once(' ')
            && ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"].contains(&level)
            && rest.as_bytes().get(2) == Some(&b'-')
            && let Some((_, message)) = rest.split_once("] ")
        {
            line = message;
        }
        // `[rank0]: `, `[2025-04-11 10:12:03 TP0] `
        if let Some(rest) = line.strip_prefix('[')
            && let Some((inside, after)) = rest.split_once(']')
        {
            if inside.starts_with("rank") {
                line = after
                    .strip_prefix(':')
                    .unwrap_or(after)
                    .strip_prefix(' ')
                    .unwrap_or(after);
            } else if inside.starts_with(|c: char| c.is_ascii_digit()) && inside.contains(':') {
                line = after.strip_prefix(' ').unwrap_or(after);
            }
        }
        if line == before {
            return line;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_vllm_sglang_and_torch_prefixes() {
        assert_eq!(
            strip_line(
                "(EngineCore_DP0 pid=4242) ERROR 10-21 08:00:10 [core.py:708]   File \"x.py\", line 1"
            ),
            "  File \"x.py\", line 1"
        );
        assert_eq!(
            strip_line("[2025-04-11 10:12:03 TP0] Capture cuda graph begin."),
            "Capture cuda graph begin."
        );
        assert_eq!(
            strip_line("[rank0]: RuntimeError: boom"),
            "RuntimeError: boom"
        );
        assert_eq!(strip_line("[vda] not a prefix"), "[vda] not a prefix");
    }

    #[test]
    fn a_cuda_oom_elsewhere_does_not_make_a_gloo_capture_failure_an_oom() {
        let mut log = String::from(
            "[2025-03-05 07:00:00 TP1] Memory pool end. avail mem=2.1 GB\n\
             [2025-03-05 07:00:01 TP1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
        );
        for i in 0..60 {
            log.push_str(&format!(
                "[2025-03-05 07:59:{:02} TP0] Load weight begin.\n",
                i % 60
            ));
        }
        log.push_str(
            "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer\n",
        );
        let verdict = classify_server_log(&log);
        assert_eq!(
            (verdict.class, verdict.subtype),
            (Class::Other, Some(Subtype::CudaGraphCapture))
        );
    }

    #[test]
    fn free_fraction_of_shared_gpu() {
        let line = "ValueError: Free memory on device (10.5/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB).";
        let fraction = free_fraction(line).expect("fraction");
        assert!((fraction - 0.1326).abs() < 0.001, "{fraction}");
    }
}
