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
//!
//! Each kind's own signatures are in its file (`server/sglang.rs`, `vllm.rs`, `llama_cpp.rs`),
//! its rules listed in `RULES`; this file holds the chain, the rules any server may trip (port,
//! model load, CUDA OOM, traceback) and what the rules share. Example logs:
//! `diagnostics/tests/fixtures/server_*.txt`.

mod llama_cpp;
mod sglang;
mod vllm;

use crate::native;
use crate::text::{normalize, truncate};
use crate::traceback;
use crate::verdict::{Class, Confidence, Subtype, Verdict};
use llama_cpp::rule_llama_cpp_allocation;
use sglang::{rule_sglang_capture_failed, rule_sglang_capture_oom};
use vllm::{rule_vllm_capture_oom, rule_vllm_gpu_memory_in_use, rule_vllm_kv_cache};

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
                let raised = l.trim_start().starts_with("raise ");
                (!raised, !raised && l.contains("Error: "))
            })
            .map(|l| l.trim())
    }

    /// Notes the line that mentions `needle` (as [`ServerLog::find`] picks it), if any.
    fn quote(&self, verdict: &mut Verdict, needle: &str) {
        verdict
            .evidence
            .extend(self.find(needle).map(str::to_string));
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
    let cause = cause.located();
    verdict.note(&cause);
    log.note_wrappers(&mut verdict);
    verdict.advise(format!("fix the exception: {cause}"));
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
}
