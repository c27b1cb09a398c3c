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
    },
    /// Show the state of a run: a config file or a run directory.
    Status {
        /// A config file or a run directory.
        target: PathBuf,
        /// Print the raw `status.json` document instead of the table.
        #[arg(long)]
        json: bool,
    },
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
    },
}
