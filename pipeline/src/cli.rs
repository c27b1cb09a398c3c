//! Command-line interface: what each subcommand takes. Parsing only; [`crate::run_cli`] acts.
//! The command line of the preparation worker `gen run` starts is written here too
//! ([`worker_args`]), next to the `gen prep` that parses it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

/// Prompts from Hugging Face datasets through an inference server, at tuned concurrency,
/// with every worker failure explained.
#[derive(Debug, Parser)]
#[command(name = "gen", version, about, max_term_width = 100, after_help = WORKFLOW)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The commands in the order a first project uses them.
const WORKFLOW: &str = "A project, start to end: `gen check CONFIG` (every problem of the config \
at once), `gen doctor CONFIG` (the machine and the server against the plan), `gen run CONFIG` \
(again to resume), `gen status CONFIG` (from any shell), `gen export CONFIG --schema NAME` (a \
dataset a trainer loads). README.md, \"Your first project\", walks through one.";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a config without running anything.
    #[command(after_help = CHECK_HELP)]
    Check {
        /// The config file to validate (e.g. `datasets.toml`).
        config: PathBuf,
        /// Check `[server] launch` as started across N nodes (`gen slurm --nodes-per-shard`).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        nodes_per_shard: u32,
    },
    /// Check the machine and the server against the plan before a run.
    #[command(after_help = DOCTOR_HELP)]
    Doctor {
        /// The config file whose plan to check (e.g. `datasets.toml`).
        config: PathBuf,
        /// Check `[server] launch` as started across N nodes (`gen slurm --nodes-per-shard`).
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        nodes_per_shard: u32,
    },
    /// Prepare sources without a server: download, normalize, deduplicate and sample their
    /// prompts into the run directory, as `gen run` does first.
    #[command(after_help = PREPARE_HELP)]
    Prepare {
        /// The config file (e.g. `datasets.toml`).
        config: PathBuf,
        /// Prepare only this source (repeatable; default: every source not prepared yet).
        #[arg(long = "source", value_name = "NAME")]
        sources: Vec<String>,
        /// Run directory (default: `[run] dir` of the config, else `runs/<config name>`).
        #[arg(long)]
        run_dir: Option<PathBuf>,
        /// Prepare nothing: wait until the run directory holds every source prepared by another
        /// `gen prepare` (the preparation Job of `gen k8s`); exit 1 if that one failed.
        #[arg(long, hide_short_help = true)]
        wait: bool,
    },
    /// Prepare every source and generate completions; resumes where the last run stopped.
    #[command(after_help = RUN_HELP)]
    Run(RunArgs),
    /// Show the state of a run: a config file or a run directory.
    #[command(after_help = STATUS_HELP)]
    Status {
        /// A config file or a run directory (not needed with `--remote`).
        #[arg(required_unless_present = "remote")]
        target: Option<PathBuf>,
        /// Print the raw `status.json` document instead of the table.
        #[arg(long)]
        json: bool,
        /// Show it again every SECS seconds (default 2) until the run ends, then exit with the
        /// run's exit code: redrawn in place on a terminal, appended when piped.
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2")]
        watch: Option<u64>,
        /// Fetch the status of a run on another host over `ssh`: `user@host:RUN_DIR`; given
        /// several times, one view of the fleet (the sources summed, a line per host).
        #[arg(long, value_name = "USER@HOST:RUN_DIR", conflicts_with = "target")]
        remote: Vec<String>,
    },
    /// Write a run's completions as a training-ready dataset in a trainer's schema, with a
    /// dataset card and a provenance file.
    #[command(after_help = EXPORT_HELP)]
    Export(ExportArgs),
    /// Audit a run: every prompt completed or rejected exactly once, every file readable.
    #[command(after_help = VERIFY_HELP)]
    Verify {
        /// A run directory or a config file.
        target: PathBuf,
        /// Print the audit as JSON.
        #[arg(long)]
        json: bool,
        /// Exit 0 for a consistent run that is not finished yet (a source not prepared or
        /// failed, prompts without a completion); without it such a run exits 1.
        #[arg(long)]
        allow_incomplete: bool,
    },
    /// Explain a failure: a source's last preparation worker, or logs captured anywhere.
    #[command(after_help = DIAGNOSE_HELP)]
    Diagnose(Box<DiagnoseArgs>),
    /// Measure the server: sweep concurrency on prepared prompts, print a table and write a plot.
    #[command(after_help = BENCH_HELP)]
    Bench(BenchArgs),
    /// Combine the run directories of `--shard` runs (or a run root's shards); report
    /// duplicates and gaps.
    #[command(after_help = MERGE_HELP)]
    Merge {
        /// The merged run directory to create (default for a run root: `RUN_ROOT/merged`).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// The shards' run directories, or the run root of `--shard auto` tasks.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
    },
    /// Write (and with `--submit`, submit) a Slurm job array: task K runs shard K of N with
    /// its own inference server; `--only-failed` resubmits only the shards not done.
    #[command(after_help = SLURM_HELP)]
    Slurm(SlurmArgs),
    /// Print a Kubernetes Job that prepares every source once and an Indexed Job whose pod K
    /// runs shard K of N once that is done (a `List`, JSON, which `kubectl apply -f` reads).
    #[command(after_help = K8S_HELP)]
    K8s(K8sArgs),
    /// Prepare one source (the preparation worker `gen run` and `gen prepare` start for each
    /// source; `gen prepare` is the command to type).
    #[command(hide = true)]
    Prep {
        config: PathBuf,
        #[arg(long)]
        source: String,
        #[arg(long)]
        run_dir: Option<PathBuf>,
        /// Leave out prompts with these content hashes (little-endian u64s; `gen run` writes
        /// the earlier sources' here, so the sample draws other rows instead).
        #[arg(long, value_name = "FILE")]
        exclude_hashes: Option<PathBuf>,
    },
}

/// The arguments of the `gen prep` worker of `source`. Values are joined to their options
/// (`--source=NAME`) and the config path follows `--`, so no name or path is ever read as an
/// option, whatever it starts with. Options added later go before the last two arguments.
pub fn worker_args(config: &Path, source: &str, run_dir: &Path) -> Vec<OsString> {
    vec![
        "prep".into(),
        option("--source", Path::new(source)),
        option("--run-dir", run_dir),
        "--".into(),
        config.into(),
    ]
}

/// `--name=VALUE` for a path (which need not be UTF-8).
pub fn option(name: &str, value: &Path) -> OsString {
    let mut option = OsString::from(format!("{name}="));
    option.push(value);
    option
}

const RUN_HELP: &str = "Examples:
  gen run datasets.toml
  gen run datasets.toml --source wildchat --source sharegpt
  gen run datasets.toml --only-failed
  gen run datasets.toml --shard 2/8 --run-dir runs/host-2
  gen run datasets.toml --server-launch 'llama-server -m model.gguf --port {port}'

Exit codes: 0 every source finished; 1 some sources failed or prompts were
refused (run it again to retry them); 2 a usage or config error.";

const PREPARE_HELP: &str = "Examples:
  gen prepare datasets.toml
  gen prepare datasets.toml --source wildchat
  gen status datasets.toml

Sources already prepared are left as they are. `gen run` then generates from
the prepared prompts; `gen bench` measures the server on them. Exit 1 when a
source failed to prepare (`gen diagnose NAME --config CONFIG` says why).

On the run root of a sharded job (`gen slurm`, `--shard auto`) it prepares
once for every shard, into RUN_ROOT/prepared; the shards take the prepared
prompts from there instead of downloading.";

const STATUS_HELP: &str = "Examples:
  gen status datasets.toml
  gen status runs/datasets --watch
  gen status runs/datasets --json
  gen status --remote me@gpu-box:/data/runs/datasets
  gen status --remote me@box-1:/data/runs/ds --remote me@box-2:/data/runs/ds

Exit codes: 0 while the run runs and when every source is done; 1 when it
finished with failed sources or prompts, stopped early, or is not running
although it did not finish.";

const EXPORT_HELP: &str = "Examples:
  gen export datasets.toml
  gen export runs/datasets --schema specforge -o out/specforge
  gen export runs/datasets --schema sharegpt --per-turn --drop-cut
  gen export runs/datasets --format parquet -o out/train
  gen export runs/datasets --allow-incomplete

The output is a dataset folder: `README.md` (a dataset card), `provenance.json`
(model, sources, settings, counts) and `data/train.jsonl` or
`data/train.parquet`, alone in its folder. Upload it with
`hf upload USER/NAME DIR --repo-type dataset`.

An unfinished run (a source that failed or was not prepared, prompts without a
completion) is not exported, with what is missing, unless `--allow-incomplete`
(exit 1).";

const VERIFY_HELP: &str = "Examples:
  gen verify datasets.toml
  gen verify runs/datasets --json
  gen verify runs/datasets --allow-incomplete

Exit 1 on a problem, and when the run is not finished unless
`--allow-incomplete`.";

const BENCH_HELP: &str = "Examples:
  gen prepare datasets.toml
  gen bench datasets.toml
  gen bench datasets.toml --concurrency 1,4,16,64 --plot bench.svg
  gen bench datasets.toml --url http://10.0.0.7:30000 --url http://10.0.0.8:30000";

const MERGE_HELP: &str = "Examples:
  gen merge -o runs/merged runs/host-1 runs/host-2
  gen merge runs/datasets";

const K8S_HELP: &str = "Examples:
  gen k8s /data/jobs/datasets.toml --shards 8 --image registry/gen:latest \\
    --volume-claim runs --gpus 1 --cpus 8 --memory 64Gi \\
    --hf-token-secret hf-token > job.json
  kubectl apply -f job.json

Paths are as the pods see them; relative ones are on the volume (the pods'
working directory). The config is read here only to check it, when it is here
too. The run root (`--run-dir`, else `runs/NAME` next to the config) must be on
the volume. `HF_HOME` is the volume's `hf-cache`, shared by every pod. The first
Job prepares every source once into RUN_ROOT/prepared; each shard's pod waits
for it (`gen prepare --wait`, an init container), then takes what it prepared.";

const DOCTOR_HELP: &str = "Examples:
  gen doctor datasets.toml
  gen doctor examples/quickstart.toml

Exit 1 when the plan does not fit the machine.";

const CHECK_HELP: &str = "Examples:
  gen check datasets.toml

Reports every problem at once with file:line:column; exit 2 when there is one.";

const DIAGNOSE_HELP: &str = "Examples:
  gen diagnose wildchat --config datasets.toml
  gen diagnose --observation observation.json --json
  gen diagnose --server-log sglang.log

Logs captured anywhere (`--stderr` alone does its best; flags add evidence):
  # kernel OOM kill, any format (dmesg [-T], journalctl -k, /dev/kmsg, syslog)
  gen diagnose --stderr worker.log --kernel-log dmesg.txt --signal 9 --pid 41234
  # ... with the worker's lifetime: a stale record of a reused pid is not blamed
  gen diagnose --stderr worker.log --kernel-log kern.log --pid 41234 \\
      --started-at '2026-11-30 10:02:11' --exited-at '2026-11-30 10:40:03'
  # Slurm job: `slurmstepd: ... oom_kill event` or `line 12: 4567 Killed`
  gen diagnose --stderr slurm-123456.out
  # Kubernetes: `kubectl describe pod` (`Reason: OOMKilled`, `Exit Code: 137`)
  gen diagnose --stderr app.log --log describe.txt
  # user-space killers (earlyoom, systemd-oomd, nohang) in the journal
  gen diagnose --stderr worker.log --log journal.txt --signal 15
  # a DataLoader / datasets map / pool child killed behind a parent's traceback
  gen diagnose --stderr train.log --kernel-log dmesg.txt --exit-code 1
  # output complete, then hung at exit until a watchdog or time limit killed it
  gen diagnose --stderr worker.log --signal 9 --output-complete
  # no OOM kill: an allocation refused (`memory allocation of N bytes
  # failed`, `ulimit -v`), a time limit
  gen diagnose --stderr worker.log --exit-code 134

`--started-at` and `--exited-at` take a wall-clock time as logs print it
(2026-11-30T10:02:11, 'Tue Dec  1 10:00:00 2026', 'Nov 30 10:02:11') or
seconds since boot as dmesg prints them (355.04). A kernel record is set aside
as another process's only when these times or the logs' own stamps put it
outside the worker's lifetime.

`--observation`'s fields are in docs/operations.md, \"An observation as JSON\".";

const SLURM_HELP: &str = "Examples:
  gen slurm datasets.toml --shards 8 -- --partition=gpu --gres=gpu:1 --time=12:00:00
  gen slurm datasets.toml --shards 8 --submit --requeue
  gen status runs/datasets
  gen slurm datasets.toml --only-failed --submit
  # a model larger than one node: each task's server across 2 nodes
  gen slurm datasets.toml --shards 4 --nodes-per-shard 2 -- --gres=gpu:8

Options after `--` go into the script as `#SBATCH` lines. The run directory is
the job's run root: shard K writes RUN_ROOT/shard-K, the task logs go to
RUN_ROOT/slurm/, and the last shard to finish merges them into
RUN_ROOT/merged. Sources are prepared once, by a job the array waits for
(`gen prepare` into RUN_ROOT/prepared), while any is not prepared there.";

#[derive(Debug, clap::Args)]
pub struct SlurmArgs {
    /// The config file.
    pub config: PathBuf,
    /// Shards (array tasks); with `--only-failed`, the run root's count is the default.
    #[arg(long, value_name = "N")]
    pub shards: Option<u32>,
    /// The job's run root (default: `[run] dir` of the config).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Each task starts its server with this command line instead of `[server] launch`.
    #[arg(long, value_name = "CMD")]
    pub server_launch: Option<String>,
    /// Nodes per array task, the server launched across them (SGLang `--nnodes {nnodes}
    /// --node-rank {node_rank} --dist-init-addr {head}:5000`), `gen` on the first
    /// [default: 1, or the last submission's].
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        hide_short_help = true
    )]
    pub nodes_per_shard: Option<u32>,
    /// Submit the script with `sbatch` (otherwise only write it).
    #[arg(long)]
    pub submit: bool,
    /// Resubmit only the shards that are not done (and not running or queued), with the
    /// options of the last submission (options given here replace those).
    #[arg(long)]
    pub only_failed: bool,
    /// Requeue a task that is preempted, or stopped by SIGUSR1 before its time limit.
    #[arg(long)]
    pub requeue: bool,
    /// At most N tasks of the array run at once (`--array=…%N`; of each array, when more
    /// shards than the cluster's `MaxArraySize` are split into several), leaving a shared
    /// cluster's other GPUs to others [default: no limit, or the last submission's].
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        hide_short_help = true
    )]
    pub max_running: Option<u32>,
    /// Seconds before the time limit at which a task is told to stop (SIGUSR1) [default: 120].
    #[arg(long, value_name = "SECS", hide_short_help = true)]
    pub signal_secs: Option<u32>,
    /// The `gen` binary the tasks run (default: this one).
    #[arg(long, value_name = "PATH", hide_short_help = true)]
    pub gen_bin: Option<PathBuf>,
    /// The job's name (default: `gen-` and the config's name).
    #[arg(long, hide_short_help = true)]
    pub job_name: Option<String>,
    /// sbatch options, after `--` (e.g. `-- --partition=gpu --gres=gpu:1`).
    #[arg(last = true, value_name = "SBATCH_OPTION")]
    pub sbatch: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct K8sArgs {
    /// The config file, as the pods see it (relative: on the volume).
    pub config: PathBuf,
    /// Shards (pods of the Indexed Job).
    #[arg(long, value_name = "N")]
    pub shards: u32,
    /// The container image holding `gen` and the inference server.
    #[arg(long)]
    pub image: String,
    /// The job's run root, as the pods see it (default: `[run] dir` of the config when it is
    /// here too, else `runs/NAME` next to it).
    #[arg(long, help_heading = "Storage")]
    pub run_dir: Option<PathBuf>,
    /// Each pod starts its server with this command line instead of `[server] launch`.
    #[arg(long, value_name = "CMD", help_heading = "Each pod")]
    pub server_launch: Option<String>,
    /// A ReadWriteMany PersistentVolumeClaim holding the run root, mounted in every pod.
    #[arg(long, value_name = "CLAIM", help_heading = "Storage")]
    pub volume_claim: Option<String>,
    /// Where the claim is mounted.
    #[arg(
        long,
        default_value = "/data",
        help_heading = "Storage",
        hide_short_help = true
    )]
    pub mount_path: String,
    /// GPUs per pod (`nvidia.com/gpu`, requested and the limit).
    #[arg(long, help_heading = "Each pod")]
    pub gpus: Option<u32>,
    /// CPUs requested per pod.
    #[arg(long, help_heading = "Each pod")]
    pub cpus: Option<u32>,
    /// Memory per pod, requested and the limit (e.g. `64Gi`).
    #[arg(long, value_name = "SIZE", help_heading = "Each pod")]
    pub memory: Option<String>,
    /// The size of `/dev/shm` (a memory volume) [default: no limit but the pod's memory].
    #[arg(
        long,
        value_name = "SIZE",
        help_heading = "Each pod",
        hide_short_help = true
    )]
    pub shm_size: Option<String>,
    /// A Secret whose key `token` becomes `HF_TOKEN` in every pod.
    #[arg(long, value_name = "SECRET", help_heading = "Each pod")]
    pub hf_token_secret: Option<String>,
    /// Pods per shard, the server launched across them: a LeaderWorkerSet group per shard
    /// (`{node_rank}`, `{nnodes}`, `{head}` in the launch, as for `gen slurm`).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = "Each pod",
        hide_short_help = true
    )]
    pub nodes_per_shard: u32,
    /// Retries of one shard's pod before it counts as failed.
    #[arg(long, default_value_t = 2, hide_short_help = true)]
    pub retries: u32,
    /// The Job's name (default: `gen-` and the config's name).
    #[arg(long, hide_short_help = true)]
    pub name: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct DiagnoseArgs {
    /// A source of a run (with `--config` or `--run-dir`).
    #[arg(conflicts_with_all = ["stderr", "observation", "server_log"], help_heading = "A source of a run")]
    pub source: Option<String>,
    /// The config of the run (without it and `--run-dir`: `datasets.toml` here, named on stderr).
    #[arg(long, help_heading = "A source of a run")]
    pub config: Option<PathBuf>,
    /// The run directory (instead of `--config`).
    #[arg(long, help_heading = "A source of a run")]
    pub run_dir: Option<PathBuf>,
    /// A worker's captured stderr or a job's whole output (Slurm `slurm-N.out`, a pod's log).
    #[arg(long, value_name = "FILE", help_heading = "Logs captured anywhere")]
    pub stderr: Option<PathBuf>,
    // Before the evidence: after it, the heading the evidence sets would be its own.
    /// Print the verdict as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub evidence: LogEvidence,
    /// A whole observation as JSON, instead of the flags (its fields: docs/operations.md).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["stderr", "server_log"], help_heading = "Logs captured anywhere")]
    pub observation: Option<PathBuf>,
    /// An inference server's log (SGLang, vLLM, llama.cpp).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "stderr",
        help_heading = "Logs captured anywhere"
    )]
    pub server_log: Option<PathBuf>,
}

/// What `gen diagnose --stderr FILE` takes beside the stderr; all of it is optional, none of
/// it without `--stderr`.
#[derive(Debug, Clone, clap::Args)]
#[group(requires = "stderr", multiple = true)]
#[command(next_help_heading = "Evidence beside the logs")]
pub struct LogEvidence {
    /// Kernel log text covering the worker's lifetime (dmesg, dmesg -T, journalctl -k [-r],
    /// /dev/kmsg, syslog).
    #[arg(long, value_name = "FILE", help_heading = "Logs captured anywhere")]
    pub kernel_log: Option<PathBuf>,
    /// Any other log about the run (repeatable): `kubectl describe`, `sacct`, a journal with
    /// earlyoom / systemd-oomd / nohang lines.
    #[arg(
        long = "log",
        value_name = "FILE",
        help_heading = "Logs captured anywhere"
    )]
    pub logs: Vec<PathBuf>,
    /// The exit code (137 = killed by SIGKILL through a shell).
    #[arg(long, conflicts_with = "signal", hide_short_help = true)]
    pub exit_code: Option<i32>,
    /// The signal that ended it: a number or a name (9, KILL, SIGKILL).
    #[arg(long, value_name = "SIGNAL", value_parser = parse_signal, hide_short_help = true)]
    pub signal: Option<i32>,
    /// The worker's pid as the kernel log names it.
    #[arg(long, hide_short_help = true)]
    pub pid: Option<u32>,
    /// The worker's memory cgroup (e.g. `/kubepods/burstable/pod.../<container>`).
    #[arg(long, value_name = "PATH", hide_short_help = true)]
    pub cgroup: Option<String>,
    /// When the worker started: wall-clock as the logs print it, or seconds since boot.
    #[arg(long, value_name = "TIME", value_parser = parse_moment, hide_short_help = true)]
    pub started_at: Option<String>,
    /// When the worker ended: wall-clock as the logs print it, or seconds since boot.
    #[arg(long, value_name = "TIME", value_parser = parse_moment, hide_short_help = true)]
    pub exited_at: Option<String>,
    /// Peak RSS (bytes, or a size such as 7.5G).
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes, hide_short_help = true)]
    pub peak_rss: Option<u64>,
    /// Memory limit (bytes, or a size such as 8G).
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes, hide_short_help = true)]
    pub memory_limit: Option<u64>,
    /// Size of the largest input row the worker held (sizes the memory advice).
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes, hide_short_help = true)]
    pub largest_row: Option<u64>,
    /// The worker's output was verified complete.
    #[arg(long, hide_short_help = true)]
    pub output_complete: bool,
}

fn parse_signal(text: &str) -> Result<i32, String> {
    text.trim()
        .parse::<i32>()
        .ok()
        .or_else(|| gen_diagnostics::batch::signal_number(&text.trim().to_ascii_uppercase()))
        .ok_or_else(|| format!("`{text}` is not a signal: give a number (9) or a name (SIGKILL)"))
}

/// Checks a `--started-at` / `--exited-at` time; `gen diagnose` reads it again.
fn parse_moment(text: &str) -> Result<String, String> {
    gen_diagnostics::clock::parse_moment(text)
        .map(|_| text.to_string())
        .ok_or_else(|| {
            format!(
                "`{text}` is not a time: give one as the logs print it (2026-11-30T10:02:11, \
             'Tue Dec  1 10:00:00 2026', 'Nov 30 10:02:11') or seconds since boot (355.04)"
            )
        })
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    crate::config::values::parse_size(text)
        .ok_or_else(|| format!("`{text}` is not a size: give bytes or a size such as 512M or 8G"))
}

// What `gen run` takes (its help text is the doc comment of `Command::Run`).
#[derive(Debug, Default, clap::Args)]
pub struct RunArgs {
    /// The config file (e.g. `datasets.toml`).
    pub config: PathBuf,
    /// Run directory (default: `[run] dir` of the config, else `runs/<config name>`).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Restart only the sources that failed in the last run; touch nothing else.
    #[arg(long, help_heading = "Which prompts")]
    pub only_failed: bool,
    /// Run only this source (repeatable).
    #[arg(long = "source", value_name = "NAME", help_heading = "Which prompts")]
    pub sources: Vec<String>,
    /// Resume even though the model or sampling settings changed since the run started.
    #[arg(long, help_heading = "After a change", hide_short_help = true)]
    pub allow_config_change: bool,
    /// Generate this source again under its current settings (repeatable): its stored
    /// answers are set aside in its directory (`completions.superseded-*`), not deleted.
    #[arg(long, value_name = "SOURCE", help_heading = "Which prompts")]
    pub regenerate: Vec<String>,
    /// Go on with the prompts prepared before although a source's input file or settings
    /// changed since (refused otherwise once answers were generated from them).
    #[arg(long, help_heading = "After a change", hide_short_help = true)]
    pub keep_preparation: bool,
    /// Run only share `k` of `n` of every source's prompts, counted from 0 as Slurm task ids
    /// are, e.g. `--shard 2/8` on the third of eight hosts; `gen merge` combines the shares.
    /// `auto`: the share of this Slurm array task, Kubernetes Indexed Job pod or RANK, in its
    /// own directory under the run directory (the job's run root).
    #[arg(long, value_name = "K/N|auto", help_heading = "Many machines")]
    pub shard: Option<crate::scale::shard::ShardArg>,
    /// With `--shard auto`: how many shards the job has (needed for a Kubernetes Indexed
    /// Job, and for a Slurm array of only some tasks).
    #[arg(
        long,
        value_name = "N",
        env = "GEN_SHARDS",
        help_heading = "Many machines",
        hide_short_help = true
    )]
    pub shards: Option<u32>,
    /// Start the inference server with this command line instead of `[server] launch`
    /// (`{port}` and `${VAR}` are filled in the same way).
    #[arg(long, value_name = "CMD")]
    pub server_launch: Option<String>,
    /// Start the server across N nodes of this Slurm job, one `srun` task per node (`gen`
    /// runs on the first, rank 0): `{node_rank}`, `{nnodes}` and `{head}` in the launch.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = "Many machines",
        hide_short_help = true
    )]
    pub nodes_per_shard: u32,
    /// Send the prompts the server refused (HTTP 400, in `rejected.jsonl`) again.
    #[arg(long, help_heading = "Which prompts")]
    pub retry_rejected: bool,
    /// Set by `gen prepare`: prepare, then stop before any server is contacted.
    #[arg(skip)]
    pub prepare_only: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// A run directory or a config file.
    pub target: PathBuf,
    /// The trainer's schema: `messages` (gen's own), `specforge` (SpecForge, speculators),
    /// `speculators` (pre-tokenized `input_ids` + `loss_mask`, one row per answer, when every
    /// answer was stored with its token ids (`token-ids = true`); else `specforge`'s
    /// conversations for speculators to render), `sharegpt` (SafeAILab EAGLE: `from`/`value`,
    /// no reasoning), `modelopt` (NVIDIA ModelOpt: `conversation_id`, `conversations`).
    #[arg(long, value_enum, default_value = "messages")]
    pub schema: ExportSchema,
    /// The file format: JSONL (one row per line) or Parquet.
    #[arg(long, value_enum, default_value = "jsonl")]
    pub format: ExportFormat,
    /// One row per generated assistant turn, with the conversation before it as history;
    /// reasoning only on the turn the row answers.
    #[arg(long)]
    pub per_turn: bool,
    /// Keep answers cut short (by `max-tokens` or the context). Without it they are left
    /// out — a reasoning trace cut mid-thought would train the model to stop there — and the
    /// count left out per reason is printed and written to the provenance file.
    #[arg(long)]
    pub keep_cut: bool,
    /// What `gen export` does without `--keep-cut` (kept so older scripts still run).
    #[arg(long, hide = true, conflicts_with = "keep_cut")]
    pub drop_cut: bool,
    /// The dataset folder to create: `README.md` (dataset card), `provenance.json`, and the
    /// data file alone in `data/` (default: `export-SCHEMA` in the run directory). It must
    /// not exist yet.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Export what is there although the run is not finished (a source not prepared or
    /// failed, prompts without a completion); without it such a run is not exported (exit 1).
    #[arg(long)]
    pub allow_incomplete: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    Jsonl,
    Parquet,
}

/// The column layout of an export, named after the trainers that read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportSchema {
    Messages,
    Specforge,
    /// speculators: token rows when every answer has its token ids, else conversations.
    Speculators,
    /// What `speculators` becomes when every answer has its token ids: `input_ids` and
    /// `loss_mask`, which speculators' `prepare-data` passes through without rendering.
    #[value(skip)]
    SpeculatorsTokens,
    Sharegpt,
    Modelopt,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The config whose prepared sources provide the prompts.
    pub config: PathBuf,
    /// Concurrency levels to sweep, comma-separated (e.g. `1,2,4,8,16`), or `auto`.
    #[arg(long, default_value = "auto")]
    pub concurrency: String,
    /// Server URLs to compare side by side (default: the config's server).
    #[arg(long = "url", value_name = "URL")]
    pub urls: Vec<String>,
    /// Launch the config's server across N nodes of this Slurm job, as `gen run
    /// --nodes-per-shard N` does (in `salloc --nodes=N`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub nodes_per_shard: u32,
    /// Requests per concurrency level.
    #[arg(long, default_value_t = 64)]
    pub requests: usize,
    /// Where to write the throughput plot (SVG).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn worker_arguments_never_read_a_name_or_path_as_an_option() {
        let mut args = worker_args(Path::new("-c.toml"), "--help", Path::new("-runs"));
        args.insert(args.len() - 2, option("--exclude-hashes", Path::new("-h")));
        let program = std::iter::once(OsString::from("gen"));
        let cli = Cli::try_parse_from(program.chain(args)).expect("the worker's arguments parse");
        let (config, source, run_dir, exclude_hashes) = match cli.command {
            Command::Prep {
                config,
                source,
                run_dir,
                exclude_hashes,
            } => (config, source, run_dir, exclude_hashes),
            other => panic!("not `gen prep`: {other:?}"),
        };
        assert_eq!(config, Path::new("-c.toml"));
        assert_eq!(source, "--help");
        assert_eq!(run_dir.as_deref(), Some(Path::new("-runs")));
        assert_eq!(exclude_hashes.as_deref(), Some(Path::new("-h")));
    }

    /// `gen --help` lists the commands in the order a first project uses them, and says
    /// that order.
    #[test]
    fn help_lists_the_commands_in_the_order_of_a_first_project() {
        let mut cli = Cli::command();
        cli.build();
        let order: Vec<&str> = cli
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.get_name())
            .collect();
        assert_eq!(
            order[..6],
            ["check", "doctor", "prepare", "run", "status", "export"]
        );
        let help = cli.render_help().to_string();
        assert!(
            help.contains("A project, start to end: `gen check CONFIG`"),
            "{help}"
        );
    }

    #[test]
    fn every_visible_subcommand_has_examples_and_every_argument_help() {
        let mut cli = Cli::command();
        cli.build();
        for command in cli
            .get_subcommands()
            .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        {
            let name = command.get_name();
            let help = command.clone().render_long_help().to_string();
            assert!(
                help.contains("Examples:\n  gen "),
                "`gen {name} --help`:\n{help}"
            );
            // Hand-broken prose wider than a terminal is rewrapped into ragged lines.
            if let Some(after) = command.get_after_help() {
                let after = after.to_string();
                for line in after.lines().filter(|l| !l.starts_with("  gen ")) {
                    assert!(line.chars().count() <= 80, "`gen {name} --help`: {line}");
                }
            }
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                assert!(
                    arg.get_help().is_some() || arg.get_long_help().is_some(),
                    "`gen {name}`: `{id}` has no help"
                );
            }
        }
    }

    /// `-h` keeps to what a first use needs; the flags for a rare case (the evidence of a
    /// failure typed by hand, the names and paths a cluster job defaults well) are in
    /// `--help`, which `-h` points to. Issue 27: 62 flags, `diagnose` alone 19.
    #[test]
    fn short_help_leaves_the_rare_flags_to_long_help() {
        let mut cli = Cli::command();
        cli.build();
        let cases: [(&str, &[&str], &[&str]); 4] = [
            (
                "diagnose",
                &[
                    "--run-dir",
                    "--stderr",
                    "--kernel-log",
                    "--server-log",
                    "--json",
                ],
                &[
                    "--pid",
                    "--peak-rss",
                    "--exited-at",
                    "--exit-code",
                    "--output-complete",
                ],
            ),
            (
                "run",
                &[
                    "--only-failed",
                    "--regenerate",
                    "--shard ",
                    "--server-launch",
                ],
                &["--keep-preparation", "--allow-config-change", "--shards"],
            ),
            (
                "slurm",
                &["--shards", "--submit", "--only-failed", "--requeue"],
                &[
                    "--gen-bin",
                    "--job-name",
                    "--signal-secs",
                    "--nodes-per-shard",
                ],
            ),
            (
                "k8s",
                &["--image", "--volume-claim", "--gpus"],
                &["--mount-path", "--shm-size", "--retries", "--name"],
            ),
        ];
        let mut shown = 0;
        for (name, short, long_only) in cases {
            let command = cli.find_subcommand_mut(name).expect(name);
            let brief = command.render_help().to_string();
            // The flags, not the examples after them.
            let brief = brief
                .split("Examples:")
                .next()
                .unwrap_or_default()
                .to_owned();
            let full = command.render_long_help().to_string();
            for flag in short {
                assert!(
                    brief.contains(flag),
                    "`gen {name} -h` lacks {flag}:\n{brief}"
                );
            }
            for flag in long_only {
                assert!(
                    !brief.contains(flag),
                    "`gen {name} -h` has {flag}:\n{brief}"
                );
                assert!(full.contains(flag), "`gen {name} --help` lacks {flag}");
            }
            assert!(brief.contains("(see more with '--help')"), "{brief}");
            shown += brief
                .lines()
                .filter(|l| l.trim_start().starts_with("--"))
                .count();
        }
        assert!(shown <= 30, "{shown} flags in the four commands' -h");
    }
}
