//! Gathers the evidence `classify` weighs: kernel kills matched to the worker (or, without a
//! pid, the log's kills), user-space killer records, scheduler and shell reports, counters and
//! RSS, each already phrased as an evidence line.
//!
//! Matching rules live in [`crate::oom`]; the rule order lives in [`crate::classify`]. This module
//! only collects, so that the chain of rules stays readable.

use crate::batch::{BatchEvent, BatchKind};
use crate::clock::{self, WallTime};
use crate::kmsg::{self, SeqGap};
use crate::native::Symptom;
use crate::observation::{Exit, KernelLog, Observation};
use crate::oom::{self, KillMatch, OomKill, OomReport, Target, UserspaceKill};
use crate::text::{human_bytes, strip_launcher_prefixes};
use crate::verdict::{Confidence, ErrorReport, Language};

/// Window slack around the worker's lifetime, µs: a kernel kill record stamped from 1 s before
/// the spawn to 5 s after the reap (CLOCK_MONOTONIC) is the worker's.
const BEFORE_SPAWN_USEC: u64 = 1_000_000;
const AFTER_EXIT_USEC: u64 = 5_000_000;
/// RSS at or above this fraction of the limit counts as "at the limit".
pub(crate) const HIGH_RSS_FRACTION: f64 = 0.9;
/// Below this fraction of a known limit, memory was not the problem.
const LOW_RSS_FRACTION: f64 = 0.5;

/// The texts a verdict may quote, prepared once.
pub(crate) struct Texts {
    /// stderr with launcher prefixes removed.
    pub(crate) stderr: String,
    /// stderr plus every other log, for symptom and batch lines.
    pub(crate) all: String,
}

impl Texts {
    pub(crate) fn of(observation: &Observation) -> Self {
        let stderr = strip_launcher_prefixes(&observation.stderr());
        let mut all = stderr.clone();
        for extra in [&observation.other_log, &observation.oom_killer_log] {
            if !extra.is_empty() {
                all.push('\n');
                all.push_str(&strip_launcher_prefixes(extra));
            }
        }
        if let KernelLog::Text { text } = &observation.kernel_log {
            all.push('\n');
            all.push_str(text);
        }
        Texts { stderr, all }
    }
}

/// How the worker ended, from the wait status or, when that is unknown, from the logs.
pub(crate) struct ResolvedExit {
    pub(crate) exit: Exit,
    /// The line the exit was read from, when it was not given.
    pub(crate) inferred_from: Option<String>,
}

/// Reads the exit from the logs when it was not given: a shell's or launcher's signal report,
/// a container's exit code, an abort or a traceback. A guess; the verdict says what it read.
pub(crate) fn heuristic_exit(
    exit: Exit,
    batch: &[BatchEvent],
    report: Option<&ErrorReport>,
    stderr: &str,
) -> ResolvedExit {
    if exit != Exit::Unknown {
        return ResolvedExit {
            exit,
            inferred_from: None,
        };
    }
    let signal = |signal: i32| Exit::Signal {
        signal,
        sent_by_gen: false,
    };
    let found = batch
        .iter()
        .find(|e| e.kind == BatchKind::ShellSignal)
        .and_then(|e| Some((signal(e.signal?), e.line.clone())))
        .or_else(|| {
            batch
                .iter()
                .find(|e| e.kind == BatchKind::ContainerExit)
                .and_then(|e| Some((Exit::Code(e.signal?), e.line.clone())))
        })
        .or_else(|| {
            let report = report?;
            let line = report.exception.to_string();
            Some(match report.language {
                Language::Rust if report.memory_related => (signal(6), line),
                Language::Rust => (Exit::Code(101), line),
                Language::Python => (Exit::Code(1), line),
            })
        })
        .or_else(|| {
            // An exception line without its traceback (a log that kept only the message).
            crate::native::last_exception_line(stderr).map(|line| (Exit::Code(1), line))
        })
        .or_else(|| {
            let line = stderr
                .lines()
                .find(|l| l.trim_start().starts_with("Fatal Python error: "))?;
            let code = if line.contains("Segmentation fault") {
                11
            } else {
                6
            };
            Some((signal(code), line.trim().to_string()))
        });
    let (exit, inferred_from) = found.map_or((exit, None), |(found, line)| (found, Some(line)));
    ResolvedExit {
        exit,
        inferred_from,
    }
}

/// Everything an OOM verdict weighs about one worker: its kernel and user-space kills, matched
/// to it or not, the counters and the limits.
#[derive(Clone)]
pub(crate) struct OomEvidence {
    /// Why the kernel log is missing, when it is.
    pub(crate) log_unavailable: Option<String>,
    /// The kernel log given was empty of records.
    pub(crate) log_empty: bool,
    pub(crate) seq_gaps: Vec<SeqGap>,
    /// The kernel log ran newest first and was read backwards.
    pub(crate) reversed: bool,
    /// `callbacks suppressed` lines: the OOM reports were rate-limited.
    pub(crate) suppressed: Vec<String>,
    /// The kernel kill that belongs to the worker or a descendant, and whether a window
    /// confirmed it.
    pub(crate) kill: Option<(OomKill, bool)>,
    /// Kernel kills for our pids that were rejected, with the reason (stale lines, pid reuse).
    pub(crate) rejected: Vec<String>,
    /// With no pid, cgroup or child pid to match: the logs' kernel kills inside whatever
    /// window is known.
    pub(crate) unattributed: Vec<OomKill>,
    /// With a pid (or cgroup, or child pids) known: kernel kills of other pids inside whatever
    /// window is known and of no other cgroup, and whether a window confirmed them. A child
    /// the worker never named (a map or pool worker it started and lost) may be one.
    pub(crate) strangers: Vec<(OomKill, bool)>,
    pub(crate) userspace: Option<UserspaceKill>,
    /// With no pid or cgroup to match: user-space kills in the logs.
    pub(crate) unattributed_userspace: Vec<UserspaceKill>,
    /// `oom_kill` delta of the worker cgroup; `None` when unreadable.
    pub(crate) counter_delta: Option<u64>,
    pub(crate) vmstat_delta: Option<u64>,
    pub(crate) peak: Option<u64>,
    pub(crate) limit: Option<(u64, &'static str)>,
    /// The memory cgroup limit the kernel printed for the matched kill, bytes.
    pub(crate) kernel_limit: Option<u64>,
    /// An OOM report whose kill line is not in the log (a quote cut short), when no kill is,
    /// and whether the worker itself invoked it.
    pub(crate) report_without_kill: Option<(OomReport, bool)>,
    /// The worker pid used for matching (given, or named by a shell line).
    pub(crate) target_pid: u32,
    /// The worker's known descendants (given, or named by symptom lines).
    pub(crate) descendants: Vec<u32>,
}

impl OomEvidence {
    pub(crate) fn gather(
        observation: &Observation,
        texts: &Texts,
        symptoms: &[Symptom],
        batch: &[BatchEvent],
    ) -> Self {
        let mut descendants = observation.child_pids.clone();
        descendants.extend(symptoms.iter().flat_map(|s| s.pids.iter().copied()));
        // A shell names the pid of the command it ran: the worker, when none was given.
        let shell_pid = batch
            .iter()
            .filter(|e| e.kind == BatchKind::ShellSignal)
            .find_map(|e| e.pid);
        let target_pid = match observation.pid {
            0 => shell_pid.unwrap_or(0),
            pid => pid,
        };
        let window = match (observation.spawn_usec, observation.exit_usec) {
            (None, None) => None,
            (spawn, exit) => Some((
                spawn.map_or(0, |s| s.saturating_sub(BEFORE_SPAWN_USEC)),
                exit.map_or(u64::MAX, |e| e.saturating_add(AFTER_EXIT_USEC)),
            )),
        };
        let started = observation
            .started_at
            .as_deref()
            .and_then(clock::parse_wall);
        let exited = observation.exited_at.as_deref().and_then(clock::parse_wall);
        let target = Target {
            pid: target_pid,
            descendants: &descendants,
            comm: observation.comm.as_deref(),
            cgroup: observation.cgroup_path.as_deref(),
            window,
            wall_window: (started, exited),
            alive_at: heuristic_alive_at(&texts.stderr),
            exit_code: match observation.exit {
                Exit::Code(code) if code != 137 => Some(code),
                _ => None,
            },
        };
        let (log_unavailable, parsed) = match &observation.kernel_log {
            KernelLog::Unavailable { reason } => {
                (Some(reason.clone()), kmsg::KernelLogParse::default())
            }
            KernelLog::Text { text } => (None, kmsg::parse(text)),
        };
        let log_empty = log_unavailable.is_none() && parsed.records.is_empty();
        let mut events = oom::find(&parsed.records);
        // Kernel lines pasted into the other logs (a job log with `dmesg` appended, a
        // `kubectl get events` OOMKilling message) count too.
        for extra in [
            &texts.stderr,
            &observation.other_log,
            &observation.oom_killer_log,
        ] {
            if extra.is_empty() {
                continue;
            }
            let found = oom::find(&kmsg::parse(extra).records);
            for kill in found.kills {
                if !events
                    .kills
                    .iter()
                    .any(|k| k.pid == kill.pid && k.line == kill.line)
                {
                    events.kills.push(kill);
                }
            }
            events.userspace.extend(found.userspace);
        }
        let mut kill: Option<(OomKill, bool)> = None;
        let mut rejected = Vec::new();
        let mut unattributed = Vec::new();
        let mut strangers = Vec::new();
        let mut others: Vec<String> = Vec::new();
        for candidate in &events.kills {
            match candidate.matches(&target) {
                KillMatch::Yes { timed } => {
                    let better = match &kill {
                        None => true,
                        // The worker's own kill outranks a descendant's.
                        Some((current, _)) => {
                            current.pid != target.pid && candidate.pid == target.pid
                        }
                    };
                    if better {
                        kill = Some((candidate.clone(), timed));
                    }
                }
                KillMatch::No(reason) => {
                    let ours = candidate.pid == target.pid || descendants.contains(&candidate.pid);
                    if target.pid != 0 && !ours {
                        others.push(format!("{} ({})", candidate.pid, candidate.comm));
                    }
                    if target.pid != 0 && ours {
                        rejected.push(format!(
                            "ignored kernel line for pid {}: {reason}: `{}`",
                            candidate.pid, candidate.line
                        ));
                    } else if target.pid == 0
                        && target.cgroup.is_none()
                        && descendants.is_empty()
                        && in_known_windows(candidate, &target)
                    {
                        unattributed.push(candidate.clone());
                    } else if in_known_windows(candidate, &target)
                        && !target
                            .cgroup
                            .is_some_and(|c| candidate.of_another_cgroup(c))
                    {
                        strangers.push((candidate.clone(), timed_by_windows(candidate, &target)));
                    }
                }
            }
        }
        let userspace = events
            .userspace
            .iter()
            .find(|k| k.matches(&target))
            .cloned();
        let unattributed_userspace = if target.pid == 0 && target.cgroup.is_none() {
            events.userspace.clone()
        } else {
            Vec::new()
        };
        let delta = |before: Option<u64>, after: Option<u64>| Some(after?.saturating_sub(before?));
        // The last OOM report, when the log has no kill line at all (a quote cut short).
        let cut_report = events.reports.last().filter(|_| events.kills.is_empty());
        let kernel_limit = kill
            .as_ref()
            .and_then(|(k, _)| k.limit_kb)
            .or_else(|| unattributed.iter().find_map(|k| k.limit_kb))
            .or_else(|| cut_report?.limit_kb)
            .or_else(|| batch.iter().find_map(|e| e.limit_kb))
            .map(|kb| kb * 1024);
        if !others.is_empty() && kill.is_none() {
            others.dedup();
            rejected.push(format!(
                "the kernel log's OOM kills are of other pids: {} (a pid inside a container differs from the host's, which the kernel log uses)",
                others.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        let report_without_kill = cut_report.map(|report| {
            let by_worker = target_pid != 0 && report.invoker == Some(target_pid);
            (report.clone(), by_worker)
        });
        OomEvidence {
            log_unavailable,
            log_empty,
            seq_gaps: parsed.seq_gaps,
            reversed: parsed.reversed,
            suppressed: events.suppressed,
            kill,
            rejected,
            unattributed,
            strangers,
            userspace,
            unattributed_userspace,
            counter_delta: delta(observation.oom_kill_before, observation.oom_kill_after),
            vmstat_delta: delta(
                observation.vmstat_oom_kill_before,
                observation.vmstat_oom_kill_after,
            ),
            peak: observation.peak_rss(),
            limit: observation.effective_limit(),
            kernel_limit,
            report_without_kill,
            target_pid,
            descendants,
        }
    }

    /// `rule_sigkill_near_limit`'s guess: a SIGKILL not sent by `gen` was an OOM kill when memory
    /// was at the limit (or the host counted an OOM kill) and the kernel evidence that would
    /// prove it is missing.
    /// Returns the confidence, or `None` when the evidence says it was no OOM kill: a readable,
    /// gap-free log without a record plus a flat cgroup counter.
    pub(crate) fn heuristic_suspected_oom(&self) -> Option<Confidence> {
        let vmstat_rose = self.vmstat_delta.is_some_and(|d| d > 0);
        if !(self.rss_high() || vmstat_rose) {
            return None;
        }
        if self.log_incomplete() {
            Some(Confidence::Medium)
        } else if self.counter_delta.is_none() {
            Some(Confidence::Low)
        } else {
            None
        }
    }

    /// Evidence that a SIGKILL was not the kernel's OOM killer: a kernel log that was readable
    /// and complete with no kill for the worker, or memory use far below a known limit.
    pub(crate) fn evidence_against_oom(&self) -> Option<String> {
        if self.report_without_kill.is_some() {
            return None;
        }
        if self.log_unavailable.is_none() && self.seq_gaps.is_empty() && !self.log_empty {
            let counter = match self.counter_delta {
                Some(0) => "; cgroup oom_kill unchanged",
                _ => "",
            };
            return Some(format!(
                "kernel log readable with no `Killed process` line for the worker{counter}"
            ));
        }
        if self.log_unavailable.is_none() && self.log_empty && self.counter_delta == Some(0) {
            return Some(
                "kernel log readable with no `Killed process` line for the worker; cgroup oom_kill unchanged"
                    .to_string(),
            );
        }
        if let (Some(peak), Some((limit, label))) = (self.peak, self.limit)
            && (peak as f64) < LOW_RSS_FRACTION * limit as f64
        {
            return Some(format!(
                "peak RSS {} is far below the {} {label}",
                human_bytes(peak),
                human_bytes(limit)
            ));
        }
        None
    }

    /// Peak RSS at or above [`HIGH_RSS_FRACTION`] of the effective limit.
    pub(crate) fn rss_high(&self) -> bool {
        match (self.peak, self.limit) {
            (Some(peak), Some((limit, _))) => peak as f64 >= HIGH_RSS_FRACTION * limit as f64,
            _ => false,
        }
    }

    /// `peak RSS 64 MiB = 100% of the 64 MiB memory limit`
    pub(crate) fn rss_line(&self) -> Option<String> {
        let peak = self.peak?;
        Some(match self.limit {
            Some((limit, label)) => format!(
                "peak RSS {} = {:.0}% of the {} {label}",
                human_bytes(peak),
                100.0 * peak as f64 / limit.max(1) as f64,
                human_bytes(limit)
            ),
            None => format!("peak RSS {} (no limit known)", human_bytes(peak)),
        })
    }

    /// `cgroup oom_kill rose by 1`
    pub(crate) fn counter_line(&self, observation: &Observation) -> Option<String> {
        let (before, after) = (observation.oom_kill_before?, observation.oom_kill_after?);
        let cgroup = observation
            .cgroup_path
            .as_deref()
            .unwrap_or("worker cgroup");
        Some(format!("cgroup oom_kill {before} → {after} in `{cgroup}`"))
    }

    /// Names what is missing for a suspected OOM.
    pub(crate) fn missing_lines(&self) -> Vec<String> {
        let mut lines = vec![match &self.log_unavailable {
            Some(reason) => format!("kernel log unavailable: {reason}"),
            None => "kernel log holds no `Killed process` line for the worker".to_string(),
        }];
        for gap in &self.seq_gaps {
            lines.push(format!(
                "kernel log lost {} record(s) (seq {} → {})",
                gap.lost(),
                gap.after,
                gap.next
            ));
        }
        if self.counter_delta.is_none() {
            lines.push("cgroup oom_kill counter unreadable".to_string());
        }
        lines
    }

    /// Notes on how the kernel log was read (reversed, rate-limited).
    pub(crate) fn reading_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.reversed {
            notes.push(
                "kernel log was newest first (journalctl -r); read in time order".to_string(),
            );
        }
        if let Some(line) = self.suppressed.first() {
            notes.push(format!(
                "kernel: {line} (OOM reports were rate-limited; the `Killed process` line is not)"
            ));
        }
        notes
    }

    /// Kernel evidence is incomplete (unreadable log or lost records).
    pub(crate) fn log_incomplete(&self) -> bool {
        self.log_unavailable.is_some() || !self.seq_gaps.is_empty()
    }

    /// The limit that was hit: given, or printed by the kernel with the kill.
    pub(crate) fn limit_hit(&self, observation: &Observation) -> Option<u64> {
        observation.memory_limit_bytes.or(self.kernel_limit)
    }
}

/// A window known on the clock `kill` is stamped in confirms where it falls.
fn timed_by_windows(kill: &OomKill, target: &Target<'_>) -> bool {
    let (started, exited) = &target.wall_window;
    (kill.usec.is_some() && target.window.is_some())
        || (kill.wall.is_some() && (started.is_some() || exited.is_some()))
}

/// With no pid, a kill still has to fall inside whatever window is known.
fn in_known_windows(kill: &OomKill, target: &Target<'_>) -> bool {
    if let (Some(usec), Some((start, end))) = (kill.usec, target.window)
        && (usec < start || usec > end)
    {
        return false;
    }
    if let Some(wall) = &kill.wall {
        let (started, exited) = &target.wall_window;
        if started
            .as_ref()
            .and_then(|s| s.seconds_since(wall))
            .is_some_and(|d| d > 2.0)
            || exited
                .as_ref()
                .and_then(|e| wall.seconds_since(e))
                .is_some_and(|d| d > 5.0)
        {
            return false;
        }
    }
    true
}

/// The last wall-clock stamp the worker itself printed at the start of a stderr line
/// (`2026-11-30 00:05:49,123 INFO ...`, `[2026-11-30 00:05:49] ...`). Lines of schedulers,
/// launchers and the kernel are skipped: they can be printed after the worker died.
fn heuristic_alive_at(stderr: &str) -> Option<WallTime> {
    stderr
        .lines()
        .rev()
        .filter(|line| {
            let lower = line.to_ascii_lowercase();
            !["slurm", "srun", "kernel", "killed", "cancelled", "oom"]
                .iter()
                .any(|word| lower.contains(word))
        })
        .filter_map(|line| {
            let line = line.trim_start().trim_start_matches('[');
            clock::iso_prefix(line).and_then(|(stamp, _)| stamp)
        })
        .next()
}

/// `kernel: <line> (at 355.150 s)`
pub(crate) fn kill_line(kill: &OomKill, timed: bool) -> String {
    let when = match (kill.usec, &kill.wall) {
        (Some(usec), _) if timed => format!(
            " (at {:.3} s, inside the worker's window)",
            usec as f64 / 1e6
        ),
        (_, Some(wall)) if timed => format!(" (at {wall}, inside the worker's window)"),
        _ if kill.task_memcg.is_some() => {
            " (no timestamp to compare with the worker's lifetime; matched by pid and cgroup)"
                .to_string()
        }
        _ => " (no timestamp to compare with the worker's lifetime; the log given is taken to cover it)"
            .to_string(),
    };
    format!("kernel: {}{when}", kill.line)
}
