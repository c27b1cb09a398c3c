//! What `gen run` tells the person at the terminal while it runs. On a TTY: one progress bar
//! per source (indicatif), with messages printed above the bars; otherwise (a pipe, a log file,
//! `NO_COLOR`/`TERM=dumb`), plain lines. Every message goes through [`say!`](crate::say) so
//! the two never garble each other.

use std::io::{IsTerminal as _, Write as _};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::status::state::{Phase, SourceStatus};

static BARS: Mutex<Option<Bars>> = Mutex::new(None);

struct Bars {
    multi: MultiProgress,
    bars: Vec<ProgressBar>,
}

/// Prints one message line, above the progress bars when they are shown, with every known
/// secret taken out ([`crate::secrets`]). A terminal that went away (an SSH session closed:
/// writes fail with EIO or EPIPE) loses the line; the run goes on.
pub fn say(line: String) {
    let line = crate::secrets::redact(&line);
    let guard = BARS.lock().expect("report lock not poisoned");
    if let Some(bars) = guard.as_ref()
        && bars.multi.println(&*line).is_ok()
    {
        return;
    }
    writeln!(std::io::stderr(), "{line}").ok();
}

/// `eprintln!` for `gen run`: goes above the progress bars when they are shown.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::report::say(format!($($arg)*))
    };
}

/// Whether progress bars make sense: stderr is a terminal that can redraw.
pub fn bars_wanted() -> bool {
    std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none()
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// Shows one bar per source (only when [`bars_wanted`]).
pub fn start_bars(names: &[String]) {
    if !bars_wanted() {
        return;
    }
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(4));
    let style = ProgressStyle::with_template("{prefix:<18} {bar:24} {pos:>7}/{len:<7} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let bars = names
        .iter()
        .map(|name| {
            let bar = multi.add(ProgressBar::new(0));
            bar.set_style(style.clone());
            bar.set_prefix(name.chars().take(18).collect::<String>());
            bar.enable_steady_tick(Duration::from_millis(500));
            bar
        })
        .collect();
    *BARS.lock().expect("report lock not poisoned") = Some(Bars { multi, bars });
}

/// Moves the bars to the sources' current state.
pub fn update_bars(sources: &[SourceStatus]) {
    let guard = BARS.lock().expect("report lock not poisoned");
    let Some(bars) = guard.as_ref() else { return };
    for (bar, source) in bars.bars.iter().zip(sources) {
        bar.set_length(source.prepared.unwrap_or(0));
        bar.set_position(source.done + source.rejected);
        let message = match (source.phase, source.tokens_per_sec) {
            (Phase::Generating, Some(rate)) => format!("{rate:.0} tok/s"),
            (phase, _) => phase.label().to_owned(),
        };
        bar.set_message(message);
    }
}

/// Removes the bars (the final state is printed as lines by the caller).
pub fn finish_bars() {
    if let Some(bars) = BARS.lock().expect("report lock not poisoned").take() {
        for bar in &bars.bars {
            bar.finish_and_clear();
        }
        bars.multi.clear().ok();
    }
}
