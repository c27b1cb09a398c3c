//! SGLang's crash signatures: CUDA graph capture failures, of a CUDA OOM or of something else
//! (gloo, NCCL). Example logs: `diagnostics/tests/fixtures/server_sglang_*.txt`.

use super::ServerLog;
use crate::text::truncate;
use crate::verdict::{Class, Confidence, Subtype, Verdict};

/// SGLang's capture failed of a CUDA OOM. Only the wrapped error (and the traceback that raised
/// it) says what failed; another rank's or an earlier attempt's CUDA OOM elsewhere in the log
/// does not. NCCL says a CUDA allocation failed as `Cuda failure 'out of memory'`.
pub(super) fn rule_sglang_capture_oom(log: &ServerLog<'_>) -> Option<Verdict> {
    let at = capture_failure(log)?;
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
        log.quote(&mut verdict, needle);
    }
    let at_capture = log
        .find("Capture cuda graph begin")
        .and_then(|l| after(l, "avail mem="))
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
pub(super) fn rule_sglang_capture_failed(log: &ServerLog<'_>) -> Option<Verdict> {
    let at = capture_failure(log)?;
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

/// SGLang's "Capture cuda graph failed" line, by index.
fn capture_failure(log: &ServerLog<'_>) -> Option<usize> {
    log.lines
        .iter()
        .position(|l| l.to_lowercase().contains("capture cuda graph failed"))
}

/// The value after `key` up to the next space: `avail mem=1.12 GB` → `1.12 GB` (keeps a unit).
fn after(text: &str, key: &str) -> Option<String> {
    let rest = &text[text.find(key)? + key.len()..];
    let mut parts = rest.split_whitespace();
    let value = parts.next()?.trim_end_matches(',');
    match parts.next().map(|unit| unit.trim_end_matches([',', '.'])) {
        Some(unit) if ["GB", "GiB", "MB", "MiB"].contains(&unit) => Some(format!("{value} {unit}")),
        _ => Some(value.to_string()),
    }
}
