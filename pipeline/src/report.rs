//! What `gen run` tells. A [`RunReporter`] is made for each run and passed to every part of it
//! that has something to say; it owns the terminal output and the run's `events.jsonl`. One
//! typed [`Notice`] (the facts and their wording: [`crate::notice`]) goes to the progress
//! display (on a TTY: one bar per source, lines printed above the bars), the plain log (stderr
//! lines, when stderr is a pipe or a file, or `NO_COLOR`/`TERM=dumb`) and `events.jsonl` alike,
//! so the terminal and the history never say different things. Every known secret is taken out first ([`crate::secrets`]). Outside a run,
//! [`plain`] prints one redacted line.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::notice::Notice;
use crate::status::state::{Phase, SourceStatus};
use crate::store::events::EventLog;

/// Where a run's notices and progress go; cheap to clone (every clone reports to the same
/// places).
#[derive(Clone)]
pub struct RunReporter {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for RunReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunReporter").finish_non_exhaustive()
    }
}

struct Inner {
    bars: Option<Bars>,
    events: Option<EventLog>,
    /// Writing `events.jsonl` failed (said once).
    events_failed: bool,
    /// A line redrawn in place ([`RunReporter::redraw`]) is open: the next line starts below it.
    redrawn: bool,
}

struct Bars {
    multi: MultiProgress,
    bars: Vec<ProgressBar>,
    /// The whole run's line under the sources' bars ([`Progress::line_within`]).
    status: ProgressBar,
    /// A source with prompts to count, and one without (pending, preparing, failed).
    counted: ProgressStyle,
    uncounted: ProgressStyle,
}

const COUNTED_TEMPLATE: &str = "{prefix:<18} {bar:24} {pos:>7}/{len:<7} {msg}";
/// No bar: indicatif draws an empty length as a full one (`████ 0/0 failed`).
const UNCOUNTED_TEMPLATE: &str = "{prefix:<18} {msg}";

/// What a source's progress bar shows: its position and length once it has prompts to count,
/// and its message (the rate while generating, else the phase).
fn bar_view(source: &SourceStatus) -> (Option<(u64, u64)>, String) {
    let message = match (source.phase, source.tokens_per_sec) {
        (Phase::Generating, Some(rate)) => format!("{rate:.0} tok/s"),
        (phase, _) => phase.label().to_owned(),
    };
    let count = source
        .prepared
        .filter(|prepared| *prepared > 0)
        .map(|prepared| (source.done + source.rejected, prepared));
    (count, message)
}

impl RunReporter {
    /// Reports to the terminal, and to `events` (a run's `events.jsonl`) when given.
    pub fn new(events: Option<PathBuf>) -> RunReporter {
        RunReporter {
            inner: Arc::new(Mutex::new(Inner {
                bars: None,
                events: events.map(EventLog::new),
                events_failed: false,
                redrawn: false,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while printing leaves nothing half-updated that matters.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Says and records `notice`, without any known secret.
    pub fn notice(&self, notice: Notice<'_>) {
        let mut inner = self.lock();
        let line = notice.to_string();
        if !line.is_empty() {
            inner.print(&crate::secrets::redact(&line));
        }
        if let Some((kind, source, detail)) = notice.event() {
            let detail = crate::secrets::redact(&detail).into_owned();
            let Some(events) = inner.events.as_mut() else {
                return;
            };
            if let Err(e) = events.append(kind, source, detail)
                && !inner.events_failed
            {
                inner.events_failed = true;
                inner.print(&crate::secrets::redact(&format!("gen: warning: {e}")));
            }
        }
    }

    /// Says where the run stands, as a line of the plain log.
    pub fn say_progress(&self, progress: &Progress) {
        self.lock().print(&crate::secrets::redact(&progress.line()));
    }

    /// Shows `notice` in place of the line it last redrew, when stderr is a terminal; `false`
    /// when it is not (the caller then says it now and then).
    pub fn redraw(&self, notice: Notice<'_>) -> bool {
        if !std::io::stderr().is_terminal() {
            return false;
        }
        let mut inner = self.lock();
        // Back to the line's start, the old text erased. A line wider than the terminal would
        // wrap, and the erase reach only its last row: cut to fit.
        let line = redrawn(&notice.to_string(), stderr_width());
        inner.redrawn = write!(std::io::stderr(), "\r\x1b[K{line}").is_ok();
        true
    }

    /// Ends a line redrawn in place, so what follows starts on a line of its own.
    pub fn end_redraw(&self) {
        self.lock().end_redraw();
    }

    /// Shows one bar per source when stderr is a terminal that can redraw.
    pub fn start_progress(&self, names: &[String]) {
        if !bars_wanted() {
            return;
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4));
        let uncounted = style(UNCOUNTED_TEMPLATE);
        let bars = names
            .iter()
            .map(|name| {
                let bar = multi.add(ProgressBar::new(0));
                bar.set_style(uncounted.clone());
                bar.set_prefix(name.chars().take(18).collect::<String>());
                bar.enable_steady_tick(Duration::from_millis(500));
                bar
            })
            .collect();
        let status = multi.add(ProgressBar::new(0));
        status.set_style(style("{msg}"));
        self.lock().bars = Some(Bars {
            multi,
            bars,
            status,
            counted: style(COUNTED_TEMPLATE),
            uncounted,
        });
    }

    /// Shows where the whole run stands: on the status line under the bars, fitted to the
    /// terminal's width; `false` when there are no bars (the caller then says the line now
    /// and then).
    pub fn status_line(&self, progress: &Progress) -> bool {
        let inner = self.lock();
        let Some(bars) = inner.bars.as_ref() else {
            return false;
        };
        // One column spare: a line as wide as the terminal wraps on some of them.
        let line = progress.line_within(stderr_width().saturating_sub(1));
        bars.status
            .set_message(crate::secrets::redact(&line).into_owned());
        true
    }

    /// Moves the bars to the sources' current state.
    pub fn progress(&self, sources: &[SourceStatus]) {
        let inner = self.lock();
        let Some(bars) = inner.bars.as_ref() else {
            return;
        };
        for (bar, source) in bars.bars.iter().zip(sources) {
            let (count, message) = bar_view(source);
            match count {
                Some((position, length)) => {
                    bar.set_style(bars.counted.clone());
                    bar.set_length(length);
                    bar.set_position(position);
                }
                None => bar.set_style(bars.uncounted.clone()),
            }
            bar.set_message(message);
        }
    }

    /// Removes the bars (the final state is said as lines).
    pub fn finish_progress(&self) {
        if let Some(bars) = self.lock().bars.take() {
            for bar in &bars.bars {
                bar.finish_and_clear();
            }
            bars.status.finish_and_clear();
            bars.multi.clear().ok();
        }
    }
}

impl Inner {
    /// Above the bars when they are shown. A terminal that went away (an SSH session closed:
    /// writes fail with EIO or EPIPE) loses the line; the run goes on.
    fn print(&mut self, line: &str) {
        self.end_redraw();
        if let Some(bars) = self.bars.as_ref()
            && bars.multi.println(line).is_ok()
        {
            return;
        }
        writeln!(std::io::stderr(), "{line}").ok();
    }

    fn end_redraw(&mut self) {
        if std::mem::take(&mut self.redrawn) {
            writeln!(std::io::stderr()).ok();
        }
    }
}

/// `line` as redrawn on a terminal `width` columns wide: secrets out, cut short of the last
/// column so it never wraps.
pub fn redrawn(line: &str, width: usize) -> String {
    crate::status::render::cut(
        &crate::secrets::redact(line),
        width.saturating_sub(1).max(20),
    )
}

/// Where a run stands, for the progress line of the plain log (and the last word of a run).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    pub elapsed: Duration,
    /// Prompts with a completion, of `total` prepared prompts.
    pub done: u64,
    pub total: u64,
    /// Prompts out of attempts (retried on the next run).
    pub failed: u64,
    /// Output tokens per second in this run.
    pub tokens_per_sec: f64,
    /// At this run's tokens per completion and rate, for what is left.
    pub eta: Option<Duration>,
    /// Requests in flight.
    pub in_flight: u32,
    /// Sources generating, preparing, and waiting for either.
    pub generating: usize,
    pub preparing: usize,
    pub queued: usize,
}

impl Progress {
    /// `gen: [0:01:05] 120/400 completed (30%), 0 failed, 512.0 output tok/s, ETA 0:02:31;
    /// 8 in flight; sources: 1 generating, 1 preparing, 2 queued`
    pub fn line(&self) -> String {
        let percent = match self.total {
            0 => String::new(),
            total => format!(" ({}%)", self.done.saturating_mul(100) / total),
        };
        let eta = self
            .eta
            .map_or_else(String::new, |eta| format!(", ETA {}", clock(eta)));
        let mut line = format!(
            "gen: [{}] {}/{} completed{percent}, {} failed, {:.1} output tok/s{eta}",
            clock(self.elapsed),
            self.done,
            self.total,
            self.failed,
            self.tokens_per_sec
        );
        if self.generating + self.preparing + self.queued > 0 {
            line.push_str(&format!(
                "; {} in flight; sources: {} generating, {} preparing, {} queued",
                self.in_flight, self.generating, self.preparing, self.queued
            ));
        }
        line
    }

    /// The line for a terminal `width` columns wide: the full [`Self::line`] when it fits, else
    /// shorter words without failures while there are none, then the least useful parts left
    /// out (which sources do what, then the requests in flight, then the rate), as nextest's
    /// status line does.
    pub fn line_within(&self, width: usize) -> String {
        let full = self.line();
        if full.chars().count() <= width {
            return full;
        }
        let percent = match self.total {
            0 => String::new(),
            total => format!(" {}%", self.done.saturating_mul(100) / total),
        };
        let head = format!(
            "[{}] {}/{}{percent}",
            clock(self.elapsed),
            self.done,
            self.total
        );
        let failed = format!("{} failed", self.failed);
        let rate = format!("{:.0} tok/s", self.tokens_per_sec);
        let eta = self.eta.map(|eta| format!("ETA {}", clock(eta)));
        let active = self.generating + self.preparing + self.queued > 0;
        let in_flight = active.then(|| format!("{} in flight", self.in_flight));
        let sources = active.then(|| {
            format!(
                "{} gen {} prep {} queued",
                self.generating, self.preparing, self.queued
            )
        });
        // Short of room, "0 failed" says nothing.
        let failed = (self.failed > 0).then_some(&failed);
        let candidates = [
            vec![
                failed,
                Some(&rate),
                eta.as_ref(),
                in_flight.as_ref(),
                sources.as_ref(),
            ],
            vec![failed, Some(&rate), eta.as_ref(), in_flight.as_ref()],
            vec![failed, Some(&rate), eta.as_ref()],
            vec![failed, eta.as_ref()],
        ];
        let mut shortest = String::new();
        for parts in candidates {
            shortest = std::iter::once(&head)
                .chain(parts.into_iter().flatten())
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" · ");
            if shortest.chars().count() <= width {
                return shortest;
            }
        }
        crate::status::render::cut(&shortest, width)
    }
}

/// `h:mm:ss`.
pub fn clock(duration: Duration) -> String {
    let secs = duration.as_secs();
    format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Prints one line on stderr without any known secret, for messages outside a run.
pub fn plain(line: &str) {
    writeln!(std::io::stderr(), "{}", crate::secrets::redact(line)).ok();
}

/// The style of `template` (the default bar should a template not parse).
fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// The terminal's width on stderr (80 when it has none).
fn stderr_width() -> usize {
    terminal_size::terminal_size_of(std::io::stderr())
        .map_or(80, |(terminal_size::Width(w), _)| usize::from(w))
}

/// Whether progress bars make sense: stderr is a terminal that can redraw.
fn bars_wanted() -> bool {
    std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none()
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Notice, Progress, RunReporter, bar_view};
    use crate::status::state::{Phase, SourceStatus};

    /// A source without prompts to count (failed before any were prepared, pending,
    /// preparing) gets no bar; before, an empty length drew a full one (`████ 0/0 failed`).
    #[test]
    fn only_a_source_with_prompts_to_count_gets_a_bar() {
        let failed = SourceStatus::new("wildchat", Phase::Failed);
        assert_eq!(bar_view(&failed), (None, "failed".to_owned()));
        let preparing = SourceStatus::new("sharegpt", Phase::Preparing);
        assert_eq!(bar_view(&preparing).0, None);
        let generating = SourceStatus {
            prepared: Some(400),
            done: 120,
            rejected: 3,
            tokens_per_sec: Some(512.4),
            ..SourceStatus::new("lmsys", Phase::Generating)
        };
        assert_eq!(
            bar_view(&generating),
            (Some((123, 400)), "512 tok/s".to_owned())
        );
    }

    #[test]
    fn the_progress_line_says_elapsed_done_eta_and_what_runs() {
        let progress = Progress {
            elapsed: Duration::from_secs(3725),
            done: 120,
            total: 400,
            failed: 1,
            tokens_per_sec: 512.04,
            eta: Some(Duration::from_secs(151)),
            in_flight: 8,
            generating: 1,
            preparing: 1,
            queued: 2,
        };
        assert_eq!(
            progress.line(),
            "gen: [1:02:05] 120/400 completed (30%), 1 failed, 512.0 output tok/s, ETA 0:02:31; \
             8 in flight; sources: 1 generating, 1 preparing, 2 queued"
        );
        let finished = Progress {
            done: 3,
            total: 3,
            ..Progress::default()
        };
        assert_eq!(
            finished.line(),
            "gen: [0:00:00] 3/3 completed (100%), 0 failed, 0.0 output tok/s"
        );
    }

    #[test]
    fn the_status_line_fits_80_and_120_columns() {
        let busy = Progress {
            elapsed: Duration::from_secs(3 * 3600 + 25 * 60 + 7),
            done: 41_230,
            total: 100_020,
            failed: 0,
            tokens_per_sec: 14_502.4,
            eta: Some(Duration::from_secs(5 * 3600 + 12 * 60)),
            in_flight: 256,
            generating: 4,
            preparing: 2,
            queued: 4,
        };
        let lines = [80, 120, 200]
            .map(|width| format!("{width:>3} | {}", busy.line_within(width)))
            .join("\n");
        insta::assert_snapshot!("status_line_widths", lines);
        for width in [80, 120] {
            assert!(busy.line_within(width).chars().count() <= width);
        }
        let failing = Progress {
            failed: 12,
            ..busy.clone()
        };
        assert!(failing.line_within(80).contains("12 failed"));
    }

    #[test]
    fn a_notice_reaches_events_jsonl_without_secrets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("events.jsonl");
        crate::secrets::register("sk-reporter-test-secret");
        let reporter = RunReporter::new(Some(path.clone()));
        reporter.notice(Notice::CompletionsRepaired {
            source: "src",
            message: "key sk-reporter-test-secret refused",
        });
        let text = fs_err::read_to_string(&path).expect("events.jsonl");
        assert!(
            text.contains("\"event\":\"completions_repaired\""),
            "{text}"
        );
        assert!(text.contains("\"source\":\"src\""), "{text}");
        assert!(!text.contains("sk-reporter-test-secret"), "{text}");
    }
}
