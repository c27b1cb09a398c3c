//! The ordered classifier rules, written once in [`classify`].
//!
//! Pre-checks: exit 0 with verified outputs is success (stderr is never mined); a fatal signal
//! `gen` sent is a timeout or cancel, never OOM. Then, first match wins:
//!
//! 1. OOM by counter, or a user-space killer naming the worker's pid or cgroup;
//! 2. OOM by a kernel `Killed process` record of the worker or a descendant (the log given is
//!    taken to cover the worker's lifetime unless stamps say otherwise; a record of the
//!    worker's own pid while it exited with a code is an earlier process's: pid reuse), by a
//!    record of a pid not known to be the worker's inside its lifetime when the worker exited
//!    with a code reporting a child's death without naming the child, or — with no pid known
//!    and a death by SIGKILL — the log's own kill;
//! 3. OOM reported by the scheduler or runtime (Slurm oom_kill events, Kubernetes `OOMKilled`,
//!    docker, systemd, PBS, LSF), or a user-space killer in a log without a pid;
//! 4. a time limit or watchdog that is not `gen`'s: a cleanup crash when the output was
//!    complete, else a time limit — never an OOM;
//! 5. SIGKILL from outside `gen`: suspected OOM near the limit, a cleanup crash after complete
//!    output, an external kill when the evidence speaks against OOM, else a suspected OOM;
//! 6. cleanup crash: outputs verified complete, then death anyway;
//! 7. a Rust allocation failure (memory refused, not a kill), else a traceback (a child's
//!    SIGKILL behind it is a suspected OOM of the child);
//! 8. other.
//!
//! A child's OOM kill outranks the traceback it caused because rules 1–3 run before rule 7.
//! What to do about a verdict is policy, not decided here.

use crate::batch::{self, BatchEvent, BatchKind};
use crate::evidence::{OomEvidence, ResolvedExit, Texts, heuristic_exit};
use crate::explain::{
    Knob, allocation_verdict, oom_verdict, other_verdict, traceback_verdict, with_symptoms,
};
use crate::native::{self, Symptom};
use crate::observation::{Exit, Observation};
use crate::oom::OomScope;
use crate::verdict::{Class, Confidence, ErrorReport, Language, Subtype, Verdict};
use crate::{panic, traceback};

const SIGABRT: i32 = 6;
const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

/// Classifies one dead worker. The rule order is the contract; see the module docs.
pub fn classify(observation: &Observation) -> Verdict {
    let texts = Texts::of(observation);
    let batch = batch::scan(&texts.all);
    let report = traceback::parse(&texts.stderr).or_else(|| panic::parse(&texts.stderr));
    let ResolvedExit {
        exit,
        inferred_from,
    } = heuristic_exit(observation.exit, &batch, report.as_ref(), &texts.stderr);
    let resolved = Observation {
        exit,
        ..observation.clone()
    };
    let observation = &resolved;
    let mut verdict = rules(observation, &texts, &batch, report);
    if let Some(line) = inferred_from {
        let quoted_below = verdict.evidence.iter().any(|e| e.contains(&line));
        verdict.evidence.insert(
            0,
            if quoted_below {
                format!("exit status not given; read as {exit} from the line quoted below")
            } else {
                format!("exit status not given; read as {exit} from: {line}")
            },
        );
    }
    finish(verdict, observation)
}

fn rules(
    observation: &Observation,
    texts: &Texts,
    batch: &[BatchEvent],
    report: Option<ErrorReport>,
) -> Verdict {
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
        return verdict;
    }

    let symptoms = native::symptoms(&texts.all);
    let mut memory = OomEvidence::gather(observation, texts, &symptoms, batch);
    let reporters: Vec<&str> = batch.iter().map(|e| e.reporter).collect();
    let knob = |memcg: Option<&str>| Knob::from_evidence(&reporters, memcg);
    let kill_memcg: Option<String> = memory
        .kill
        .as_ref()
        .map(|(k, _)| k)
        .or(memory.unattributed.first())
        .and_then(|k| k.task_memcg.clone().or_else(|| k.oom_memcg.clone()));

    // Pre-check: `gen` sent the fatal signal (watchdog, cancel, shutdown): never OOM. A timed-out
    // worker that a wrapper reported as 128 + N counts as killed by gen; a signal recorded as not
    // sent by gen (the kernel killed it during the grace period) goes through the rules.
    let killed_by_gen = match exit {
        Exit::Signal { sent_by_gen, .. } => sent_by_gen,
        Exit::Code(_) | Exit::Unknown => observation.timed_out,
    };
    if killed_by_gen {
        let mut verdict = gen_kill_verdict(observation);
        if memory.counter_delta.is_some_and(|d| d > 0) {
            verdict.evidence.push(format!(
                "note: the cgroup's oom_kill rose by {} during the run (a killed child can cause a hang)",
                memory.counter_delta.unwrap_or(0)
            ));
        }
        return verdict;
    }

    // 1. OOM (counter), and userspace killers naming the worker's pid or cgroup.
    if memory.counter_delta.is_some_and(|d| d > 0) {
        let subtype = match &memory.kill {
            Some((kill, _)) => kernel_subtype(kill.scope),
            None => Subtype::CgroupCounter,
        };
        let verdict = oom_led_by(
            memory.counter_line(observation).unwrap_or_default(),
            oom_verdict(
                subtype,
                Confidence::High,
                observation,
                &memory,
                knob(kill_memcg.as_deref()),
            ),
        );
        return with_child_report(verdict, report, &symptoms);
    }
    // A kernel kill of the same worker outranks the user-space killer's SIGTERM unless the
    // worker died of that SIGTERM.
    let died_of_sigterm = matches!(death, Some((SIGTERM, _)));
    if let Some(kill) = &memory.userspace
        && (memory.kill.is_none() || died_of_sigterm)
    {
        let verdict = oom_led_by(
            format!("{}: {}", kill.killer, kill.line),
            oom_verdict(
                Subtype::UserspaceKiller,
                Confidence::High,
                observation,
                &memory,
                Knob::Gen,
            ),
        );
        return with_child_report(verdict, report, &symptoms);
    }

    // 2. OOM (kernel line) of the worker or a descendant.
    if let Some((kill, timed)) = &memory.kill {
        // Without stamps comparable with the worker's lifetime, pid reuse cannot be ruled out.
        let confidence = if *timed {
            Confidence::High
        } else {
            Confidence::Medium
        };
        let verdict = oom_verdict(
            kernel_subtype(kill.scope),
            confidence,
            observation,
            &memory,
            knob(kill_memcg.as_deref()),
        );
        return with_child_report(verdict, report, &symptoms);
    }
    // A child the worker reports dead without naming it (datasets' map, a process pool), and
    // the kernel killing a pid not known to be the worker's inside its lifetime while the
    // worker itself exited with a code (so it was not the victim): that child's OOM kill.
    let unnamed_child_died = symptoms.iter().any(|s| {
        s.kind != native::SymptomKind::ResourceTracker
            && s.pids.is_empty()
            && s.signal.is_none_or(|signal| signal == SIGKILL)
    });
    if death.is_none()
        && unnamed_child_died
        && let [(kill, timed), ..] = memory.strangers.as_slice()
    {
        let (kill, timed) = (kill.clone(), *timed);
        let pids: Vec<String> = memory
            .strangers
            .iter()
            .map(|(k, _)| format!("{} ({})", k.pid, k.comm))
            .collect();
        memory
            .rejected
            .retain(|line| !line.starts_with("the kernel log's OOM kills are of other pids"));
        let knob = knob(kill.task_memcg.as_deref().or(kill.oom_memcg.as_deref()));
        let scope = kernel_subtype(kill.scope);
        memory.kill = Some((kill, timed));
        let mut verdict = oom_verdict(scope, Confidence::Medium, observation, &memory, knob);
        verdict.evidence.push(format!(
            "the worker reports a child's death without naming it, and the kernel killed {} {} inside its lifetime: taken as that child (its pid was not recorded as the worker's)",
            if pids.len() == 1 { "pid" } else { "pids" },
            pids.join(", ")
        ));
        return with_child_report(verdict, report, &symptoms);
    }

    // No pid known: the log's own kill explains a SIGKILL, or a child's death behind a report.
    let sigkill_or_unknown = matches!(death, Some((SIGKILL, _))) || exit == Exit::Unknown;
    let child_died = symptoms
        .iter()
        .any(|s| s.kind != native::SymptomKind::ResourceTracker);
    if !memory.unattributed.is_empty() && (sigkill_or_unknown || child_died) {
        let mut victims: Vec<u32> = memory.unattributed.iter().map(|k| k.pid).collect();
        victims.dedup();
        let confidence = if victims.len() == 1 {
            Confidence::Medium
        } else {
            Confidence::Low
        };
        let first = &memory.unattributed[0];
        let mut verdict = oom_verdict(
            kernel_subtype(first.scope),
            confidence,
            observation,
            &memory,
            knob(first.task_memcg.as_deref().or(first.oom_memcg.as_deref())),
        );
        let lines = memory
            .unattributed
            .iter()
            .take(3)
            .map(|k| format!("kernel: {}", k.line));
        let position = 1.min(verdict.evidence.len());
        verdict.evidence.splice(position..position, lines);
        verdict.evidence.push(format!(
            "no pid given: the kernel log's OOM kill{} (pid {}) taken as the worker's{}",
            if victims.len() == 1 { "" } else { "s" },
            victims
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            if victims.len() == 1 {
                ""
            } else {
                "; pass --pid to pick one"
            }
        ));
        return with_child_report(verdict, report, &symptoms);
    }

    // A log cut before the kill line: the report's header is all there is.
    if let Some((cut, by_worker)) = &memory.report_without_kill
        && (sigkill_or_unknown || child_died)
        && (memory.target_pid == 0 || *by_worker)
    {
        let confidence = if *by_worker {
            Confidence::Medium
        } else {
            Confidence::Low
        };
        let mut verdict = oom_led_by(
            format!("kernel: {}", cut.header),
            oom_verdict(
                Subtype::Kernel,
                confidence,
                observation,
                &memory,
                knob(cut.memcg.as_deref()),
            ),
        );
        verdict.evidence.push(if *by_worker {
            "the worker itself invoked the OOM killer; the report's `Killed process` line is not in the log given".to_string()
        } else {
            "an OOM report without its `Killed process` line (the log given ends or was cut before it)".to_string()
        });
        return with_child_report(verdict, report, &symptoms);
    }

    // 3. The scheduler or container runtime counted an OOM kill (or saw the limit reached by
    // a process that was then SIGKILLed).
    let reported = batch
        .iter()
        .find(|e| e.kind == BatchKind::MemoryKill)
        .map(|e| (e, Confidence::High))
        .or_else(|| {
            batch
                .iter()
                .find(|e| {
                    // Without a kill, the warning is often page cache counted against the
                    // limit of a job that went on to succeed.
                    e.kind == BatchKind::MemoryLimitReached && matches!(death, Some((SIGKILL, _)))
                })
                .map(|e| (e, Confidence::Medium))
        });
    if let Some((event, confidence)) = reported {
        let mut verdict = oom_led_by(
            format!("{}: {}", event.reporter, event.line),
            oom_verdict(
                Subtype::SchedulerReport,
                confidence,
                observation,
                &memory,
                knob(kill_memcg.as_deref()),
            ),
        );
        for other in batch
            .iter()
            .filter(|e| e.kind == BatchKind::ShellSignal || e.kind == BatchKind::ContainerExit)
            .take(2)
        {
            verdict
                .evidence
                .push(format!("{}: {}", other.reporter, other.line));
        }
        return with_child_report(verdict, report, &symptoms);
    }
    let killed_from_outside =
        matches!(death, Some((SIGKILL | SIGTERM, _))) || exit == Exit::Unknown;
    if killed_from_outside && let Some(kill) = memory.unattributed_userspace.first() {
        let mut verdict = oom_led_by(
            format!("{}: {}", kill.killer, kill.line),
            oom_verdict(
                Subtype::UserspaceKiller,
                Confidence::Medium,
                observation,
                &memory,
                Knob::Gen,
            ),
        );
        verdict
            .evidence
            .push("no pid given: the user-space killer's kill taken as the worker's".to_string());
        return with_child_report(verdict, report, &symptoms);
    }

    // 4. A time limit or a watchdog that is not gen's: not a memory problem. Such a stop ends
    // in a signal (or timeout(1)'s 124), never in a traceback's exit code.
    let stopped = death.is_some() || matches!(exit, Exit::Unknown | Exit::Code(124));
    if stopped
        && let Some(event) = batch.iter().find(|e| {
            matches!(
                e.kind,
                BatchKind::TimeLimit
                    | BatchKind::Watchdog
                    | BatchKind::Cancelled
                    | BatchKind::NodeFailure
            )
        })
    {
        return stopped_verdict(observation, event, batch);
    }

    let signature = native::find_signature(&texts.stderr);

    // 5. SIGKILL from outside gen.
    if let Some((SIGKILL, via_code)) = death {
        return sigkill_verdict(observation, &memory, batch, via_code, signature.as_ref());
    }

    // 6. Cleanup crash: outputs verified complete, then death anyway.
    if observation.outputs_complete {
        return cleanup_verdict(
            observation,
            signature.as_ref(),
            report.as_ref(),
            &texts.stderr,
        );
    }

    // 7. Traceback: a non-zero exit code with a report (or a Rust abort that printed one). A
    // child SIGKILLed behind it is the child's OOM, suspected, unless the kernel log says no.
    let code_failure = matches!(exit, Exit::Code(c) if c != 0) && death.is_none();
    if (code_failure || exit == Exit::Unknown)
        && let Some(verdict) =
            child_sigkill_verdict(observation, &memory, report.as_ref(), &symptoms)
    {
        return verdict;
    }
    let rust_abort = death.is_some_and(|(s, _)| s == SIGABRT)
        && report
            .as_ref()
            .is_some_and(|r| r.language == Language::Rust);
    if (code_failure && (report.is_some() || signature.is_none())) || rust_abort {
        if let Some(report) = report {
            if report.memory_related && report.language == Language::Rust {
                return allocation_verdict(report, observation, &texts.stderr, &memory);
            }
            let mut verdict = traceback_verdict(report.clone(), &symptoms);
            if report.memory_related && memory.kill.is_none() {
                verdict
                    .evidence
                    .extend(allocation_refused_python(observation));
            }
            // Kernel kills that were not the worker's (pid reuse, other pids) and why.
            verdict.evidence.extend(memory.rejected.iter().cloned());
            return verdict;
        }
        let line = native::last_exception_line(&texts.stderr)
            .or_else(|| native::last_meaningful_line(&texts.stderr));
        if let Some(line) = line {
            let mut verdict = Verdict::new(
                Class::Traceback,
                Some(Subtype::LastLine),
                Confidence::Medium,
            );
            verdict
                .evidence
                .push(format!("{exit}; no traceback; stderr says: {line}"));
            verdict
                .advice
                .push(format!("fix the error reported on stderr: {line}"));
            verdict.signature = Some(line);
            return with_symptoms(verdict, &symptoms);
        }
    }

    // 8. Other: signals, aborts, bare exit codes.
    let mut verdict = other_verdict(exit, death, signature, &memory);
    for event in batch
        .iter()
        .filter(|e| e.kind == BatchKind::ShellSignal)
        .take(1)
    {
        verdict
            .evidence
            .push(format!("{}: {}", event.reporter, event.line));
    }
    if let Some(event) = batch
        .iter()
        .find(|e| e.kind == BatchKind::MemoryLimitReached)
    {
        verdict.evidence.push(format!(
            "{}: {} (the limit was reached but nothing was killed for it: page cache counts toward it)",
            event.reporter, event.line
        ));
    }
    verdict
}

/// An OOM verdict whose first evidence line is the record that decided it.
fn oom_led_by(line: String, mut verdict: Verdict) -> Verdict {
    verdict.evidence.insert(0, line);
    verdict
}

fn kernel_subtype(scope: OomScope) -> Subtype {
    match scope {
        OomScope::Memcg => Subtype::KernelMemcg,
        OomScope::Global => Subtype::KernelGlobal,
        OomScope::Unknown => Subtype::Kernel,
    }
}

/// `gen` stopped the worker: a hang after complete output, its watchdog, or a cancel.
fn gen_kill_verdict(observation: &Observation) -> Verdict {
    if observation.outputs_complete {
        let mut v = Verdict::new(Class::CleanupAfterCompletion, None, Confidence::High);
        v.evidence.push(
            "outputs verified complete, then the worker hung until gen killed it".to_string(),
        );
        v.advice
            .push("nothing to do: output was complete".to_string());
        v.advice.push(
            "the worker hangs at exit (threads or pools not shut down); worth fixing".to_string(),
        );
        v
    } else if observation.timed_out {
        let mut v = Verdict::new(Class::Other, Some(Subtype::Timeout), Confidence::High);
        v.evidence
            .push("gen's watchdog fired, then gen killed the worker".to_string());
        v.advice.push(
            "find where it hangs (no progress) or raise the timeout, then rerun with --only-failed"
                .to_string(),
        );
        v
    } else {
        let mut v = Verdict::new(Class::Other, Some(Subtype::Cancelled), Confidence::High);
        v.evidence
            .push("gen stopped the worker (cancel or shutdown)".to_string());
        v.advice.push("rerun with --only-failed".to_string());
        v
    }
}

/// A scheduler's time limit, a watchdog, a cancel or a node failure ended it.
fn stopped_verdict(observation: &Observation, event: &BatchEvent, batch: &[BatchEvent]) -> Verdict {
    let quoted = format!("{}: {}", event.reporter, event.line);
    if observation.outputs_complete {
        let mut v = Verdict::new(Class::CleanupAfterCompletion, None, Confidence::High);
        v.evidence.push(format!(
            "outputs verified complete, then the worker was still running when it was stopped ({})",
            observation.exit
        ));
        v.evidence.push(quoted);
        v.signature = Some(event.line.clone());
        v.advice
            .push("nothing to do: output was complete".to_string());
        v.advice.push(
            "the worker hung at exit after finishing (threads of a streaming reader, pools, or an HF streaming dataset not closed) until it was killed late; worth fixing"
                .to_string(),
        );
        return v;
    }
    let (subtype, advice) = match event.kind {
        BatchKind::TimeLimit | BatchKind::Watchdog => (
            Subtype::TimeLimit,
            "killed for running too long, not for memory: find why it ran long or hung, or raise the time limit, then rerun",
        ),
        BatchKind::NodeFailure => (
            Subtype::ExternalKill,
            "the node failed under the job: rerun it elsewhere",
        ),
        _ => (
            Subtype::ExternalKill,
            "cancelled or preempted by a person or the scheduler, not for memory: rerun it",
        ),
    };
    let mut v = Verdict::new(Class::Other, Some(subtype), Confidence::High);
    v.evidence.push(quoted);
    for other in batch
        .iter()
        .filter(|e| e.kind == event.kind && e.line != event.line)
        .take(2)
    {
        v.evidence
            .push(format!("{}: {}", other.reporter, other.line));
    }
    v.evidence.push(format!("exit: {}", observation.exit));
    for other in batch
        .iter()
        .filter(|e| e.kind == BatchKind::ShellSignal)
        .take(2)
    {
        v.evidence
            .push(format!("{}: {}", other.reporter, other.line));
    }
    v.evidence
        .push("not an OOM: no memory kill was reported".to_string());
    v.signature = Some(crate::text::truncate(&event.line, 48));
    v.advice.push(advice.to_string());
    v
}

/// Rule 5: SIGKILL from outside `gen` with no record naming a killer.
fn sigkill_verdict(
    observation: &Observation,
    memory: &OomEvidence,
    batch: &[BatchEvent],
    via_code: bool,
    signature: Option<&native::NativeSignature>,
) -> Verdict {
    let vmstat_rose = memory.vmstat_delta.is_some_and(|d| d > 0);
    if let Some(confidence) = memory.heuristic_suspected_oom() {
        let mut verdict = oom_verdict(
            Subtype::SuspectedFromRss,
            confidence,
            observation,
            memory,
            Knob::Gen,
        );
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
        return verdict;
    }
    if observation.outputs_complete {
        let mut v = Verdict::new(Class::CleanupAfterCompletion, None, Confidence::High);
        v.evidence.push(format!(
            "outputs verified complete, then {} from outside gen (a hang at exit killed late)",
            observation.exit
        ));
        v.evidence.extend(memory.rss_line());
        if let Some(line) = native::last_meaningful_line(&stderr_of(observation)) {
            v.evidence.push(format!("stderr ends with: {line}"));
        }
        v.advice
            .push("nothing to do: output was complete".to_string());
        v.advice.push(
            "the worker hung at exit after finishing until something killed it; worth fixing"
                .to_string(),
        );
        return v;
    }
    let shell = batch
        .iter()
        .find(|e| e.kind == BatchKind::ShellSignal || e.kind == BatchKind::ContainerExit);
    if let Some(against) = memory.evidence_against_oom() {
        // A complete kernel log without a record is evidence enough on its own.
        let log_complete = !memory.log_incomplete() && !memory.log_empty;
        let confidence = if log_complete || memory.counter_delta.is_some() {
            Confidence::Medium
        } else {
            Confidence::Low
        };
        let mut verdict = Verdict::new(Class::Other, Some(Subtype::ExternalKill), confidence);
        if via_code {
            verdict
                .evidence
                .push("exit code 137 = 128 + SIGKILL (a wrapper reported the signal)".to_string());
        }
        verdict.evidence.push("SIGKILL not sent by gen".to_string());
        verdict.evidence.extend(memory.rss_line());
        verdict.evidence.push(against);
        verdict.evidence.extend(memory.rejected.iter().cloned());
        if let Some(event) = shell {
            verdict
                .evidence
                .push(format!("{}: {}", event.reporter, event.line));
        }
        verdict.advice.push(
            "something outside gen killed the worker (kill -9, scheduler, container stop): find it, then rerun with --only-failed"
                .to_string(),
        );
        return verdict;
    }
    // Nothing speaks for or against memory: the kernel OOM killer is the usual sender of an
    // unexplained SIGKILL.
    let runtime_saw_none = batch.iter().find(|e| e.kind == BatchKind::NoMemoryKill);
    let confidence = if shell.is_some() && runtime_saw_none.is_none() {
        Confidence::Medium
    } else {
        Confidence::Low
    };
    let mut verdict = oom_verdict(
        Subtype::SuspectedSigkill,
        confidence,
        observation,
        memory,
        Knob::from_evidence(&batch.iter().map(|e| e.reporter).collect::<Vec<_>>(), None),
    );
    if via_code {
        verdict
            .evidence
            .push("exit code 137 = 128 + SIGKILL (a wrapper reported the signal)".to_string());
    }
    if let Some(event) = shell {
        verdict
            .evidence
            .push(format!("{}: {}", event.reporter, event.line));
    }
    if let Some(event) = runtime_saw_none {
        verdict.evidence.push(format!(
            "{}: {} (no OOM kill inside the container's own limit; a host-wide OOM kill is still possible)",
            event.reporter, event.line
        ));
    }
    if let Some(signature) = signature {
        verdict.evidence.push(format!("stderr: {}", signature.line));
    }
    verdict.evidence.push(
        "SIGKILL with no time limit, cancel or watchdog in the logs; the kernel OOM killer is the usual sender".to_string(),
    );
    verdict.evidence.extend(memory.missing_lines());
    verdict.advice.push(
        "confirm with the kernel log of that time (dmesg -T, journalctl -k) or the scheduler's record (sacct, kubectl describe)"
            .to_string(),
    );
    verdict
}

/// Rule 6: complete output, then death by something other than a kill.
fn cleanup_verdict(
    observation: &Observation,
    signature: Option<&native::NativeSignature>,
    report: Option<&ErrorReport>,
    stderr: &str,
) -> Verdict {
    let mut verdict = Verdict::new(Class::CleanupAfterCompletion, None, Confidence::High);
    verdict.evidence.push(format!(
        "outputs verified complete, then {}",
        observation.exit
    ));
    let line = signature
        .map(|s| s.line.clone())
        .or_else(|| report.map(|r| r.primary().to_string()))
        .or_else(|| native::last_meaningful_line(stderr));
    if let Some(line) = &line {
        verdict.evidence.push(format!("stderr: {line}"));
    }
    verdict.signature = line;
    verdict
        .advice
        .push("nothing to do: output was complete".to_string());
    if signature.is_some_and(|s| s.at_shutdown) {
        verdict.advice.push(
            "the crash happens at interpreter shutdown (daemon threads or native pools still running); worth fixing, not urgent"
                .to_string(),
        );
    }
    verdict
}

/// A traceback raised because a child was SIGKILLed (DataLoader `killed by signal: Killed`,
/// torchrun `exitcode: -9`, joblib `SIGKILL(-9)`), with no kernel record either way: the
/// child's OOM, suspected. `None` when no child was SIGKILLed or the kernel log speaks against.
fn child_sigkill_verdict(
    observation: &Observation,
    memory: &OomEvidence,
    report: Option<&ErrorReport>,
    symptoms: &[Symptom],
) -> Option<Verdict> {
    let symptom = symptoms.iter().find(|s| s.signal == Some(SIGKILL))?;
    if memory.evidence_against_oom().is_some() {
        return None;
    }
    let mut verdict = oom_verdict(
        Subtype::SuspectedSigkill,
        Confidence::Medium,
        observation,
        memory,
        Knob::Gen,
    );
    verdict.evidence.insert(
        1,
        format!("a child was killed by SIGKILL: {}", symptom.line),
    );
    verdict.evidence.extend(memory.missing_lines());
    verdict.advice.insert(
        0,
        "a child of the worker was SIGKILLed with no other cause, most often by the kernel OOM killer: lower its parallelism (num_proc, DataLoader num_workers, pool size) or raise the memory it may use"
            .to_string(),
    );
    Some(with_child_report(verdict, report.cloned(), symptoms))
}

/// An OOM verdict that also carries the traceback the child's death caused: both are reported.
fn with_child_report(
    mut verdict: Verdict,
    report: Option<ErrorReport>,
    symptoms: &[Symptom],
) -> Verdict {
    let child_died = symptoms
        .iter()
        .any(|s| s.kind != native::SymptomKind::ResourceTracker);
    if let Some(report) = report
        && (child_died || verdict.evidence.iter().any(|e| e.starts_with("victim pid")))
    {
        let raised = report.primary();
        let at = raised
            .location
            .as_ref()
            .map(|l| format!(" at {l}"))
            .unwrap_or_default();
        verdict.evidence.push(format!(
            "traceback raised: {raised}{at}, caused by the child's OOM kill"
        ));
        verdict.error = Some(report);
    }
    with_symptoms(verdict, symptoms)
}

/// Python's `MemoryError`: like a refused allocation, not a kill.
fn allocation_refused_python(observation: &Observation) -> Vec<String> {
    let mut notes = vec![
        "not an OOM kill: Python could not allocate and raised MemoryError; under a memory cgroup or a host OOM the kernel kills with SIGKILL instead"
            .to_string(),
    ];
    if observation.memory_limit_bytes.is_none() {
        notes.push(
            "the limit that refused it is per-process: the address-space limit (`ulimit -v`, RLIMIT_AS), RLIMIT_DATA, or strict overcommit (vm.overcommit_memory=2)"
                .to_string(),
        );
    }
    notes
}

fn stderr_of(observation: &Observation) -> String {
    crate::text::strip_launcher_prefixes(&observation.stderr())
}

/// The signal that ended the worker, also when a wrapper turned it into 128 + N.
fn death_signal(exit: Exit) -> Option<(i32, bool)> {
    match exit {
        Exit::Signal { signal, .. } => Some((signal, false)),
        Exit::Code(code) if (129..=159).contains(&code) => Some((code - 128, true)),
        Exit::Code(_) | Exit::Unknown => None,
    }
}

fn finish(mut verdict: Verdict, observation: &Observation) -> Verdict {
    verdict.exit = Some(observation.exit);
    verdict.outputs_complete = observation.outputs_complete;
    verdict.evidence.retain(|line| !line.is_empty());
    let mut seen = std::collections::HashSet::new();
    verdict.advice.retain(|line| seen.insert(line.clone()));
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
