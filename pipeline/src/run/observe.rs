//! Turns what the supervisor collected about a dead worker into the diagnostics crate's
//! [`Observation`], and classifies it. Collection happens here; judgement in `gen-diagnostics`.

use std::path::Path;

use gen_diagnostics::{Exit, KernelLog, Observation, RssSample, Verdict};

use crate::store::worker::{ExitRecord, WorkerReport};

/// Bytes of stderr kept from the end (where tracebacks are) and from the start.
const TAIL_BYTES: usize = 16 * 1024;
const HEAD_BYTES: usize = 4 * 1024;

/// `MemTotal` of the host, bytes.
pub fn host_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    crate::sys::meminfo_field(&text, "MemTotal")
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

/// Bytes of decoded input the largest-row scan reads at most: past this, the scan answers with
/// the largest row seen so far (a lower bound) rather than hold up the run.
const ROW_SCAN_BUDGET: u64 = 8 << 30;

/// The longest record among a source's local JSON-lines inputs (plain, `.zst` or `.gz`), bytes:
/// a worker holds and parses a whole row at once, so after an OOM this sizes the memory a row
/// needs. `None` for Hub sources, columnar or JSON-array files, and inputs that cannot be read.
pub fn largest_input_row(spec: &gen_sources::SourceSpec, base_dir: &Path) -> Option<u64> {
    if spec.repo.is_some() {
        return None;
    }
    let files = gen_sources::prepare::resolve_files(spec, base_dir).ok()?;
    let mut budget = ROW_SCAN_BUDGET;
    let mut largest = None;
    let json_lines = |file: &&std::path::PathBuf| {
        gen_sources::read::format_of(spec.format, file) == gen_sources::spec::Format::Jsonl
    };
    for file in files.iter().filter(json_lines) {
        let Ok(reader) = gen_sources::read::open_decoded(file) else {
            continue;
        };
        if let Some(longest) = longest_line(reader, &mut budget) {
            largest = largest.max(Some(longest));
        }
        if budget == 0 {
            break;
        }
    }
    largest
}

/// The length of the longest line of `reader`, reading at most `budget` bytes (decreased by
/// what was read). `None` when nothing could be read.
fn longest_line(mut reader: impl std::io::Read, budget: &mut u64) -> Option<u64> {
    let mut buffer = vec![0u8; 1 << 20];
    let (mut current, mut longest, mut read_any) = (0u64, 0u64, false);
    while *budget > 0 {
        let n = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        read_any = true;
        *budget = budget.saturating_sub(n as u64);
        let mut start = 0;
        for end in memchr::memchr_iter(b'\n', &buffer[..n]) {
            longest = longest.max(current + (end - start) as u64);
            current = 0;
            start = end + 1;
        }
        current += (n - start) as u64;
    }
    read_any.then_some(longest.max(current))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_line_is_found_across_buffer_boundaries_and_without_a_final_newline() {
        let mut data = b"short\n".to_vec();
        data.extend(std::iter::repeat_n(b'x', 3 << 20));
        data.extend(b"\nmid\n");
        data.extend(std::iter::repeat_n(b'y', 5 << 20));
        let mut budget = u64::MAX;
        assert_eq!(longest_line(&data[..], &mut budget), Some(5 << 20));
        assert_eq!(u64::MAX - budget, data.len() as u64);
    }

    #[test]
    fn the_scan_stops_at_its_budget_with_what_it_saw() {
        let data = [b"a\n".as_slice(), &[b'z'; 4 << 20]].concat();
        let mut budget = 1 << 20;
        assert_eq!(longest_line(&data[..], &mut budget), Some((1 << 20) - 2));
        assert_eq!(budget, 0);
    }
}
