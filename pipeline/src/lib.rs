//! `gen`: prepares prompts from datasets and runs them through an inference server.
//!
//! Crate map:
//! - [`config`]: `datasets.toml` → a validated [`config::Plan`].
//! - [`prep`]: the preparation worker (`gen prep`), one process per source.
//! - [`run`]: `gen run` — the orchestrator's event loop, worker supervision, the dispatcher.
//! - [`inference`]: the streaming chat client, server probes, a server `gen` launches.
//! - [`store`]: the run directory's layout and its crash-safe files.
//! - [`status`]: `status.json` and its 80-column rendering.
//! - [`scale`]: `--shard auto` under Slurm or Kubernetes, shard ownership, `gen slurm`.
//! - [`secrets`]: the API key and Hugging Face tokens, taken out of every text `gen` writes.
//! - [`sys`]: process primitives, clocks and the host name; a leaf every layer may use.
//!
//! Failures of a worker or a prompt are data (counted, shown in status, retried on the next
//! run); an `Err` from [`run_cli`] means the run itself could not go on.

pub mod bench;
pub mod cli;
pub mod config;
pub mod diagnose;
pub mod doctor;
pub mod exit;
pub mod export;
pub mod inference;
#[cfg(test)]
mod layering;
pub mod merge;
pub mod notice;
pub mod prep;
pub mod report;
pub mod run;
pub mod scale;
pub mod secrets;
pub mod status;
pub mod store;
pub mod sys;
pub mod verify;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use cli::{Cli, Command, RunArgs};
use config::{ConfigError, Plan};
use run::RunOutcome;
use store::RunDir;

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
            || error.downcast_ref::<store::pin::PinMismatch>().is_some()
            || error
                .downcast_ref::<status::command::NoRunNamed>()
                .is_some()
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

impl CliError {
    /// A usage or config error (exit 2).
    pub fn usage(error: anyhow::Error) -> CliError {
        CliError {
            code: exit::USAGE,
            error,
        }
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
        Command::Check {
            config,
            nodes_per_shard,
        } => check_command(&config, nodes_per_shard),
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
        Command::Prepare {
            config,
            run_dir,
            wait: true,
            ..
        } => {
            let plan = Plan::load(&config)?;
            let dir = run_dir_for(&plan, run_dir);
            let every = std::time::Duration::from_secs(5);
            Ok(ExitCode::from(exit::ok_if(scale::prepared::wait(
                &plan, &dir, every,
            ))))
        }
        Command::Prepare {
            config,
            sources,
            run_dir,
            wait: false,
        } => run_command(RunArgs {
            config,
            run_dir,
            sources,
            nodes_per_shard: 1,
            prepare_only: true,
            ..RunArgs::default()
        }),
        Command::Status {
            target,
            json,
            watch,
            remote,
        } => Ok(ExitCode::from(status::command::status(
            target.as_deref(),
            json,
            watch,
            &remote,
        )?)),
        Command::Export(args) => Ok(export::export(&args)?),
        Command::Bench(args) => Ok(bench::bench(&args)?),
        Command::Merge { output, shards } => Ok(merge::merge(output.as_deref(), &shards)?),
        Command::Verify {
            target,
            json,
            allow_incomplete,
        } => Ok(verify::verify(&target, json, allow_incomplete)?),
        Command::Doctor {
            config,
            nodes_per_shard,
        } => Ok(doctor::doctor(&config, nodes_per_shard)?),
        Command::Slurm(args) => slurm_command(args),
        Command::K8s(args) => k8s_command(&args),
        Command::Diagnose(args) => diagnose_command(*args),
        Command::Run(args) => run_command(args),
    }
}

/// `gen check CONFIG`: loads the config and checks its inputs, running nothing.
fn check_command(config: &Path, nodes_per_shard: u32) -> Result<ExitCode, CliError> {
    let env = |name: &str| std::env::var(name).ok();
    let mut plan = Plan::load_checked(config, &env, &|_| false)?;
    plan.set_nodes(nodes_per_shard)?;
    for warning in plan.input_warnings(&env) {
        report::plain(&format!("warning: {warning}"));
    }
    println!(
        "`{}` is valid: {} sources, run directory `{}`",
        config.display(),
        plan.sources.len(),
        plan.run_dir.display()
    );
    for source in &plan.sources {
        println!("  {}: {}", source.name(), source.settings);
    }
    println!("{}", store::pin::RULE);
    Ok(ExitCode::SUCCESS)
}

/// `gen run` (and `gen prepare`, which is `gen run` that stops after preparing).
fn run_command(args: RunArgs) -> Result<ExitCode, CliError> {
    let (plan, run_dir) = load_run_plan(&args)?;
    // Under `--shard auto` the run directory is the job's run root, and this task owns its
    // shard's directory inside it until the run ends.
    let task = match args.shard {
        Some(scale::shard::ShardArg::Auto) => Some(
            scale::task::ShardTask::begin(&plan, run_dir.root(), args.shards).map_err(|error| {
                CliError {
                    code: exit::FAILED,
                    error,
                }
            })?,
        ),
        _ => None,
    };
    let (run_dir, shard) = match (&task, args.shard) {
        (Some(task), _) => (task.dir.clone(), Some(task.shard())),
        (None, Some(scale::shard::ShardArg::Fixed(shard))) => (run_dir, Some(shard)),
        (None, _) => (run_dir, None),
    };
    let selection = run::Selection {
        only_failed: args.only_failed,
        sources: args.sources.clone(),
        allow_config_change: args.allow_config_change,
        regenerate: args.regenerate.clone(),
        keep_preparation: args.keep_preparation,
        shard,
        retry_rejected: args.retry_rejected,
        fence: task.as_ref().map(scale::task::ShardTask::fence),
        prepare_only: args.prepare_only,
    };
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    let outcome = runtime.block_on(async {
        let cancel = CancellationToken::new();
        tokio::spawn(run::stop::listen(cancel.clone(), run_dir.status()));
        let reporter = report::RunReporter::new(Some(run_dir.events()));
        run::run(&plan, &run_dir, &selection, cancel, reporter).await
    });
    let done = matches!(&outcome, Ok(RunOutcome::NothingToDo))
        || matches!(&outcome, Ok(RunOutcome::Finished { failed, .. }) if failed.is_empty());
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            // A task that lost its shard writes nothing more to it, status included; a run
            // refused by the lock leaves the holder's status alone.
            if error.downcast_ref::<scale::owner::FenceError>().is_none()
                && error.downcast_ref::<run::lock::LockError>().is_none()
            {
                mark_stopped(&run_dir, &error);
            }
            if let Some(task) = task {
                task.finish(false)?;
            }
            return Err(error.into());
        }
    };
    if let Some(task) = task {
        task.finish(done)?;
    }
    Ok(ExitCode::from(report_outcome(&args, &run_dir, outcome)))
}

/// The plan (with `--server-launch` applied) and the run directory, once the inputs of the
/// sources to run are checked and every `--source` and `--regenerate` names one of the
/// config's.
fn load_run_plan(args: &RunArgs) -> Result<(Plan, RunDir), CliError> {
    let sources = &args.sources;
    let left_out = |name: &str| !sources.is_empty() && !sources.iter().any(|s| s == name);
    // A file with problems: those on this machine too, in the same list, as `gen check` says
    // them (which sources are prepared already is not known before the plan is).
    let env = |name: &str| std::env::var(name).ok();
    let mut plan =
        Plan::load(&args.config).or_else(|_| Plan::load_checked(&args.config, &env, &left_out))?;
    if let Some(command) = &args.server_launch {
        scale::task::override_launch(&mut plan, command)?;
    }
    plan.set_nodes(args.nodes_per_shard)?;
    if args.nodes_per_shard > 1
        && let Some(message) = scale::nodes::allocation_problem(args.nodes_per_shard, &env)
    {
        return Err(ConfigError::Flag {
            flag: format!("--nodes-per-shard {}", args.nodes_per_shard),
            message,
        }
        .into());
    }
    let mut run_dir = run_dir_for(&plan, args.run_dir.clone());
    // `gen prepare` on a sharded job's run root prepares once for every shard.
    if args.prepare_only && scale::root::RunRoot::is_root(run_dir.root()) {
        run_dir = scale::root::RunRoot::new(run_dir.root()).prepared();
    }
    // Before anything starts. A prepared source does not read its files again, and one left
    // out by `--source` not at all.
    plan.check_inputs(&|name| {
        left_out(name) || store::manifest::read_manifest(&run_dir, name).is_ok_and(|m| m.is_some())
    })?;
    let named = sources.iter().chain(&args.regenerate);
    if let Some(unknown) = named.into_iter().find(|s| plan.source(s).is_none()) {
        let known: Vec<&str> = plan.sources.iter().map(|s| s.name()).collect();
        return Err(CliError::usage(anyhow::anyhow!(
            "`{}` has no source `{unknown}`; its sources are: {}",
            args.config.display(),
            known.join(", ")
        )));
    }
    Ok((plan, run_dir))
}

/// The command line that goes on with the run `args` started: the same config, run
/// directory, sources and shard.
fn resume_command(args: &RunArgs) -> String {
    let verb = if args.prepare_only { "prepare" } else { "run" };
    let mut command = format!("gen {verb} {}", args.config.display());
    if let Some(dir) = &args.run_dir {
        command.push_str(&format!(" --run-dir {}", dir.display()));
    }
    for source in &args.sources {
        command.push_str(&format!(" --source {source}"));
    }
    match args.shard {
        Some(scale::shard::ShardArg::Fixed(shard)) => {
            command.push_str(&format!(" --shard {shard}"))
        }
        Some(scale::shard::ShardArg::Auto) => command.push_str(" --shard auto"),
        None => {}
    }
    command
}

/// Says on stderr how a run ended and what to do next; returns its exit code.
fn report_outcome(args: &RunArgs, run_dir: &RunDir, outcome: RunOutcome) -> u8 {
    let (failed, refused) = match outcome {
        RunOutcome::NothingToDo => return exit::OK,
        RunOutcome::Interrupted => {
            // Not `eprintln!`: after a hangup the terminal is gone, and this must not panic.
            report::plain(&format!(
                "gen: interrupted; run `{}` again to resume",
                resume_command(args)
            ));
            return exit::FAILED;
        }
        RunOutcome::Finished { failed, refused } => (failed, refused),
    };
    let config = args.config.display();
    if !refused.is_empty() {
        let per_source: Vec<String> = refused.iter().map(|(s, n)| format!("{s} {n}")).collect();
        let total: u64 = refused.iter().map(|(_, n)| n).sum();
        eprintln!(
            "gen: {total} prompt(s) refused by the server ({}): the reasons are in \
             `sources/NAME/rejected.jsonl`; after fixing the prompts or the \
             settings, `gen run --retry-rejected` sends them again (a change of \
             `max-tokens` or sampling settings does so by itself)",
            per_source.join(", ")
        );
    }
    if args.prepare_only && !failed.is_empty() {
        eprintln!(
            "gen: {} source(s) failed to prepare: {}; `gen diagnose NAME --config \
             {config}` says why, `gen prepare` again retries them",
            failed.len(),
            failed.join(", "),
        );
    } else if args.prepare_only {
        eprintln!("gen: every selected source is prepared; `gen run {config}` generates");
    } else if !failed.is_empty() {
        eprintln!(
            "gen: {} source(s) not finished: {}; run `gen run {config}` again to retry them",
            failed.len(),
            failed.join(", ")
        );
    } else if refused.is_empty() {
        eprintln!(
            "gen: every source is done; `gen status {}` shows the run",
            run_dir.root().display()
        );
    }
    exit::ok_if(failed.is_empty() && refused.is_empty())
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

/// The config's name without extension, for job names (`datasets.toml` → `gen-datasets`).
fn job_name(plan: &Plan) -> String {
    let stem = plan
        .config_path
        .file_stem()
        .map_or_else(|| "run".to_owned(), |s| s.to_string_lossy().into_owned());
    format!("gen-{stem}")
}

fn slurm_command(args: cli::SlurmArgs) -> Result<ExitCode, CliError> {
    let mut plan = Plan::load(&args.config)?;
    let root = run_dir_for(&plan, args.run_dir);
    // `--only-failed` resubmits the way the job was submitted; what this line says wins.
    let last = if args.only_failed {
        scale::slurm::submitted(root.root())
    } else {
        None
    };
    let last = last.as_ref();
    let server_launch = args
        .server_launch
        .or_else(|| last.and_then(|j| j.server_launch.clone()));
    if let Some(command) = &server_launch {
        scale::task::override_launch(&mut plan, command)?;
    }
    let nodes_per_shard = args
        .nodes_per_shard
        .or_else(|| last.map(|j| j.nodes_per_shard))
        .unwrap_or(1);
    plan.set_nodes(nodes_per_shard)?;
    let (config, shards, server_launch) =
        scale::slurm::resolve(&plan, root.root(), args.shards, server_launch)?;
    let gen_bin = match args.gen_bin.or_else(|| last.map(|j| j.gen_bin.clone())) {
        Some(bin) => std::path::absolute(&bin).unwrap_or(bin),
        None => std::env::current_exe().context("failed to find this `gen` binary")?,
    };
    let job = scale::slurm::SlurmJob {
        config,
        root: root.root().to_path_buf(),
        shards,
        server_launch,
        requeue: args.requeue || last.is_some_and(|j| j.requeue),
        signal_secs: args
            .signal_secs
            .or_else(|| last.map(|j| j.signal_secs))
            .unwrap_or(120),
        gen_bin,
        job_name: args
            .job_name
            .or_else(|| last.map(|j| j.job_name.clone()))
            .unwrap_or_else(|| job_name(&plan)),
        sbatch_options: scale::slurm::sbatch_options_over(
            last.map_or(&[][..], |j| j.sbatch_options.as_slice()),
            &args.sbatch,
        ),
        nodes_per_shard,
        max_running: args
            .max_running
            .or_else(|| last.and_then(|j| j.max_running)),
        arrays: Vec::new(),
    };
    let unprepared = scale::prepared::unprepared(&plan, &scale::root::RunRoot::new(root.root()));
    Ok(scale::slurm::slurm(
        &job,
        args.submit,
        args.only_failed,
        &unprepared,
    )?)
}

fn k8s_command(args: &cli::K8sArgs) -> Result<ExitCode, CliError> {
    use scale::k8s::in_pod;
    let volume = args.volume_claim.as_ref().map(|_| args.mount_path.as_str());
    let config = in_pod(&args.config, volume);
    // The path is the pods'; read here only when it is here too, to check it early.
    let plan = (args.config.is_file().then(|| Plan::load(&args.config))).transpose()?;
    let root = match (&args.run_dir, &plan) {
        (Some(dir), _) => in_pod(dir, volume),
        (None, Some(plan)) => in_pod(&plan.run_dir, volume),
        (None, None) => {
            let stem = config
                .file_stem()
                .map_or_else(|| "run".to_owned(), |s| s.to_string_lossy().into_owned());
            let root = config.with_file_name("runs").join(stem);
            crate::report::plain(&format!(
                "gen: `{}` is not here: the pods' run root is `{}` (`--run-dir` to choose)",
                args.config.display(),
                root.display()
            ));
            root
        }
    };
    if volume.is_none() {
        crate::report::plain(
            "gen: warning: no `--volume-claim`: the run root must be on storage every pod \
             mounts, or no shard sees another",
        );
    }
    let name = match (&args.name, &plan) {
        (Some(name), _) => name.clone(),
        (None, Some(plan)) => job_name(plan),
        (None, None) => format!(
            "gen-{}",
            config
                .file_stem()
                .map_or_else(|| "run".into(), |s| s.to_string_lossy())
        ),
    };
    let job = scale::k8s::K8sJob {
        name,
        image: args.image.clone(),
        config: config.display().to_string(),
        root: root.display().to_string(),
        shards: args.shards,
        // Across pods, each pod's part of the launch is written out here.
        server_launch: args.server_launch.clone().or_else(|| {
            let launch = plan.as_ref()?.server.launch.as_ref()?;
            let words: Vec<String> = launch.iter().map(|w| scale::nodes::quote(w)).collect();
            (args.nodes_per_shard > 1).then(|| words.join(" "))
        }),
        volume_claim: args.volume_claim.clone(),
        mount_path: args.mount_path.clone(),
        gpus: args.gpus,
        cpus: args.cpus,
        memory: args.memory.clone(),
        shm_size: args.shm_size.clone(),
        hf_token_secret: args.hf_token_secret.clone(),
        retries_per_index: args.retries,
        nodes_per_shard: args.nodes_per_shard,
    };
    scale::k8s::check(&job).map_err(CliError::usage)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&scale::k8s::manifest(&job)).context("manifest serializes")?
    );
    Ok(ExitCode::SUCCESS)
}

fn diagnose_command(args: cli::DiagnoseArgs) -> Result<ExitCode, CliError> {
    use diagnose::Subject;
    let subject = if let Some(source) = args.source.clone() {
        let run_dir = match (args.run_dir, args.config) {
            (Some(dir), _) => RunDir::new(dir),
            (None, Some(config)) => RunDir::new(Plan::load(&config)?.run_dir),
            (None, None) => {
                // Said every time, so a source of another config is never looked for in the
                // wrong run directory unnoticed.
                let default = PathBuf::from("datasets.toml");
                if !default.is_file() {
                    return Err(CliError::usage(anyhow::anyhow!(
                        "say which config `{source}` belongs to: `gen diagnose {source} \
                             --config CONFIG` (or `--run-dir DIR`); there is no `datasets.toml` \
                             here to default to"
                    )));
                }
                let plan = Plan::load(&default)?;
                eprintln!(
                    "gen: `{source}` of `datasets.toml` (run directory `{}`); `--config` \
                     chooses another config",
                    plan.run_dir.display()
                );
                RunDir::new(plan.run_dir)
            }
        };
        Subject::Source { run_dir, source }
    } else if let Some(stderr) = args.stderr {
        Subject::Logs {
            stderr,
            evidence: args.evidence,
        }
    } else if let Some(path) = args.observation {
        Subject::Observation(path)
    } else if let Some(path) = args.server_log {
        Subject::ServerLog(path)
    } else {
        return Err(CliError::usage(anyhow::anyhow!(
            "say what to diagnose: a SOURCE, `--stderr FILE`, `--observation FILE` or `--server-log FILE`"
        )));
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
