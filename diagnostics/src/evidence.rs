//! Gathers the memory evidence `classify` weighs: kernel kills matched to the worker, userspace
//! killer records, counters and RSS, each already phrased as an evidence line.
//!
//! Matching rules live in [`crate::oom`]; the rule order lives in [`crate::classify`]. This module
//! only collects, so that the one function with the order stays readable.

use crate::kmsg::{self, SeqGap};
use crate::native::Symptom;
use crate::observation::{KernelLog, Observation};
use crate::oom::{self, KillMatch, OomKill, Target, UserspaceKill};
use crate::text::human_bytes;
use crate::verdict::Confidence;

/// Window slack around the worker's lifetime, µs (field notes §3.5 rule 2).
const BEFORE_SPAWN_USEC: u64 = 1_000_000;
const AFTER_EXIT_USEC: u64 = 5_000_000;
/// RSS at or above this fraction of the limit counts as "at the limit".
pub(crate) const HIGH_RSS_FRACTION: f64 = 0.9;

/// Everything memory-related known about one worker.
pub(crate) struct MemoryEvidence {
    /// Why the kernel log is missing, when it is.
    pub(crate) log_unavailable: Option<String>,
    pub(crate) seq_gaps: Vec<SeqGap>,
    /// The kernel kill that belongs to the worker or a descendant, and whether it was timed.
    pub(crate) kill: Option<(OomKill, bool)>,
    /// Kernel kills for our pids that were rejected, with the reason (stale lines, pid reuse).
    pub(crate) rejected: Vec<String>,
    pub(crate) userspace: Option<UserspaceKill>,
    /// `oom_kill` delta of the worker cgroup; `None` when unreadable.
    pub(crate) counter_delta: Option<u64>,
    pub(crate) vmstat_delta: Option<u64>,
    pub(crate) peak: Option<u64>,
    pub(crate) limit: Option<(u64, &'static str)>,
}

impl MemoryEvidence {
    pub(crate) fn gather(observation: &Observation, symptoms: &[Symptom]) -> Self {
        let mut descendants = observation.child_pids.clone();
        descendants.extend(symptoms.iter().flat_map(|s| s.pids.iter().copied()));
        let window = match (observation.spawn_usec, observation.exit_usec) {
            (Some(spawn), Some(exit)) => Some((
                spawn.saturating_sub(BEFORE_SPAWN_USEC),
                exit.saturating_add(AFTER_EXIT_USEC),
            )),
            _ => None,
        };
        let target = Target {
            pid: observation.pid,
            descendants: &descendants,
            comm: observation.comm.as_deref(),
            cgroup: observation.cgroup_path.as_deref(),
            window,
        };
        let (log_unavailable, parsed) = match &observation.kernel_log {
            KernelLog::Unavailable { reason } => {
                (Some(reason.clone()), kmsg::KernelLogParse::default())
            }
            KernelLog::Text { text } => (None, kmsg::parse(text)),
        };
        let events = oom::find(&parsed.records);
        let mut kill: Option<(OomKill, bool)> = None;
        let mut rejected = Vec::new();
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
                    if candidate.pid == target.pid || descendants.contains(&candidate.pid) {
                        rejected.push(format!(
                            "ignored kernel line for pid {}: {reason}: `{}`",
                            candidate.pid, candidate.line
                        ));
                    }
                }
            }
        }
        let userspace_log = kmsg::parse(&observation.oom_killer_log);
        let userspace = events
            .userspace
            .iter()
            .chain(oom::find(&userspace_log.records).userspace.iter())
            .find(|k| k.matches(&target))
            .cloned();
        let delta = |before: Option<u64>, after: Option<u64>| match (before, after) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        MemoryEvidence {
            log_unavailable,
            seq_gaps: parsed.seq_gaps,
            kill,
            rejected,
            userspace,
            counter_delta: delta(observation.oom_kill_before, observation.oom_kill_after),
            vmstat_delta: delta(
                observation.vmstat_oom_kill_before,
                observation.vmstat_oom_kill_after,
            ),
            peak: observation.peak_rss(),
            limit: observation.effective_limit(),
        }
    }

    /// Rule 3's guess: a SIGKILL not sent by `gen` was an OOM kill when memory was at the limit
    /// (or the host counted an OOM kill) and the kernel evidence that would prove it is missing.
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
        let mut lines = Vec::new();
        match &self.log_unavailable {
            Some(reason) => lines.push(format!("kernel log unavailable: {reason}")),
            None => {
                lines.push("kernel log holds no `Killed process` line for the worker".to_string())
            }
        }
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

    /// Kernel evidence is incomplete (unreadable log or lost records).
    pub(crate) fn log_incomplete(&self) -> bool {
        self.log_unavailable.is_some() || !self.seq_gaps.is_empty()
    }
}

/// `kernel: <line> (at 355.150 s)`
pub(crate) fn kill_line(kill: &OomKill, timed: bool) -> String {
    let when = match kill.usec {
        Some(usec) if timed => format!(
            " (at {:.3} s, inside the worker's window)",
            usec as f64 / 1e6
        ),
        _ => " (no monotonic timestamp; matched by cgroup)".to_string(),
    };
    format!("kernel: {}{when}", kill.line)
}
