//! Plain-text rendering of a [`RunStatus`]: no colour, no cursor movement, so it reads the
//! same over SSH, in `watch`, and in a log file. It fills the terminal's width ([`width`]: 80
//! when piped); what does not fit a column (a failed source's verdict, a note) goes on lines
//! of its own under the source's row, wrapped at spaces, never cut mid-word. The first lines
//! say whether the run failed, and [`exit_code`] says it to scripts.

use std::fmt::Write as _;
use std::time::Duration;

use super::state::{Phase, RunStatus, ServerStatus, SourceStatus, VerdictLine};
use crate::report::clock;

/// The width when there is no terminal to ask, and the least one rendered for.
pub const WIDTH: usize = 80;
/// Wider than this, the table would only spread out.
const MAX_WIDTH: usize = 200;
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

/// `n` and `noun`, with an `s` unless `n` is one: `1 answer`, `2 answers`.
pub fn plural(n: u64, noun: &str) -> String {
    match n {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

fn liveness(status: &RunStatus, now_ms: u64) -> String {
    let age = now_ms.saturating_sub(status.heartbeat_unix_ms);
    let failed = status
        .sources
        .iter()
        .filter(|s| s.phase == Phase::Failed)
        .count();
    let failed_prompts: u64 = status.sources.iter().map(|s| s.failed).sum();
    let total = status.sources.len();
    let outcome = match (failed, failed_prompts) {
        (0, 0) => String::new(),
        (0, n) => format!(" with {n} failed prompts"),
        (n, _) => format!(" with {} of {total}", plural(n as u64, "failed source")),
    };
    if let (true, Some(reason)) = (status.finished, &status.stopped_by) {
        format!("stopped {}{outcome}: {reason}", ago(age))
    } else if status.finished {
        format!("finished {}{outcome}", ago(age))
    } else if age > STALE_AFTER_MS {
        format!(
            "not running: last heartbeat {} (pid {} on {})",
            ago(age),
            status.pid,
            status.host
        )
    } else if let Some(what) = &status.waiting_for {
        format!(
            "running, waiting for {what} (pid {} on {})",
            status.pid, status.host
        )
    } else {
        format!("running (pid {} on {})", status.pid, status.host)
    }
}

/// How long the run has been going (or went), and while it runs, what is left of it as `gen
/// run`'s progress line says it: `1:30:00 elapsed, ETA 0:02:31`.
fn times(status: &RunStatus, now_ms: u64) -> String {
    let running =
        !status.finished && now_ms.saturating_sub(status.heartbeat_unix_ms) <= STALE_AFTER_MS;
    let end = if running {
        now_ms
    } else {
        status.heartbeat_unix_ms
    };
    let elapsed = Duration::from_millis(end.saturating_sub(status.started_unix_ms));
    let eta = match status.eta_secs {
        Some(eta) if running => format!(", ETA {}", clock(Duration::from_secs(eta))),
        _ => String::new(),
    };
    format!("{} elapsed{eta}", clock(elapsed))
}

/// Bytes in GiB with one decimal, or MiB below 1 GiB.
fn gib(bytes: u64) -> String {
    if bytes < 1 << 30 {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    }
}

/// What `gen status` exits with: 0 while the run is running and when it finished with every
/// source done; 1 when it finished with a failed source or failed prompts, stopped early, or
/// is not running although it did not finish (its heartbeat is stale).
pub fn exit_code(status: &RunStatus, now_ms: u64) -> u8 {
    let age = now_ms.saturating_sub(status.heartbeat_unix_ms);
    if !status.finished {
        return crate::exit::ok_if(age <= STALE_AFTER_MS);
    }
    let all_done = status
        .sources
        .iter()
        .all(|s| s.phase == Phase::Done && s.failed == 0);
    crate::exit::ok_if(status.stopped_by.is_none() && all_done)
}

/// The width to render for: `COLUMNS` when set, else the terminal's when stdout is one, else
/// 80; never less than 80 or more than 200.
pub fn width() -> usize {
    let asked = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .or_else(|| {
            terminal_size::terminal_size_of(std::io::stdout())
                .map(|(terminal_size::Width(w), _)| usize::from(w))
        });
    asked.unwrap_or(WIDTH).clamp(WIDTH, MAX_WIDTH)
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

/// `text` in lines of at most `width` columns, split at spaces: the first line starts with
/// `first`, the others with `rest`. A word longer than a whole line is split where it must be.
pub fn wrap(text: &str, width: usize, first: &str, rest: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_owned();
    let mut empty = true;
    for word in text.split_whitespace() {
        let room = |line: &String| width.saturating_sub(line.chars().count());
        let needed = word.chars().count() + usize::from(!empty);
        if !empty && needed > room(&line) {
            lines.push(std::mem::replace(&mut line, rest.to_owned()));
            empty = true;
        }
        let mut word: Vec<char> = word.chars().collect();
        // Only on a line of its own (the line was broken above when it did not fit): a word
        // wider than a line (a long path or URL), as much as fits, then the rest.
        while empty && word.len() > room(&line) && room(&line) > 0 {
            let take = room(&line);
            line.extend(word.drain(..take));
            lines.push(std::mem::replace(&mut line, rest.to_owned()));
        }
        if !empty {
            line.push(' ');
        }
        line.extend(word);
        empty = false;
    }
    lines.push(line);
    lines
}

/// A worker verdict under its source's row, wrapped to `width`: what happened, then on a line
/// of its own what to do next.
fn push_verdict(out: &mut String, verdict: &VerdictLine, width: usize) {
    if verdict.class != "success" {
        push_wrapped(out, &verdict.headline, width, "  ! ", "    ");
        push_wrapped(out, &verdict.next_action, width, "    next: ", "          ");
    }
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
    share(s.truncated, s.done).unwrap_or_else(|| "-".to_owned())
}

/// `part` of `whole` in percent, when there is any.
fn share(part: u64, whole: u64) -> Option<String> {
    if part == 0 || whole == 0 {
        return None;
    }
    let percent = 100.0 * part as f64 / whole as f64;
    Some(if percent < 0.1 {
        "<0.1%".to_owned()
    } else if percent < 10.0 {
        format!("{percent:.1}%")
    } else {
        format!("{percent:.0}%")
    })
}

/// The line under a source's row about its answers cut by the context, which its CUT column
/// (cut by `max-tokens`) leaves out.
fn context_cuts(s: &SourceStatus) -> Option<String> {
    let percent = share(s.cut_by_context, s.done)?;
    Some(format!(
        "{} ({percent}) cut by the context: a larger `max-tokens` cannot help",
        plural(s.cut_by_context, "answer")
    ))
}

/// The line under a source's row about its prompts with tool turns: kept, or how many were
/// answered without them because the server refused them.
fn tool_turns(s: &SourceStatus) -> Option<String> {
    let prompts = match s.with_tool_turns {
        0 => return None,
        n => plural(n, "prompt"),
    };
    Some(match s.tool_turns_cut {
        0 => format!("{prompts} with tool turns: sent as they are, only the answers generated"),
        cut => format!(
            "{prompts} with tool turns: {cut} answered without them (the server refused them)"
        ),
    })
}

/// The table's columns; a source's note and verdict go on lines of their own under its row.
const HEADER: [&str; 9] = [
    "SOURCE", "PHASE", "PREPARED", "DONE", "FAIL", "SKIP", "TOK/S", "ETA", "CUT",
];
/// The source column's width at 80 columns; a wider terminal gives the rest to it.
const NAME_WIDTH: usize = 14;

/// The source column's width for `sources` at `width`: room for the longest name, as far as
/// the terminal allows.
fn name_width(sources: &[SourceStatus], width: usize) -> usize {
    let longest = sources
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0);
    longest.clamp(NAME_WIDTH, NAME_WIDTH + width.saturating_sub(WIDTH))
}

fn columns(cells: [&str; 9], name_width: usize) -> String {
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
        "{name:<name_width$} {phase:<10} {prepared:>8} {done:>7} {failed:>5} {skipped:>5} {rate:>6} {eta:>6} {cut_share:>5}"
    )
    .trim_end()
    .to_owned()
}

/// A source's row, then its note (when the verdict lines below do not say it already) and
/// warnings, wrapped to `width`.
fn row(out: &mut String, s: &SourceStatus, name_width: usize, width: usize) {
    let generating = s.phase == Phase::Generating;
    let rate = match s.tokens_per_sec {
        Some(rate) if generating => format!("{rate:.0}"),
        _ => "-".to_owned(),
    };
    let eta = match s.eta_secs {
        Some(eta) if generating => duration(eta),
        _ => "-".to_owned(),
    };
    // A source that failed as a whole is not a count of failed prompts: its phase says it in
    // capitals, and counts it never had show as `-`.
    let (phase, failed) = match (s.phase, s.prepared) {
        (Phase::Failed, None) => ("FAILED", "-".to_owned()),
        (Phase::Failed, Some(_)) => ("FAILED", s.failed.to_string()),
        (phase, _) => (phase.label(), s.failed.to_string()),
    };
    out.push_str(&columns(
        [
            &cut(&s.name, name_width),
            phase,
            &s.prepared.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            &s.done.to_string(),
            &failed,
            &s.rejected.to_string(),
            &rate,
            &eta,
            &truncation(s),
        ],
        name_width,
    ));
    out.push('\n');
    if !s.note.is_empty() && !repeats_verdict(s) {
        let mark = if s.phase == Phase::Failed {
            "  ! "
        } else {
            "  "
        };
        push_wrapped(out, &s.note, width, mark, "    ");
    }
    if s.samples > 1 {
        let prompts = s.prepared.map_or_else(String::new, |p| {
            format!("{} prompts × ", p / u64::from(s.samples))
        });
        let line = format!("{prompts}{} samples each: counts are of samples", s.samples);
        push_wrapped(out, &line, width, "  ", "    ");
    }
    if let Some(cuts) = context_cuts(s) {
        push_wrapped(out, &cuts, width, "  ", "    ");
    }
    if let Some(tools) = tool_turns(s) {
        push_wrapped(out, &tools, width, "  ", "    ");
    }
    for warning in &s.warnings {
        push_wrapped(out, warning, width, "  warning: ", "    ");
    }
}

/// A whole line of `text`, cut to `width` with `…` (a URL or path is not worth two lines).
fn line(out: &mut String, text: &str, width: usize) {
    out.push_str(&cut(text, width));
    out.push('\n');
}

/// Appends `text` wrapped at `width` (see [`wrap`]), each line with a newline.
pub fn push_wrapped(out: &mut String, text: &str, width: usize, first: &str, rest: &str) {
    for line in wrap(text, width, first, rest) {
        out.push_str(&line);
        out.push('\n');
    }
}

/// The status table, each line at most `width` columns (see [`width`]).
pub fn render(status: &RunStatus, now_ms: u64, width: usize) -> String {
    let mut out = String::new();
    line(&mut out, &format!("run    {}", status.config), width);
    push_wrapped(
        &mut out,
        &liveness(status, now_ms),
        width,
        "state  ",
        "       ",
    );
    line(
        &mut out,
        &format!("time   {}", times(status, now_ms)),
        width,
    );
    let all_down = status
        .servers
        .iter()
        .all(|s| s.down_since_unix_ms.is_some());
    for server in &status.servers {
        // A finished run has nothing in flight or queued, whatever its last reading of the
        // server said.
        let live = !status.finished;
        server_lines(&mut out, server, live, all_down, now_ms, width);
    }
    if let Some(machine) = &status.machine {
        let peak = machine
            .peak_worker_rss_bytes
            .map_or_else(String::new, |p| format!("; peak worker RSS {}", gib(p)));
        let text = format!(
            "host   {} RAM, {} available{peak}",
            gib(machine.memory_total_bytes),
            gib(machine.memory_available_bytes)
        );
        line(&mut out, &text, width);
    }
    out.push('\n');
    out.push_str(&source_table(&status.sources, width));
    out
}

/// A server's lines: its URL and model, what it is doing (or since when and why it is down),
/// and the tuner's last decision.
fn server_lines(
    out: &mut String,
    server: &ServerStatus,
    live: bool,
    all_down: bool,
    now_ms: u64,
    width: usize,
) {
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
        None => (
            format!("server {} ({})", server.url, server.model),
            serving(server, live),
        ),
    };
    line(out, &head, width);
    push_wrapped(out, &detail, width, "       ", "       ");
    if let Some(named) = &server.answered_by {
        let said = format!(
            "its answers name model `{named}`, not `{}`: stored under `{named}`",
            server.model
        );
        push_wrapped(out, &said, width, "       WARNING: ", "                ");
    }
    if let (Some(_), Some(reason)) = (server.down_since_unix_ms, &server.down_reason) {
        push_wrapped(out, reason, width, "       why: ", "            ");
    }
    if let Some(decision) = &server.decision
        && server.down_since_unix_ms.is_none()
    {
        push_wrapped(out, decision, width, "tuning ", "       ");
    }
}

/// What an up server is doing: its concurrency, and while the run is `live` the requests in
/// flight and how many of them wait in the server's own queue, then its rate. The tuning line
/// says the wait in the same words from its own reading; then it is said there only, so the
/// two lines never disagree.
fn serving(server: &ServerStatus, live: bool) -> String {
    let tuned = server
        .ceiling
        .map_or_else(String::new, |c| format!(" (auto, ceiling {c})"));
    let in_flight = server
        .in_flight
        .filter(|_| live)
        .map_or_else(String::new, |n| format!(", {n} in flight"));
    let tuning_says_it = server
        .decision
        .as_ref()
        .is_some_and(|d| d.contains("waiting at the server"));
    let queued = server
        .queued
        .filter(|_| live && !tuning_says_it && server.in_flight.is_some())
        .map_or_else(String::new, |q| match q {
            0 => ", none waiting at the server".to_owned(),
            q => format!(", {q} of them waiting at the server"),
        });
    let rate = server
        .tokens_per_sec
        .map_or_else(String::new, |r| format!(", {r:.0} tok/s"));
    format!(
        "concurrency {}{tuned}{in_flight}{queued}{rate}",
        server.concurrency
    )
}

/// The per-source table with its total line (also used for a sharded job's sum).
#[expect(
    clippy::let_underscore_must_use,
    reason = "writing to a String cannot fail"
)]
pub fn source_table(sources: &[SourceStatus], width: usize) -> String {
    let mut out = String::new();
    let name_width = name_width(sources, width);
    let _ = writeln!(out, "{}", columns(HEADER, name_width));
    for source in sources {
        row(&mut out, source, name_width, width);
        if let Some(verdict) = &source.verdict {
            push_verdict(&mut out, verdict, width);
        }
    }
    let prepared: u64 = sources.iter().filter_map(|s| s.prepared).sum();
    let done: u64 = sources.iter().map(|s| s.done).sum();
    let failed: u64 = sources.iter().map(|s| s.failed).sum();
    let skipped: u64 = sources.iter().map(|s| s.rejected).sum();
    let _ = writeln!(
        out,
        "{}",
        columns(
            [
                "total",
                "",
                &prepared.to_string(),
                &done.to_string(),
                &failed.to_string(),
                &skipped.to_string(),
                "",
                "",
                "",
            ],
            name_width
        )
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
            waiting_for: None,
            eta_secs: None,
        }
    }

    /// A healthy server at a fixed concurrency of 64.
    fn server() -> ServerStatus {
        ServerStatus {
            url: "http://127.0.0.1:30000".into(),
            model: "Qwen/Qwen3-8B".into(),
            answered_by: None,
            version: None,
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
            note: format!("{}; {}", verdict.full_headline(), verdict.next_action()),
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

    /// Renders `status` at `now` for 80 columns, checks the width, and compares with the
    /// snapshot `name`.
    fn snapshot(name: &str, status: &RunStatus, now: u64) {
        snapshot_at(name, status, now, WIDTH);
    }

    fn snapshot_at(name: &str, status: &RunStatus, now: u64, width: usize) {
        let text = render(status, now, width);
        for line in text.lines() {
            assert!(
                line.chars().count() <= width,
                "wider than {width}: {line:?}"
            );
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

    /// Answers cut by the context get a line of their own (CUT is the `max-tokens` share).
    #[test]
    fn generating_with_eta_and_tokens_per_second() {
        let status = with_server(
            run(vec![
                SourceStatus {
                    truncated: 412,
                    cut_by_context: 27,
                    rejected: 3,
                    ..source("sharegpt", Phase::Done, Some(10_000), 9_997)
                },
                SourceStatus {
                    truncated: 130,
                    cut_by_context: 1,
                    ..generating("wildchat", 10_000, 6_512, 2_841.7, 3 * 3_600 + 5 * 60)
                },
                generating("ultrachat-200k", 8_000, 120, 312.0, 45 * 60),
                source("lmsys-chat-1m", Phase::Prepared, Some(10_000), 0),
            ]),
            server(),
        );
        let status = RunStatus {
            eta_secs: Some(3 * 3_600 + 5 * 60),
            ..status
        };
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

    /// A reason longer than the terminal is wrapped under the row at 80 and at 120 columns,
    /// never cut ("No such file or dir…").
    #[test]
    fn a_long_reason_is_wrapped_not_cut() {
        let stderr = "Traceback (most recent call last):\n  File \"prep.py\", line 3, in <module>\n    open(path)\nFileNotFoundError: [Errno 2] No such file or directory: '/data/hf/mixture-of-thoughts/science/train-00000-of-00004.parquet'\n";
        let verdict = Verdict {
            error: gen_diagnostics::traceback::parse(stderr),
            ..Verdict::new(Class::Traceback, Some(Subtype::Python), Confidence::High)
        };
        let status = with_server(run(vec![failed("my-script", &verdict)]), server());
        for (name, width) in [("long_reason_80", 80), ("long_reason_120", 120)] {
            snapshot_at(name, &status, NOW, width);
            let text = render(&status, NOW, width).replace("\n    ", " ");
            assert!(
                text.contains("train-00000-of-00004.parquet'"),
                "{width}: {text}"
            );
        }
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
        crashed.note = format!("{}; output kept", verdict.full_headline());
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
                decision: Some(
                    "ramped 8 → 24 → 48 in 9 s; holding at 48: KV 91% full, 2 waiting at the server"
                        .into(),
                ),
                // An older reading of the server's queue than the tuner's: not said beside it.
                queued: Some(0),
                ..server()
            },
        );
        let text = render(&status, NOW, WIDTH);
        assert!(!text.contains("none waiting"), "{text}");
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

    /// A finished run of five sources, two of which failed to prepare (one with a reason too
    /// long for a line), with the server's last reading still saying requests were queued.
    fn finished_with_two_failed_sources() -> RunStatus {
        let mut missing = source("mixture_of_thoughts_science", Phase::Failed, None, 0);
        missing.note = "last preparation failed (exit code 1): the data path \
            `/data/hf/mixture-of-thoughts/science/*.parquet` matches no file; fix `path` in \
            datasets.toml, then rerun with --only-failed"
            .into();
        let mut status = with_server(
            run(vec![
                SourceStatus {
                    truncated: 412,
                    ..source("sharegpt", Phase::Done, Some(10_000), 10_000)
                },
                failed("wildchat", &oom()),
                missing,
                source("ultrachat-200k", Phase::Done, Some(8_000), 8_000),
                source("lmsys-chat-1m", Phase::Done, Some(10_000), 10_000),
            ]),
            ServerStatus {
                in_flight: Some(0),
                queued: Some(2),
                completed: 28_000,
                tokens_per_sec: Some(1_912.3),
                ..server()
            },
        );
        status.finished = true;
        status.heartbeat_unix_ms = NOW - 7_000;
        status
    }

    #[test]
    fn a_finished_run_with_failed_sources_says_so_at_80_and_120_columns() {
        let status = finished_with_two_failed_sources();
        snapshot_at("finished_failed_80", &status, NOW, 80);
        snapshot_at("finished_failed_120", &status, NOW, 120);
        assert_eq!(exit_code(&status, NOW), crate::exit::FAILED);
    }

    #[test]
    fn the_exit_code_follows_the_run() {
        let mut status = run(vec![source("sharegpt", Phase::Done, Some(10), 10)]);
        assert_eq!(exit_code(&status, NOW), crate::exit::OK, "running");
        assert_eq!(
            exit_code(&status, NOW + 5 * MINUTE),
            crate::exit::FAILED,
            "not running, not finished"
        );
        status.finished = true;
        assert_eq!(
            exit_code(&status, NOW + 5 * MINUTE),
            crate::exit::OK,
            "all done"
        );
        status.sources[0].failed = 1;
        assert_eq!(
            exit_code(&status, NOW),
            crate::exit::FAILED,
            "a failed prompt"
        );
        status.sources[0].failed = 0;
        status.stopped_by = Some("interrupted by Ctrl-C".into());
        assert_eq!(exit_code(&status, NOW), crate::exit::FAILED, "stopped");
    }

    #[test]
    fn wrapping_splits_at_spaces_and_only_splits_words_wider_than_a_line() {
        assert_eq!(
            wrap("raise memory-limit to 16G", 16, "  ! ", "    "),
            ["  ! raise", "    memory-limit", "    to 16G"]
        );
        assert_eq!(
            wrap("see /a/very/long/path", 12, "", "  "),
            ["see", "  /a/very/lo", "  ng/path"]
        );
        assert_eq!(wrap("", 10, "x ", ""), ["x "]);
    }
}
