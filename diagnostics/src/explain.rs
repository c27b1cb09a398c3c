//! Phrasing of verdicts: evidence lines and advice for each kind of finding.
//!
//! `classify` decides which rule fired; these builders only turn that decision and the gathered
//! evidence into the text people read in `gen status` and `gen diagnose`. No rule order here.

use crate::evidence::{OomEvidence, kill_line};
use crate::native::{self, NativeKind, NativeSignature, SymptomKind};
use crate::observation::{Exit, Observation, signal_name};
use crate::text::{human_bytes, limit_setting};
use crate::verdict::{Class, Confidence, ErrorReport, Language, Subtype, Verdict};

const SIGABRT: i32 = 6;
const SIGSEGV: i32 = 11;

/// Where the memory limit that was hit is set, as far as the evidence tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Knob {
    /// `memory-limit` of the source in `datasets.toml` (a worker `gen` ran).
    Gen,
    /// Slurm's `--mem` / `--mem-per-cpu`.
    Slurm,
    /// The container's `resources.limits.memory`.
    Kubernetes,
    /// `docker run --memory`.
    Docker,
    /// A systemd unit's `MemoryMax=`.
    Systemd,
    /// PBS / LSF memory requests.
    BatchQueue,
}

impl Knob {
    /// From the scheduler that reported the death, else the victim's cgroup path.
    pub(crate) fn from_evidence(reporters: &[&str], memcg: Option<&str>) -> Knob {
        let memcg = memcg.unwrap_or("");
        if reporters.contains(&"slurm") || memcg.contains("/slurm") {
            Knob::Slurm
        } else if reporters.contains(&"kubernetes") || memcg.contains("kubepods") {
            Knob::Kubernetes
        } else if reporters.contains(&"docker") || memcg.contains("docker") {
            Knob::Docker
        } else if reporters.contains(&"pbs/lsf") {
            Knob::BatchQueue
        } else if reporters.contains(&"systemd") || memcg.ends_with(".service") {
            Knob::Systemd
        } else {
            Knob::Gen
        }
    }

    fn name(self) -> &'static str {
        match self {
            Knob::Gen => crate::verdict::GEN_LIMIT_KNOB,
            Knob::Slurm => "the job's Slurm --mem",
            Knob::Kubernetes => "the container's resources.limits.memory",
            Knob::Docker => "the container's docker --memory",
            Knob::Systemd => "the unit's MemoryMax=",
            Knob::BatchQueue => "the job's memory request",
        }
    }

    /// How to write `bytes` where this knob is set.
    fn example(self, bytes: u64) -> String {
        let size = limit_setting(bytes);
        match self {
            Knob::Gen => format!("{} = \"{size}\"", crate::verdict::GEN_LIMIT_KNOB),
            Knob::Slurm => format!("#SBATCH --mem={size}"),
            Knob::Kubernetes => format!("memory: {size}i"),
            Knob::Docker => format!("docker run --memory={size}"),
            Knob::Systemd => format!("MemoryMax={size}"),
            Knob::BatchQueue => format!("{size} of memory"),
        }
    }
}

/// Memory a worker needs per byte of the row it holds: the raw bytes, the decoded string, the
/// parsed objects and the prompt built from them (a 200 MB row took ~0.9 GB).
const ROW_WORKING_SET_FACTOR: u64 = 5;

/// The limit to suggest: twice what was hit or seen, and at least what the largest input row
/// needs on top of it; rounded up to 64 MiB (256 MiB above 1 GiB). With the reasons.
pub(crate) fn suggested_limit(
    limit: Option<u64>,
    peak: Option<u64>,
    victim_rss: Option<u64>,
    largest_row: Option<u64>,
) -> Option<(u64, Vec<String>)> {
    // The victim's RSS counts shared file pages too: only a stand-in when nothing else is known.
    let base = limit.max(peak).or(victim_rss);
    let mut reasons = Vec::new();
    let mut need = base.map(|b| b.saturating_mul(2));
    if let Some(row) = largest_row {
        let for_row = base
            .unwrap_or(0)
            .saturating_add(row.saturating_mul(ROW_WORKING_SET_FACTOR));
        if need.is_none_or(|n| for_row > n) {
            reasons.push(format!(
                "the largest input row is {}, and holding and parsing a row takes about {ROW_WORKING_SET_FACTOR}× its size",
                human_bytes(row)
            ));
            need = Some(for_row);
        }
    }
    let need = need?;
    const MIB: u64 = 1024 * 1024;
    let step = if need > 1024 * MIB {
        256 * MIB
    } else {
        64 * MIB
    };
    Some((need.div_ceil(step).saturating_mul(step), reasons))
}

pub(crate) fn oom_verdict(
    subtype: Subtype,
    confidence: Confidence,
    observation: &Observation,
    memory: &OomEvidence,
    knob: Knob,
) -> Verdict {
    let mut verdict = Verdict::new(Class::Oom, Some(subtype), confidence);
    verdict.peak_bytes = memory.peak;
    verdict.limit_bytes = match subtype {
        Subtype::KernelGlobal => observation.host_memory_bytes,
        _ => memory.limit_hit(observation),
    };
    verdict.note(format!("exit: {}", observation.exit));
    let mut child = None;
    let victim_rss = memory
        .kill
        .as_ref()
        .and_then(|(k, _)| k.rss_kb)
        .map(|kb| kb * 1024);
    if let Some((kill, timed)) = &memory.kill {
        verdict.note(kill_line(kill, *timed));
        if let Some(summary) = &kill.summary {
            verdict.note(format!("kernel: {summary}"));
        }
        if let Some(limit) = kill.limit_kb {
            verdict.note(format!(
                "kernel: the memory cgroup's limit was {}",
                human_bytes(limit * 1024)
            ));
        }
        if kill.pid != memory.target_pid {
            verdict.note(if memory.descendants.contains(&kill.pid) {
                format!(
                    "victim pid {} ({}) is a descendant of worker pid {}",
                    kill.pid, kill.comm, memory.target_pid
                )
            } else if memory.target_pid == 0 {
                format!("victim pid {} ({})", kill.pid, kill.comm)
            } else {
                format!(
                    "victim pid {} ({}) is not the worker (pid {}) but a child or another task of its memory cgroup",
                    kill.pid, kill.comm, memory.target_pid
                )
            });
            child = Some(kill);
        }
    }
    verdict.evidence.extend(memory.rss_line());
    verdict.evidence.extend(memory.rejected.iter().cloned());
    verdict.evidence.extend(memory.reading_notes());
    let limit = verdict.limit_bytes;
    let suggestion = suggested_limit(
        limit,
        memory.peak,
        victim_rss,
        observation.largest_row_bytes,
    );
    let limit_text = match (limit, memory.peak) {
        (Some(limit), Some(peak)) => format!(
            "{} (peak {} = {:.0}% of the limit)",
            human_bytes(limit),
            human_bytes(peak),
            100.0 * peak as f64 / limit.max(1) as f64
        ),
        (Some(limit), None) => human_bytes(limit),
        (None, _) => "its current value".to_string(),
    };
    match subtype {
        Subtype::KernelGlobal => verdict.advise("the whole host ran out of memory (global OOM), not the worker's limit: run fewer workers at once or free host memory"),
        Subtype::UserspaceKiller => verdict.advise("a user-space OOM killer (earlyoom, systemd-oomd, nohang, a memory monitor) acted under memory pressure before the kernel would: leave more headroom or exempt the worker"),
        _ => {
            let example = suggestion
                .as_ref()
                .map(|(bytes, _)| format!(", e.g. {}", knob.example(*bytes)))
                .unwrap_or_default();
            verdict.advise(format!("raise {} above {limit_text}{example}", knob.name()));
            if let Some((_, reasons)) = &suggestion {
                verdict.advice.extend(reasons.iter().cloned());
            }
            verdict.suggested_limit_bytes = suggestion.as_ref().map(|(bytes, _)| *bytes);
            verdict.limit_knob = Some(knob.name().to_string());
        }
    }
    if let Some(kill) = child {
        verdict.advise(format!(
            "the killed process was a child (pid {}, {}): lower its parallelism (num_proc, pool or DataLoader workers)",
            kill.pid, kill.comm
        ));
    } else {
        verdict.advise("or lower the worker's memory use (batch size, rows per shard)");
    }
    verdict
}

/// Why an allocation failed inside the process instead of the kernel killing it: which limit
/// refused it, as far as the evidence says.
pub(crate) fn allocation_refused(
    report: &ErrorReport,
    observation: &Observation,
    stderr: &str,
) -> Vec<String> {
    let asked = allocation_size(report);
    let host = observation.host_memory_bytes;
    let lower = stderr.to_ascii_lowercase();
    let named = lower.contains("ulimit -v") || lower.contains("rlimit_as");
    let limit = match asked {
        Some(bytes) if host.is_some_and(|h| bytes > h) || bytes >= 1 << 40 => format!(
            "it asked for {} at once, more than the machine has: a size computed from bad input or an overflow, not a limit that is too low",
            human_bytes(bytes)
        ),
        _ if named => "the limit that refused it: the address-space limit (`ulimit -v`, RLIMIT_AS) set for the process".to_string(),
        Some(bytes) => format!(
            "a request of {} was refused: the process hit a per-process limit, most likely the address-space limit (`ulimit -v`, RLIMIT_AS), or RLIMIT_DATA, or strict overcommit (vm.overcommit_memory=2)",
            human_bytes(bytes)
        ),
        None => "the limit that refused it is per-process: the address-space limit (`ulimit -v`, RLIMIT_AS), RLIMIT_DATA, or strict overcommit (vm.overcommit_memory=2)".to_string(),
    };
    let not_a_kill = "not an OOM kill: the allocator was refused memory and the process stopped itself; under a memory cgroup or a host OOM the kernel kills with SIGKILL instead";
    vec![not_a_kill.to_string(), limit]
}

/// A Rust allocation failure (`memory allocation of N bytes failed`, then SIGABRT): the
/// process was refused memory and stopped itself. Memory, not a bug in the program's logic,
/// and not an OOM kill: the limit that refused it is named as far as the evidence says.
pub(crate) fn allocation_verdict(
    report: ErrorReport,
    observation: &Observation,
    stderr: &str,
    memory: &OomEvidence,
) -> Verdict {
    let subtype = Some(Subtype::AllocationFailure);
    let mut verdict = Verdict::new(Class::Oom, subtype, Confidence::High);
    verdict.note(format!("exit: {}", observation.exit));
    verdict.note(format!("stderr: {}", report.exception.message));
    let notes = allocation_refused(&report, observation, stderr);
    let impossible = notes
        .iter()
        .any(|n| n.contains("more than the machine has"));
    verdict.evidence.extend(notes);
    verdict.evidence.extend(memory.rss_line());
    verdict.peak_bytes = memory.peak;
    verdict.signature = Some(match allocation_size(&report) {
        Some(bytes) => format!("{} asked at once", human_bytes(bytes)),
        None => "an allocation was refused".to_string(),
    });
    verdict.advise(if impossible {
        "the size asked for is impossible: find the length or count it was computed from (bad input, an overflow); no memory limit would let it through".to_string()
    } else {
        "lift the per-process limit that refused it (`ulimit -v`, RLIMIT_AS or RLIMIT_DATA in the job's or container's settings), or make the worker hold less at once".to_string()
    });
    verdict.advise("then rerun with --only-failed");
    verdict.error = Some(report);
    verdict
}

/// The size a Rust allocation failure names, bytes.
fn allocation_size(report: &ErrorReport) -> Option<u64> {
    report
        .exception
        .message
        .strip_prefix("memory allocation of ")
        .and_then(crate::text::leading_number)
        .map(|(n, _)| n)
}

pub(crate) fn traceback_verdict(report: ErrorReport, symptoms: &[native::Symptom]) -> Verdict {
    let subtype = match report.language {
        Language::Python => Subtype::Python,
        Language::Rust => Subtype::Rust,
    };
    let mut verdict = Verdict::new(Class::Traceback, Some(subtype), Confidence::High);
    let primary = report.primary().located();
    verdict.note(&primary);
    if let Some(root) = &report.root_cause {
        let root = root.located();
        verdict.note(format!("root cause (first in the chain): {root}"));
    }
    if report.group_leaves.len() > 1 {
        verdict.note(format!(
            "exception group with {} leaves: {}",
            report.group_leaves.len(),
            report
                .group_leaves
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    if report.memory_related {
        verdict.advise(format!(
            "{primary}: an allocation failed inside the worker (not an OOM kill): lower batch size or memory use, or raise the limit that refused it"
        ));
    } else {
        verdict.advise(format!("fix the exception: {primary}"));
    }
    verdict.advise("then rerun with --only-failed");
    verdict.error = Some(report);
    with_symptoms(verdict, symptoms)
}

/// Symptom lines as evidence; with no OOM found, say the cause is a child's death.
pub(crate) fn with_symptoms(mut verdict: Verdict, symptoms: &[native::Symptom]) -> Verdict {
    for symptom in symptoms {
        if symptom.kind == SymptomKind::ResourceTracker {
            verdict.note(format!(
                "ignored (symptom of a killed parent, not a cause): {}",
                symptom.line
            ));
            continue;
        }
        verdict.note(format!("symptom of a child's death: {}", symptom.line));
        if verdict.class == Class::Oom {
            continue;
        }
        let advice = match symptom.signal {
            Some(9) => "a child process was SIGKILLed but the kernel log given shows no OOM kill for it: look for another killer (a user-space OOM killer, a scheduler, kill -9)".to_string(),
            Some(signal) => format!(
                "a child process died of {} (not a memory kill): find the crash in the child",
                signal_name(signal)
            ),
            None => "a child process died abruptly; no OOM kill was recorded for it: check the kernel log and the child's stderr (often an OOM kill)".to_string(),
        };
        verdict.advice.insert(0, advice);
    }
    verdict
}

pub(crate) fn other_verdict(
    exit: Exit,
    death: Option<(i32, bool)>,
    signature: Option<NativeSignature>,
    memory: &OomEvidence,
) -> Verdict {
    let subtype = match (death, &signature) {
        (_, Some(s)) if s.kind == NativeKind::Segfault => Subtype::Segfault,
        (Some((SIGSEGV, _)), _) => Subtype::Segfault,
        (Some((SIGABRT, _)), _) => Subtype::Abort,
        (None, Some(_)) => Subtype::Abort,
        (Some((2 | 15 | 1 | 3, _)), _) => Subtype::ExternalKill,
        (Some(_), _) => Subtype::Signal,
        (None, None) => Subtype::ExitCode,
    };
    let confidence = if signature.is_some() {
        Confidence::High
    } else if exit == Exit::Unknown {
        Confidence::Low
    } else {
        Confidence::Medium
    };
    let mut verdict = Verdict::new(Class::Other, Some(subtype), confidence);
    verdict.note(format!("exit: {exit}"));
    if let Some(signature) = &signature {
        verdict.note(format!("stderr: {}", signature.line));
        verdict.signature = Some(signature.line.clone());
    }
    verdict.evidence.extend(memory.rss_line());
    let advice = match subtype {
        Subtype::Segfault => "a native extension crashed (segfault): rerun with --only-failed; set PYTHONFAULTHANDLER=1 to get a stack if stderr is empty".to_string(),
        Subtype::Abort => "the process aborted (heap corruption, C++ terminate or fatal interpreter error): rerun with --only-failed; report it if it repeats".to_string(),
        Subtype::ExternalKill => format!(
            "something outside gen sent {}: find it, then rerun with --only-failed",
            death.map_or("a signal", |(s, _)| signal_name(s))
        ),
        Subtype::ExitCode if exit == Exit::Unknown => {
            "nothing in the logs names a failure: give how it ended (--exit-code or --signal) and the kernel log of that time (--kernel-log)".to_string()
        }
        Subtype::ExitCode if exit == Exit::Code(0) => {
            "the worker exited 0 but its outputs are not complete: check the worker's output handling".to_string()
        }
        Subtype::ExitCode => "the worker failed without printing anything: rerun it by hand to see the error".to_string(),
        _ => "the worker died by a signal: rerun with --only-failed; report it if it repeats".to_string(),
    };
    verdict.advise(advice);
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn suggestion_doubles_what_was_hit() {
        let (bytes, reasons) =
            suggested_limit(Some(64 * MIB), Some(64 * MIB), None, None).expect("suggestion");
        assert_eq!(limit_setting(bytes), "128M");
        assert!(reasons.is_empty());
        let (bytes, _) = suggested_limit(None, Some(3 * 1024 * MIB), None, None).expect("peak");
        assert_eq!(limit_setting(bytes), "6G");
        assert_eq!(suggested_limit(None, None, None, None), None);
    }

    #[test]
    fn a_large_row_raises_the_suggestion_past_twice_the_limit() {
        // A 200 MB row needed ~0.9 GB in a worker capped at 64 MiB; twice the cap is 128M.
        let (bytes, reasons) = suggested_limit(
            Some(64 * MIB),
            Some(64 * MIB),
            None,
            Some(200 * 1000 * 1000),
        )
        .expect("suggestion");
        assert!(bytes >= 900 * 1000 * 1000, "{}", limit_setting(bytes));
        assert_eq!(limit_setting(bytes), "1G");
        assert!(
            reasons[0].contains("the largest input row is 190.7 MiB"),
            "{reasons:?}"
        );
    }

    #[test]
    fn knobs_are_named_where_they_are_set() {
        assert_eq!(Knob::from_evidence(&["slurm"], None), Knob::Slurm);
        assert_eq!(
            Knob::from_evidence(&[], Some("/kubepods/burstable/pod1/c1")),
            Knob::Kubernetes
        );
        assert_eq!(
            Knob::from_evidence(&["shell"], Some("/gen/run-1/w")),
            Knob::Gen
        );
        assert_eq!(Knob::Gen.example(128 * MIB), "memory-limit = \"128M\"");
        assert_eq!(Knob::Kubernetes.example(2048 * MIB), "memory: 2Gi");
    }
}
