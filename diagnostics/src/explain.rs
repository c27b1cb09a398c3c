//! Phrasing of verdicts: evidence lines and advice for each kind of finding.
//!
//! `classify` decides which rule fired; these builders only turn that decision and the gathered
//! evidence into the text people read in `gen status` and `gen diagnose`. No rule order here.

use crate::evidence::{MemoryEvidence, kill_line};
use crate::native::{self, NativeKind, NativeSignature, SymptomKind};
use crate::observation::{Exit, Observation, signal_name};
use crate::text::{human_bytes, limit_setting};
use crate::verdict::{Class, Confidence, ErrorReport, Language, Subtype, Verdict};

const SIGABRT: i32 = 6;
const SIGSEGV: i32 = 11;

pub(crate) fn oom_verdict(
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

pub(crate) fn traceback_verdict(report: ErrorReport, symptoms: &[native::Symptom]) -> Verdict {
    let subtype = match report.language {
        Language::Python => Subtype::Python,
        Language::Rust => Subtype::Rust,
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
pub(crate) fn with_symptoms(mut verdict: Verdict, symptoms: &[native::Symptom]) -> Verdict {
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

pub(crate) fn other_verdict(
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
