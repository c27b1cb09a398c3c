//! A source's preparation worker as its source directory keeps it: `worker.json` (the last
//! worker's [`WorkerReport`] and verdict, [`WorkerFile`]), the content hashes of the earlier
//! sources' prompts it leaves out (`earlier-prompts.hashes`), a custom worker's output and its
//! done marker, and the first sample set aside while the source is prepared again.

use std::path::{Path, PathBuf};

use gen_diagnostics::Verdict;
use serde::{Deserialize, Serialize};

use super::layout::SourceDir;
use super::{RunDir, atomic};
use crate::sys;

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitRecord {
    Code(i32),
    Signal { signal: i32, sent_by_gen: bool },
}

impl ExitRecord {
    pub fn success(self) -> bool {
        self == ExitRecord::Code(0)
    }

    pub fn describe(self) -> String {
        match self {
            ExitRecord::Code(code) => format!("exit code {code}"),
            ExitRecord::Signal {
                signal,
                sent_by_gen: true,
            } => format!("killed by {} sent by gen", sys::signal_name(signal)),
            ExitRecord::Signal { signal, .. } => format!("killed by {}", sys::signal_name(signal)),
        }
    }
}

/// One RSS reading of the worker's process tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RssSample {
    /// Milliseconds since the worker started.
    pub at_ms: u64,
    pub bytes: u64,
}

/// Everything observed about one worker run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReport {
    pub pid: i32,
    /// Descendants seen while sampling.
    pub child_pids: Vec<i32>,
    pub exit: ExitRecord,
    /// The larger of the sampled tree peak and the worker's own `ru_maxrss`.
    pub peak_rss_bytes: u64,
    pub rss_samples: Vec<RssSample>,
    pub started_unix_ms: u64,
    pub duration_ms: u64,
    /// Signals `gen` sent to the worker's group, in order.
    pub signals_sent: Vec<i32>,
    /// The worker's command name as the kernel knows it (`/proc/PID/comm`).
    pub comm: Option<String>,
    /// CLOCK_MONOTONIC at spawn and reap, microseconds (the clock of `/dev/kmsg`).
    #[serde(default)]
    pub spawn_usec: u64,
    #[serde(default)]
    pub exit_usec: u64,
    #[serde(default)]
    pub memory: MemoryCounters,
    /// The stall watchdog killed the worker.
    #[serde(default)]
    pub timed_out: bool,
}

/// What the worker's memory cgroup and the host counters said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryCounters {
    pub cgroup_path: Option<String>,
    /// Why the worker ran without a cap although one was asked for.
    pub cgroup_unavailable: Option<String>,
    pub limit_bytes: Option<u64>,
    pub cgroup_peak_bytes: Option<u64>,
    pub oom_kill_before: Option<u64>,
    pub oom_kill_after: Option<u64>,
    pub vmstat_oom_kill_before: Option<u64>,
    pub vmstat_oom_kill_after: Option<u64>,
}

/// The report of the source's last preparation worker when it failed (its `worker.json`); a
/// worker `gen` stopped because the run stopped did not fail.
pub fn last_failure(dir: &SourceDir) -> Option<WorkerReport> {
    WorkerFile::read(dir)
        .filter(|w| {
            let cancelled = w.verdict.as_ref().and_then(|v| v.subtype)
                == Some(gen_diagnostics::Subtype::Cancelled);
            !w.succeeded && !cancelled
        })
        .map(|w| w.report)
}

/// `worker.json`: the last preparation worker's report and whether it prepared its source.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerFile {
    pub succeeded: bool,
    pub report: WorkerReport,
    /// The diagnostics verdict, when the worker did not simply succeed.
    pub verdict: Option<Verdict>,
    /// Milliseconds from the worker's exit to its verdict (the budget is 1 s).
    pub verdict_ms: Option<u64>,
}

impl WorkerFile {
    /// The source's `worker.json`, when there is one that decodes.
    pub fn read(dir: &SourceDir) -> Option<WorkerFile> {
        atomic::read_json(&dir.worker()).ok().flatten()
    }
}

/// After a preparation again (see `run::sources::Sources`): drops the first sample set
/// aside when the new one is complete, or puts it back when it is not (the worker failed, or
/// `gen` stopped). Returns whether it was put back.
pub fn settle_first_sample(dir: &SourceDir) -> std::io::Result<bool> {
    if !dir.first_manifest().exists() {
        return Ok(false);
    }
    if dir.manifest().exists() {
        fs_err::remove_file(dir.first_manifest())?;
        fs_err::remove_file(dir.first_prompts()).ok();
        return Ok(false);
    }
    // Prompts first, manifest last, as a preparation writes them; each step can be redone.
    if dir.first_prompts().exists() {
        fs_err::rename(dir.first_prompts(), dir.prompts())?;
    }
    fs_err::rename(dir.first_manifest(), dir.manifest())?;
    Ok(true)
}

/// Writes the source's `worker.json`.
pub fn record_worker(
    dir: &SourceDir,
    report: &WorkerReport,
    verdict: Option<&Verdict>,
    succeeded: bool,
) -> anyhow::Result<()> {
    atomic::write_json(
        &dir.worker(),
        &WorkerFile {
            succeeded,
            report: report.clone(),
            verdict_ms: verdict
                .map(|_| sys::monotonic_usec().saturating_sub(report.exit_usec) / 1000),
            verdict: verdict.cloned(),
        },
    )?;
    Ok(())
}

/// Writes content hashes as little-endian u64s (atomically).
pub fn write_hashes(path: &Path, hashes: impl IntoIterator<Item = u64>) -> std::io::Result<()> {
    let mut hashes: Vec<u64> = hashes.into_iter().collect();
    hashes.sort_unstable();
    let bytes: Vec<u8> = hashes.iter().flat_map(|h| h.to_le_bytes()).collect();
    atomic::write(path, &bytes)
}

/// Reads what [`write_hashes`] wrote.
pub fn read_hashes(path: &Path) -> anyhow::Result<std::collections::HashSet<u64>> {
    let bytes = fs_err::read(path)?;
    anyhow::ensure!(
        bytes.len() % 8 == 0,
        "`{}` is damaged ({} bytes, not a whole number of hashes); delete it and run `gen run` again",
        path.display(),
        bytes.len()
    );
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}

/// Where a custom worker writes its rows, and the marker it creates when complete.
pub fn custom_output(run_dir: &RunDir, source: &str) -> (PathBuf, PathBuf) {
    let dir = run_dir.source(source);
    (
        dir.root().join("worker-output.jsonl"),
        dir.root().join("worker-output.done"),
    )
}

/// A custom worker's output counts as complete only with its done marker, and with the
/// expected number of rows when the config gives one.
pub fn custom_output_complete(run_dir: &RunDir, source: &str, expected: Option<u64>) -> bool {
    let (output, done) = custom_output(run_dir, source);
    if !done.exists() {
        return false;
    }
    match expected {
        None => true,
        Some(expected) => {
            let text = fs_err::read(&output).unwrap_or_default();
            let rows = text
                .split(|b| *b == b'\n')
                .filter(|l| !l.trim_ascii().is_empty())
                .count() as u64;
            rows >= expected
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source directory holding `files` (name → content).
    fn source(files: &[(&str, &str)]) -> (tempfile::TempDir, SourceDir) {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = RunDir::new(root.path()).source("s");
        fs_err::create_dir_all(dir.root()).expect("mkdir");
        for (name, text) in files {
            fs_err::write(dir.root().join(name), text).expect("write");
        }
        (root, dir)
    }

    fn names(dir: &SourceDir) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = fs_err::read_dir(dir.root())
            .expect("read_dir")
            .flatten()
            .map(|e| {
                let text = fs_err::read_to_string(e.path()).expect("read");
                (e.file_name().to_string_lossy().into_owned(), text)
            })
            .collect();
        files.sort();
        files
    }

    fn owned(files: &[(&str, &str)]) -> Vec<(String, String)> {
        files
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
            .collect()
    }

    #[test]
    fn a_complete_new_sample_replaces_the_first() {
        let (_root, dir) = source(&[
            ("manifest.first.json", "first"),
            ("prompts.first.jsonl.zst", "first"),
            ("manifest.json", "new"),
            ("prompts.jsonl.zst", "new"),
        ]);
        assert!(!settle_first_sample(&dir).expect("settle"));
        assert_eq!(
            names(&dir),
            owned(&[("manifest.json", "new"), ("prompts.jsonl.zst", "new")])
        );
    }

    #[test]
    fn a_failed_new_sample_gives_the_first_back_from_any_step() {
        let first = [("manifest.json", "first"), ("prompts.jsonl.zst", "first")];
        for files in [
            // The worker failed after writing part of its temporary file.
            &[
                ("manifest.first.json", "first"),
                ("prompts.first.jsonl.zst", "first"),
                ("prompts.jsonl.zst.tmp", "partial"),
            ][..],
            // It renamed its new prompts into place, then died before its manifest.
            &[
                ("manifest.first.json", "first"),
                ("prompts.first.jsonl.zst", "first"),
                ("prompts.jsonl.zst", "new"),
            ],
            // `gen` stopped between setting the manifest and the prompts aside.
            &[
                ("manifest.first.json", "first"),
                ("prompts.jsonl.zst", "first"),
            ],
        ] {
            let (_root, dir) = source(files);
            assert!(settle_first_sample(&dir).expect("settle"), "{files:?}");
            let left: Vec<(String, String)> = names(&dir)
                .into_iter()
                .filter(|(n, _)| !n.ends_with(".tmp"))
                .collect();
            assert_eq!(left, owned(&first), "{files:?}");
            assert!(!settle_first_sample(&dir).expect("again"), "{files:?}");
        }
    }

    #[test]
    fn nothing_set_aside_changes_nothing() {
        let files = [("manifest.json", "m"), ("prompts.jsonl.zst", "p")];
        let (_root, dir) = source(&files);
        assert!(!settle_first_sample(&dir).expect("settle"));
        assert_eq!(names(&dir), owned(&files));
    }
}
