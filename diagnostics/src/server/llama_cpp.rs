//! llama.cpp's crash signatures: a buffer allocation that failed while loading (the model or the
//! KV cache). Example logs: `diagnostics/tests/fixtures/server_llama_cpp_*.txt`.

use super::ServerLog;
use crate::verdict::{Class, Confidence, Subtype, Verdict};

/// llama.cpp: an allocation failed while loading.
pub(super) fn rule_llama_cpp_allocation(log: &ServerLog<'_>) -> Option<Verdict> {
    let line = log
        .find("cudaMalloc failed: out of memory")
        .or(log.find("failed to allocate buffer for kv cache"))
        .or(log.find("failed to allocate"))
        .or(log.find("unable to allocate"))?;
    let mut verdict = Verdict::new(Class::Oom, Some(Subtype::GpuAllocation), Confidence::High);
    verdict.signature = Some("buffer allocation failed".to_string());
    verdict.note(line);
    log.quote(&mut verdict, "exiting due to model loading error");
    verdict.advise(if log.lower.contains("kv cache") {
        "the KV cache does not fit: lower -c (context) or -np (slots), or quantize it (-ctk q8_0 -ctv q8_0)".to_string()
    } else {
        "the model does not fit: lower -ngl (GPU layers) or -c (context), or use a smaller quantization".to_string()
    });
    Some(verdict)
}
