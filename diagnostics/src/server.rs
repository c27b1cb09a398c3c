//! Inference-server logs (SGLang, vLLM, llama.cpp) → [`Verdict`].
//!
//! Log prefixes are stripped first (`(EngineCore_DP0 pid=N) ERROR 10-21 08:00:10 [core.py:708] `,
//! `[2025-04-11 10:12:03 TP0] `, `[rank0]: `). Then the rules of [`RULES`] check known signatures
//! from most to least specific; the first verdict wins, and `rule_other` answers when none does:
//!
//! 1. `rule_sglang_capture_oom`: SGLang's CUDA graph capture failed of a CUDA OOM;
//! 2. `rule_sglang_capture_failed`: it failed of something else (gloo, NCCL);
//! 3. `rule_vllm_kv_cache`: vLLM found no memory for the KV cache;
//! 4. `rule_vllm_gpu_memory_in_use`: another process holds the GPU memory vLLM wants;
//! 5. `rule_vllm_capture_oom`: a CUDA OOM while vLLM captures graphs;
//! 6. `rule_llama_cpp_allocation`: llama.cpp failed to allocate a buffer;
//! 7. `rule_port_in_use`: the port is taken;
//! 8. `rule_model_load`: the model file could not be loaded;
//! 9. `rule_cuda_oom`: any other CUDA OOM;
//! 10. `rule_traceback`: the last Python exception that is not a wrapper;
//! 11. `rule_other`: the log's last line.
//!
//! Wrappers (`EngineDeadError`, "Engine core initialization failed. See root cause above.") are
//! never the answer: what precedes them is. Advice names the server flag to change.

use crate::native;
use crate::text::{normalize, truncate};
use crate::traceback;
use crate::verdict::{Class, Confidence, Subtype, Verdict};

/// The rules in the order the module docs give; the first verdict wins.
const RULES: &[fn(&ServerLog<'_>) -> Option<Verdict>] = &[
    rule_sglang_capture_oom,
    rule_sglang_capture_failed,
    rule_vllm_kv_cache,
    rule_vllm_gpu_memory_in_use,
    rule_vllm_capture_oom,
    rule_llama_cpp_allocation,
    rule_port_in_use,
    rule_model_load,
    rule_cuda_oom,
    rule_traceback,
];

/// Classifies an inference server's log (stdout + stderr, any order of prefixes).
pub fn classify_server_log(text: &str) -> Verdict {
    let cleaned = strip_prefixes(text);
    let log = ServerLog {
        lines: cleaned.lines().collect(),
        lower: cleaned.to_lowercase(),
        cleaned: &cleaned,
    };
    RULES
        .iter()
        .find_map(|rule| rule(&log))
        .unwrap_or_else(|| rule_other(&log))
}

/// A server log without its prefixes, as the rules read it.
struct ServerLog<'a> {
    cleaned: &'a str,
    lines: Vec<&'a str>,
    lower: String,
}

impl<'a> ServerLog<'a> {
    /// The line that mentions `needle`: the exception line (`ValueError: No available ...`)
    /// over the source line that raised it (`raise ValueError("No available ...`), else the
    /// first mention.
    fn find(&self, needle: &str) -> Option<&'a str> {
        self.lines
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
    }

    /// SGLang's "Capture cuda graph failed" line, by index.
    fn capture_failure(&self) -> Option<usize> {
        self.lines
            .iter()
            .position(|l| l.to_lowercase().contains("capture cuda graph failed"))
    }

    /// The last wrapper exception, named as such in the evidence.
    fn note_wrappers(&self, verdict: &mut Verdict) {
        if let Some(line) = self.lines.iter().rev().find(|l| is_wrapper(l)) {
            verdict.note(format!(
                "wrapper, classified by what precedes it: {}",
                line.trim()
            ));
        }
    }
}

/// SGLang's capture failed of a CUDA OOM. Only the wrapped error (and the traceback that raised
/// it) says what failed; another rank's or an earlier attempt's CUDA OOM elsewhere in the log
/// does not. NCCL says a CUDA allocation failed as `Cuda failure 'out of memory'`.
fn rule_sglang_capture_oom(log: &ServerLog<'_>) -> Option<Verdict> {
    let at = log.capture_failure()?;
    let wrapped_oom = log.lines[at.saturating_sub(40)..=at].iter().any(|l| {
        l.contains("CUDA out of memory")
            || l.contains("OutOfMemoryError")
            || l.contains("Cuda failure 'out of memory'")
    });
    if !wrapped_oom {
        return None;
    }
    let subtype = Some(Subtype::CudaGraphCapture);
    let mut verdict = Verdict::new(Class::Oom, subtype, Confidence::High);
    verdict.signature = Some("CUDA OOM in graph capture".to_string());
    verdict.note(truncate(log.lines[at].trim(), 300));
    for needle in [
        "Load weight end",
        "KV Cache is allocated",
        "Capture cuda graph begin",
    ] {
        verdict
            .evidence
            .extend(log.find(needle).map(str::to_string));
    }
    let avail = log
        .find("Capture cuda graph begin")
        .and_then(|l| after(l, "avail mem="));
    let at_capture = avail
        .map(|a| format!(" (avail mem {a} at capture)"))
        .unwrap_or_default();
    verdict.advise(format!(
        "the model fits; the static fraction left too little memory for CUDA graph capture{at_capture}"
    ));
    let current = after(log.cleaned, "mem_fraction_static=")
        .or_else(|| after(log.cleaned, "--mem-fraction-static "))
        .and_then(|v| v.trim_end_matches([',', ')']).parse::<f64>().ok());
    verdict.advise(match current {
        Some(value) => format!(
            "lower --mem-fraction-static ({value:.2} → {:.2})",
            ((value - 0.07) * 100.0).floor() / 100.0
        ),
        None => "lower --mem-fraction-static (e.g. 0.95 → 0.85)".to_string(),
    });
    verdict.advise("if that is not enough, lower --cuda-graph-max-bs (e.g. 16)");
    verdict.advise("last resort: --disable-cuda-graph (much slower decoding)");
    Some(verdict)
}

/// SGLang's capture failed of something other than memory: a collective between ranks, or the
/// capture itself.
fn rule_sglang_capture_failed(log: &ServerLog<'_>) -> Option<Verdict> {
    let at = log.capture_failure()?;
    let line = log.lines[at].trim();
    let subtype = Some(Subtype::CudaGraphCapture);
    let mut verdict = Verdict::new(Class::Other, subtype, Confidence::Medium);
    let wrapped = line.split_once("failed:").map_or(line, |(_, w)| w.trim());
    // Drop a source-location prefix such as `[../gloo/transport/tcp/pair.cc:534] `.
    let message = match wrapped.strip_prefix('[').and_then(|w| w.split_once("] ")) {
        Some((_, message)) => message,
        None => wrapped,
    };
    verdict.note(truncate(line, 300));
    let crashed_rank = log.lines[..at]
        .iter()
        .rev()
        .find(|l| l.contains(" in ncclAllReduce") || l.contains(" in ncclAllGather"));
    let (kind, what, advice) = capture_failure_kind(&wrapped.to_lowercase());
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
    verdict.note(format!(
        "not a memory error: {what} (the wrapped error has no `CUDA out of memory`)"
    ));
    if let Some(frame) = crashed_rank {
        verdict.note(format!(
            "a rank crashed inside an NCCL collective: {}",
            frame.trim()
        ));
    }
    verdict.advise(format!("{advice} ({})", truncate(message, 80)));
    verdict.advise("lowering --mem-fraction-static does not help: memory is not the cause");
    Some(verdict)
}

/// What failed in a capture, from the wrapped error (lowercase): the kind, what it means and
/// what to do.
fn capture_failure_kind(wrapped: &str) -> (&'static str, &'static str, &'static str) {
    if wrapped.contains("gloo") {
        (
            "gloo",
            "a gloo (CPU, TCP) collective between the tensor-parallel ranks failed: a peer rank died or the connection between ranks broke",
            "find the first error of the other ranks (the rank that died first), and check the network interface the ranks use (GLOO_SOCKET_IFNAME)",
        )
    } else if wrapped.contains("nccl") {
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
    }
}

/// vLLM: no room for the KV cache.
fn rule_vllm_kv_cache(log: &ServerLog<'_>) -> Option<Verdict> {
    let line = log
        .find("No available memory for the cache blocks")
        .or(log.find("Available KV cache memory: -"))?;
    let mut verdict = Verdict::new(Class::Oom, Some(Subtype::KvCache), Confidence::High);
    verdict.signature = Some("no memory left for the KV cache".to_string());
    verdict
        .evidence
        .extend(log.find("Available KV cache memory").map(str::to_string));
    if !line.contains("Available KV cache memory") {
        verdict.note(line);
    }
    log.note_wrappers(&mut verdict);
    verdict.advise("weights and activations leave no room for the KV cache: lower --max-model-len or --max-num-seqs");
    verdict.advise("or raise --gpu-memory-utilization if the GPU is not shared (e.g. 0.90 → 0.95), or use a smaller/quantized model");
    Some(verdict)
}

/// vLLM: another process holds the GPU memory it was told to use.
fn rule_vllm_gpu_memory_in_use(log: &ServerLog<'_>) -> Option<Verdict> {
    let line = log.lines.iter().find(|l| {
        l.contains("Free memory on device")
            && l.contains("less than desired GPU memory utilization")
    })?;
    let mut verdict = Verdict::new(Class::Oom, Some(Subtype::GpuMemoryInUse), Confidence::High);
    verdict.signature = Some("GPU memory held by another process".to_string());
    verdict.note(line.trim());
    log.note_wrappers(&mut verdict);
    let fit = free_fraction(line)
        .map(|f| {
            format!(
                " (free {:.0}% → at most {:.2})",
                f * 100.0,
                ((f - 0.02) * 100.0).floor() / 100.0
            )
        })
        .unwrap_or_default();
    verdict.advise(format!(
        "another process holds GPU memory: free the GPU (nvidia-smi) or lower --gpu-memory-utilization{fit}"
    ));
    Some(verdict)
}

/// vLLM: a CUDA OOM while capturing CUDA graphs.
fn rule_vllm_capture_oom(log: &ServerLog<'_>) -> Option<Verdict> {
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

/// llama.cpp: an allocation failed while loading.
fn rule_llama_cpp_allocation(log: &ServerLog<'_>) -> Option<Verdict> {
    let line = log
        .find("cudaMalloc failed: out of memory")
        .or(log.find("failed to allocate buffer for kv cache"))
        .or(log.find("failed to allocate"))
        .or(log.find("unable to allocate"))?;
    let mut verdict = Verdict::new(Class::Oom, Some(Subtype::GpuAllocation), Confidence::High);
    verdict.signature = Some("buffer allocation failed".to_string());
    verdict.note(line);
    verdict.evidence.extend(
        log.find("exiting due to model loading error")
            .map(str::to_string),
    );
    verdict.advise(if log.lower.contains("kv cache") {
        "the KV cache does not fit: lower -c (context) or -np (slots), or quantize it (-ctk q8_0 -ctv q8_0)".to_string()
    } else {
        "the model does not fit: lower -ngl (GPU layers) or -c (context), or use a smaller quantization".to_string()
    });
    Some(verdict)
}

fn rule_port_in_use(log: &ServerLog<'_>) -> Option<Verdict> {
    let line = log
        .find("couldn't bind HTTP server socket")
        .or(log.find("Address already in use"))?;
    let mut verdict = Verdict::new(Class::Other, Some(Subtype::PortInUse), Confidence::High);
    verdict.signature = Some("port already in use".to_string());
    verdict.note(line);
    verdict.advise(
        "another process holds the port: pick a free port (gen binds 127.0.0.1:0 in tests)",
    );
    Some(verdict)
}

fn rule_model_load(log: &ServerLog<'_>) -> Option<Verdict> {
    let line = log
        .find("failed to open GGUF file")
        .or(log.find("error: failed to open file"))
        .or(log.find("error loading model"))
        .or(log.find("failed to load model"))
        .or(log.find("exiting due to model loading error"))?;
    let mut verdict = Verdict::new(Class::Other, Some(Subtype::ModelLoad), Confidence::High);
    // `gguf_init_from_file: failed to open ...`: the function name is noise in a headline.
    let message = match line.split_once(": ") {
        Some((function, message)) if !function.contains(' ') => message,
        _ => line,
    };
    verdict.signature = Some(truncate(message, 60));
    verdict.note(line);
    verdict.advise("check the model path, file permissions and that the file is a complete GGUF");
    Some(verdict)
}

fn rule_cuda_oom(log: &ServerLog<'_>) -> Option<Verdict> {
    if !log.cleaned.contains("CUDA out of memory") {
        return None;
    }
    let mut verdict = Verdict::new(Class::Oom, Some(Subtype::GpuAllocation), Confidence::Medium);
    verdict.signature = Some("CUDA out of memory".to_string());
    verdict
        .evidence
        .extend(log.find("CUDA out of memory").map(|l| truncate(l, 300)));
    verdict.advise("lower the batch (max running requests) or context length");
    Some(verdict)
}

/// A plain Python traceback: the last exception that is not a wrapper.
fn rule_traceback(log: &ServerLog<'_>) -> Option<Verdict> {
    let raised = traceback::exceptions(log.cleaned);
    let cause = raised.iter().rev().find(|r| !is_wrapper(&r.to_string()))?;
    let mut report = traceback::parse(log.cleaned).expect("exceptions() found a traceback");
    report.exception = cause.clone();
    let mut verdict = Verdict::new(Class::Traceback, Some(Subtype::Python), Confidence::High);
    let at = cause
        .location
        .as_ref()
        .map_or(String::new(), |l| format!(" at {l}"));
    verdict.note(format!("{cause}{at}"));
    log.note_wrappers(&mut verdict);
    verdict.advise(format!("fix the exception: {cause}{at}"));
    verdict.error = Some(report);
    Some(verdict)
}

/// The end of the chain: no known signature, so the log's last line.
fn rule_other(log: &ServerLog<'_>) -> Verdict {
    let mut verdict = Verdict::new(Class::Other, None, Confidence::Low);
    if let Some(line) = native::last_meaningful_line(log.cleaned) {
        verdict.note(format!("last line: {line}"));
        verdict.signature = Some(truncate(&line, 60));
    }
    verdict.advise("no known crash signature: read the end of the server log");
    verdict
}

/// `EngineDeadError` and "See root cause above" exceptions only point elsewhere.
fn is_wrapper(line: &str) -> bool {
    line.contains("EngineDeadError")
        || line.contains("See root cause above")
        || line.contains("See stack trace (above)")
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
    fn the_module_doc_lists_the_chain_in_order() {
        let source = include_str!("server.rs");
        let (documented, mut chained) = crate::classify::tests::documented_and_chained(source);
        chained.push("rule_other");
        assert_eq!(documented, chained);
    }

    #[test]
    fn every_rule_decides_a_log_of_its_own() {
        let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
        let cases = [
            (
                "rule_sglang_capture_oom",
                format!("{oom}\nException: Capture cuda graph failed: {oom}"),
            ),
            (
                "rule_sglang_capture_failed",
                "Exception: Capture cuda graph failed: NCCL error: unhandled system error".into(),
            ),
            (
                "rule_vllm_kv_cache",
                "ValueError: No available memory for the cache blocks.".into(),
            ),
            (
                "rule_vllm_gpu_memory_in_use",
                "ValueError: Free memory on device (10.5/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB).".into(),
            ),
            (
                "rule_vllm_capture_oom",
                format!("INFO vllm: Capturing CUDA graphs\n{oom}"),
            ),
            (
                "rule_llama_cpp_allocation",
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000 MiB on device 0: cudaMalloc failed: out of memory".into(),
            ),
            (
                "rule_port_in_use",
                "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080".into(),
            ),
            (
                "rule_model_load",
                "gguf_init_from_file: failed to open GGUF file 'model.gguf'".into(),
            ),
            ("rule_cuda_oom", oom.to_string()),
            (
                "rule_traceback",
                "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nKeyError: 'prompt'".into(),
            ),
            ("rule_other", "INFO: shutting down".to_string()),
        ];
        let (_, chained) =
            crate::classify::tests::documented_and_chained(include_str!("server.rs"));
        let mut decided = Vec::new();
        for (_, text) in &cases {
            let cleaned = strip_prefixes(text);
            let log = ServerLog {
                lines: cleaned.lines().collect(),
                lower: cleaned.to_lowercase(),
                cleaned: &cleaned,
            };
            let first = RULES.iter().position(|rule| rule(&log).is_some());
            decided.push(first.map_or("rule_other", |i| chained[i]));
        }
        let listed: Vec<&str> = cases.iter().map(|(rule, _)| *rule).collect();
        assert_eq!(
            decided, listed,
            "each log is decided by the rule it is listed under"
        );
        assert_eq!(
            listed[..chained.len()],
            chained,
            "one case per rule, in chain order"
        );
    }

    #[test]
    fn free_fraction_of_shared_gpu() {
        let line = "ValueError: Free memory on device (10.5/79.19 GiB) on startup is less than desired GPU memory utilization (0.9, 71.27 GiB).";
        let fraction = free_fraction(line).expect("fraction");
        assert!((fraction - 0.1326).abs() < 0.001, "{fraction}");
    }
}
