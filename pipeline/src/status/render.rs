//! Plain-text rendering of a [`RunStatus`] for an 80-column terminal: no colour, no cursor
//! movement, so it reads the same over SSH, in `watch`, and in a log file.

use std::fmt::Write as _;

use super::state::{RunStatus, SourceStatus, VerdictLine};

const WIDTH: usize = 80;
/// A heartbeat older than this means `gen run` is no longer running.
pub const STALE_AFTER_MS: u64 = 15_000;

fn ago(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..=59 => format!("{secs}s ago"),
        60..=3599 => format!("{} min ago", secs / 60),
        _ => format!("{}h{:02} ago", secs / 3600, secs % 3600 / 60),
    }
}

fn liveness(status: &RunStatus, now_ms: u64) -> String {
    let age = now_ms.saturating_sub(status.heartbeat_unix_ms);
    if let (true, Some(reason)) = (status.finished, &status.stopped_by) {
        format!("stopped {}: {reason}", ago(age))
    } else if status.finished {
        format!("finished {}", ago(age))
    } else if age > STALE_AFTER_MS {
        format!(
            "not running: last heartbeat {} (pid {} on {})",
            ago(age),
            status.pid,
            status.host
        )
    } else {
        format!("running (pid {} on {})", status.pid, status.host)
    }
}

/// Bytes in GiB with one decimal, or MiB below 1 GiB.
fn gib(bytes: u64) -> String {
    if bytes < 1 << 30 {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    }
}

/// Seconds as `45s`, `12 min`, `3h05`.
fn duration(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        _ => format!("{}h{:02}", secs / 3600, secs % 3600 / 60),
    }
}

/// `text` cut to `width` columns, with `…` where it was cut.
pub fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A worker verdict under its source's row: `  ! HEADLINE; NEXT ACTION` on one line when it
/// fits 80 columns, else the next action on a line of its own, so it always shows whole.
fn verdict_lines(verdict: &VerdictLine) -> Vec<String> {
    if verdict.class == "success" {
        return Vec::new();
    }
    let one_line = format!("  ! {}; {}", verdict.headline, verdict.next_action);
    if one_line.chars().count() <= WIDTH {
        return vec![one_line];
    }
    vec![
        cut(&format!("  ! {}", verdict.headline), WIDTH),
        cut(&format!("    next: {}", verdict.next_action), WIDTH),
    ]
}

/// The note the orchestrator writes about a worker's verdict, which the verdict lines say in
/// full.
fn repeats_verdict(s: &SourceStatus) -> bool {
    s.verdict
        .as_ref()
        .is_some_and(|v| v.class != "success" && s.note.starts_with(&v.headline))
}

/// The share of completions cut by `max-tokens`, when any were.
fn truncation(s: &SourceStatus) -> String {
    if s.truncated == 0 || s.done == 0 {
        return "-".to_owned();
    }
    let percent = 100.0 * s.truncated as f64 / s.done as f64;
    if percent < 10.0 {
        format!("{percent:.1}%")
    } else {
        format!("{percent:.0}%")
    }
}

/// The table's columns; a source's note and verdict go on lines of their own under its row.
const HEADER: [&str; 9] = [
    "SOURCE", "PHASE", "PREPARED", "DONE", "FAIL", "SKIP", "TOK/S", "ETA", "CUT",
];

fn columns(cells: [&str; 9]) -> String {
    let [
        name,
        phase,
        prepared,
        done,
        failed,
        skipped,
        rate,
        eta,
        cut_share,
    ] = cells;
    format!(
        "{name:<14} {phase:<10} {prepared:>8} {done:>7} {failed:>5} {skipped:>5} {rate:>6} {eta:>6} {cut_share:>5}"
    )
    .trim_end()
    .to_owned()
}

/// A source's row, then its note (when the verdict lines below do not say it already).
fn row(s: &SourceStatus) -> Vec<String> {
    let generating = s.phase == super::state::Phase::Generating;
    let rate = match s.tokens_per_sec {
        Some(rate) if generating => format!("{rate:.0}"),
        _ => "-".to_owned(),
    };
    let eta = match s.eta_secs {
        Some(eta) if generating => duration(eta),
        _ => "-".to_owned(),
    };
    let mut lines = vec![columns([
        &cut(&s.name, 14),
        s.phase.label(),
        &s.prepared.map_or_else(|| "-".to_owned(), |p| p.to_string()),
        &s.done.to_string(),
        &s.failed.to_string(),
        &s.rejected.to_string(),
        &rate,
        &eta,
        &truncation(s),
    ])];
    if !s.note.is_empty() && !repeats_verdict(s) {
        lines.push(cut(&format!("  {}", s.note), WIDTH));
    }
    for warning in &s.warnings {
        lines.push(cut(&format!("  warning: {warning}"), WIDTH));
    }
    lines
}

/// The status table, each line at most 80 columns.
#[expect(
    clippy::let_underscore_must_use,
    reason = "writing to a String cannot fail"
)]
pub fn render(status: &RunStatus, now_ms: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", cut(&format!("run    {}", status.config), WIDTH));
    let _ = writeln!(
        out,
        "{}",
        cut(&format!("state  {}", liveness(status, now_ms)), WIDTH)
    );
    let all_down = status
        .servers
        .iter()
        .all(|s| s.down_since_unix_ms.is_some());
    for server in &status.servers {
        let (head, detail) = match server.down_since_unix_ms {
            Some(since) => (
                format!(
                    "server {} DOWN since {}",
                    server.url,
                    ago(now_ms.saturating_sub(since))
                ),
                if all_down {
                    "every server down: dispatch paused, nothing lost".to_owned()
                } else {
                    "its requests went to the other servers, nothing lost".to_owned()
                },
            ),
            None => {
                let tuned = server
                    .ceiling
                    .map_or_else(String::new, |c| format!(" (auto, ceiling {c})"));
                let in_flight = server
                    .in_flight
                    .map_or_else(String::new, |n| format!(", {n} in flight"));
                let queued = server
                    .queued
                    .map_or_else(String::new, |q| format!(", {q} queued"));
                let rate = server
                    .tokens_per_sec
                    .map_or_else(String::new, |r| format!(", {r:.0} tok/s"));
                (
                    format!("server {} ({})", server.url, server.model),
                    format!(
                        "concurrency {}{tuned}{in_flight}{queued}{rate}",
                        server.concurrency
                    ),
                )
            }
        };
        let _ = writeln!(out, "{}", cut(&head, WIDTH));
        let _ = writeln!(out, "{}", cut(&format!("       {detail}"), WIDTH));
        if let (Some(_), Some(reason)) = (server.down_since_unix_ms, &server.down_reason) {
            let _ = writeln!(out, "{}", cut(&format!("       why: {reason}"), WIDTH));
        }
        if let Some(decision) = &server.decision
            && server.down_since_unix_ms.is_none()
        {
            let _ = writeln!(out, "{}", cut(&format!("tuning {decision}"), WIDTH));
        }
    }
    if let Some(machine) = &status.machine {
        let peak = machine
            .peak_worker_rss_bytes
            .map_or_else(String::new, |p| format!("; peak worker RSS {}", gib(p)));
        let line = format!(
            "host   {} RAM, {} available{peak}",
            gib(machine.memory_total_bytes),
            gib(machine.memory_available_bytes)
        );
        let _ = writeln!(out, "{}", cut(&line, WIDTH));
    }
    let _ = writeln!(out);
    out.push_str(&source_table(&status.sources));
    out
}

/// The per-source table with its total line (also used for a sharded job's sum).
#[expect(
    clippy::let_underscore_must_use,
    reason = "writing to a String cannot fail"
)]
pub fn source_table(sources: &[SourceStatus]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", columns(HEADER));
    for source in sources {
        for line in row(source) {
            let _ = writeln!(out, "{line}");
        }
        for line in source
            .verdict
            .as_ref()
            .map(verdict_lines)
            .unwrap_or_default()
        {
            let _ = writeln!(out, "{line}");
        }
    }
    let prepared: u64 = sources.iter().filter_map(|s| s.prepared).sum();
    let done: u64 = sources.iter().map(|s| s.done).sum();
    let failed: u64 = sources.iter().map(|s| s.failed).sum();
    let skipped: u64 = sources.iter().map(|s| s.rejected).sum();
    let _ = writeln!(
        out,
        "{}",
        columns([
            "total",
            "",
            &prepared.to_string(),
            &done.to_string(),
            &failed.to_string(),
            &skipped.to_string(),
            "",
            "",
            "",
        ])
    );
    out
}

#[cfg(test)]
mod tests {
    //! Snapshots of the table as `gen status` prints it (`snapshots/`), every line checked
    //! against 80 columns. Fixtures are built through the helpers below; the server part only
    //! through [`with_server`], so a change to `RunStatus.server` is adapted in one place.

    use super::*;
    use crate::status::state::{MachineStatus, Phase, ServerStatus};
    use gen_diagnostics::{Class, Confidence, Subtype, Verdict};

    const GIB: u64 = 1 << 30;
    /// "Now" for every fixture: 2027-01-15 08:00 UTC, a fixed clock.
    const NOW: u64 = 1_800_000_000_000;
    const MINUTE: u64 = 60_000;

    /// A run alive a second ago, on a 64 GiB host, without a server yet.
    fn run(sources: Vec<SourceStatus>) -> RunStatus {
        RunStatus {
            layout: 1,
            config: "/data/jobs/datasets.toml".into(),
            pid: 4242,
            host: "gpu-box".into(),
            started_unix_ms: NOW - 90 * MINUTE,
            heartbeat_unix_ms: NOW - 1_000,
            finished: false,
            servers: Vec::new(),
            sources,
            machine: Some(MachineStatus {
                memory_total_bytes: 64 * GIB,
                memory_available_bytes: 41 * GIB + GIB / 2,
                peak_worker_rss_bytes: Some(3 * GIB + GIB / 4),
            }),
            stopped_by: None,
        }
    }

    /// A healthy server at a fixed concurrency of 64.
    fn server() -> ServerStatus {
        ServerStatus {
            url: "http://127.0.0.1:30000".into(),
            model: "Qwen/Qwen3-8B".into(),
            concurrency: 64,
            down_since_unix_ms: None,
            down_reason: None,
            in_flight: Some(64),
            ceiling: None,
            decision: None,
            completed: 0,
            tokens_per_sec: None,
            queued: None,
        }
    }

    /// The one place a fixture gets its server.
    fn with_server(mut status: RunStatus, server: ServerStatus) -> RunStatus {
        status.servers.push(server);
        status
    }

    fn source(name: &str, phase: Phase, prepared: Option<u64>, done: u64) -> SourceStatus {
        SourceStatus {
            prepared,
            done,
            ..SourceStatus::new(name, phase)
        }
    }

    fn generating(name: &str, prepared: u64, done: u64, rate: f64, eta_secs: u64) -> SourceStatus {
        SourceStatus {
            tokens_per_sec: Some(rate),
            eta_secs: Some(eta_secs),
            ..source(name, Phase::Generating, Some(prepared), done)
        }
    }

    /// A source whose worker ended with `verdict`, with the note the orchestrator writes.
    fn failed(name: &str, verdict: &Verdict) -> SourceStatus {
        SourceStatus {
            note: format!("{}; {}", verdict.headline(), verdict.next_action()),
            verdict: Some(VerdictLine::from(verdict)),
            ..source(name, Phase::Failed, None, 0)
        }
    }

    /// A kernel OOM kill inside the worker's 8 GiB memory cgroup.
    fn oom() -> Verdict {
        Verdict {
            limit_bytes: Some(8 * GIB),
            ..Verdict::new(Class::Oom, Some(Subtype::KernelMemcg), Confidence::High)
        }
    }

    fn traceback() -> Verdict {
        let stderr = "Traceback (most recent call last):\n  File \"prep.py\", line 12, in <module>\n    rows = load(path)\n  File \"prep.py\", line 7, in load\n    return row[\"prompt\"]\nKeyError: 'prompt'\n";
        Verdict {
            error: gen_diagnostics::traceback::parse(stderr),
            ..Verdict::new(Class::Traceback, Some(Subtype::Python), Confidence::High)
        }
    }

    /// Renders `status` at `now`, checks the width, and compares with the snapshot `name`.
    fn snapshot(name: &str, status: &RunStatus, now: u64) {
        let text = render(status, now);
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "wider than 80: {line:?}");
        }
        insta::assert_snapshot!(name, text);
    }

    #[test]
    fn preparing() {
        let mut tulu = source("tulu-3-sft-mixture", Phase::Preparing, None, 0);
        tulu.note = "reading rows".into();
        let status = run(vec![
            source("sharegpt", Phase::Prepared, Some(10_000), 0),
            tulu,
            source("wildchat", Phase::Preparing, None, 0),
            source("lmsys-chat-1m", Phase::Pending, None, 0),
        ]);
        snapshot("preparing", &status, NOW);
    }

    #[test]
    fn generating_with_eta_and_tokens_per_second() {
        let status = with_server(
            run(vec![
                SourceStatus {
                    truncated: 412,
                    rejected: 3,
                    ..source("sharegpt", Phase::Done, Some(10_000), 9_997)
                },
                SourceStatus {
                    truncated: 130,
                    ..generating("wildchat", 10_000, 6_512, 2_841.7, 3 * 3_600 + 5 * 60)
                },
                generating("ultrachat-200k", 8_000, 120, 312.0, 45 * 60),
                source("lmsys-chat-1m", Phase::Prepared, Some(10_000), 0),
            ]),
            server(),
        );
        snapshot("generating", &status, NOW);
    }

    #[test]
    fn a_failed_source_with_an_oom_verdict_and_the_next_action() {
        let status = with_server(
            run(vec![
                failed("wildchat", &oom()),
                generating("sharegpt", 10_000, 2_000, 1_500.0, 20 * 60),
            ]),
            server(),
        );
        snapshot("oom_verdict", &status, NOW);
    }

    #[test]
    fn a_traceback_verdict() {
        let status = with_server(
            run(vec![
                source("sharegpt", Phase::Done, Some(10_000), 10_000),
                failed("my-script", &traceback()),
            ]),
            server(),
        );
        snapshot("traceback_verdict", &status, NOW);
    }

    #[test]
    fn a_cleanup_crash_after_complete_output_keeps_generating() {
        let verdict = Verdict {
            outputs_complete: true,
            ..Verdict::new(
                Class::CleanupAfterCompletion,
                Some(Subtype::Abort),
                Confidence::High,
            )
        };
        let mut crashed = generating("nemotron-post-training", 10_000, 4_100, 1_820.4, 55 * 60);
        crashed.note = format!("{}; output kept", verdict.headline());
        crashed.verdict = Some(VerdictLine::from(&verdict));
        let status = with_server(run(vec![crashed]), server());
        snapshot("cleanup_crash_verdict", &status, NOW);
    }

    #[test]
    fn a_server_that_is_down_pauses_the_run() {
        let status = with_server(
            run(vec![generating(
                "sharegpt",
                10_000,
                2_000,
                1_480.5,
                21 * 60,
            )]),
            ServerStatus {
                down_since_unix_ms: Some(NOW - 3 * MINUTE),
                in_flight: Some(0),
                ..server()
            },
        );
        snapshot("server_down", &status, NOW);
    }

    #[test]
    fn auto_concurrency_shows_its_ceiling_and_decision() {
        let status = with_server(
            run(vec![generating(
                "sharegpt",
                10_000,
                2_000,
                3_120.0,
                40 * 60,
            )]),
            ServerStatus {
                concurrency: 48,
                in_flight: Some(47),
                ceiling: Some(52),
                decision: Some("ramped 8 → 24 → 48 in 9 s; holding at 48: KV 91% full".into()),
                ..server()
            },
        );
        snapshot("auto_concurrency", &status, NOW);
    }

    #[test]
    fn several_servers_one_down_the_others_take_its_requests() {
        let status = with_server(
            with_server(
                run(vec![generating("sharegpt", 10_000, 4_200, 2_310.0, 3_900)]),
                ServerStatus {
                    completed: 2_900,
                    tokens_per_sec: Some(1_620.4),
                    queued: Some(3),
                    ..server()
                },
            ),
            ServerStatus {
                url: "http://10.0.0.7:30000".into(),
                down_since_unix_ms: Some(NOW - 2 * MINUTE),
                in_flight: Some(0),
                ..server()
            },
        );
        snapshot("several_servers", &status, NOW);
    }

    #[test]
    fn not_running_when_the_heartbeat_is_stale() {
        let status = with_server(
            run(vec![generating(
                "sharegpt",
                10_000,
                2_000,
                1_500.0,
                20 * 60,
            )]),
            server(),
        );
        snapshot(
            "not_running",
            &status,
            status.heartbeat_unix_ms + 5 * MINUTE,
        );
    }
}
