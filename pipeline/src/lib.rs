//! `gen`: prepares prompts from datasets and runs them through an inference server.
//!
//! Crate map:
//! - [`config`]: `datasets.toml` → a validated [`config::Plan`].
//! - [`prep`]: the preparation worker (`gen prep`), one process per source.
//! - [`run`]: `gen run` — the orchestrator's event loop, worker supervision, the dispatcher.
//! - [`inference`]: the streaming chat client, server probes, a server `gen` launches.
//! - [`store`]: the run directory's layout and its crash-safe files.
//! - [`status`]: `status.json` and its 80-column rendering.
//! - [`secrets`]: the API key and Hugging Face tokens, taken out of every text `gen` writes.
//!
//! Failures of a worker or a prompt are data (counted, shown in status, retried on the next
//! run); an `Err` from [`run_cli`] means the run itself could not go on.

pub mod bench;
pub mod cli;
pub mod config;
pub mod diagnose;
pub mod doctor;
pub mod export;
pub mod inference;
pub mod merge;
pub mod prep;
pub mod report;
pub mod run;
pub mod secrets;
pub mod status;
pub mod store;
pub mod verify;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use cli::{Cli, Command};
use config::{ConfigError, Plan};
use run::RunOutcome;
use store::RunDir;

/// Exit codes: 0 everything finished, 1 some sources failed or the run stopped (a rerun
/// continues), 2 a usage or config error.
pub mod exit {
    pub const OK: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
}

/// An error together with the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub error: anyhow::Error,
}

impl<E: Into<anyhow::Error>> From<E> for CliError {
    fn from(error: E) -> CliError {
        let error = error.into();
        let code = if error.downcast_ref::<ConfigError>().is_some()
            || error.downcast_ref::<run::pin::PinMismatch>().is_some()
            || error
                .downcast_ref::<run::orchestrator::InputsChanged>()
                .is_some()
            || matches!(
                error.downcast_ref::<inference::probe::ProbeError>(),
                Some(inference::probe::ProbeError::ModelNotServed { .. })
            ) {
            exit::USAGE
        } else {
            exit::FAILED
        };
        CliError { code, error }
    }
}

/// The run directory, made absolute: workers get paths inside it and may change directory.
fn run_dir_for(plan: &Plan, explicit: Option<PathBuf>) -> RunDir {
    let dir = explicit.unwrap_or_else(|| plan.run_dir.clone());
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    RunDir::new(normalize_lexically(&dir))
}

/// Removes `.` and `name/..` pairs without touching the file system (`examples/../runs` →
/// `runs`), so paths in messages read as the user would write them.
fn normalize_lexically(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Runs one parsed command line.
pub fn run_cli(cli: Cli) -> Result<ExitCode, CliError> {
    // The config's API key joins them when a config is loaded (`Plan::from_text`).
    secrets::register_hf_tokens();
    match cli.command {
        Command::Check { config } => {
            let plan = Plan::load(&config)?;
            println!(
                "`{}` is valid: {} sources, run directory `{}`",
                config.display(),
                plan.sources.len(),
                plan.run_dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Prep {
            config,
            source,
            run_dir,
            exclude_hashes,
        } => {
            let plan = Plan::load(&config)?;
            let run_dir = run_dir_for(&plan, run_dir);
            prep::prepare_source(&plan, &run_dir, &source, exclude_hashes.as_deref())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Status {
            target,
            json,
            watch,
            remote,
        } => status_command(target.as_deref(), json, watch, remote.as_deref()),
        Command::Export(args) => Ok(export::export(&args)?),
        Command::Bench(args) => Ok(bench::bench(&args)?),
        Command::Merge { output, shards } => Ok(merge::merge(&output, &shards)?),
        Command::Verify { target, json } => Ok(verify::verify(&target, json)?),
        Command::Doctor { config } => Ok(doctor::doctor(&config)?),
        Command::Diagnose(args) => diagnose_command(args),
        Command::Run {
            config,
            run_dir,
            only_failed,
            sources,
            allow_config_change,
            keep_preparation,
            shard,
        } => {
            let plan = Plan::load(&config)?;
            let run_dir = run_dir_for(&plan, run_dir);
            if let Some(unknown) = sources.iter().find(|s| plan.source(s).is_none()) {
                let known: Vec<&str> = plan.sources.iter().map(|s| s.name()).collect();
                return Err(CliError {
                    code: exit::USAGE,
                    error: anyhow::anyhow!(
                        "`{}` has no source `{unknown}`; its sources are: {}",
                        config.display(),
                        known.join(", ")
                    ),
                });
            }
            let selection = run::Selection {
                only_failed,
                sources,
                allow_config_change,
                keep_preparation,
                shard,
            };
            let runtime =
                tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
            let outcome = runtime.block_on(async {
                let cancel = CancellationToken::new();
                tokio::spawn(run::stop::listen(cancel.clone(), run_dir.status()));
                run::run(&plan, &run_dir, &selection, cancel).await
            });
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(error) => {
                    mark_stopped(&run_dir, &error);
                    return Err(error.into());
                }
            };
            let code = match outcome {
                RunOutcome::NothingToDo => exit::OK,
                // `say!`: the terminal may be gone (an SSH session closed mid-run).
                RunOutcome::Finished { failed } if failed.is_empty() => {
                    crate::say!(
                        "gen: every source is done; `gen status {}` shows the run",
                        run_dir.root().display()
                    );
                    exit::OK
                }
                RunOutcome::Finished { failed } => {
                    crate::say!(
                        "gen: {} source(s) not finished: {}; run `gen run` again to retry them",
                        failed.len(),
                        failed.join(", ")
                    );
                    exit::FAILED
                }
                RunOutcome::Interrupted => exit::FAILED,
            };
            Ok(ExitCode::from(code))
        }
    }
}

/// After a run stopped with an error, says so in `status.json` (if the run got far enough to
/// write one), so `gen status` shows why instead of a stale "running".
fn mark_stopped(run_dir: &RunDir, error: &anyhow::Error) {
    let reason = format!("{error:#}")
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    drop(status::state::mark_stopped(&run_dir.status(), &reason));
}

/// The run directory named by `target`: a run directory itself, or a config file's.
pub fn resolve_run_dir(target: &Path) -> Result<RunDir, CliError> {
    if target.is_dir() {
        Ok(RunDir::new(target))
    } else {
        Ok(RunDir::new(Plan::load(target)?.run_dir))
    }
}

fn status_command(
    target: Option<&Path>,
    json: bool,
    watch: Option<u64>,
    remote: Option<&str>,
) -> Result<ExitCode, CliError> {
    loop {
        let status = match (remote, target) {
            (Some(remote), _) => status::remote::fetch(remote)?,
            (None, Some(target)) => {
                let run_dir = resolve_run_dir(target)?;
                let path = run_dir.status();
                let status: Option<status::RunStatus> = store::atomic::read_json(&path)?;
                status.ok_or_else(|| {
                    anyhow::anyhow!(
                        "no run found at `{}` (no `status.json`): start one with `gen run CONFIG`",
                        run_dir.root().display()
                    )
                })?
            }
            (None, None) => {
                return Err(CliError {
                    code: exit::USAGE,
                    error: anyhow::anyhow!("say which run: a CONFIG, a RUN_DIR or `--remote`"),
                });
            }
        };
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(&status).context("status serializes")?
            );
        } else {
            print!(
                "{}",
                status::render::render(&status, status::state::unix_ms())
            );
        }
        let Some(every) = watch else {
            return Ok(ExitCode::SUCCESS);
        };
        std::thread::sleep(std::time::Duration::from_secs(every.max(1)));
        println!();
    }
}

fn diagnose_command(args: cli::DiagnoseArgs) -> Result<ExitCode, CliError> {
    use diagnose::{LogInputs, Subject};
    let subject = if let Some(source) = args.source {
        let run_dir = match args.run_dir {
            Some(dir) => RunDir::new(dir),
            None => RunDir::new(
                Plan::load(
                    &args
                        .config
                        .unwrap_or_else(|| PathBuf::from("datasets.toml")),
                )?
                .run_dir,
            ),
        };
        Subject::Source { run_dir, source }
    } else if let Some(stderr) = args.stderr {
        Subject::Logs(LogInputs {
            stderr,
            kernel_log: args.kernel_log,
            exit_code: args.exit_code,
            signal: args.signal,
            pid: args.pid,
            peak_rss: args.peak_rss,
            memory_limit: args.memory_limit,
            output_complete: args.output_complete,
        })
    } else if let Some(path) = args.observation {
        Subject::Observation(path)
    } else if let Some(path) = args.server_log {
        Subject::ServerLog(path)
    } else {
        return Err(CliError {
            code: exit::USAGE,
            error: anyhow::anyhow!(
                "say what to diagnose: a SOURCE, `--stderr FILE`, `--observation FILE` or `--server-log FILE`"
            ),
        });
    };
    let (title, verdict) = diagnose::diagnose(&subject)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&verdict).context("verdict serializes")?
        );
    } else {
        print!("{}", diagnose::render(&title, &verdict));
    }
    Ok(ExitCode::SUCCESS)
}
