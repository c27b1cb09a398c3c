//! Inference-server logs (SGLang, vLLM, llama.cpp) → [`Verdict`]. Placeholder until filled.
use crate::verdict::{Class, Confidence, Verdict};

/// Classifies a server log.
pub fn classify_server_log(_text: &str) -> Verdict {
    Verdict::new(Class::Other, None, Confidence::Low)
}
