//! Turns what the supervisor collected about a dead worker into the diagnostics crate's
//! [`Observation`], and classifies it. Collection happens here; judgement in `gen-diagnostics`.

use std::path::Path;

use gen_diagnostics::{Exit, KernelLog, Observation, RssSample, Verdict};

use super::supervisor::{ExitRecord, WorkerReport};

/// Bytes of stderr kept from the end (where tracebacks are) and from the start.
const TAIL_BYTES: usize = 16 * 1024;
const HEAD_BYTES: usize = 4 * 1024;

/// `MemTotal` of the host, bytes.
pub fn host_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    line.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|kib| kib * 1024)
}

/// Splits a log into (head, tail), head empty when the whole log fits the tail.
fn head_and_tail(log: &Path) -> (String, String) {
    let bytes = std::fs::read(log).unwrap_or_default();
    if bytes.len() <= TAIL_BYTES {
        return (String::new(), String::from_utf8_lossy(&bytes).into_owned());
    }
    let head = String::from_utf8_lossy(&bytes[..HEAD_BYTES]).into_owned();
    let tail = String::from_utf8_lossy(&bytes[bytes.len() - TAIL_BYTES..]).into_owned();
    (head, tail)
}

/// The observation of one worker run.
pub fn observation(
    report: &WorkerReport,
    log: &Path,
    kernel_log: KernelLog,
    outputs_complete: bool,
) -> Observation {
    let exit = match report.exit {
        ExitRecord::Code(code) => Exit::Code(code),
        ExitRecord::Signal {
            signal,
            sent_by_gen,
        } => Exit::Signal {
            signal,
            sent_by_gen,
        },
    };
    let (stderr_head, stderr_tail) = head_and_tail(log);
    let spawn_ms = report.spawn_usec / 1000;
    let mut observation = Observation::new(exit, u32::try_from(report.pid).unwrap_or(0));
    observation.child_pids = report
        .child_pids
        .iter()
        .filter_map(|p| u32::try_from(*p).ok())
        .collect();
    // A sampled name can predate an exec (shims, launchers); with the worker's own cgroup to
    // match kernel lines on, the name adds nothing but that risk.
    observation.comm = if report.memory.cgroup_path.is_some() {
        None
    } else {
        report.comm.clone()
    };
    observation.cgroup_path = report.memory.cgroup_path.as_ref().map(|p| {
        // Kernel lines name cgroups relative to the hierarchy root.
        p.strip_prefix("/sys/fs/cgroup/memory")
            .or_else(|| p.strip_prefix("/sys/fs/cgroup"))
            .unwrap_or(p)
            .to_owned()
    });
    observation.spawn_usec = Some(report.spawn_usec);
    observation.exit_usec = Some(report.exit_usec);
    observation.rss_samples = report
        .rss_samples
        .iter()
        .map(|s| RssSample {
            at_ms: spawn_ms + s.at_ms,
            bytes: s.bytes,
        })
        .collect();
    observation.peak_rss_bytes = Some(report.peak_rss_bytes);
    observation.memory_limit_bytes = report.memory.limit_bytes;
    observation.host_memory_bytes = host_memory_bytes();
    observation.oom_kill_before = report.memory.oom_kill_before;
    observation.oom_kill_after = report.memory.oom_kill_after;
    observation.vmstat_oom_kill_before = report.memory.vmstat_oom_kill_before;
    observation.vmstat_oom_kill_after = report.memory.vmstat_oom_kill_after;
    observation.kernel_log = kernel_log;
    observation.stderr_head = stderr_head;
    observation.stderr_tail = stderr_tail;
    observation.outputs_complete = outputs_complete;
    observation.timed_out = report.timed_out;
    observation
}

/// Classifies a worker run.
pub fn verdict(observation: &Observation) -> Verdict {
    gen_diagnostics::classify(observation)
}
