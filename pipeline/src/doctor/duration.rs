//! How long the job will take: the output tokens still to generate (prompts left × tokens per
//! answer, measured once answers exist, `max-tokens` before) over the generation rate the last
//! run measured. Read from the plan and the run directory's `status.json`; nothing is sent.

use super::{Check, Level};
use crate::config::Plan;
use crate::status::RunStatus;

/// Answers a mean output length is trusted from.
const MIN_ANSWERS: u64 = 20;
/// Rates the estimate is shown at before any rate was measured, tok/s.
const REFERENCE_RATES: [f64; 2] = [1_000.0, 10_000.0];

/// The `duration` check for `plan`, from the run directory's status when there is one.
/// `local_rows`: the rows of sources' local files ([`super::local_rows`]), a tighter bound
/// than their `limit` before they are prepared.
pub(super) fn check(plan: &Plan, local_rows: &std::collections::BTreeMap<String, u64>) -> Check {
    let status = std::fs::read(crate::store::layout::RunDir::new(&plan.run_dir).status())
        .ok()
        .and_then(|bytes| serde_json::from_slice::<RunStatus>(&bytes).ok());
    // Answers (`samples` per prompt) and their budget, each source at its own `max-tokens`.
    let (mut limits, mut budget) = (0u64, 0u64);
    for source in &plan.sources {
        let settings = &source.settings;
        let answers = super::unprepared_bound(&source.spec, local_rows)
            .saturating_mul(u64::from(settings.samples.get()));
        limits = limits.saturating_add(answers);
        budget = budget.saturating_add(answers.saturating_mul(u64::from(settings.max_tokens)));
    }
    let uniform =
        (plan.sources.iter()).all(|s| s.settings.max_tokens == plan.generation.max_tokens);
    let (max_tokens, what) = if uniform || limits == 0 {
        (u64::from(plan.generation.max_tokens), "`max-tokens`")
    } else {
        (
            budget / limits,
            "each source's `max-tokens`, weighted by its prompts",
        )
    };
    let unit = if plan.sources.iter().all(|s| s.settings.samples.get() == 1) {
        "prompts"
    } else {
        "answers (`samples` per prompt)"
    };
    estimate(
        limits,
        Budget {
            max_tokens,
            what,
            unit,
        },
        status.as_ref(),
    )
}

/// What each answer may cost before any is measured: `max_tokens` (`what` says whose), and
/// what is counted (`unit`: prompts, or answers with `samples`).
pub(super) struct Budget<'a> {
    pub(super) max_tokens: u64,
    pub(super) what: &'a str,
    pub(super) unit: &'a str,
}

/// The estimate for up to `limits` answers (the sum of the sources' `limit`s × `samples`) of
/// at most `budget.max_tokens` each, refined by what `status` measured.
pub(super) fn estimate(limits: u64, budget: Budget<'_>, status: Option<&RunStatus>) -> Check {
    let Budget {
        max_tokens,
        what,
        unit,
    } = budget;
    let sources = status.map(|s| s.sources.as_slice()).unwrap_or_default();
    // Prepared counts are exact; a limit is an upper bound (a source may have fewer rows).
    let all_prepared = !sources.is_empty() && sources.iter().all(|s| s.prepared.is_some());
    let (total, bound) = if all_prepared {
        (sources.iter().filter_map(|s| s.prepared).sum::<u64>(), "")
    } else {
        (limits, "up to ")
    };
    let answered: u64 = sources.iter().map(|s| s.done).sum();
    let settled: u64 = sources.iter().map(|s| s.rejected + s.failed).sum();
    let left = total.saturating_sub(answered + settled);
    if left == 0 && all_prepared {
        return Check::new("duration", Level::Ok, "every prompt is answered or settled");
    }
    let output_tokens: u64 = sources.iter().map(|s| s.output_tokens).sum();
    let (per_answer, per_answer_text) = if answered >= MIN_ANSWERS {
        let mean = output_tokens.div_ceil(answered);
        (
            mean,
            format!(
                "~{} output tokens (the mean of {} answers)",
                thousands(mean),
                thousands(answered)
            ),
        )
    } else {
        (
            max_tokens,
            format!("at most {} output tokens ({what})", thousands(max_tokens)),
        )
    };
    let tokens = left.saturating_mul(per_answer);
    let work = format!(
        "{bound}{} {unit} to go × {per_answer_text} = {}{} tokens",
        thousands(left),
        if answered >= MIN_ANSWERS { "~" } else { "≤ " },
        compact(tokens)
    );
    let rate: f64 = status
        .map(|s| s.servers.iter().filter_map(|s| s.tokens_per_sec).sum())
        .unwrap_or(0.0);
    let message = if rate > 0.0 {
        format!(
            "{work}; at {} tok/s (the last run's rate over its servers) ≈ {}",
            thousands(rate.round() as u64),
            duration(tokens as f64 / rate)
        )
    } else {
        let at: Vec<String> = REFERENCE_RATES
            .iter()
            .map(|r| {
                format!(
                    "{} at {} tok/s",
                    duration(tokens as f64 / r),
                    thousands(*r as u64)
                )
            })
            .collect();
        format!(
            "{work}; no rate measured yet (`gen bench CONFIG` or the first minutes of `gen run` measure it): {}",
            at.join(", ")
        )
    };
    Check::new("duration", Level::Ok, message)
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Token counts as `950`, `12.3k`, `4.5M`, `1.6B`.
fn compact(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{:.1}B", n as f64 / 1e9),
    }
}

/// Seconds as `40s`, `12m`, `3h05m`, `2d 04h`.
fn duration(secs: f64) -> String {
    let secs = secs.ceil() as u64;
    match secs {
        0..60 => format!("{secs}s"),
        60..3_600 => format!("{}m", secs.div_ceil(60)),
        3_600..86_400 => format!("{}h{:02}m", secs / 3_600, secs % 3_600 / 60),
        _ => format!("{}d {:02}h", secs / 86_400, secs % 86_400 / 3_600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::SourceStatus;
    use crate::status::state::ServerStatus;

    fn status(sources: Vec<SourceStatus>, rates: &[f64]) -> RunStatus {
        let mut status: RunStatus = serde_json::from_value(serde_json::json!({
            "layout": 1, "config": "c.toml", "pid": 1, "host": "h",
            "started_unix_ms": 0, "heartbeat_unix_ms": 0, "finished": false,
            "servers": [], "sources": []
        }))
        .expect("status");
        status.sources = sources;
        for rate in rates {
            let mut server: ServerStatus = serde_json::from_value(serde_json::json!({
                "url": "http://127.0.0.1:30000", "model": "m", "concurrency": 8, "completed": 0
            }))
            .expect("server");
            server.tokens_per_sec = Some(*rate);
            status.servers.push(server);
        }
        status
    }

    fn source(prepared: Option<u64>, done: u64, output_tokens: u64) -> SourceStatus {
        let mut source: SourceStatus = serde_json::from_value(serde_json::json!({
            "name": "s", "phase": "generating", "done": 0, "failed": 0, "rejected": 0
        }))
        .expect("source");
        source.prepared = prepared;
        source.done = done;
        source.output_tokens = output_tokens;
        source
    }

    #[test]
    fn before_any_run_the_bound_is_limits_times_max_tokens_at_reference_rates() {
        let check = estimate(
            100_000,
            Budget {
                max_tokens: 8192,
                what: "`max-tokens`",
                unit: "prompts",
            },
            None,
        );
        assert_eq!(
            check.message,
            "up to 100,000 prompts to go × at most 8,192 output tokens (`max-tokens`) = ≤ 819.2M tokens; \
             no rate measured yet (`gen bench CONFIG` or the first minutes of `gen run` measure it): \
             9d 11h at 1,000 tok/s, 22h45m at 10,000 tok/s"
        );
    }

    #[test]
    fn a_started_run_gives_the_measured_length_and_rate() {
        // 2,000 of 10,000 answered with 3,700,000 tokens: 1,850 a answer; two servers at 2,000
        // and 2,210 tok/s: 8,000 × 1,850 = 14.8M tokens in 3,516 s.
        let sources = vec![
            source(Some(6_000), 1_500, 2_775_000),
            source(Some(4_000), 500, 925_000),
        ];
        let check = estimate(
            20_000,
            Budget {
                max_tokens: 8192,
                what: "`max-tokens`",
                unit: "prompts",
            },
            Some(&status(sources, &[2_000.0, 2_210.0])),
        );
        assert_eq!(
            check.message,
            "8,000 prompts to go × ~1,850 output tokens (the mean of 2,000 answers) = ~14.8M tokens; \
             at 4,210 tok/s (the last run's rate over its servers) ≈ 59m"
        );
    }

    #[test]
    fn a_finished_run_says_so() {
        let sources = vec![source(Some(30), 30, 900)];
        let check = estimate(
            100,
            Budget {
                max_tokens: 64,
                what: "`max-tokens`",
                unit: "prompts",
            },
            Some(&status(sources, &[])),
        );
        assert_eq!(check.message, "every prompt is answered or settled");
    }

    #[test]
    fn numbers_read_like_a_person_wrote_them() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(compact(1_600_000_000), "1.6B");
        assert_eq!(duration(59.2), "1m");
        assert_eq!(duration(3_600.0 * 30.0), "1d 06h");
    }
}
