//! The `gen` binary: parse, run, render the error chain, map the exit code.

use std::process::ExitCode;

use clap::Parser as _;
use gen_pipeline::{cli::Cli, exit, run_cli};

/// jemalloc keeps a preparation worker's peak RSS flat in the number of rows it reads (glibc's
/// heap grows with every batch; see BENCHMARKS.md "Preparation").
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            e.print().ok();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GEN_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    match run_cli(cli) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("error: {}", failure.error);
            for cause in failure.error.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(failure.code)
        }
    }
}
