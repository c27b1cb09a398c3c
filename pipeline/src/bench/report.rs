//! A bench's results ([`Report`]) and their 80-column rendering: one table with a block of
//! columns per server (two servers side by side per table), the best level of each marked, and
//! a line saying whether every level got fresh prompts or from which level they were reused.

use crate::status::render::{cut, push_wrapped};
use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::measure::LevelResult;

const WIDTH: usize = 80;
/// Servers per table: two blocks of four columns fit 80 columns.
const SERVERS_PER_TABLE: usize = 2;
const LEVEL_WIDTH: usize = 6;
const CELL_WIDTH: usize = 8;
const BLOCK_GAP: &str = "   ";

/// Everything a bench measured (this is the `--json` schema).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub requests_per_level: usize,
    /// Distinct prompts available (round-robin over `sources`); each level takes the next
    /// `requests_per_level` of them, wrapping around once they are all sent.
    pub prompts: usize,
    /// The first level that reused prompts sent before in this bench (the prompts ran out);
    /// `None` when every level sent prompts no earlier level had sent.
    pub prompts_reused_from: Option<usize>,
    pub sources: Vec<String>,
    /// `[generation]`'s; each source's requests are sent with its own [`Report::settings`].
    pub max_tokens: u32,
    /// What each source's requests were sent with, as `gen check` shows it (`max_tokens 64,
    /// samples 4, temperature 0.6`): `gen run`'s settings, samples and drawn values.
    pub settings: BTreeMap<String, String>,
    pub servers: Vec<ServerReport>,
}

/// One server's sweep.
#[derive(Debug, Clone, Serialize)]
pub struct ServerReport {
    /// `A`, `B`, … as in the table.
    pub label: String,
    /// Credentials redacted.
    pub url: String,
    pub model: String,
    /// Requests the server runs at once, when it says.
    pub slots: Option<u32>,
    pub levels: Vec<LevelResult>,
    /// The level with the highest output tok/s.
    pub best_concurrency: Option<usize>,
    /// Why the sweep stopped early, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

impl ServerReport {
    /// The level with the highest output throughput (the lowest level on a tie).
    pub fn best(levels: &[LevelResult]) -> Option<usize> {
        levels
            .iter()
            .filter(|l| l.completed > 0)
            .fold(None::<&LevelResult>, |best, level| match best {
                Some(b) if b.output_tokens_per_s >= level.output_tokens_per_s => Some(b),
                _ => Some(level),
            })
            .map(|l| l.concurrency)
    }
}

/// Seconds as `850ms`, `1.25s`, `12.5s`, `125s`; `-` when unknown.
fn seconds(value: Option<f64>) -> String {
    match value {
        None => "-".to_owned(),
        Some(s) if s < 1.0 => format!("{:.0}ms", s * 1000.0),
        Some(s) if s < 10.0 => format!("{s:.2}s"),
        Some(s) if s < 100.0 => format!("{s:.1}s"),
        Some(s) => format!("{s:.0}s"),
    }
}

fn rate(value: f64) -> String {
    if value < 100.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    }
}

/// The four cells of one server at one level (the tok/s cell carries the best-level marker).
fn cells(server: &ServerReport, level: usize) -> String {
    let Some(result) = server.levels.iter().find(|l| l.concurrency == level) else {
        return format!(
            "{:>w$} {:>w$}{:>w$}{:>w$}",
            "-",
            "-",
            "-",
            "-",
            w = CELL_WIDTH
        );
    };
    let marker = if server.best_concurrency == Some(level) {
        '*'
    } else if result.failed > 0 {
        '!'
    } else {
        ' '
    };
    let tokens = if result.completed == 0 {
        "-".to_owned()
    } else {
        rate(result.output_tokens_per_s)
    };
    format!(
        "{tokens:>w$}{marker}{:>w$}{:>w$}{:>w$}",
        seconds(result.latency_p50_s),
        seconds(result.latency_p95_s),
        seconds(result.ttft_p50_s),
        w = CELL_WIDTH
    )
}

fn table(out: &mut String, servers: &[ServerReport]) {
    let block = 4 * CELL_WIDTH + 1;
    let mut title = " ".repeat(LEVEL_WIDTH);
    let mut header = format!("{:>LEVEL_WIDTH$}", "L");
    for server in servers {
        let name = cut(&format!("{} {}", server.label, server.url), block);
        write!(title, "{BLOCK_GAP}{name:<block$}").ok();
        write!(
            header,
            "{BLOCK_GAP}{:>w$} {:>w$}{:>w$}{:>w$}",
            "tok/s",
            "p50",
            "p95",
            "TTFT",
            w = CELL_WIDTH
        )
        .ok();
    }
    let mut levels: Vec<usize> = servers
        .iter()
        .flat_map(|s| s.levels.iter().map(|l| l.concurrency))
        .collect();
    levels.sort_unstable();
    levels.dedup();
    out.push_str(title.trim_end());
    out.push('\n');
    out.push_str(&header);
    out.push('\n');
    for level in levels {
        let mut row = format!("{level:>LEVEL_WIDTH$}");
        for server in servers {
            row.push_str(BLOCK_GAP);
            row.push_str(&cells(server, level));
        }
        out.push_str(row.trim_end());
        out.push('\n');
    }
}

/// The report as text for an 80-column terminal.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    writeln!(
        out,
        "{}",
        cut(
            &format!(
                "gen bench: {} requests per level, {} prompts round-robin from {}",
                report.requests_per_level,
                report.prompts,
                report.sources.join(", ")
            ),
            WIDTH
        )
    )
    .ok();
    let freshness = match report.prompts_reused_from {
        None => "each level sent prompts no earlier level sent".to_owned(),
        Some(level) => {
            format!("! prompts ran out at L={level}: from there levels reuse prompts sent before")
        }
    };
    writeln!(out, "{}", cut(&freshness, WIDTH)).ok();
    for (source, settings) in &report.settings {
        writeln!(out, "{}", cut(&format!("  {source}: {settings}"), WIDTH)).ok();
    }
    if report.servers.len() > 1 {
        out.push_str("servers take turns at each level, so they are compared at the same time\n");
    }
    for group in report.servers.chunks(SERVERS_PER_TABLE) {
        out.push('\n');
        table(&mut out, group);
    }
    out.push('\n');
    out.push_str("L: requests in flight; tok/s: output tokens per second; p50/p95: latency;\n");
    out.push_str("TTFT: median time to first token; * best L (highest tok/s)\n");
    for server in &report.servers {
        let slots = server
            .slots
            .map_or_else(|| "slots unknown".to_owned(), |s| format!("{s} slots"));
        let line = format!(
            "{}  {}  `{}`, {slots}",
            server.label, server.url, server.model
        );
        writeln!(out, "{}", cut(&line, WIDTH)).ok();
        // Reasons are wrapped, not cut: the end of a server's answer is often what says why.
        if let Some(stopped) = &server.stopped {
            push_wrapped(&mut out, stopped, WIDTH, "   stopped: ", "            ");
        }
        for level in server.levels.iter().filter(|l| l.failed > 0) {
            let text = format!(
                "L={}: {} of {} requests failed: {}",
                level.concurrency,
                level.failed,
                level.failed + level.completed,
                level.first_error.as_deref().unwrap_or("")
            );
            push_wrapped(&mut out, &text, WIDTH, "   ! ", "     ");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(concurrency: usize, tok_s: f64, failed: usize) -> LevelResult {
        LevelResult {
            concurrency,
            completed: 8,
            failed,
            retried: 0,
            wall_s: 1.0,
            output_tokens: 100,
            output_tokens_per_s: tok_s,
            latency_p50_s: Some(0.25),
            latency_p95_s: Some(1.5),
            ttft_p50_s: Some(0.05),
            first_error: (failed > 0).then(|| "HTTP 500: boom".to_owned()),
        }
    }

    fn server(label: &str, levels: Vec<LevelResult>) -> ServerReport {
        ServerReport {
            label: label.to_owned(),
            url: format!("http://127.0.0.1:3000{}", label.len()),
            model: "m".to_owned(),
            slots: Some(4),
            best_concurrency: ServerReport::best(&levels),
            levels,
            stopped: None,
        }
    }

    #[test]
    fn the_table_fits_80_columns_and_marks_the_best_level() {
        let report = Report {
            requests_per_level: 8,
            prompts: 20,
            prompts_reused_from: Some(4),
            sources: vec!["alpha".into(), "beta".into()],
            max_tokens: 16,
            settings: BTreeMap::from([("alpha".into(), "max_tokens 16, samples 2".into())]),
            servers: vec![
                server("A", vec![level(1, 40.0, 0), level(4, 1234.6, 0)]),
                server("B", vec![level(1, 20.0, 0), level(2, 35.0, 1)]),
                server("C", vec![level(1, 20.0, 0)]),
            ],
        };
        let text = render(&report);
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
        let row4 = text
            .lines()
            .find(|l| l.trim_start().starts_with("4 "))
            .expect("row for L=4");
        assert!(row4.contains("1235*"), "{text}");
        assert!(row4.contains('-'), "B has no L=4: {text}");
        assert!(text.contains("35.0*"), "{text}");
        assert!(
            text.contains("! L=2: 1 of 9 requests failed: HTTP 500: boom"),
            "{text}"
        );
        assert!(text.contains("250ms") && text.contains("1.50s"), "{text}");
        assert!(text.contains("! prompts ran out at L=4"), "{text}");
        assert!(text.contains("servers take turns at each level"), "{text}");
        assert!(
            text.contains("\n  alpha: max_tokens 16, samples 2\n"),
            "{text}"
        );
    }

    /// A failed request's reason is wrapped under the table, whole.
    #[test]
    fn a_long_failure_reason_is_wrapped_not_cut() {
        let mut failing = level(2, 35.0, 1);
        failing.first_error = Some(
            "HTTP 400: This model's maximum context length is 4096 tokens. However, you requested 4608 tokens (512 in the messages, 4096 in the completion). Please reduce the length of the messages or completion.".to_owned(),
        );
        let report = Report {
            requests_per_level: 8,
            prompts: 20,
            prompts_reused_from: None,
            sources: vec!["alpha".into()],
            max_tokens: 4096,
            settings: BTreeMap::new(),
            servers: vec![server("A", vec![level(1, 20.0, 0), failing])],
        };
        let text = render(&report);
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn the_best_level_prefers_the_lowest_on_a_tie() {
        let levels = [level(1, 10.0, 0), level(2, 30.0, 0), level(4, 30.0, 0)];
        assert_eq!(ServerReport::best(&levels), Some(2));
        assert_eq!(ServerReport::best(&[]), None);
    }
}
