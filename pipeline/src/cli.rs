//! Command-line interface: what each subcommand takes. Parsing only; [`crate::run_cli`] acts.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Prompts from Hugging Face datasets through an inference server, at tuned concurrency,
/// with every worker failure explained.
#[derive(Debug, Parser)]
#[command(name = "gen", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Prepare every source and generate completions; resumes where the last run stopped.
    Run {
        /// The config file (e.g. `datasets.toml`).
        config: PathBuf,
        /// Run directory (default: `[run] dir` of the config, else `runs/<config name>`).
        #[arg(long)]
        run_dir: Option<PathBuf>,
        /// Restart only the sources that failed in the last run; touch nothing else.
        #[arg(long)]
        only_failed: bool,
        /// Run only this source (repeatable).
        #[arg(long = "source", value_name = "NAME")]
        sources: Vec<String>,
        /// Resume even though the model or sampling settings changed since the run started.
        #[arg(long)]
        allow_config_change: bool,
        /// Go on with the prompts prepared before although a source's input file or settings
        /// changed since (refused otherwise once answers were generated from them).
        #[arg(long)]
        keep_preparation: bool,
        /// Run only share `i` of `n` of every source's prompts (1-based), e.g. `--shard 2/8`
        /// on the second of eight hosts; `gen merge` combines the shares.
        #[arg(long, value_name = "I/N")]
        shard: Option<crate::run::shard::Shard>,
    },
    /// Show the state of a run: a config file or a run directory.
    Status {
        /// A config file or a run directory (not needed with `--remote`).
        #[arg(required_unless_present = "remote")]
        target: Option<PathBuf>,
        /// Print the raw `status.json` document instead of the table.
        #[arg(long)]
        json: bool,
        /// Redraw every SECS seconds until interrupted.
        #[arg(long, value_name = "SECS")]
        watch: Option<u64>,
        /// Fetch the status of a run on another host over `ssh`: `user@host:RUN_DIR`.
        #[arg(long, value_name = "USER@HOST:RUN_DIR", conflicts_with = "target")]
        remote: Option<String>,
    },
    /// Write a run's completions as a training-ready dataset (messages with reasoning).
    Export(ExportArgs),
    /// Audit a run: every prompt completed or rejected exactly once, every file readable.
    Verify {
        /// A run directory or a config file.
        target: PathBuf,
        /// Print the audit as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure the server: sweep concurrency on prepared prompts, print a table and write a plot.
    Bench(BenchArgs),
    /// Combine the run directories of `--shard i/n` runs; report duplicates and gaps.
    Merge {
        /// The merged run directory to create.
        #[arg(long, short)]
        output: PathBuf,
        /// The shards' run directories.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
    },
    /// Check the machine and the server against the plan before a run.
    Doctor { config: PathBuf },
    /// Explain a failure: a source's last preparation worker, or logs captured anywhere.
    #[command(after_help = DIAGNOSE_HELP)]
    Diagnose(DiagnoseArgs),
    /// Validate a config without running anything.
    Check { config: PathBuf },
    /// Prepare one source (the preparation worker `gen run` starts for each source).
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

const DIAGNOSE_HELP: &str = "Examples:
  gen diagnose wildchat --config datasets.toml
  gen diagnose --stderr worker.log --kernel-log dmesg.txt --signal 9 --memory-limit 8589934592
  gen diagnose --observation observation.json --json
  gen diagnose --server-log sglang.log

`--observation` takes the JSON schema of gen_diagnostics::Observation: exit ({\"code\": N} or
{\"signal\": N, \"sent_by_gen\": false}), pid, child_pids, comm, cgroup_path, spawn_usec,
exit_usec, rss_samples [{at_ms, bytes}], peak_rss_bytes, memory_limit_bytes, host_memory_bytes,
oom_kill_before/after, vmstat_oom_kill_before/after, kernel_log ({\"kind\": \"text\", \"text\": ...}
or {\"kind\": \"unavailable\", \"reason\": ...}), oom_killer_log, stderr_head, stderr_tail,
outputs_complete, timed_out. Only exit and pid are required.";

#[derive(Debug, clap::Args)]
pub struct DiagnoseArgs {
    /// A source of a run (with `--config` or `--run-dir`).
    #[arg(conflicts_with_all = ["stderr", "observation", "server_log"])]
    pub source: Option<String>,
    /// The config of the run (default `datasets.toml`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The run directory (instead of `--config`).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// A worker's captured stderr.
    #[arg(long)]
    pub stderr: Option<PathBuf>,
    /// Kernel log text covering the worker's lifetime (dmesg, dmesg -T, journalctl -k, /dev/kmsg).
    #[arg(long, requires = "stderr")]
    pub kernel_log: Option<PathBuf>,
    #[arg(long, requires = "stderr", conflicts_with = "signal")]
    pub exit_code: Option<i32>,
    #[arg(long, requires = "stderr")]
    pub signal: Option<i32>,
    #[arg(long, requires = "stderr")]
    pub pid: Option<u32>,
    /// Peak RSS in bytes.
    #[arg(long, requires = "stderr")]
    pub peak_rss: Option<u64>,
    /// Memory limit in bytes.
    #[arg(long, requires = "stderr")]
    pub memory_limit: Option<u64>,
    /// The worker's output was verified complete.
    #[arg(long, requires = "stderr")]
    pub output_complete: bool,
    /// A whole observation as JSON.
    #[arg(long, conflicts_with_all = ["stderr", "server_log"])]
    pub observation: Option<PathBuf>,
    /// An inference server's log (SGLang, vLLM, llama.cpp).
    #[arg(long, conflicts_with = "stderr")]
    pub server_log: Option<PathBuf>,
    /// Print the verdict as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// A run directory or a config file.
    pub target: PathBuf,
    #[arg(long, value_enum, default_value = "jsonl")]
    pub format: ExportFormat,
    /// Output file (default: `export.jsonl` / `export.parquet` in the run directory).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    Jsonl,
    Parquet,
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
