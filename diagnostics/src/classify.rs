//! The ordered classifier rules of field notes §3.5, written once in [`classify`].
//!
//! Pre-checks: exit 0 with verified outputs is success (stderr is never mined); a fatal signal
//! `gen` sent is a timeout or cancel, never OOM. Then, first match wins: 1 counter (and
//! userspace killers), 2 kernel `Killed process` line, 3 suspected OOM / external kill,
//! 4 cleanup crash, 5 traceback, 6 other. A child's OOM kill outranks the traceback it caused
//! because rules 1–2 run before rule 5. What to do about a verdict is policy, not decided here.

use crate::evidence::MemoryEvidence;
use crate::explain::{oom_verdict, other_verdict, traceback_verdict, with_symptoms};
use crate::native;
use crate::observation::{Exit, Observation};
use crate::oom::OomScope;
use crate::verdict::{Class, Confidence, Language, Subtype, Verdict};
use crate::{panic, traceback};

const SIGABRT: i32 = 6;
const SIGKILL: i32 = 9;

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

    // Pre-check: `gen` sent the fatal signal (watchdog, cancel, shutdown): never OOM. A timed-out
    // worker that a wrapper reported as 128 + N counts as killed by gen; a signal recorded as not
    // sent by gen (the kernel killed it during the grace period) goes through the rules.
    let killed_by_gen = match exit {
        Exit::Signal { sent_by_gen, .. } => sent_by_gen,
        Exit::Code(_) => observation.timed_out,
    };
    if killed_by_gen {
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
        if let Some(confidence) = memory.heuristic_suspected_oom() {
            let mut verdict =
                oom_verdict(Subtype::SuspectedFromRss, confidence, observation, &memory);
            if vmstat_rose {
                verdict.evidence.push(format!(
                    "/proc/vmstat oom_kill rose by {} (host-wide)",
                    memory.vmstat_delta.unwrap_or(0)
                ));
            }
            verdict.evidence.extend(memory.missing_lines());
            verdict.advice.push(if memory.log_unavailable.is_some() {
                "make the kernel log readable to confirm (CAP_SYSLOG, or sysctl kernel.dmesg_restrict=0)"
                    .to_string()
            } else {
                "kernel records were lost or missing: follow /dev/kmsg from the start of the run to confirm"
                    .to_string()
            });
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
            .is_some_and(|r| r.language == Language::Rust);
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

fn finish(mut verdict: Verdict, observation: &Observation) -> Verdict {
    verdict.exit = Some(observation.exit);
    verdict.outputs_complete = observation.outputs_complete;
    verdict.evidence.retain(|line| !line.is_empty());
    if observation.timed_out && verdict.subtype != Some(Subtype::Timeout) {
        verdict
            .evidence
            .push("note: gen's watchdog had fired before the worker died".to_string());
    }
    if observation.outputs_complete && verdict.class == Class::Oom {
        verdict
            .advice
            .push("outputs were verified complete before the kill and can be kept".to_string());
    }
    verdict
}
