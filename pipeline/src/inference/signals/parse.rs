//! `/metrics` of any server kind → one [`Reading`] (its load, and the KV capacity where a kind
//! prints it), by the metric names each kind's table gives (`inference::kinds`). Pure: the
//! text comes from [`super::reader`] or from a test fixture. The kind is the one whose prefix
//! the names carry; the other endpoints of each kind are read by the kind's own parsers.

use super::prometheus;
use crate::inference::kinds::{Load, Metrics, Reading, ServerKind, count, tokens};

/// One list of names of a kind's [`Metrics`].
type Names = fn(&Metrics) -> &'static [&'static str];

/// `/metrics` of any of the kinds.
pub fn from_metrics(text: &str) -> Reading {
    let samples = prometheus::parse(text);
    // Every kind's spellings of the names, each name's prefixes in turn.
    let names = |field: Names| -> Vec<String> {
        let metrics = ServerKind::ALL.iter().map(|kind| &kind.spec().metrics);
        let prefixed = |m: &'static Metrics, n| m.prefixes.iter().map(move |p| format!("{p}{n}"));
        metrics
            .flat_map(|m| field(m).iter().flat_map(move |n| prefixed(m, n)))
            .collect()
    };
    let total = |field: Names| prometheus::total(&samples, &names(field));
    let kind = ServerKind::ALL.into_iter().find(|kind| {
        let prefixes = kind.spec().metrics.prefixes;
        samples
            .iter()
            .any(|s| prefixes.iter().any(|p| s.name.starts_with(p)))
    });
    let kv_total = total(|m| m.kv_total);
    let kv_usage = match (total(|m| m.kv_used), kv_total) {
        (Some(used), Some(kv)) if kv > 0.0 => Some(used / kv),
        _ => prometheus::mean(&samples, &names(|m| m.kv_usage)),
    };
    let kv_capacity = ServerKind::ALL
        .iter()
        .find_map(|kind| (kind.spec().metrics.kv_capacity)(&samples));
    Reading {
        kind,
        max_running: None,
        kv_tokens: kv_capacity.or(kv_total.and_then(tokens)),
        load: Load {
            running: total(|m| m.running).and_then(count),
            queued: total(|m| m.queued).and_then(count),
            kv_usage: kv_usage.map(|u| u.clamp(0.0, 1.0)),
            preemptions_total: total(|m| m.preemptions)
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(|v| v.round() as u64),
        },
    }
}

#[cfg(test)]
mod tests;
