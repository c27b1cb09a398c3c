//! `gen slurm CONFIG --shards N`: writes (and with `--submit`, submits) an `sbatch` job array
//! in which task `k` runs `gen run CONFIG --shard auto --shards N` on shard `k` — starting its
//! own inference server from `[server] launch` on its node — and `--only-failed` resubmits
//! just the shards that are not done (`--array=3,7`). With `--nodes-per-shard K` each task
//! gets K nodes and its `gen run` starts the server across them (`super::nodes`). Above the
//! cluster's `MaxArraySize` M, `--submit` splits the job into arrays of task ids below M, each
//! given the shard of its task 0 (`GEN_SHARD_OFFSET`) as the script's argument.
//!
//! Prepare once: while `RUN_ROOT/prepared` lacks a source, a preparation job
//! (`gen-prepare.sbatch`, `gen prepare CONFIG --run-dir RUN_ROOT`) goes first and the array
//! waits for it (`--dependency=afterok`; `--kill-on-invalid-dep=yes`, so a failed
//! preparation ends the array's tasks instead of leaving them pending forever). The tasks
//! then take the prepared sources instead of downloading them (`super::prepared`).
//!
//! Signals: Slurm sends SIGTERM to every process of a cancelled or preempted task, `gen`
//! included, and `gen` stops gracefully on it (no new requests, in-flight ones get a grace
//! period, everything stored). The script asks for SIGUSR1 ahead of the time limit
//! (`--signal=B:USR1@SECS`, to the batch shell only) and passes it on to `gen`, which stops
//! the same way; with `--requeue` the script then requeues its own task, which takes its
//! shard back when it starts again.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::nodes::quote;
use super::owner;
use super::root::{self, RunRoot};
use crate::config::Plan;
use crate::sys;

/// What `gen slurm` was asked for (the command line, resolved). Kept in
/// `RUN_ROOT/slurm/submit.json` so that `--only-failed` resubmits the way the job was submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJob {
    pub config: PathBuf,
    pub root: PathBuf,
    pub shards: u32,
    /// `--server-launch`, passed on to every task's `gen run`.
    pub server_launch: Option<String>,
    pub requeue: bool,
    /// Seconds before the time limit that the task is told to stop (SIGUSR1).
    pub signal_secs: u32,
    /// The `gen` binary the tasks run.
    pub gen_bin: PathBuf,
    pub job_name: String,
    /// Extra `sbatch` options, one `#SBATCH` line each.
    pub sbatch_options: Vec<String>,
    /// `--nodes-per-shard`: nodes per array task, the server launched across them
    /// (`super::nodes`); 1 in a record written before there was a choice.
    #[serde(default = "one_node")]
    pub nodes_per_shard: u32,
    /// `--max-running`: at most this many tasks at once (`--array=…%N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
    /// The arrays `--submit` submitted last: one, or one per `MaxArraySize` shards.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arrays: Vec<Submission>,
}

fn one_node() -> u32 {
    1
}

/// `RUN_ROOT/slurm/jobs.jsonl`: one line per submitted job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    pub job_id: String,
    /// The array's task ids (`0-999`), or `prepare` for the preparation job.
    pub array: String,
    /// Added to a task id to give its shard (the second of arrays split at `MaxArraySize`
    /// 1000 starts at 1000).
    #[serde(default)]
    pub offset: u32,
    pub script: String,
    pub submitted_unix_ms: u64,
}

impl SlurmJob {
    /// How the tasks are submitted, in one line: what `--only-failed` says it reuses.
    pub fn describe(&self) -> String {
        self.describe_parts().join(", ")
    }

    /// [`SlurmJob::describe`] in parts, for `gen status RUN_ROOT` to show a line each.
    pub fn describe_parts(&self) -> Vec<String> {
        let mut parts = Vec::new();
        if !self.sbatch_options.is_empty() {
            parts.push(format!("sbatch {}", self.sbatch_options.join(" ")));
        }
        if self.requeue {
            parts.push("--requeue".to_owned());
        }
        if self.nodes_per_shard > 1 {
            parts.push(format!("{} nodes per shard", self.nodes_per_shard));
        }
        match self.max_running {
            Some(1) => parts.push("one task at a time".to_owned()),
            Some(n) => parts.push(format!("at most {n} tasks at once")),
            None => {}
        }
        parts.push(format!(
            "SIGUSR1 {} s before the time limit",
            self.signal_secs
        ));
        match &self.server_launch {
            Some(launch) => parts.push(format!("server `{launch}`")),
            None => parts.push("server from `[server] launch`".to_owned()),
        }
        parts.push(format!("gen `{}`", self.gen_bin.display()));
        if !self.arrays.is_empty() {
            let arrays: Vec<String> = (self.arrays.iter())
                .map(|a| match a.offset {
                    0 => format!("{} (array {})", a.job_id, a.array),
                    from => format!("{} (array {} from shard {from})", a.job_id, a.array),
                })
                .collect();
            parts.push(format!("job {}", arrays.join(", ")));
        }
        parts
    }
}

/// `RUN_ROOT/slurm/tasks/K.json`: how the last task of shard `K` ended, written by the batch
/// script after `gen` exited (or failed to start).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskEnd {
    /// The array's job id (`%A` in the log's name).
    pub job: String,
    pub task: u32,
    /// `gen`'s exit status as the shell saw it (127: not found, 126: not executable).
    pub exit: i32,
    pub host: String,
}

impl TaskEnd {
    /// The task's log, `RUN_ROOT/slurm/%A_%a.out`.
    pub fn log(&self, root: &Path) -> PathBuf {
        root.join("slurm")
            .join(format!("{}_{}.out", self.job, self.task))
    }
}

fn tasks_dir(root: &Path) -> PathBuf {
    root.join("slurm").join("tasks")
}

/// How the last task of shard `index` ended, if the batch script recorded it.
pub fn task_end(root: &Path, index: u32) -> Option<TaskEnd> {
    let path = tasks_dir(root).join(format!("{index}.json"));
    crate::store::atomic::read_json(&path).ok().flatten()
}

/// `RUN_ROOT/slurm/submit.json`.
fn submit_path(root: &RunRoot) -> PathBuf {
    root.slurm_dir().join("submit.json")
}

/// How the job in `root` was last submitted (written or submitted by `gen slurm`), if known.
/// A damaged record is warned about and ignored: the command line then says everything.
pub fn submitted(root: &Path) -> Option<SlurmJob> {
    let path = submit_path(&RunRoot::new(root));
    match crate::store::atomic::read_json::<SlurmJob>(&path) {
        Ok(job) => job,
        Err(error) => {
            crate::report::plain(&format!(
                "gen: warning: how the job was submitted cannot be read ({error}); only this \
                 command line's options are used"
            ));
            None
        }
    }
}

/// Short `sbatch` options by their long names, so that `-t…` given again replaces a kept
/// `--time=…`.
const SHORT_OPTIONS: [(&str, &str); 14] = [
    ("A", "account"),
    ("C", "constraint"),
    ("D", "chdir"),
    ("G", "gpus"),
    ("J", "job-name"),
    ("N", "nodes"),
    ("c", "cpus-per-task"),
    ("e", "error"),
    ("n", "ntasks"),
    ("o", "output"),
    ("p", "partition"),
    ("q", "qos"),
    ("t", "time"),
    ("w", "nodelist"),
];

/// The name an `sbatch` option sets: `time` for `--time=1:00:00`, `-t1:00:00` and `--time`.
fn option_name(option: &str) -> &str {
    match option.strip_prefix("--") {
        Some(long) => long.split('=').next().unwrap_or(long),
        None => {
            let short = option.get(1..2).unwrap_or_default();
            SHORT_OPTIONS
                .iter()
                .find(|(s, _)| *s == short)
                .map_or(short, |(_, long)| *long)
        }
    }
}

/// The kept `sbatch` options with each one `given` again replaced, and the new ones after: a
/// rerun given `-- --time=24:00:00` keeps the first submission's partition and GPUs.
pub fn sbatch_options_over(kept: &[String], given: &[String]) -> Vec<String> {
    let replaced: Vec<&str> = given.iter().map(|o| option_name(o)).collect();
    kept.iter()
        .filter(|o| !replaced.contains(&option_name(o)))
        .chain(given)
        .cloned()
        .collect()
}

/// `0-2,5,7-8` for the sorted shard numbers.
pub fn array_spec(shards: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < shards.len() {
        let start = shards[i];
        let mut end = start;
        while i + 1 < shards.len() && shards[i + 1] == end + 1 {
            i += 1;
            end = shards[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end > start {
            write!(out, "{start}-{end}").ok();
        } else {
            write!(out, "{start}").ok();
        }
        i += 1;
    }
    out
}

/// The batch script for the array `array` (e.g. `0-7` or `3,7`).
pub fn script(job: &SlurmJob, array: &str) -> anyhow::Result<String> {
    for option in &job.sbatch_options {
        anyhow::ensure!(
            !option.contains('\n'),
            "the sbatch option {option:?} spans lines"
        );
        anyhow::ensure!(
            option.starts_with('-'),
            "`{option}` is not an sbatch option (they start with `-`, e.g. `--partition=gpu`)"
        );
        anyhow::ensure!(
            !matches!(option_name(option), "nodes" | "ntasks-per-node"),
            "the sbatch option `{option}`: give the nodes of a shard with `gen slurm \
             --nodes-per-shard N` instead, which also starts the server across them"
        );
    }
    let mut s = script_header(job, array);
    writeln!(s).ok();
    if job.nodes_per_shard > 1 {
        s.push_str(
            "# The server's step (srun) gets the task's CPUs only when told (Slurm 22.05 on).\n\
             if [ -n \"${SLURM_CPUS_PER_TASK:-}\" ]; then\n  \
             export SRUN_CPUS_PER_TASK=\"$SLURM_CPUS_PER_TASK\"\nfi\n",
        );
    }
    write!(
        s,
        r#"export GEN_SHARDS={shards}
# Above the cluster's MaxArraySize, `gen slurm --submit` splits the job into arrays of task ids
# 0-(MaxArraySize-1), each given the shard its task 0 runs.
export GEN_SHARD_OFFSET="${{1:-0}}"
shard=$((GEN_SHARD_OFFSET + SLURM_ARRAY_TASK_ID))
# Slurm kills the task KillWait (30 s by default) after SIGTERM: in-flight requests get 15 s,
# so gen has stored everything and let its shard go before then (none when the server got the
# SIGTERM too: gen stops as soon as it stops answering).
export GEN_SHUTDOWN_GRACE_SECS="${{GEN_SHUTDOWN_GRACE_SECS:-15}}"
stop_signal=""
# Slurm sends SIGTERM to every process of the task itself; the shell only has to outlive it.
trap 'true' TERM
# SIGUSR1 (time limit ahead) reaches this shell only: pass it on.
trap 'stop_signal=USR1; kill -USR1 "$gen_pid" 2>/dev/null' USR1
echo "gen slurm: task ${{SLURM_ARRAY_TASK_ID}} of job ${{SLURM_ARRAY_JOB_ID}} (shard $shard) on $(hostname) (restart ${{SLURM_RESTART_COUNT:-0}})"
{run} &
gen_pid=$!
# `wait` returns early when a trapped signal arrives; wait again until gen itself has exited.
while :; do
  wait "$gen_pid"
  status=$?
  kill -0 "$gen_pid" 2>/dev/null || break
done
# How the task ended, for `gen status` when gen never got to write its shard's status (a wrong
# gen binary exits 127): written whole, then renamed into place.
task_end={tasks}/"$shard".json
printf '{{"job": "%s", "task": %s, "exit": %s, "host": "%s"}}\n' "$SLURM_ARRAY_JOB_ID" \
  "$SLURM_ARRAY_TASK_ID" "$status" "$(hostname)" > "$task_end.tmp" && mv "$task_end.tmp" "$task_end"
"#,
        shards = job.shards,
        run = run_line(job),
        tasks = quote(&tasks_dir(&job.root).display().to_string()),
    )
    .ok();
    if job.requeue {
        s.push_str(
            r#"if [ "$stop_signal" = USR1 ] && [ "$status" -ne 0 ]; then
  echo "gen slurm: stopped before the time limit; requeueing this task"
  scontrol requeue "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
fi
"#,
        );
    }
    s.push_str("exit \"$status\"\n");
    Ok(s)
}

/// The script's first lines: what wrote it, then the `#SBATCH` options.
fn script_header(job: &SlurmJob, array: &str) -> String {
    let logs = job.root.join("slurm");
    let mut s = String::new();
    writeln!(s, "#!/bin/bash").ok();
    writeln!(
        s,
        "# Written by `gen slurm`: array task K runs shard OFFSET + K of {} of `{}`",
        job.shards,
        job.config.display()
    )
    .ok();
    writeln!(
        s,
        "# (OFFSET: this script's argument, 0 when none), with its own inference server.\n\
         # `gen status {}` shows every shard.",
        job.root.display()
    )
    .ok();
    writeln!(s, "#SBATCH --job-name={}", job.job_name).ok();
    match job.max_running {
        Some(n) => writeln!(s, "#SBATCH --array={array}%{n}").ok(),
        None => writeln!(s, "#SBATCH --array={array}").ok(),
    };
    writeln!(s, "#SBATCH --output={}/%A_%a.out", logs.display()).ok();
    writeln!(s, "#SBATCH --open-mode=append").ok();
    writeln!(s, "#SBATCH --signal=B:USR1@{}", job.signal_secs).ok();
    if job.requeue {
        writeln!(s, "#SBATCH --requeue").ok();
    }
    if job.nodes_per_shard > 1 {
        // One task per node: the server's step runs once on each (`gen run --nodes-per-shard`).
        writeln!(s, "#SBATCH --nodes={}", job.nodes_per_shard).ok();
        writeln!(s, "#SBATCH --ntasks-per-node=1").ok();
    }
    for option in &job.sbatch_options {
        writeln!(s, "#SBATCH {option}").ok();
    }
    s
}

/// The sbatch options that ask for GPUs, which the preparation job leaves out.
const GPU_OPTIONS: [&str; 8] = [
    "gres",
    "gpus",
    "gpus-per-node",
    "gpus-per-task",
    "gpus-per-socket",
    "cpus-per-gpu",
    "mem-per-gpu",
    "gpu-bind",
];

/// The preparation job's script: `gen prepare` of every source into `RUN_ROOT/prepared`,
/// with the array's sbatch options (its partition, account and time limit) but its GPUs.
pub fn prepare_script(job: &SlurmJob) -> String {
    let mut s = String::new();
    writeln!(s, "#!/bin/bash").ok();
    writeln!(
        s,
        "# Written by `gen slurm`: prepares every source of `{}` once, into",
        job.config.display()
    )
    .ok();
    writeln!(
        s,
        "# {}/prepared, for the {} shards of the array that waits for this job.",
        job.root.display(),
        job.shards
    )
    .ok();
    writeln!(s, "#SBATCH --job-name={}-prepare", job.job_name).ok();
    let log = preparation_log(&job.root, "%j");
    writeln!(s, "#SBATCH --output={}", log.display()).ok();
    writeln!(s, "#SBATCH --open-mode=append").ok();
    let (gpu, other): (Vec<&String>, Vec<&String>) = job
        .sbatch_options
        .iter()
        .partition(|o| GPU_OPTIONS.contains(&option_name(o)));
    if !gpu.is_empty() {
        let gpu: Vec<&str> = gpu.iter().map(|o| o.as_str()).collect();
        writeln!(s, "# Preparing needs no GPU: left out {}", gpu.join(" ")).ok();
    }
    for option in other {
        writeln!(s, "#SBATCH {option}").ok();
    }
    writeln!(s).ok();
    writeln!(
        s,
        "echo \"gen slurm: preparing once for job {} on $(hostname)\"",
        job.job_name
    )
    .ok();
    writeln!(
        s,
        "{} prepare {} --run-dir {}",
        quote(&job.gen_bin.display().to_string()),
        quote(&job.config.display().to_string()),
        quote(&job.root.display().to_string())
    )
    .ok();
    write!(
        s,
        r#"status=$?
# How it ended, for `gen status` when gen never got to write the preparation's status.
task_end={tasks}/prepare.json
printf '{{"job": "%s", "task": 0, "exit": %s, "host": "%s"}}\n' "$SLURM_JOB_ID" "$status" \
  "$(hostname)" > "$task_end.tmp" && mv "$task_end.tmp" "$task_end"
exit "$status"
"#,
        tasks = quote(&tasks_dir(&job.root).display().to_string()),
    )
    .ok();
    s
}

/// How the last preparation job ended, if its script recorded it.
pub fn preparation_end(root: &Path) -> Option<TaskEnd> {
    crate::store::atomic::read_json(&tasks_dir(root).join("prepare.json"))
        .ok()
        .flatten()
}

/// The preparation job's log, `RUN_ROOT/slurm/prepare-%j.out`.
pub fn preparation_log(root: &Path, job: &str) -> PathBuf {
    root.join("slurm").join(format!("prepare-{job}.out"))
}

/// The `gen run` command line each array task runs, quoted for the shell.
fn run_line(job: &SlurmJob) -> String {
    let mut run = vec![
        quote(&job.gen_bin.display().to_string()),
        "run".to_owned(),
        quote(&job.config.display().to_string()),
        "--shard auto".to_owned(),
        format!("--shards {}", job.shards),
        format!("--run-dir {}", quote(&job.root.display().to_string())),
    ];
    if let Some(launch) = &job.server_launch {
        run.push(format!("--server-launch {}", quote(launch)));
    }
    if job.nodes_per_shard > 1 {
        run.push(format!("--nodes-per-shard {}", job.nodes_per_shard));
    }
    run.join(" ")
}

/// A shard that is not finished and why it is (or is not) resubmitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    pub index: u32,
    /// `Some(reason)`: not resubmitted, because it is running or queued.
    pub busy: Option<String>,
}

/// The shards of `root` that are not done, each marked busy when a live task owns it or
/// Slurm still has its task queued or running (`queued`: shard numbers from `squeue`).
pub fn unfinished(
    root: &RunRoot,
    queued: &BTreeSet<u32>,
    lease: std::time::Duration,
) -> anyhow::Result<Vec<Unfinished>> {
    let now = sys::unix_ms();
    let mut out = Vec::new();
    for (index, dir, status) in root.shards()? {
        if root::shard_done(status.as_ref()) {
            continue;
        }
        let busy = if queued.contains(&index) {
            Some("queued or running in Slurm".to_owned())
        } else {
            owner::read_owner(&dir)?
                .filter(|o| {
                    o.released_unix_ms.is_none()
                        && now.saturating_sub(o.heartbeat_unix_ms) < lease.as_millis() as u64
                })
                .map(|o| format!("owned by a live task ({})", o.describe()))
        };
        out.push(Unfinished { index, busy });
    }
    Ok(out)
}

fn submissions_path(root: &RunRoot) -> PathBuf {
    root.slurm_dir().join("jobs.jsonl")
}

fn read_submissions(root: &RunRoot) -> Vec<Submission> {
    fs_err::read_to_string(submissions_path(root))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// This root's jobs that Slurm still has (any state `squeue` lists), as `(job id, array
/// task id)` (`None` for a job that is not an array: the preparation). `None` when `squeue`
/// cannot be asked.
fn queued_jobs(root: &RunRoot) -> Option<Vec<(String, Option<u32>)>> {
    let jobs: BTreeSet<String> = read_submissions(root)
        .into_iter()
        .map(|s| s.job_id)
        .collect();
    if jobs.is_empty() {
        return Some(Vec::new());
    }
    // All jobs, filtered here: `squeue -j` fails outright on an id Slurm has forgotten.
    let output = Command::new("squeue")
        .args(["-h", "-r", "-o", "%F|%K|%T"])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Some(
        text.lines()
            .filter_map(|line| {
                let mut cells = line.split('|');
                let (job, task) = (cells.next()?.trim(), cells.next()?.trim());
                jobs.contains(job)
                    .then(|| (job.to_owned(), task.parse().ok()))
            })
            .collect(),
    )
}

/// Shard numbers of this root's array tasks that Slurm still has. `None` when `squeue`
/// cannot be asked.
fn queued_tasks(root: &RunRoot) -> Option<BTreeSet<u32>> {
    let offsets: std::collections::HashMap<String, u32> = read_submissions(root)
        .into_iter()
        .map(|s| (s.job_id, s.offset))
        .collect();
    let jobs = queued_jobs(root)?;
    Some(
        jobs.into_iter()
            .filter_map(|(job, task)| Some(task? + offsets.get(&job).copied().unwrap_or(0)))
            .collect(),
    )
}

/// The preparation job Slurm still has for this root, if any.
fn queued_preparation(root: &RunRoot) -> Option<String> {
    let preparations: BTreeSet<String> = read_submissions(root)
        .into_iter()
        .filter(|s| s.array == PREPARE)
        .map(|s| s.job_id)
        .collect();
    queued_jobs(root)?
        .into_iter()
        .find(|(job, task)| task.is_none() && preparations.contains(job))
        .map(|(job, _)| job)
}

/// What `jobs.jsonl` records as the "array" of the preparation job.
const PREPARE: &str = "prepare";

/// `gen slurm`: see the module documentation. `unprepared`: the sources `RUN_ROOT/prepared`
/// lacks, which a preparation job prepares first.
pub fn slurm(
    job: &SlurmJob,
    submit: bool,
    only_failed: bool,
    unprepared: &[String],
) -> anyhow::Result<ExitCode> {
    let root = RunRoot::new(&job.root);
    root.open_or_create(job.shards, &job.config)?;
    crate::store::private::private_dir(&tasks_dir(root.root()))
        .with_context(|| format!("failed to create `{}`", root.slurm_dir().display()))?;
    let shards = if only_failed {
        match shards_to_resubmit(&root)? {
            Some(shards) => {
                crate::report::plain(&format!("gen: resubmitting with {}", job.describe()));
                shards
            }
            None => return Ok(ExitCode::SUCCESS),
        }
    } else {
        (0..job.shards).collect()
    };
    // Asked of the controller only when submitting: a script may be written where none is.
    let max = submit.then(max_array_size).flatten();
    let arrays = split(&shards, max);
    let array = &arrays[0].1;
    let text = script(job, array)?;
    let name = if only_failed {
        "gen-only-failed.sbatch"
    } else {
        "gen.sbatch"
    };
    let write = |path: &Path, bytes: &[u8]| {
        crate::store::atomic::write(path, bytes)
            .with_context(|| format!("failed to write `{}`", path.display()))
    };
    let path = root.slurm_dir().join(name);
    write(&path, text.as_bytes())?;
    let record = |job: &SlurmJob| write(&submit_path(&root), &serde_json::to_vec_pretty(job)?);
    record(job)?;
    let prepare = if unprepared.is_empty() {
        None
    } else {
        let path = root.slurm_dir().join("gen-prepare.sbatch");
        write(&path, prepare_script(job).as_bytes())?;
        Some(path)
    };
    if !submit {
        println!("{}", path.display());
        let how = match &prepare {
            Some(prepare) => format!(
                "jid=$(sbatch --parsable {}) && sbatch --dependency=afterok:$jid \
                 --kill-on-invalid-dep=yes {}` (it prepares every source once first) or `gen \
                 slurm … --submit",
                prepare.display(),
                path.display()
            ),
            None => format!("sbatch {}` or `gen slurm … --submit", path.display()),
        };
        crate::report::plain(&format!(
            "gen: wrote `{}` (array {array}); submit it with `{how}`",
            path.display(),
        ));
        return Ok(ExitCode::SUCCESS);
    }
    let dependency = match prepare {
        None => None,
        Some(prepare) => Some(match queued_preparation(&root) {
            Some(queued) => {
                crate::report::plain(&format!(
                    "gen: the preparation job {queued} is still queued or running: the array \
                     waits for it"
                ));
                queued
            }
            None => {
                let id = sbatch(&root, &prepare, PREPARE, 0, None, None)?.job_id;
                crate::report::plain(&format!(
                    "gen: submitted job {id}: prepares {} once into `{}`",
                    unprepared.join(", "),
                    root.prepared().root().display()
                ));
                id
            }
        }),
    };
    if let (Some(max), 2..) = (max, arrays.len()) {
        let each = match job.max_running {
            Some(n) => format!("; `--max-running {n}` holds for each array"),
            None => String::new(),
        };
        crate::report::plain(&format!(
            "gen: array task ids stay below this cluster's `MaxArraySize` {max}: {} shards go \
             in {} arrays, task K of each running shard OFFSET + K{each}",
            shards.len(),
            arrays.len()
        ));
    }
    let after = dependency
        .as_ref()
        .map_or_else(String::new, |id| format!(", after job {id}"));
    let throttle = job
        .max_running
        .map_or_else(String::new, |n| format!("%{n}"));
    let (mut submitted, mut refused) = (Vec::new(), None);
    for (i, (offset, array)) in arrays.iter().enumerate() {
        // The first array is the script's own `#SBATCH --array`.
        let array_arg = (i > 0).then_some(throttle.as_str());
        let waits_for = dependency.as_deref();
        let submission = match sbatch(&root, &path, array, *offset, waits_for, array_arg) {
            Ok(submission) => submission,
            Err(error) => {
                refused = Some(error);
                break;
            }
        };
        println!("{}", submission.job_id);
        let from = if *offset > 0 {
            format!(" from shard {offset}")
        } else {
            String::new()
        };
        crate::report::plain(&format!(
            "gen: submitted job {} (array {array}{from}{after})",
            submission.job_id
        ));
        submitted.push(submission);
    }
    // The arrays that went in are the job's even when a later one was refused: `gen status`
    // shows them and `--only-failed` leaves their shards to them.
    record(&SlurmJob {
        arrays: submitted,
        ..job.clone()
    })?;
    if let Some(error) = refused {
        return Err(error);
    }
    crate::report::plain(&format!(
        "gen: follow it with `gen status {}`",
        job.root.display()
    ));
    Ok(ExitCode::SUCCESS)
}

/// The arrays that run `shards` (sorted) with task ids below `max` (the cluster's
/// `MaxArraySize`; `None`: one array): `(offset, task ids)`, task K running shard offset + K.
pub fn split(shards: &[u32], max: Option<u32>) -> Vec<(u32, String)> {
    let Some(max) = max.filter(|&m| m > 0) else {
        return vec![(0, array_spec(shards))];
    };
    shards
        .chunk_by(|a, b| a / max == b / max)
        .map(|chunk| {
            let offset = chunk[0] / max * max;
            let ids: Vec<u32> = chunk.iter().map(|s| s - offset).collect();
            (offset, array_spec(&ids))
        })
        .collect()
}

/// `--only-failed`: the shards that are not done and that no task is running or Slurm still
/// has queued, each of those named; `None` when there is none (said why, and merged when
/// every shard is done).
fn shards_to_resubmit(root: &RunRoot) -> anyhow::Result<Option<Vec<u32>>> {
    let queued = queued_tasks(root).unwrap_or_else(|| {
        crate::report::plain(
            "gen: warning: `squeue` did not answer; judging shards by their owners only",
        );
        BTreeSet::new()
    });
    let unfinished = unfinished(root, &queued, owner::Timing::from_env().lease)?;
    for shard in &unfinished {
        if let Some(why) = &shard.busy {
            crate::report::plain(&format!(
                "gen: shard {} is not done but {why}: not resubmitted",
                shard.index
            ));
        }
    }
    let again: Vec<u32> = unfinished
        .iter()
        .filter(|s| s.busy.is_none())
        .map(|s| s.index)
        .collect();
    if !again.is_empty() {
        return Ok(Some(again));
    }
    if unfinished.is_empty() {
        crate::report::plain("gen: every shard is done: nothing to resubmit");
        super::task::merge_if_complete(root)?;
    } else {
        crate::report::plain("gen: nothing to resubmit: the shards left are running or queued");
    }
    Ok(None)
}

/// The cluster's `MaxArraySize` (`scontrol show config`; array task ids stay below it), when
/// `scontrol` answers.
fn max_array_size() -> Option<u32> {
    let output = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "MaxArraySize")
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

/// Submits the script at `path` with `sbatch` (to start once job `after` succeeded) and
/// records the submission in the root's `slurm/jobs.jsonl`. `array_arg`: `Some(throttle)`
/// (`%N` or empty) replaces the script's `--array` with `array`; the script's argument is the
/// shard of task 0 (`offset`).
fn sbatch(
    root: &RunRoot,
    path: &Path,
    array: &str,
    offset: u32,
    after: Option<&str>,
    array_arg: Option<&str>,
) -> anyhow::Result<Submission> {
    let mut command = Command::new("sbatch");
    command.arg("--parsable");
    if let Some(job) = after {
        command
            .arg(format!("--dependency=afterok:{job}"))
            .arg("--kill-on-invalid-dep=yes");
    }
    if let Some(throttle) = array_arg {
        command.arg(format!("--array={array}{throttle}"));
    }
    command.arg(path);
    if offset > 0 {
        command.arg(offset.to_string());
    }
    let output = command
        .output()
        .context("failed to run `sbatch` (is Slurm's client installed and on PATH?)")?;
    if !output.status.success() {
        anyhow::bail!(
            "`sbatch {}` failed ({}): {}",
            path.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    // `--parsable` prints `JOBID` or `JOBID;CLUSTER`.
    let job_id = stdout
        .trim()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(!job_id.is_empty(), "`sbatch` printed no job id: {stdout:?}");
    let submission = Submission {
        job_id,
        array: array.to_owned(),
        offset,
        script: path.display().to_string(),
        submitted_unix_ms: sys::unix_ms(),
    };
    let mut line = serde_json::to_vec(&submission)?;
    line.push(b'\n');
    crate::store::private::open_private(&submissions_path(root))
        .and_then(|mut f| std::io::Write::write_all(&mut f, &line))
        .with_context(|| format!("failed to write `{}`", submissions_path(root).display()))?;
    Ok(submission)
}

/// Resolves `gen slurm`'s command line into a [`SlurmJob`].
pub fn resolve(
    plan: &Plan,
    root: &Path,
    shards: Option<u32>,
    server_launch: Option<String>,
) -> anyhow::Result<(PathBuf, u32, Option<String>)> {
    let config = std::path::absolute(&plan.config_path).unwrap_or(plan.config_path.clone());
    let existing = RunRoot::new(root).read()?.map(|f| f.shards);
    let shards = match (shards, existing) {
        (Some(n), _) => n,
        (None, Some(n)) => n,
        (None, None) => anyhow::bail!("say how many shards with `--shards N`"),
    };
    anyhow::ensure!(shards >= 1, "`--shards` must be at least 1");
    if server_launch.is_none() && plan.server.launch.is_none() {
        crate::report::plain(&format!(
            "gen: warning: `{}` has no `[server] launch`: every task sends to {} instead of \
             starting its own server (pass `--server-launch CMD` for one per task)",
            plan.config_path.display(),
            crate::inference::probe::redact(plan.server.url())
        ));
    }
    Ok((config, shards, server_launch))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> SlurmJob {
        SlurmJob {
            config: "/data/jobs/datasets.toml".into(),
            root: "/data/runs/datasets".into(),
            shards: 8,
            server_launch: Some("python -m sglang.launch_server --port {port} --tp 8".into()),
            requeue: true,
            signal_secs: 120,
            gen_bin: "/opt/gen/bin/gen".into(),
            job_name: "gen-datasets".into(),
            sbatch_options: vec!["--partition=gpu".into(), "--gres=gpu:8".into()],
            nodes_per_shard: 1,
            max_running: None,
            arrays: Vec::new(),
        }
    }

    #[test]
    fn an_option_given_again_replaces_only_the_kept_one() {
        let kept = [
            "--partition=gpu",
            "--gres=gpu:8",
            "-t12:00:00",
            "--exclusive",
        ]
        .map(String::from);
        let given = ["--time=24:00:00", "-pdebug", "--mem=64G"].map(String::from);
        assert_eq!(
            sbatch_options_over(&kept, &given),
            [
                "--gres=gpu:8",
                "--exclusive",
                "--time=24:00:00",
                "-pdebug",
                "--mem=64G"
            ]
        );
        assert_eq!(sbatch_options_over(&kept, &[]), kept);
        assert_eq!(sbatch_options_over(&[], &given), given);
    }

    /// `--max-running N` throttles the array (Slurm's `%N`), and is kept for `--only-failed`.
    #[test]
    fn a_throttled_array_runs_at_most_n_tasks_at_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let job = SlurmJob {
            root: dir.path().to_path_buf(),
            max_running: Some(4),
            ..job()
        };
        let text = script(&job, "3,7").expect("script");
        assert!(text.lines().any(|l| l == "#SBATCH --array=3,7%4"), "{text}");
        assert!(job.describe().contains(", at most 4 tasks at once, "));
        slurm(&job, false, false, &[]).expect("written");
        assert_eq!(submitted(dir.path()), Some(job));
    }

    /// Task ids stay below `MaxArraySize`: a job of more shards becomes several arrays, each
    /// from a multiple of it; a rerun's shards land in the arrays of their offsets.
    #[test]
    fn shards_above_max_array_size_are_split_into_arrays_with_offsets() {
        let all: Vec<u32> = (0..2500).collect();
        assert_eq!(
            split(&all, Some(1001)),
            [
                (0, "0-1000".to_owned()),
                (1001, "0-1000".to_owned()),
                (2002, "0-497".to_owned())
            ]
        );
        assert_eq!(split(&all, None), [(0, "0-2499".to_owned())]);
        assert_eq!(
            split(&[3, 1500, 1501, 2400], Some(1000)),
            [
                (0, "3".to_owned()),
                (1000, "500-501".to_owned()),
                (2000, "400".to_owned())
            ]
        );
    }

    #[test]
    fn array_specs_compress_runs() {
        assert_eq!(array_spec(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(array_spec(&[3, 7]), "3,7");
        assert_eq!(array_spec(&[4]), "4");
    }

    #[test]
    fn the_script_runs_each_task_on_its_shard() {
        let text = script(&job(), "0-7").expect("script");
        insta::assert_snapshot!(text);
        let error = script(
            &SlurmJob {
                sbatch_options: vec!["partition=gpu".into()],
                ..job()
            },
            "0-7",
        )
        .expect_err("not an option");
        assert!(
            error.to_string().contains("is not an sbatch option"),
            "{error}"
        );
    }

    #[test]
    fn a_shard_across_nodes_asks_for_them_and_starts_its_server_across_them() {
        let job = SlurmJob {
            nodes_per_shard: 2,
            server_launch: Some(
                "python -m sglang.launch_server --port {port} --tp 16 --nnodes {nnodes} \
                 --node-rank {node_rank} --dist-init-addr {head}:5000"
                    .into(),
            ),
            ..job()
        };
        insta::assert_snapshot!(script(&job, "0-7").expect("script"));
        assert!(
            job.describe().contains(", 2 nodes per shard, "),
            "{}",
            job.describe()
        );
        for option in ["-N2", "--nodes=2", "--ntasks-per-node=4"] {
            let error = script(
                &SlurmJob {
                    sbatch_options: vec![option.into()],
                    ..job.clone()
                },
                "0-7",
            )
            .expect_err("nodes said twice");
            assert!(
                error
                    .to_string()
                    .contains("with `gen slurm --nodes-per-shard N` instead"),
                "{error}"
            );
        }
    }

    #[test]
    fn the_preparation_job_prepares_every_source_once_with_the_arrays_options() {
        insta::assert_snapshot!(prepare_script(&job()));
    }

    /// Without `--submit`: both scripts written, the preparation's only while a source is
    /// not prepared.
    #[test]
    fn a_preparation_script_is_written_while_a_source_is_not_prepared() {
        let dir = tempfile::tempdir().expect("tempdir");
        let job = SlurmJob {
            root: dir.path().to_path_buf(),
            shards: 2,
            ..job()
        };
        let script = dir.path().join("slurm/gen-prepare.sbatch");
        slurm(&job, false, false, &["wildchat".to_owned()]).expect("written");
        assert!(script.is_file());
        fs_err::remove_file(&script).expect("remove");
        slurm(&job, false, false, &[]).expect("written");
        assert!(!script.exists());
    }

    #[test]
    fn only_failed_reuses_how_the_job_was_submitted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let job = SlurmJob {
            root: dir.path().to_path_buf(),
            shards: 2,
            ..job()
        };
        slurm(&job, false, false, &[]).expect("written");
        assert_eq!(submitted(dir.path()), Some(job.clone()));
        assert_eq!(
            job.describe(),
            "sbatch --partition=gpu --gres=gpu:8, --requeue, SIGUSR1 120 s before the time \
             limit, server `python -m sglang.launch_server --port {port} --tp 8`, gen \
             `/opt/gen/bin/gen`"
        );
        // Damaged: warned about and ignored, never a failed resubmission.
        std::fs::write(dir.path().join("slurm/submit.json"), "{").expect("write");
        assert_eq!(submitted(dir.path()), None);
    }
}
