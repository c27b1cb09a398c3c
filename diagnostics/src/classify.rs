//! The ordered classifier rules of field notes §3.5, written once in [`classify`].
//!
//! Pre-checks: exit 0 with verified outputs is success (stderr is never mined); a fatal signal
//! `gen` sent is a timeout or cancel, never OOM. Then, first match wins: 1 counter (and
//! userspace killers), 2 kernel `Killed process` line, 3 suspected OOM / external kill,
//! 4 cleanup crash, 5 traceback, 6 other. A child's OOM kill outranks the traceback it caused
//! because rules 1–2 run before rule 5. What to do about a verdict is policy, not decided here.

use crate::evidence::{MemoryEvidence, kill_line};
use crate::native::{self, NativeKind, NativeSignature, SymptomKind};
use crate::observation::{Exit, Observation, signal_name};
use crate::oom::OomScope;
use crate::text::{human_bytes, limit_setting};
use crate::verdict::{Class, Confidence, ErrorReport, Subtype, Verdict};
use crate::{panic, traceback};

const SIGABRT: i32 = 6;
const SIGKILL: i32 = 9;
const SIGSEGV: i32 = 11;

/// Classifies one dead worker. The rule order is the contract; see the module docs.
pub fn classify(observation: &Observation) -> Verdict {
    let stderr = observation.stderr();
    let exit = observation.exit;
    let death = death_signal(exit);

    // Pre-check: success, whatever stderr says.
    if exit == Exit::Code(0) && observation.outputs_complete {
        let mut verdict = Verdict::new(Class::Success, None, Confidence::High);
        verdict
            .evidence
            .push("exit code 0 and outputs verified complete".to_string());
        verdict
            .advice
            .push("nothing to do: output was complete".to_string());
        return finish(verdict, observation);
    }

    let symptoms = native::symptoms(&stderr);
    let memory = MemoryEvidence::gather(observation, &symptoms);

    // Pre-check: `gen` sent the fatal signal (watchdog, cancel, shutdown): never OOM.
    if observation.timed_out
        || matches!(
            exit,
            Exit::Signal {
                sent_by_gen: true,
                ..
            }
        )
    {
        let mut verdict = if observation.outputs_complete {
            let mut v = Verdict::new(Class::CleanupAfterCompletion, None, Confidence::High);
            v.evidence.push(
                "outputs verified complete, then the worker hung until gen killed it".to_string(),
            );
            v.advice
                .push("nothing to do: output was complete".to_string());
            v.advice.push(
                "the worker hangs at exit (threads or pools not shut down); worth fixing"
                    .to_string(),
            );
            v
        } else if observation.timed_out {
            let mut v = Verdict::new(Class::Other, Some(Subtype::Timeout), Confidence::High);
            v.evidence
                .push("gen's watchdog fired, then gen killed the worker".to_string());
            v.advice.push("find where it hangs (no progress) or raise the timeout, then rerun with --only-failed".to_string());
            v
        } else {
            let mut v = Verdict::new(Class::Other, Some(Subtype::Cancelled), Confidence::High);
            v.evidence
                .push("gen stopped the worker (cancel or shutdown)".to_string());
            v.advice.push("rerun with --only-failed".to_string());
            v
        };
        if memory.counter_delta.is_some_and(|d| d > 0) {
            verdict.evidence.push(format!(
                "note: the cgroup's oom_kill rose by {} during the run (a killed child can cause a hang)",
                memory.counter_delta.unwrap_or(0)
            ));
        }
        return finish(verdict, observation);
    }

    // 1. OOM (counter), and userspace killers naming the worker's pid or cgroup.
    if memory.counter_delta.is_some_and(|d| d > 0) {
        let subtype = match &memory.kill {
            Some((kill, _)) if kill.scope == OomScope::Global => Subtype::KernelGlobal,
            Some(_) => Subtype::KernelMemcg,
            None => Subtype::CgroupCounter,
        };
        let mut verdict = oom_verdict(subtype, Confidence::High, observation, &memory);
        verdict
            .evidence
            .insert(0, memory.counter_line(observation).unwrap_or_default());
        return finish(with_symptoms(verdict, &symptoms), observation);
    }
    if let Some(kill) = &memory.userspace {
        let mut verdict = oom_verdict(
            Subtype::UserspaceKiller,
            Confidence::High,
            observation,
            &memory,
        );
        verdict
            .evidence
            .insert(0, format!("{}: {}", kill.killer, kill.line));
        return finish(with_symptoms(verdict, &symptoms), observation);
    }

    // 2. OOM (kernel line) of the worker or a descendant, inside the time window.
    if let Some((kill, timed)) = &memory.kill {
        let subtype = match kill.scope {
            OomScope::Memcg => Subtype::KernelMemcg,
            OomScope::Global => Subtype::KernelGlobal,
        };
        let confidence = if *timed {
            Confidence::High
        } else {
            Confidence::Medium
        };
        let verdict = oom_verdict(subtype, confidence, observation, &memory);
        return finish(with_symptoms(verdict, &symptoms), observation);
    }

    // 3. SIGKILL from outside gen: suspected OOM near the limit, else an external kill.
    if let Some((SIGKILL, via_code)) = death {
        let vmstat_rose = memory.vmstat_delta.is_some_and(|d| d > 0);
        let suspicious = memory.rss_high() || vmstat_rose;
        let confidence = if memory.log_incomplete() {
            Some(Confidence::Medium)
        } else if memory.counter_delta.is_none() {
            Some(Confidence::Low)
        } else {
            None // log readable and counter flat: the kernel did not kill it
        };
        if let (true, Some(confidence)) = (suspicious, confidence) {
            let mut verdict =
                oom_verdict(Subtype::SuspectedFromRss, confidence, observation, &memory);
            if vmstat_rose {
                verdict.evidence.push(format!(
                    "/proc/vmstat oom_kill rose by {} (host-wide)",
                    memory.vmstat_delta.unwrap_or(0)
                ));
            }
            verdict.evidence.extend(memory.missing_lines());
            verdict.advice.push(
                "make the kernel log readable to confirm (CAP_SYSLOG, or sysctl kernel.dmesg_restrict=0)"
                    .to_string(),
            );
            return finish(verdict, observation);
        }
        let confidence = if memory.log_incomplete() || memory.counter_delta.is_none() {
            Confidence::Low
        } else {
            Confidence::Medium
        };
        let mut verdict = Verdict::new(Class::Other, Some(Subtype::ExternalKill), confidence);
        if via_code {
            verdict
                .evidence
                .push("exit code 137 = 128 + SIGKILL (a wrapper reported the signal)".to_string());
        }
        verdict.evidence.push("SIGKILL not sent by gen".to_string());
        verdict.evidence.extend(memory.rss_line());
        match (&memory.log_unavailable, memory.counter_delta) {
            (None, Some(0)) => verdict.evidence.push(
                "kernel log readable with no `Killed process` line for the worker; cgroup oom_kill unchanged".to_string(),
            ),
            _ => verdict.evidence.extend(memory.missing_lines()),
        }
        verdict.evidence.extend(memory.rejected.iter().cloned());
        verdict.advice.push(
            "something outside gen killed the worker (kill -9, scheduler, container stop): find it, then rerun with --only-failed"
                .to_string(),
        );
        return finish(verdict, observation);
    }

    let signature = native::find_signature(&stderr);
    let report = traceback::parse(&stderr).or_else(|| panic::parse(&stderr));

    // 4. Cleanup crash: outputs verified complete, then death anyway.
    if observation.outputs_complete {
        let mut verdict = Verdict::new(Class::CleanupAfterCompletion, None, Confidence::High);
        verdict
            .evidence
            .push(format!("outputs verified complete, then {exit}"));
        let line = signature
            .as_ref()
            .map(|s| s.line.clone())
            .or_else(|| report.as_ref().map(|r| r.primary().to_string()))
            .or_else(|| native::last_meaningful_line(&stderr));
        if let Some(line) = &line {
            verdict.evidence.push(format!("stderr: {line}"));
        }
        verdict.signature = line;
        verdict
            .advice
            .push("nothing to do: output was complete".to_string());
        if signature.as_ref().is_some_and(|s| s.at_shutdown) {
            verdict.advice.push(
                "the crash happens at interpreter shutdown (daemon threads or native pools still running); worth fixing, not urgent"
                    .to_string(),
            );
        }
        return finish(verdict, observation);
    }

    // 5. Traceback: a non-zero exit code with a report (or a Rust abort that printed one).
    let code_failure = matches!(exit, Exit::Code(c) if c != 0) && death.is_none();
    let rust_abort = death.is_some_and(|(s, _)| s == SIGABRT)
        && report
            .as_ref()
            .is_some_and(|r| r.language == crate::verdict::Language::Rust);
    if (code_failure && (report.is_some() || signature.is_none())) || rust_abort {
        if let Some(report) = report {
            return finish(traceback_verdict(report, &symptoms), observation);
        }
        if let Some(line) = native::last_meaningful_line(&stderr) {
            let mut verdict = Verdict::new(
                Class::Traceback,
                Some(Subtype::LastLine),
                Confidence::Medium,
            );
            verdict
                .evidence
                .push(format!("{exit}; no traceback; last stderr line: {line}"));
            verdict
                .advice
                .push(format!("fix the error reported on stderr: {line}"));
            verdict.signature = Some(line);
            return finish(with_symptoms(verdict, &symptoms), observation);
        }
    }

    // 6. Other: signals, aborts, bare exit codes.
    finish(other_verdict(exit, death, signature, &memory), observation)
}

/// The signal that ended the worker, also when a wrapper turned it into 128 + N.
fn death_signal(exit: Exit) -> Option<(i32, bool)> {
    match exit {
        Exit::Signal { signal, .. } => Some((signal, false)),
        Exit::Code(code) if (129..=159).contains(&code) => Some((code - 128, true)),
        Exit::Code(_) => None,
    }
}

fn oom_verdict(
    subtype: Subtype,
    confidence: Confidence,
    observation: &Observation,
    memory: &MemoryEvidence,
) -> Verdict {
    let mut verdict = Verdict::new(Class::Oom, Some(subtype), confidence);
    verdict.peak_bytes = memory.peak;
    verdict.limit_bytes = match subtype {
        Subtype::KernelGlobal => observation.host_memory_bytes,
        _ => observation.memory_limit_bytes,
    };
    verdict.evidence.push(format!("exit: {}", observation.exit));
    let mut child = None;
    if let Some((kill, timed)) = &memory.kill {
        verdict.evidence.push(kill_line(kill, *timed));
        if let Some(summary) = &kill.summary {
            verdict.evidence.push(format!("kernel: {summary}"));
        }
        if kill.pid != observation.pid {
            verdict.evidence.push(format!(
                "victim pid {} ({}) is a descendant of worker pid {}",
                kill.pid, kill.comm, observation.pid
            ));
            child = Some(kill);
        }
    }
    verdict.evidence.extend(memory.rss_line());
    verdict.evidence.extend(memory.rejected.iter().cloned());
    let limit_text = match (verdict.limit_bytes, memory.peak) {
        (Some(limit), Some(peak)) => format!(
            "{} (peak {} = {:.0}% of the limit)",
            human_bytes(limit),
            human_bytes(peak),
            100.0 * peak as f64 / limit.max(1) as f64
        ),
        (Some(limit), None) => human_bytes(limit),
        (None, _) => "its current value".to_string(),
    };
    let suggestion = verdict
        .limit_bytes
        .or(memory.peak)
        .map(|b| {
            format!(
                ", e.g. memory_limit = \"{}\"",
                limit_setting(b.saturating_mul(2))
            )
        })
        .unwrap_or_default();
    match subtype {
        Subtype::KernelGlobal => verdict.advice.push(
            "the whole host ran out of memory (global OOM), not the worker's limit: run fewer workers at once or free host memory"
                .to_string(),
        ),
        Subtype::UserspaceKiller => verdict.advice.push(
            "a userspace OOM killer (earlyoom / systemd-oomd) acted under memory pressure: leave more headroom or exempt gen's workers"
                .to_string(),
        ),
        _ => verdict.advice.push(format!("raise memory_limit above {limit_text}{suggestion}")),
    }
    if let Some(kill) = child {
        verdict.advice.push(format!(
            "the killed process was a child (pid {}, {}): lower its parallelism (num_proc, pool or DataLoader workers)",
            kill.pid, kill.comm
        ));
    } else {
        verdict
            .advice
            .push("or lower the worker's memory use (batch size, rows per shard)".to_string());
    }
    verdict
}

fn traceback_verdict(report: ErrorReport, symptoms: &[native::Symptom]) -> Verdict {
    let subtype = match report.language {
        crate::verdict::Language::Python => Subtype::Python,
        crate::verdict::Language::Rust => Subtype::Rust,
    };
    let mut verdict = Verdict::new(Class::Traceback, Some(subtype), Confidence::High);
    let primary = report.primary().clone();
    let at = primary
        .location
        .as_ref()
        .map(|l| format!(" at {l}"))
        .unwrap_or_default();
    verdict.evidence.push(format!("{primary}{at}"));
    if let Some(root) = &report.root_cause {
        let root_at = root
            .location
            .as_ref()
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        verdict
            .evidence
            .push(format!("root cause (first in the chain): {root}{root_at}"));
    }
    if report.group_leaves.len() > 1 {
        verdict.evidence.push(format!(
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
        verdict.advice.push(format!(
            "{primary}{at}: an allocation failed inside the worker (not an OOM kill): lower batch size or memory use, or raise memory_limit"
        ));
    } else {
        verdict
            .advice
            .push(format!("fix the exception: {primary}{at}"));
    }
    verdict
        .advice
        .push("then rerun with --only-failed".to_string());
    verdict.error = Some(report);
    with_symptoms(verdict, symptoms)
}

/// Symptom lines as evidence; with no OOM found, say the cause is a child's death.
fn with_symptoms(mut verdict: Verdict, symptoms: &[native::Symptom]) -> Verdict {
    for symptom in symptoms {
        if symptom.kind == SymptomKind::ResourceTracker {
            verdict.evidence.push(format!(
                "ignored (symptom of a killed parent, not a cause): {}",
                symptom.line
            ));
            continue;
        }
        verdict
            .evidence
            .push(format!("symptom of a child's death: {}", symptom.line));
        if verdict.class != Class::Oom {
            verdict.advice.insert(
                0,
                "a child process died abruptly; no OOM kill was recorded for it: check the kernel log and the child's stderr (often an OOM kill)"
                    .to_string(),
            );
        }
    }
    verdict
}

fn other_verdict(
    exit: Exit,
    death: Option<(i32, bool)>,
    signature: Option<NativeSignature>,
    memory: &MemoryEvidence,
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
    } else {
        Confidence::Medium
    };
    let mut verdict = Verdict::new(Class::Other, Some(subtype), confidence);
    verdict.evidence.push(format!("exit: {exit}"));
    if let Some(signature) = &signature {
        verdict.evidence.push(format!("stderr: {}", signature.line));
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
        Subtype::ExitCode if exit == Exit::Code(0) => {
            "the worker exited 0 but its outputs are not complete: check the worker's output handling".to_string()
        }
        Subtype::ExitCode => "the worker failed without printing anything: rerun it by hand to see the error".to_string(),
        _ => "the worker died by a signal: rerun with --only-failed; report it if it repeats".to_string(),
    };
    verdict.advice.push(advice);
    verdict
}

fn finish(mut verdict: Verdict, observation: &Observation) -> Verdict {
    verdict.exit = Some(observation.exit);
    verdict.outputs_complete = observation.outputs_complete;
    verdict.evidence.retain(|line| !line.is_empty());
    if observation.outputs_complete && verdict.class == Class::Oom {
        verdict
            .advice
            .push("outputs were verified complete before the kill and can be kept".to_string());
    }
    verdict
}
