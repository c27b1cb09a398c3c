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
    if let (true, Some(error)) = (status.finished, &status.stopped_by) {
        format!("stopped {} by an error: {error}", ago(age))
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
        60..=3599 => format!("{} min", secs / 60),
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

/// The note the orchestrator writes for a failed worker, which the verdict line says in full.
fn repeats_verdict(s: &SourceStatus) -> bool {
    s.verdict
        .as_ref()
        .is_some_and(|v| s.note == format!("{}; {}", v.headline, v.next_action))
}

fn row(s: &SourceStatus) -> String {
    let prepared = s.prepared.map_or_else(|| "-".to_owned(), |p| p.to_string());
    let line = format!(
        "{:<18} {:<10} {:>8} {:>8} {:>6}  ",
        cut(&s.name, 18),
        s.phase.label(),
        prepared,
        s.done,
        s.failed
    );
    let room = WIDTH.saturating_sub(line.chars().count());
    let note = match (s.phase, s.tokens_per_sec, s.note.is_empty()) {
        (super::state::Phase::Generating, Some(rate), true) => {
            let eta = s
                .eta_secs
                .map_or_else(String::new, |e| format!(", ETA {}", duration(e)));
            format!("{rate:.0} tok/s{eta}")
        }
        _ if repeats_verdict(s) => String::new(),
        _ => s.note.clone(),
    };
    format!("{line}{}", cut(&note, room)).trim_end().to_owned()
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
    if let Some(server) = &status.server {
        let line = match server.down_since_unix_ms {
            Some(since) => format!(
                "server {} DOWN since {}: paused, nothing lost",
                server.url,
                ago(now_ms.saturating_sub(since))
            ),
            None => {
                let tuned = server
                    .ceiling
                    .map_or_else(String::new, |c| format!(" (auto, ceiling {c})"));
                let in_flight = server
                    .in_flight
                    .map_or_else(String::new, |n| format!(", {n} in flight"));
                format!(
                    "server {} ({}), concurrency {}{tuned}{in_flight}",
                    server.url, server.model, server.concurrency
                )
            }
        };
        let _ = writeln!(out, "{}", cut(&line, WIDTH));
        if let Some(decision) = &server.decision {
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
    let _ = writeln!(
        out,
        "{:<18} {:<10} {:>8} {:>8} {:>6}  NOTE",
        "SOURCE", "PHASE", "PREPARED", "DONE", "FAILED"
    );
    for source in &status.sources {
        let _ = writeln!(out, "{}", row(source));
        for line in source
            .verdict
            .as_ref()
            .map(verdict_lines)
            .unwrap_or_default()
        {
            let _ = writeln!(out, "{line}");
        }
    }
    let prepared: u64 = status.sources.iter().filter_map(|s| s.prepared).sum();
    let done: u64 = status.sources.iter().map(|s| s.done).sum();
    let failed: u64 = status.sources.iter().map(|s| s.failed).sum();
    let _ = writeln!(
        out,
        "{:<18} {:<10} {prepared:>8} {done:>8} {failed:>6}",
        "total", ""
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::state::{Phase, ServerStatus};

    fn status() -> RunStatus {
        RunStatus {
            layout: 1,
            config: "examples/quickstart.toml".into(),
            pid: 4242,
            host: "gpu-box".into(),
            started_unix_ms: 1_000,
            heartbeat_unix_ms: 10_000,
            finished: false,
            server: Some(ServerStatus { url: "http://127.0.0.1:8080".into(), model: "smollm2".into(), concurrency: 4, down_since_unix_ms: None, in_flight: None, ceiling: None, decision: None }),
            machine: None,
            stopped_by: None,
            sources: vec![
                SourceStatus { name: "alpaca".into(), phase: Phase::Done, prepared: Some(20), done: 20, failed: 0, rejected: 0, truncated: 0, output_tokens: 0, tokens_per_sec: None, eta_secs: None, note: String::new(), verdict: None },
                SourceStatus {
                    name: "a-source-with-a-very-long-name".into(),
                    phase: Phase::Failed,
                    prepared: None,
                    done: 0,
                    failed: 0,
                    rejected: 0,
                    truncated: 0,
                    output_tokens: 0,
                    tokens_per_sec: None,
                    eta_secs: None,
                    note: "preparation failed: exit code 1: KeyError: 'prompt' — fix it, then run gen run again".into(),
                    verdict: None,
                },
            ],
        }
    }

    #[test]
    fn table_fits_80_columns() {
        let text = render(&status(), 11_000);
        for line in text.lines() {
            assert!(line.chars().count() <= WIDTH, "too wide: {line:?}");
        }
        let expected = "\
run    examples/quickstart.toml
state  running (pid 4242 on gpu-box)
server http://127.0.0.1:8080 (smollm2), concurrency 4

SOURCE             PHASE      PREPARED     DONE FAILED  NOTE
alpaca             done             20       20      0
a-source-with-a-v… failed            -        0      0  preparation failed: exi…
total                               20       20      0
";
        assert_eq!(text, expected);
    }

    #[test]
    fn a_verdict_gets_its_own_lines_with_the_whole_next_action() {
        let mut status = status();
        let verdict = VerdictLine {
            class: "traceback".into(),
            headline: "traceback: ValueError: the dataset row 17 has no `prompt` field at all"
                .into(),
            next_action: "fix the error, then rerun with --only-failed".into(),
        };
        status.sources[1].note = format!("{}; {}", verdict.headline, verdict.next_action);
        status.sources[1].verdict = Some(verdict);
        let text = render(&status, 11_000);
        let lines: Vec<&str> = text.lines().collect();
        let row = lines
            .iter()
            .position(|l| l.starts_with("a-source"))
            .expect("row");
        assert!(
            lines[row].ends_with(" 0"),
            "the note is not repeated: {text}"
        );
        assert_eq!(
            lines[row + 1..row + 3],
            [
                "  ! traceback: ValueError: the dataset row 17 has no `prompt` field at all",
                "    next: fix the error, then rerun with --only-failed"
            ]
        );
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH), "{text}");
    }

    #[test]
    fn stale_heartbeat_says_not_running() {
        let text = render(&status(), 10_000 + 5 * 60_000);
        assert!(
            text.contains("\nstate  not running: last heartbeat 5 min ago (pid 4242 on gpu-box)\n"),
            "{text}"
        );
    }
}
