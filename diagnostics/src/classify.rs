//! The worker classifier: [`classify`] gathers the [`Evidence`] once, then asks each rule of
//! [`RULES`] in turn; the first verdict wins, and `rule_other` answers when none does. In order:
//!
//! 1. `rule_success`: exit 0 with verified outputs (stderr is never mined);
//! 2. `rule_killed_by_gen`: `gen` sent the fatal signal: a hang, a timeout or a cancel, never OOM;
//! 3. `rule_oom_counter`: OOM by the cgroup's `oom_kill` counter;
//! 4. `rule_userspace_killer`: OOM by a user-space killer naming the worker's pid or cgroup;
//! 5. `rule_kernel_kill`: OOM by a kernel kill record of the worker or a descendant;
//! 6. `rule_kernel_kill_of_unnamed_child`: of a pid in its lifetime, when a child died unnamed;
//! 7. `rule_kernel_kill_without_pid`: with no pid known, the log's own kill;
//! 8. `rule_kernel_report_cut_short`: an OOM report whose `Killed process` line is missing;
//! 9. `rule_scheduler_oom`: OOM reported by the scheduler or runtime (Slurm, Kubernetes, ...);
//! 10. `rule_userspace_killer_without_pid`: a user-space killer in a log without a pid;
//! 11. `rule_stopped_after_complete_output`: a time limit or watchdog not `gen`'s, after complete
//!     output: a cleanup crash;
//! 12. `rule_stopped_from_outside`: such a stop otherwise: a time limit, never an OOM;
//! 13. `rule_sigkill_near_limit`: SIGKILL from outside `gen` near the limit: suspected OOM;
//! 14. `rule_sigkill_after_complete_output`: SIGKILL after complete output: a cleanup crash;
//! 15. `rule_sigkill_external`: SIGKILL with evidence against OOM: an external kill;
//! 16. `rule_sigkill_suspected_oom`: any other SIGKILL: a suspected OOM;
//! 17. `rule_cleanup_crash`: outputs verified complete, then death anyway;
//! 18. `rule_child_sigkill`: a traceback a child's SIGKILL caused: the child's suspected OOM;
//! 19. `rule_allocation_failure`: a Rust allocation failure (memory refused, not a kill);
//! 20. `rule_traceback`: a traceback or panic;
//! 21. `rule_last_line`: a failing exit code without a report: stderr's last words;
//! 22. `rule_other`: signals, aborts, bare exit codes.
//!
//! A child's OOM kill outranks the traceback it caused because the OOM rules run first.
//! What to do about a verdict is policy, not decided here.

use crate::batch::{self, BatchEvent, BatchKind};
use crate::evidence::{OomEvidence, ResolvedExit, Texts, heuristic_exit};
use crate::explain::{
    Knob, allocation_verdict, oom_verdict, other_verdict, traceback_verdict, with_symptoms,
};
use crate::native::{self, NativeSignature, Symptom, SymptomKind};
use crate::observation::{Exit, Observation};
use crate::oom::{OomKill, OomScope};
use crate::verdict::{Class, Confidence, ErrorReport, Language, Subtype, Verdict};
use crate::{panic, traceback};

const SIGABRT: i32 = 6;
const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

/// The rules in the order the module docs give; the first verdict wins.
const RULES: &[fn(&Evidence) -> Option<Verdict>] = &[
    rule_success,
    rule_killed_by_gen,
    rule_oom_counter,
    rule_userspace_killer,
    rule_kernel_kill,
    rule_kernel_kill_of_unnamed_child,
    rule_kernel_kill_without_pid,
    rule_kernel_report_cut_short,
    rule_scheduler_oom,
    rule_userspace_killer_without_pid,
    rule_stopped_after_complete_output,
    rule_stopped_from_outside,
    rule_sigkill_near_limit,
    rule_sigkill_after_complete_output,
    rule_sigkill_external,
    rule_sigkill_suspected_oom,
    rule_cleanup_crash,
    rule_child_sigkill,
    rule_allocation_failure,
    rule_traceback,
    rule_last_line,
];

/// Classifies one dead worker. The rule order is the contract; see the module docs.
pub fn classify(observation: &Observation) -> Verdict {
    let evidence = Evidence::gather(observation);
    let verdict = RULES
        .iter()
        .find_map(|rule| rule(&evidence))
        .unwrap_or_else(|| rule_other(&evidence));
    finish(verdict, &evidence)
}

/// What the rules read, gathered once: the observation with its exit resolved, the texts and
/// what was parsed from them.
struct Evidence {
    observation: Observation,
    /// The line the exit was read from, when it was not given.
    inferred_from: Option<String>,
    texts: Texts,
    batch: Vec<BatchEvent>,
    report: Option<ErrorReport>,
    symptoms: Vec<Symptom>,
    memory: OomEvidence,
    signature: Option<NativeSignature>,
    /// The signal that ended the worker, and whether a wrapper reported it as 128 + N.
    death: Option<(i32, bool)>,
}

impl Evidence {
    fn gather(observation: &Observation) -> Self {
        let texts = Texts::of(observation);
        let batch = batch::scan(&texts.all);
        let report = traceback::parse(&texts.stderr).or_else(|| panic::parse(&texts.stderr));
        let ResolvedExit {
            exit,
            inferred_from,
        } = heuristic_exit(observation.exit, &batch, report.as_ref(), &texts.stderr);
        let observation = Observation {
            exit,
            ..observation.clone()
        };
        let symptoms = native::symptoms(&texts.all);
        let memory = OomEvidence::gather(&observation, &texts, &symptoms, &batch);
        Evidence {
            observation,
            inferred_from,
            signature: native::find_signature(&texts.stderr),
            death: death_signal(exit),
            texts,
            batch,
            report,
            symptoms,
            memory,
        }
    }

    fn oom(&self, subtype: Subtype, confidence: Confidence, knob: Knob) -> Verdict {
        oom_verdict(subtype, confidence, &self.observation, &self.memory, knob)
    }

    /// Where the limit is set: from the scheduler that reported, else the victim's cgroup.
    fn knob(&self, memcg: Option<&str>) -> Knob {
        let reporters: Vec<&str> = self.batch.iter().map(|e| e.reporter).collect();
        Knob::from_evidence(&reporters, memcg)
    }

    /// The knob for the matched kernel kill, else the log's first kill.
    fn kill_knob(&self) -> Knob {
        let kill = self.memory.kill.as_ref().map(|(kill, _)| kill);
        self.knob(kill.or(self.memory.unattributed.first()).and_then(memcg_of))
    }

    /// The worker reports a child's death (not the resource tracker's noise).
    fn child_died(&self) -> bool {
        self.symptoms
            .iter()
            .any(|s| s.kind != SymptomKind::ResourceTracker)
    }

    /// `Some(via_code)` when the worker died of SIGKILL.
    fn sigkill(&self) -> Option<bool> {
        match self.death {
            Some((SIGKILL, via_code)) => Some(via_code),
            _ => None,
        }
    }

    fn sigkill_or_unknown(&self) -> bool {
        self.sigkill().is_some() || self.observation.exit == Exit::Unknown
    }

    /// A non-zero exit code that is no signal in disguise.
    fn code_failure(&self) -> bool {
        matches!(self.observation.exit, Exit::Code(c) if c != 0) && self.death.is_none()
    }

    /// A failing exit code with a report (or a Rust abort that printed one), or one with no
    /// native crash signature: a traceback or the last line explains it.
    fn traceback_expected(&self) -> bool {
        let rust_report = self
            .report
            .as_ref()
            .is_some_and(|r| r.language == Language::Rust);
        let rust_abort = self.death.is_some_and(|(s, _)| s == SIGABRT) && rust_report;
        (self.code_failure() && (self.report.is_some() || self.signature.is_none())) || rust_abort
    }

    /// A scheduler's time limit, a watchdog, a cancel or a node failure, when the worker
    /// ended as such a stop does: by a signal (or timeout(1)'s 124), never a traceback's code.
    fn stop_event(&self) -> Option<&BatchEvent> {
        let exit = self.observation.exit;
        let stopped = self.death.is_some() || matches!(exit, Exit::Unknown | Exit::Code(124));
        let stops = [
            BatchKind::TimeLimit,
            BatchKind::Watchdog,
            BatchKind::Cancelled,
            BatchKind::NodeFailure,
        ];
        self.batch
            .iter()
            .find(|e| stopped && stops.contains(&e.kind))
    }

    /// The first batch line of `kind`.
    fn batch_event(&self, kind: BatchKind) -> Option<&BatchEvent> {
        self.batch.iter().find(|e| e.kind == kind)
    }

    fn batch_lines(&self, kinds: &[BatchKind], count: usize) -> impl Iterator<Item = String> {
        let events = self.batch.iter().filter(move |e| kinds.contains(&e.kind));
        events
            .take(count)
            .map(|e| format!("{}: {}", e.reporter, e.line))
    }

    /// An OOM verdict that also carries the traceback the child's death caused: both are
    /// reported.
    fn with_child_report(&self, mut verdict: Verdict) -> Verdict {
        if let Some(report) = &self.report
            && (self.child_died() || verdict.evidence.iter().any(|e| e.starts_with("victim pid")))
        {
            let raised = report.primary().located();
            verdict.note(format!(
                "traceback raised: {raised}, caused by the child's OOM kill"
            ));
            verdict.error = Some(report.clone());
        }
        with_symptoms(verdict, &self.symptoms)
    }
}

/// Exit code 0 and outputs verified complete: success, whatever stderr says.
fn rule_success(e: &Evidence) -> Option<Verdict> {
    if e.observation.exit != Exit::Code(0) || !e.observation.outputs_complete {
        return None;
    }
    let mut verdict = Verdict::new(Class::Success, None, Confidence::High);
    verdict.note("exit code 0 and outputs verified complete");
    verdict.advise("nothing to do: output was complete");
    Some(verdict)
}

/// `gen` sent the fatal signal (watchdog, cancel, shutdown): never OOM. A timed-out worker that
/// a wrapper reported as 128 + N counts as killed by gen; a signal recorded as not sent by gen
/// (the kernel killed it during the grace period) goes on to the other rules.
fn rule_killed_by_gen(e: &Evidence) -> Option<Verdict> {
    let observation = &e.observation;
    let killed_by_gen = match observation.exit {
        Exit::Signal { sent_by_gen, .. } => sent_by_gen,
        Exit::Code(_) | Exit::Unknown => observation.timed_out,
    };
    if !killed_by_gen {
        return None;
    }
    let mut v;
    if observation.outputs_complete {
        v = Verdict::new(Class::CleanupAfterCompletion, None, Confidence::High);
        v.note("outputs verified complete, then the worker hung until gen killed it");
        v.advise("nothing to do: output was complete");
        v.advise("the worker hangs at exit (threads or pools not shut down); worth fixing");
    } else if observation.timed_out {
        v = Verdict::new(Class::Other, Some(Subtype::Timeout), Confidence::High);
        v.note("gen's watchdog fired, then gen killed the worker");
        v.advise(
            "find where it hangs (no progress) or raise the timeout, then rerun with --only-failed",
        );
    } else {
        v = Verdict::new(Class::Other, Some(Subtype::Cancelled), Confidence::High);
        v.note("gen stopped the worker (cancel or shutdown)");
        v.advise("rerun with --only-failed");
    }
    if let Some(delta) = e.memory.counter_delta.filter(|d| *d > 0) {
        v.note(format!(
            "note: the cgroup's oom_kill rose by {delta} during the run (a killed child can cause a hang)"
        ));
    }
    Some(v)
}

/// The cgroup's `oom_kill` counter rose.
fn rule_oom_counter(e: &Evidence) -> Option<Verdict> {
    e.memory.counter_delta.filter(|d| *d > 0)?;
    let subtype = match &e.memory.kill {
        Some((kill, _)) => kernel_subtype(kill.scope),
        None => Subtype::CgroupCounter,
    };
    let line = e.memory.counter_line(&e.observation).unwrap_or_default();
    let verdict = e.oom(subtype, Confidence::High, e.kill_knob());
    Some(e.with_child_report(oom_led_by(line, verdict)))
}

/// A user-space killer named the worker's pid or cgroup. A kernel kill of the same worker
/// outranks the killer's SIGTERM unless the worker died of that SIGTERM.
fn rule_userspace_killer(e: &Evidence) -> Option<Verdict> {
    let kill = e.memory.userspace.as_ref()?;
    if e.memory.kill.is_some() && !matches!(e.death, Some((SIGTERM, _))) {
        return None;
    }
    let verdict = e.oom(Subtype::UserspaceKiller, Confidence::High, Knob::Gen);
    let line = format!("{}: {}", kill.killer, kill.line);
    Some(e.with_child_report(oom_led_by(line, verdict)))
}

/// A kernel kill record of the worker or a descendant.
fn rule_kernel_kill(e: &Evidence) -> Option<Verdict> {
    let (kill, timed) = e.memory.kill.as_ref()?;
    // Without stamps comparable with the worker's lifetime, pid reuse cannot be ruled out.
    let confidence = if *timed {
        Confidence::High
    } else {
        Confidence::Medium
    };
    let verdict = e.oom(kernel_subtype(kill.scope), confidence, e.kill_knob());
    Some(e.with_child_report(verdict))
}

/// A child the worker reports dead without naming it (datasets' map, a process pool), and the
/// kernel killing a pid not known to be the worker's inside its lifetime while the worker
/// itself exited with a code (so it was not the victim): that child's OOM kill.
fn rule_kernel_kill_of_unnamed_child(e: &Evidence) -> Option<Verdict> {
    let unnamed_child_died = e.symptoms.iter().any(|s| {
        s.kind != SymptomKind::ResourceTracker
            && s.pids.is_empty()
            && s.signal.is_none_or(|signal| signal == SIGKILL)
    });
    let [(kill, timed), ..] = e.memory.strangers.as_slice() else {
        return None;
    };
    if e.death.is_some() || !unnamed_child_died {
        return None;
    }
    let pids: Vec<String> = e
        .memory
        .strangers
        .iter()
        .map(|(k, _)| format!("{} ({})", k.pid, k.comm))
        .collect();
    let mut memory = e.memory.clone();
    memory
        .rejected
        .retain(|line| !line.starts_with("the kernel log's OOM kills are of other pids"));
    memory.kill = Some((kill.clone(), *timed));
    let (subtype, knob) = (kernel_subtype(kill.scope), e.knob(memcg_of(kill)));
    let mut verdict = oom_verdict(subtype, Confidence::Medium, &e.observation, &memory, knob);
    verdict.note(format!(
        "the worker reports a child's death without naming it, and the kernel killed {} {} inside its lifetime: taken as that child (its pid was not recorded as the worker's)",
        if pids.len() == 1 { "pid" } else { "pids" },
        pids.join(", ")
    ));
    Some(e.with_child_report(verdict))
}

/// No pid known: the log's own kill explains a SIGKILL, or a child's death behind a report.
fn rule_kernel_kill_without_pid(e: &Evidence) -> Option<Verdict> {
    let first = e.memory.unattributed.first()?;
    if !(e.sigkill_or_unknown() || e.child_died()) {
        return None;
    }
    let mut victims: Vec<u32> = e.memory.unattributed.iter().map(|k| k.pid).collect();
    victims.dedup();
    let (confidence, plural, hint) = match victims.len() {
        1 => (Confidence::Medium, "", ""),
        _ => (Confidence::Low, "s", "; pass --pid to pick one"),
    };
    let knob = e.knob(memcg_of(first));
    let mut verdict = e.oom(kernel_subtype(first.scope), confidence, knob);
    let lines = e
        .memory
        .unattributed
        .iter()
        .take(3)
        .map(|k| format!("kernel: {}", k.line));
    let position = 1.min(verdict.evidence.len());
    verdict.evidence.splice(position..position, lines);
    let victims: Vec<String> = victims.iter().map(u32::to_string).collect();
    verdict.note(format!(
        "no pid given: the kernel log's OOM kill{plural} (pid {}) taken as the worker's{hint}",
        victims.join(", "),
    ));
    Some(e.with_child_report(verdict))
}

/// A log cut before the kill line: the report's header is all there is.
fn rule_kernel_report_cut_short(e: &Evidence) -> Option<Verdict> {
    let (cut, by_worker) = e.memory.report_without_kill.as_ref()?;
    if !(e.sigkill_or_unknown() || e.child_died()) || (e.memory.target_pid != 0 && !*by_worker) {
        return None;
    }
    let confidence = if *by_worker {
        Confidence::Medium
    } else {
        Confidence::Low
    };
    let knob = e.knob(cut.memcg.as_deref());
    let line = format!("kernel: {}", cut.header);
    let mut verdict = oom_led_by(line, e.oom(Subtype::Kernel, confidence, knob));
    verdict.note(if *by_worker {
        "the worker itself invoked the OOM killer; the report's `Killed process` line is not in the log given"
    } else {
        "an OOM report without its `Killed process` line (the log given ends or was cut before it)"
    });
    Some(e.with_child_report(verdict))
}

/// The scheduler or container runtime counted an OOM kill (or saw the limit reached by a
/// process that was then SIGKILLed).
fn rule_scheduler_oom(e: &Evidence) -> Option<Verdict> {
    let (event, confidence) = match e.batch_event(BatchKind::MemoryKill) {
        Some(event) => (event, Confidence::High),
        // Without a kill, the warning is often page cache counted against the limit of a job
        // that went on to succeed.
        None if e.sigkill().is_some() => (
            e.batch_event(BatchKind::MemoryLimitReached)?,
            Confidence::Medium,
        ),
        None => return None,
    };
    let verdict = e.oom(Subtype::SchedulerReport, confidence, e.kill_knob());
    let line = format!("{}: {}", event.reporter, event.line);
    let mut verdict = oom_led_by(line, verdict);
    let reports = [BatchKind::ShellSignal, BatchKind::ContainerExit];
    verdict.evidence.extend(e.batch_lines(&reports, 2));
    Some(e.with_child_report(verdict))
}

/// A user-space killer's kill in logs that name no pid, when something outside killed the worker.
fn rule_userspace_killer_without_pid(e: &Evidence) -> Option<Verdict> {
    let killed_from_outside =
        matches!(e.death, Some((SIGKILL | SIGTERM, _))) || e.observation.exit == Exit::Unknown;
    let kill = e.memory.unattributed_userspace.first()?;
    if !killed_from_outside {
        return None;
    }
    let verdict = e.oom(Subtype::UserspaceKiller, Confidence::Medium, Knob::Gen);
    let mut verdict = oom_led_by(format!("{}: {}", kill.killer, kill.line), verdict);
    verdict.note("no pid given: the user-space killer's kill taken as the worker's");
    Some(e.with_child_report(verdict))
}

/// A time limit or watchdog that is not gen's stopped a worker whose output was complete.
fn rule_stopped_after_complete_output(e: &Evidence) -> Option<Verdict> {
    let event = e.stop_event()?;
    if !e.observation.outputs_complete {
        return None;
    }
    let mut v = Verdict::new(Class::CleanupAfterCompletion, None, Confidence::High);
    v.note(format!(
        "outputs verified complete, then the worker was still running when it was stopped ({})",
        e.observation.exit
    ));
    v.note(format!("{}: {}", event.reporter, event.line));
    v.signature = Some(event.line.clone());
    v.advise("nothing to do: output was complete");
    v.advise("the worker hung at exit after finishing (threads of a streaming reader, pools, or an HF streaming dataset not closed) until it was killed late; worth fixing");
    Some(v)
}

/// A scheduler's time limit, a watchdog, a cancel or a node failure ended it: not a memory
/// problem.
fn rule_stopped_from_outside(e: &Evidence) -> Option<Verdict> {
    let event = e.stop_event()?;
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
    v.note(format!("{}: {}", event.reporter, event.line));
    let same_kind = e
        .batch
        .iter()
        .filter(|other| other.kind == event.kind && other.line != event.line)
        .take(2);
    v.evidence
        .extend(same_kind.map(|other| format!("{}: {}", other.reporter, other.line)));
    v.note(format!("exit: {}", e.observation.exit));
    v.evidence
        .extend(e.batch_lines(&[BatchKind::ShellSignal], 2));
    v.note("not an OOM: no memory kill was reported");
    v.signature = Some(crate::text::truncate(&event.line, 48));
    v.advise(advice);
    Some(v)
}

/// SIGKILL from outside `gen` with memory near the limit (or a host-wide OOM kill) and the
/// kernel evidence that would prove it missing: a suspected OOM.
fn rule_sigkill_near_limit(e: &Evidence) -> Option<Verdict> {
    e.sigkill()?;
    let memory = &e.memory;
    let confidence = memory.heuristic_suspected_oom()?;
    let mut verdict = e.oom(Subtype::SuspectedFromRss, confidence, Knob::Gen);
    if let Some(delta) = memory.vmstat_delta.filter(|d| *d > 0) {
        verdict.note(format!("/proc/vmstat oom_kill rose by {delta} (host-wide)"));
    }
    verdict.evidence.extend(memory.missing_lines());
    verdict.advise(if memory.log_unavailable.is_some() {
        "make the kernel log readable to confirm (CAP_SYSLOG, or sysctl kernel.dmesg_restrict=0)"
    } else {
        "kernel records were lost or missing: follow /dev/kmsg from the start of the run to confirm"
    });
    Some(verdict)
}

/// SIGKILL from outside `gen` after complete output: a hang at exit, killed late.
fn rule_sigkill_after_complete_output(e: &Evidence) -> Option<Verdict> {
    e.sigkill()?;
    if !e.observation.outputs_complete {
        return None;
    }
    let mut v = Verdict::new(Class::CleanupAfterCompletion, None, Confidence::High);
    v.note(format!(
        "outputs verified complete, then {} from outside gen (a hang at exit killed late)",
        e.observation.exit
    ));
    v.evidence.extend(e.memory.rss_line());
    if let Some(line) = native::last_meaningful_line(&e.texts.stderr) {
        v.note(format!("stderr ends with: {line}"));
    }
    v.advise("nothing to do: output was complete");
    v.advise("the worker hung at exit after finishing until something killed it; worth fixing");
    Some(v)
}

/// SIGKILL from outside `gen` while the evidence speaks against an OOM: someone killed it.
fn rule_sigkill_external(e: &Evidence) -> Option<Verdict> {
    let via_code = e.sigkill()?;
    let memory = &e.memory;
    let against = memory.evidence_against_oom()?;
    // A complete kernel log without a record is evidence enough on its own.
    let log_complete = !memory.log_incomplete() && !memory.log_empty;
    let confidence = if log_complete || memory.counter_delta.is_some() {
        Confidence::Medium
    } else {
        Confidence::Low
    };
    let mut verdict = Verdict::new(Class::Other, Some(Subtype::ExternalKill), confidence);
    if via_code {
        verdict.note("exit code 137 = 128 + SIGKILL (a wrapper reported the signal)");
    }
    verdict.note("SIGKILL not sent by gen");
    verdict.evidence.extend(memory.rss_line());
    verdict.note(against);
    verdict.evidence.extend(memory.rejected.iter().cloned());
    let reports = [BatchKind::ShellSignal, BatchKind::ContainerExit];
    verdict.evidence.extend(e.batch_lines(&reports, 1));
    verdict.advise("something outside gen killed the worker (kill -9, scheduler, container stop): find it, then rerun with --only-failed");
    Some(verdict)
}

/// SIGKILL from outside `gen` and nothing speaks for or against memory: the kernel OOM killer
/// is the usual sender of an unexplained SIGKILL.
fn rule_sigkill_suspected_oom(e: &Evidence) -> Option<Verdict> {
    let via_code = e.sigkill()?;
    let shell = e.batch.iter().find(|event| {
        matches!(
            event.kind,
            BatchKind::ShellSignal | BatchKind::ContainerExit
        )
    });
    let runtime_saw_none = e.batch_event(BatchKind::NoMemoryKill);
    let confidence = if shell.is_some() && runtime_saw_none.is_none() {
        Confidence::Medium
    } else {
        Confidence::Low
    };
    let mut verdict = e.oom(Subtype::SuspectedSigkill, confidence, e.knob(None));
    if via_code {
        verdict.note("exit code 137 = 128 + SIGKILL (a wrapper reported the signal)");
    }
    if let Some(event) = shell {
        verdict.note(format!("{}: {}", event.reporter, event.line));
    }
    if let Some(event) = runtime_saw_none {
        verdict.note(format!(
            "{}: {} (no OOM kill inside the container's own limit; a host-wide OOM kill is still possible)",
            event.reporter, event.line
        ));
    }
    if let Some(signature) = &e.signature {
        verdict.note(format!("stderr: {}", signature.line));
    }
    verdict.note("SIGKILL with no time limit, cancel or watchdog in the logs; the kernel OOM killer is the usual sender");
    verdict.evidence.extend(e.memory.missing_lines());
    verdict.advise("confirm with the kernel log of that time (dmesg -T, journalctl -k) or the scheduler's record (sacct, kubectl describe)");
    Some(verdict)
}

/// Complete output, then death by something other than a kill.
fn rule_cleanup_crash(e: &Evidence) -> Option<Verdict> {
    if !e.observation.outputs_complete {
        return None;
    }
    let mut verdict = Verdict::new(Class::CleanupAfterCompletion, None, Confidence::High);
    let exit = e.observation.exit;
    verdict.note(format!("outputs verified complete, then {exit}"));
    let line = e
        .signature
        .as_ref()
        .map(|s| s.line.clone())
        .or_else(|| e.report.as_ref().map(|r| r.primary().to_string()))
        .or_else(|| native::last_meaningful_line(&e.texts.stderr));
    if let Some(line) = &line {
        verdict.note(format!("stderr: {line}"));
    }
    verdict.signature = line;
    verdict.advise("nothing to do: output was complete");
    if e.signature.as_ref().is_some_and(|s| s.at_shutdown) {
        verdict.advise("the crash happens at interpreter shutdown (daemon threads or native pools still running); worth fixing, not urgent");
    }
    Some(verdict)
}

/// A failing exit behind which a child was SIGKILLed (DataLoader `killed by signal: Killed`,
/// torchrun `exitcode: -9`, joblib `SIGKILL(-9)`), with no kernel record either way: the
/// child's OOM, suspected, unless the kernel log speaks against it.
fn rule_child_sigkill(e: &Evidence) -> Option<Verdict> {
    if !(e.code_failure() || e.observation.exit == Exit::Unknown) {
        return None;
    }
    let symptom = e.symptoms.iter().find(|s| s.signal == Some(SIGKILL))?;
    if e.memory.evidence_against_oom().is_some() {
        return None;
    }
    let mut verdict = e.oom(Subtype::SuspectedSigkill, Confidence::Medium, Knob::Gen);
    verdict.evidence.insert(
        1,
        format!("a child was killed by SIGKILL: {}", symptom.line),
    );
    verdict.evidence.extend(e.memory.missing_lines());
    verdict.advice.insert(
        0,
        "a child of the worker was SIGKILLed with no other cause, most often by the kernel OOM killer: lower its parallelism (num_proc, DataLoader num_workers, pool size) or raise the memory it may use"
            .to_string(),
    );
    Some(e.with_child_report(verdict))
}

/// A Rust allocation failure: memory refused, not a kill.
fn rule_allocation_failure(e: &Evidence) -> Option<Verdict> {
    let report = e.report.as_ref()?;
    if !e.traceback_expected() || !report.memory_related || report.language != Language::Rust {
        return None;
    }
    let verdict = allocation_verdict(report.clone(), &e.observation, &e.texts.stderr, &e.memory);
    Some(verdict)
}

/// A traceback or panic explains the failing exit.
fn rule_traceback(e: &Evidence) -> Option<Verdict> {
    let report = e.report.as_ref()?;
    if !e.traceback_expected() {
        return None;
    }
    let mut verdict = traceback_verdict(report.clone(), &e.symptoms);
    if report.memory_related && e.memory.kill.is_none() {
        // Python's `MemoryError`: like a refused allocation, not a kill.
        verdict.note("not an OOM kill: Python could not allocate and raised MemoryError; under a memory cgroup or a host OOM the kernel kills with SIGKILL instead");
        if e.observation.memory_limit_bytes.is_none() {
            verdict.note("the limit that refused it is per-process: the address-space limit (`ulimit -v`, RLIMIT_AS), RLIMIT_DATA, or strict overcommit (vm.overcommit_memory=2)");
        }
    }
    // Kernel kills that were not the worker's (pid reuse, other pids) and why.
    verdict.evidence.extend(e.memory.rejected.iter().cloned());
    Some(verdict)
}

/// A failing exit code with no report: the exception line or stderr's last words.
fn rule_last_line(e: &Evidence) -> Option<Verdict> {
    if !e.traceback_expected() {
        return None;
    }
    let stderr = &e.texts.stderr;
    let line =
        native::last_exception_line(stderr).or_else(|| native::last_meaningful_line(stderr))?;
    let kind = Some(Subtype::LastLine);
    let mut verdict = Verdict::new(Class::Traceback, kind, Confidence::Medium);
    let exit = e.observation.exit;
    verdict.note(format!("{exit}; no traceback; stderr says: {line}"));
    verdict.advise(format!("fix the error reported on stderr: {line}"));
    verdict.signature = Some(line);
    Some(with_symptoms(verdict, &e.symptoms))
}

/// The end of the chain: signals, aborts, bare exit codes.
fn rule_other(e: &Evidence) -> Verdict {
    let mut verdict = other_verdict(e.observation.exit, e.death, e.signature.clone(), &e.memory);
    let shell = e.batch_lines(&[BatchKind::ShellSignal], 1);
    verdict.evidence.extend(shell);
    if let Some(event) = e.batch_event(BatchKind::MemoryLimitReached) {
        verdict.note(format!(
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

/// The victim's memory cgroup, as the kill record names it.
fn memcg_of(kill: &OomKill) -> Option<&str> {
    kill.task_memcg.as_deref().or(kill.oom_memcg.as_deref())
}

/// The signal that ended the worker, also when a wrapper turned it into 128 + N.
fn death_signal(exit: Exit) -> Option<(i32, bool)> {
    match exit {
        Exit::Signal { signal, .. } => Some((signal, false)),
        Exit::Code(code) if (129..=159).contains(&code) => Some((code - 128, true)),
        Exit::Code(_) | Exit::Unknown => None,
    }
}

fn finish(mut verdict: Verdict, evidence: &Evidence) -> Verdict {
    let observation = &evidence.observation;
    let exit = observation.exit;
    if let Some(line) = &evidence.inferred_from {
        let quoted_below = verdict.evidence.iter().any(|e| e.contains(line));
        verdict.evidence.insert(
            0,
            if quoted_below {
                format!("exit status not given; read as {exit} from the line quoted below")
            } else {
                format!("exit status not given; read as {exit} from: {line}")
            },
        );
    }
    verdict.exit = Some(exit);
    verdict.outputs_complete = observation.outputs_complete;
    verdict.evidence.retain(|line| !line.is_empty());
    let mut seen = std::collections::HashSet::new();
    verdict.advice.retain(|line| seen.insert(line.clone()));
    if observation.timed_out && verdict.subtype != Some(Subtype::Timeout) {
        verdict.note("note: gen's watchdog had fired before the worker died");
    }
    if observation.outputs_complete && verdict.class == Class::Oom {
        verdict.advise("outputs were verified complete before the kill and can be kept");
    }
    verdict
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The rule names as a module doc lists them (`N. `rule_…``) and as its `RULES` slice does.
    pub(crate) fn documented_and_chained(source: &str) -> (Vec<&str>, Vec<&str>) {
        let documented = source
            .lines()
            .map_while(|line| line.strip_prefix("//!"))
            .filter_map(|line| line.trim_start().split_once(". `"))
            .filter(|(number, _)| number.parse::<u32>().is_ok())
            .filter_map(|(_, rest)| rest.split_once('`').map(|(name, _)| name))
            .collect();
        let (_, chain) = source
            .split_once("Option<Verdict>] = &[")
            .expect("a RULES slice");
        let (chain, _) = chain.split_once("];").expect("the end of RULES");
        let chained = chain.split(',').map(str::trim).filter(|n| !n.is_empty());
        (documented, chained.collect())
    }

    #[test]
    fn the_module_doc_lists_the_chain_in_order() {
        let (documented, mut chained) = documented_and_chained(include_str!("classify.rs"));
        chained.push("rule_other");
        assert_eq!(documented, chained);
    }

    /// Each rule with an observation (JSON, as `gen diagnose --observation` reads it) that it is
    /// the first to decide: no rule is shadowed by the ones before it.
    const CASES: &[(&str, &str)] = &[
        (
            "rule_success",
            r#"{"exit": {"code": 0}, "pid": 1, "outputs_complete": true}"#,
        ),
        (
            "rule_killed_by_gen",
            r#"{"exit": {"signal": 9, "sent_by_gen": true}, "pid": 1}"#,
        ),
        (
            "rule_oom_counter",
            r#"{"exit": {"signal": 9}, "pid": 1, "oom_kill_before": 0, "oom_kill_after": 1}"#,
        ),
        (
            "rule_userspace_killer",
            r#"{"exit": {"signal": 15}, "pid": 9001, "other_log": "earlyoom[512]: sending SIGTERM to process 9001 uid 1000 \"python3\": oom_score 933, VmRSS 14200 MiB"}"#,
        ),
        (
            "rule_kernel_kill",
            r#"{"exit": {"signal": 9}, "pid": 9142, "kernel_log": {"kind": "text", "text": "Memory cgroup out of memory: Killed process 9142 (python3) total-vm:75160kB, anon-rss:65280kB, file-rss:6636kB, shmem-rss:0kB"}}"#,
        ),
        (
            "rule_kernel_kill_of_unnamed_child",
            r#"{"exit": {"code": 1}, "pid": 4000, "stderr_tail": "RuntimeError: One of the subprocesses has abruptly died during map operation.", "kernel_log": {"kind": "text", "text": "Memory cgroup out of memory: Killed process 9142 (python3) total-vm:75160kB, anon-rss:65280kB, file-rss:6636kB, shmem-rss:0kB"}}"#,
        ),
        (
            "rule_kernel_kill_without_pid",
            r#"{"exit": {"signal": 9}, "pid": 0, "kernel_log": {"kind": "text", "text": "Memory cgroup out of memory: Killed process 9142 (python3) total-vm:75160kB, anon-rss:65280kB, file-rss:6636kB, shmem-rss:0kB"}}"#,
        ),
        (
            "rule_kernel_report_cut_short",
            r#"{"exit": {"signal": 9}, "pid": 0, "kernel_log": {"kind": "text", "text": "[  355.147341] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"}}"#,
        ),
        (
            "rule_scheduler_oom",
            r#"{"exit": {"unknown": true}, "pid": 0, "other_log": "slurmstepd: error: Detected 1 oom_kill event in StepId=440575.0. Some of the step tasks have been OOM Killed."}"#,
        ),
        (
            "rule_userspace_killer_without_pid",
            r#"{"exit": {"signal": 9}, "pid": 0, "other_log": "earlyoom[512]: sending SIGTERM to process 9001 uid 1000 \"python3\": oom_score 933, VmRSS 14200 MiB"}"#,
        ),
        (
            "rule_stopped_after_complete_output",
            r#"{"exit": {"signal": 15}, "pid": 1, "outputs_complete": true, "other_log": "slurmstepd: error: *** JOB 12 ON node1 CANCELLED AT 2025-01-01T00:00:00 DUE TO TIME LIMIT ***"}"#,
        ),
        (
            "rule_stopped_from_outside",
            r#"{"exit": {"signal": 15}, "pid": 1, "other_log": "slurmstepd: error: *** JOB 12 ON node1 CANCELLED AT 2025-01-01T00:00:00 DUE TO TIME LIMIT ***"}"#,
        ),
        (
            "rule_sigkill_near_limit",
            r#"{"exit": {"signal": 9}, "pid": 1, "peak_rss_bytes": 66060288, "memory_limit_bytes": 67108864}"#,
        ),
        (
            "rule_sigkill_after_complete_output",
            r#"{"exit": {"signal": 9}, "pid": 1, "outputs_complete": true}"#,
        ),
        (
            "rule_sigkill_external",
            r#"{"exit": {"signal": 9}, "pid": 1, "kernel_log": {"kind": "text", "text": ""}, "oom_kill_before": 0, "oom_kill_after": 0}"#,
        ),
        (
            "rule_sigkill_suspected_oom",
            r#"{"exit": {"signal": 9}, "pid": 1}"#,
        ),
        (
            "rule_cleanup_crash",
            r#"{"exit": {"code": 1}, "pid": 1, "outputs_complete": true}"#,
        ),
        (
            "rule_child_sigkill",
            r#"{"exit": {"code": 1}, "pid": 1, "stderr_tail": "RuntimeError: DataLoader worker (pid 77) is killed by signal: Killed."}"#,
        ),
        (
            "rule_allocation_failure",
            r#"{"exit": {"signal": 6}, "pid": 1, "stderr_tail": "memory allocation of 70368744177664 bytes failed\n"}"#,
        ),
        (
            "rule_traceback",
            r#"{"exit": {"code": 1}, "pid": 1, "stderr_tail": "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nKeyError: 'prompt'\n"}"#,
        ),
        (
            "rule_last_line",
            r#"{"exit": {"code": 1}, "pid": 1, "stderr_tail": "error: the input has no rows\n"}"#,
        ),
        ("rule_other", r#"{"exit": {"signal": 11}, "pid": 1}"#),
    ];

    #[test]
    fn every_rule_decides_a_case_of_its_own() {
        let (_, chained) = documented_and_chained(include_str!("classify.rs"));
        let mut decided = Vec::new();
        for (rule, json) in CASES {
            let observation: Observation = serde_json::from_str(json).expect(rule);
            let evidence = Evidence::gather(&observation);
            let first = RULES.iter().position(|rule| rule(&evidence).is_some());
            decided.push((*rule, first.map_or("rule_other", |i| chained[i])));
        }
        let expected: Vec<_> = CASES.iter().map(|(rule, _)| (*rule, *rule)).collect();
        assert_eq!(decided, expected);
        let listed: Vec<&str> = CASES.iter().map(|(rule, _)| *rule).collect();
        assert_eq!(
            listed[..chained.len()],
            chained,
            "one case per rule, in chain order"
        );
    }
}
