//! llama.cpp's `llama-server`. `/props`: `total_slots` (and the context per slot,
//! `default_generation_settings.n_ctx`, and `build_info`); `/slots`: which slots are busy;
//! `/metrics` (with `--metrics`): `llamacpp:requests_processing`, `requests_deferred`. Its
//! slots are its running cap (`-np`); it returns no token ids.

use serde_json::Value;

use super::reading::{count, number};
use super::{Context, Endpoint, KindSpec, Load, Metrics, Reading};

pub(super) static SPEC: KindSpec = KindSpec {
    name: "llama.cpp",
    endpoints: &[
        Endpoint {
            paths: &["/props"],
            tells_kind: true,
            tick: false,
            parse: props,
        },
        Endpoint {
            paths: &["/slots"],
            tells_kind: false,
            tick: true,
            parse: slots,
        },
    ],
    metrics: Metrics {
        prefixes: &["llamacpp:"],
        running: &["requests_processing"],
        queued: &["requests_deferred"],
        kv_usage: &["kv_cache_usage_ratio"],
        ..Metrics::EMPTY
    },
    running_cap_flags: &["-np", "--parallel"],
    context: Some(Context::At {
        path: "/props",
        pointer: "/default_generation_settings/n_ctx",
        what: "llama.cpp `n_ctx` per slot",
    }),
    context_flag: Some("-c"),
    reasoning_flag: Some("--reasoning-format deepseek"),
    version: &[("/props", "build_info")],
    programs: &["llama-server"],
    ..KindSpec::EMPTY
};

/// `/props`: the slot count. Its KV is no pool the controller can plan against: without
/// `-kvu` each slot owns `n_ctx` (a request too long for it is refused or truncated, never
/// preempted), and `/props` does not say whether the cache is unified, so counting
/// `n_ctx × slots` as shared would put the ceiling under the slot count.
pub(super) fn props(props: &Value) -> Option<Reading> {
    let slots = number(props, "total_slots")
        .and_then(count)
        .filter(|s| *s > 0)?;
    Some(Reading {
        max_running: Some(slots),
        ..Reading::default()
    })
}

/// `/slots`: how many slots are busy (`is_processing`, or `state` ≠ 0 in older builds).
pub(super) fn slots(slots: &Value) -> Option<Reading> {
    let slots = slots.as_array()?;
    let busy = slots
        .iter()
        .filter(|slot| {
            slot.get("is_processing")
                .and_then(Value::as_bool)
                .or_else(|| slot.get("state").and_then(Value::as_u64).map(|s| s != 0))
                .unwrap_or(false)
        })
        .count();
    Some(Reading {
        max_running: u32::try_from(slots.len()).ok().filter(|n| *n > 0),
        load: Load {
            running: u32::try_from(busy).ok(),
            ..Load::default()
        },
        ..Reading::default()
    })
}
