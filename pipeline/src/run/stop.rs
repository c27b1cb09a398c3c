//! Stopping `gen run` from outside. SIGINT (Ctrl-C), SIGTERM, SIGHUP (the terminal or the
//! SSH session closed) and SIGUSR1 (what a Slurm task is sent ahead of its time limit with
//! `--signal=B:USR1@SECS`; without a handler it would kill `gen` outright) all stop it the same
//! graceful way: no new requests, those in flight get
//! a grace period, every answer is stored, and `status.json` says the run stopped and why. A
//! second SIGINT or SIGTERM stops at once, after `status.json` says so (answers in flight are
//! dropped and asked for again by the next run).
//!
//! SIGHUP never escalates: when a session closes, the shell forwards its hangup to its jobs and
//! the kernel hangs up the terminal's foreground group too, so one closed session can deliver
//! two. A SIGHUP the process was started ignoring (`nohup gen run …`) stays ignored: listening
//! for it would install a handler and undo what the user asked for.

use std::path::PathBuf;
use std::sync::OnceLock;

use tokio_util::sync::CancellationToken;

/// The first signal this process received, by name.
static FIRST: OnceLock<&'static str> = OnceLock::new();

/// Exit code after a second signal: 128 + SIGINT, as shells report an interrupted command.
const EXIT_AT_ONCE: i32 = 130;

/// What interrupted the run: `interrupted by SIGHUP (…)`, or just `interrupted` when it was
/// cancelled without a signal.
pub fn interrupted_by() -> &'static str {
    match FIRST.get().copied() {
        Some("SIGHUP") => "interrupted by SIGHUP (the terminal or SSH session closed)",
        Some("SIGINT") => "interrupted by Ctrl-C (SIGINT)",
        Some("SIGTERM") => "interrupted by SIGTERM",
        Some("SIGUSR1") => "interrupted by SIGUSR1 (the scheduler asked the task to stop)",
        _ => "interrupted",
    }
}

/// Why the run stopped, for `status.json` (`stopped_by`).
pub fn reason() -> String {
    format!(
        "{}; every answer received is stored: run `gen run` again to continue",
        interrupted_by()
    )
}

/// Cancels `cancel` on the first SIGINT, SIGTERM, SIGHUP or SIGUSR1; on a second SIGINT,
/// SIGTERM or SIGUSR1, marks the run at `status` stopped and exits at once.
pub async fn listen(cancel: CancellationToken, status: PathBuf) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut usr1)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::user_defined1()),
    ) else {
        return;
    };
    let mut hup = if ignored_at_start(libc::SIGHUP) {
        None
    } else {
        signal(SignalKind::hangup()).ok()
    };
    let first = tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
        _ = usr1.recv() => "SIGUSR1",
        _ = hangup(&mut hup) => "SIGHUP",
    };
    FIRST.set(first).ok();
    cancel.cancel();
    let second = loop {
        tokio::select! {
            _ = int.recv() => break "SIGINT",
            _ = term.recv() => break "SIGTERM",
            _ = usr1.recv() => break "SIGUSR1",
            _ = hangup(&mut hup) => {}
        }
    };
    let reason = format!(
        "stopped at once by a second signal ({first}, then {second}); answers in flight were \
         dropped: run `gen run` again to continue"
    );
    crate::report::plain(&format!("gen: {reason}"));
    // Held until the process is gone: no tick of the loop overwrites this last word.
    let _last_word = crate::status::state::mark_stopped(&status, &reason);
    std::process::exit(EXIT_AT_ONCE);
}

/// The next SIGHUP, or never when it is not listened for.
async fn hangup(hup: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match hup {
        Some(hup) => hup.recv().await,
        None => std::future::pending().await,
    }
}

/// Whether this process was started with `signal` ignored (the `SigIgn` mask of
/// `/proc/self/status`, read before any handler is installed).
fn ignored_at_start(signal: i32) -> bool {
    let Ok(status) = fs_err::read_to_string("/proc/self/status") else {
        return false;
    };
    ignored_in(&status, signal)
}

fn ignored_in(status: &str, signal: i32) -> bool {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok());
    match (mask, u32::try_from(signal - 1)) {
        (Some(mask), Ok(bit)) if bit < 64 => mask & (1 << bit) != 0,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ignored_hangup_is_read_from_the_sigign_mask() {
        // `/proc/self/status` of a process started under `nohup` (SIGHUP = 1 ignored) and of
        // one started normally; other signals ignored by the shell (SIGPIPE here) do not count.
        let nohup = "Name:\tgen\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000001001\n";
        let plain = "Name:\tgen\nSigIgn:\t0000000000001000\nSigCgt:\t0000000000000000\n";
        assert!(ignored_in(nohup, libc::SIGHUP));
        assert!(!ignored_in(plain, libc::SIGHUP));
        assert!(ignored_in(plain, libc::SIGPIPE));
        assert!(!ignored_in("Name:\tgen\n", libc::SIGHUP));
    }
}
