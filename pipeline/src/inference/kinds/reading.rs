//! What a server's endpoints say about it: one [`Reading`] (its kind, its caps, its [`Load`]),
//! and the number helpers every kind's parsers share.

use serde_json::Value;

use super::ServerKind;

/// One reading of the server's load.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    pub running: Option<u32>,
    pub queued: Option<u32>,
    /// KV cache in use, 0–1.
    pub kv_usage: Option<f64>,
    /// The cumulative preemption (retraction) counter; a drop means a restart.
    pub preemptions_total: Option<u64>,
}

/// What one or more endpoints said: which server it is, what bounds it, its load.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    pub kind: Option<ServerKind>,
    /// Most requests the server runs at once.
    pub max_running: Option<u32>,
    /// KV cache capacity in tokens.
    pub kv_tokens: Option<u64>,
    pub load: Load,
}

impl Reading {
    /// `self`, with what it lacks taken from `other`.
    pub fn or(self, other: Reading) -> Reading {
        Reading {
            kind: self.kind.or(other.kind),
            max_running: self.max_running.or(other.max_running),
            kv_tokens: self.kv_tokens.or(other.kv_tokens),
            load: Load {
                running: self.load.running.or(other.load.running),
                queued: self.load.queued.or(other.load.queued),
                kv_usage: self.load.kv_usage.or(other.load.kv_usage),
                preemptions_total: self.load.preemptions_total.or(other.load.preemptions_total),
            },
        }
    }
}

pub(crate) fn count(v: f64) -> Option<u32> {
    (v.is_finite() && v >= 0.0).then(|| v.round().min(f64::from(u32::MAX)) as u32)
}

pub(crate) fn tokens(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 1.0).then(|| v.round() as u64)
}

/// A JSON array of token ids; `None` for `null` or anything else.
pub(super) fn token_list(value: &Value) -> Option<Vec<u32>> {
    value
        .as_array()?
        .iter()
        .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect()
}

pub(super) fn number(value: &Value, key: &str) -> Option<f64> {
    value.get(key).and_then(Value::as_f64)
}
