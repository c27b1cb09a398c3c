//! The values of per-source settings that later layers act on: what to do with an answer cut
//! by `max-tokens` ([`LengthPolicy`]), the order prompts are sent in ([`Order`]), and byte
//! sizes such as `8G` ([`parse_size`]). They are plain data, parsed here and interpreted by
//! `run`.

use serde::{Deserialize, Serialize};

/// What to do with an answer cut by `max-tokens` (`finish_reason = "length"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LengthPolicy {
    /// Keep it (flagged by its finish reason; counted in the truncation rate).
    #[default]
    Keep,
    /// Do not store it; the prompt is recorded as rejected (`truncated`), not retried. So is an
    /// answer the context cut.
    Drop,
    /// Ask once more with twice the token budget, then keep whatever comes back. An answer the
    /// context cut is kept at once: no budget makes room in the context.
    Retry,
}

/// The order a source's prompts are sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// As prepared (the seeded sample's order).
    #[default]
    File,
    /// Longest prompt first, so the longest requests do not finish last.
    LongestFirst,
}

/// Parses sizes such as `512M`, `8G`, `1.5GiB`, `1048576`.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let multiplier: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let bytes = number * multiplier;
    (1.0..1.8e19).contains(&bytes).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("0"), None);
        assert_eq!(parse_size("5X"), None);
    }
}
