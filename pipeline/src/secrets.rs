//! The secrets this process knows — the API key named by `[server] api-key-env` and the
//! Hugging Face tokens in the environment — and their removal from text.
//!
//! A server may quote the key it was sent in an error body (gateways echo the `Authorization`
//! header), a launched server may print it in its log, and such text flows into notes, events,
//! rejections and messages. So the key is taken out where text leaves `gen`, not where it
//! enters: every line printed to the terminal ([`crate::report::RunReporter`],
//! [`crate::report::plain`], the error chain and log lines of `main`), every whole file
//! written ([`crate::store::atomic`]) and every line appended ([`crate::store::append`]:
//! events, rejections, a launched server's log) goes through [`redact`]. A new message or file is then covered without knowing it carries server
//! text.
//!
//! Must not: hold anything else than secrets, or be used to hide non-secret text.

use std::borrow::Cow;
use std::sync::RwLock;

/// Environment variables whose values are Hugging Face tokens (`huggingface_hub` reads all
/// three, newest first).
pub const HF_TOKEN_VARS: [&str; 3] = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN"];

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Shorter values are not treated as secrets: replacing every `ab` in every message would make
/// the output unreadable and hide nothing worth hiding.
const MIN_LEN: usize = 4;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remembers `secret` (and its JSON-escaped form, as it appears inside JSON files) so that
/// [`redact`] removes it from then on.
pub fn register(secret: &str) {
    let secret = secret.trim();
    if secret.len() < MIN_LEN {
        return;
    }
    let mut forms = vec![secret.to_owned()];
    if let Ok(quoted) = serde_json::to_string(secret) {
        let escaped = &quoted[1..quoted.len() - 1];
        if escaped != secret {
            forms.push(escaped.to_owned());
        }
    }
    let mut secrets = SECRETS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for form in forms {
        if !secrets.contains(&form) {
            secrets.push(form);
        }
    }
    // Longest first, so a secret that contains another is replaced whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// Registers the value of the environment variable `name`, when it is set.
pub fn register_env(name: &str) {
    if let Ok(value) = std::env::var(name) {
        register(&value);
    }
}

/// Registers the Hugging Face tokens of the environment.
pub fn register_hf_tokens() {
    for name in HF_TOKEN_VARS {
        register_env(name);
    }
}

/// `text` with every known secret replaced by [`MASK`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = Cow::Borrowed(text);
    for secret in secrets.iter() {
        if out.contains(secret.as_str()) {
            out = Cow::Owned(out.replace(secret.as_str(), MASK));
        }
    }
    out
}

/// [`redact`] for bytes that may not be UTF-8 (invalid sequences are left as they are).
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    let secrets = SECRETS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = Cow::Borrowed(bytes);
    for secret in secrets.iter() {
        let needle = secret.as_bytes();
        if out.windows(needle.len()).any(|w| w == needle) {
            out = Cow::Owned(replace_bytes(&out, needle, MASK.as_bytes()));
        }
    }
    out
}

fn replace_bytes(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = haystack;
    while let Some(at) = rest.windows(needle.len()).position(|w| w == needle) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// Standard error with every known secret taken out of each write (for the log subscriber,
/// which formats a whole event before writing it).
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactedStderr;

impl std::io::Write for RedactedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::io::stderr().write_all(&redact_bytes(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_secrets_are_masked_in_text_and_bytes() {
        // The registry is process-wide: this test's values are its own.
        register("sk-unit-Redact9x");
        register("hf_unit\"Quote7");
        register("ab");
        let body = r#"{"error": "Authentication Error, Invalid proxy server token passed. Received API Key = sk-unit-Redact9x"}"#;
        assert_eq!(
            redact(body),
            r#"{"error": "Authentication Error, Invalid proxy server token passed. Received API Key = ***"}"#
        );
        let json = serde_json::to_string("token hf_unit\"Quote7 ab").expect("json");
        assert_eq!(
            String::from_utf8(redact_bytes(json.as_bytes()).into_owned()).expect("utf-8"),
            r#""token *** ab""#
        );
        assert!(matches!(redact("nothing secret"), Cow::Borrowed(_)));
        assert_eq!(
            &*redact_bytes(b"\xff sk-unit-Redact9x \xfe"),
            b"\xff *** \xfe"
        );
    }
}
