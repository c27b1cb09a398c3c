//! The `gen` binary: parse, run, render the error chain, map the exit code.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;
use gen_pipeline::{cli::Cli, exit, run_cli, secrets};

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
        .with_writer(|| secrets::RedactedStderr)
        .init();
    match run_cli(cli) {
        Ok(code) => code,
        Err(failure) => {
            // Not `eprintln!`: a closed terminal must not turn an error into a panic.
            let mut stderr = std::io::stderr();
            let error = failure.error.to_string();
            writeln!(stderr, "error: {}", secrets::redact(&error)).ok();
            for cause in failure.error.chain().skip(1) {
                let cause = cause.to_string();
                writeln!(stderr, "  caused by: {}", secrets::redact(&cause)).ok();
            }
            ExitCode::from(failure.code)
        }
    }
}
