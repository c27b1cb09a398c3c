//! `gen bench`: sweeps concurrency against one or more servers on prompts from the prepared
//! sources, and reports output tok/s, p50/p95 latency and time to first token per level.
//!
//! The sweep goes in rounds: in each round every server still sweeping ([`levels`]) measures
//! its next level in turn (A at L=1, B at L=1, A at L=2, …), so servers are compared at the
//! same moment and drift (heat, other load) is not pinned on one of them. Each round sends
//! prompts no earlier round sent ([`prompts`]), so a prefix cache cannot flatter later
//! levels; when the prepared prompts run out, the output says from which level they were
//! reused. A level keeps exactly L requests in flight until `--requests` have finished
//! ([`measure`]). The results go to an 80-column table or `--json` ([`report`]) and
//! optionally an SVG plot ([`plot`]). A bench never writes to the run directory.
//!
//! A config with `[server] launch` (and no `--url`) gets its server started the way `gen run`
//! starts it ([`ManagedServer`]: a free port for `{port}`, `${VAR}` filled in, healthy before
//! the first request), its log in the system's temporary directory, and stopped at the end.

pub mod levels;
pub mod measure;
pub mod plot;
pub mod prompts;
pub mod report;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;

use crate::cli::BenchArgs;
use crate::config::Plan;
use crate::inference::managed::ManagedServer;
use crate::inference::{ChatClient, RequestError, probe, signals};
use levels::{Levels, Sweep};
use measure::LevelResult;
use prompts::BenchPrompts;
use report::{Report, ServerReport};

/// Runs `gen bench`.
pub fn bench(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let levels = match Levels::parse(&args.concurrency) {
        Ok(levels) => levels,
        Err(message) => return Ok(usage_error(&message)),
    };
    if args.requests == 0 {
        return Ok(usage_error("`--requests` must be at least 1"));
    }
    if let Levels::List(list) = &levels
        && list.iter().any(|&level| level > args.requests)
    {
        eprintln!(
            "gen bench: warning: levels above `--requests {}` never have that many requests in flight",
            args.requests
        );
    }
    let mut plan = Plan::load(&args.config)?;
    // Across nodes only where `gen run` would start it so: in a Slurm job of that many.
    plan.set_nodes(args.nodes_per_shard)?;
    let env = |name: &str| std::env::var(name).ok();
    if args.nodes_per_shard > 1
        && args.urls.is_empty()
        && let Some(problem) = crate::scale::nodes::allocation_problem(args.nodes_per_shard, &env)
    {
        return Ok(usage_error(&problem));
    }
    let prompts = prompts::load(&plan, args.requests * levels.max_rounds(args.requests))?;
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    let (servers, prompts_reused_from) =
        runtime.block_on(measure_servers(&plan, &levels, args, &prompts))?;
    let any_failed = servers
        .iter()
        .any(|s| s.levels.iter().any(|l| l.failed > 0));
    let report = Report {
        requests_per_level: args.requests,
        prompts: prompts.prompts,
        prompts_reused_from,
        settings: (prompts.sources.iter())
            .map(|(name, settings)| (name.clone(), settings.to_string()))
            .collect(),
        sources: prompts.sources.into_iter().map(|(name, _)| name).collect(),
        max_tokens: plan.generation.max_tokens,
        servers,
    };
    if let Some(path) = &args.plot {
        plot::write(&report, path)?;
        eprintln!("gen bench: wrote the plot to `{}`", path.display());
    }
    // A server's failure in the report quotes its answer.
    if args.json {
        let text = serde_json::to_string_pretty(&report).context("failed to encode the report")?;
        println!("{}", crate::secrets::redact(&text));
    } else {
        print!("{}", crate::secrets::redact(&report::render(&report)));
    }
    Ok(ExitCode::from(crate::exit::ok_if(!any_failed)))
}

/// Sweeps every server to bench — the config's (launched for the bench when it has `launch`
/// and no `--url` is given) or the `--url`s — through `levels`; returns their reports and
/// the sweep's prompt reuse ([`sweep_in_rounds`]).
async fn measure_servers(
    plan: &Plan,
    levels: &Levels,
    args: &BenchArgs,
    prompts: &BenchPrompts,
) -> anyhow::Result<(Vec<ServerReport>, Option<usize>)> {
    let launched = match (&plan.server.launch, args.urls.is_empty()) {
        (Some(launch), true) => Some(launch_server(plan, launch).await?),
        _ => None,
    };
    let urls = match (&launched, args.urls.is_empty()) {
        (Some(server), _) => vec![server.url.clone()],
        (None, true) => plan.server.urls.clone(),
        (None, false) => args
            .urls
            .iter()
            .map(|url| url.trim_end_matches('/').to_owned())
            .collect(),
    };
    let measured = async {
        let mut contenders = Vec::new();
        for (index, url) in urls.iter().enumerate() {
            contenders.push(Contender::connect(plan, levels, args.requests, index, url).await?);
        }
        let reused_from = sweep_in_rounds(&mut contenders, prompts, args.requests).await?;
        let servers: Vec<ServerReport> = contenders.into_iter().map(Contender::report).collect();
        anyhow::Ok((servers, reused_from))
    }
    .await;
    if let Some(server) = launched {
        server.stop().await;
    }
    measured
}

/// Starts the config's server as `gen run` does; its log goes to the temporary directory, as
/// a bench writes nothing into the run directory.
async fn launch_server(plan: &Plan, launch: &[String]) -> anyhow::Result<ManagedServer> {
    let log = std::env::temp_dir().join(format!("gen-bench-{}.server.log", std::process::id()));
    eprintln!(
        "gen bench: starting the inference server (log: {})",
        log.display()
    );
    ManagedServer::start(&plan.server, launch, &log)
        .await
        .with_context(|| {
            format!(
                "the inference server did not start (log: {})",
                log.display()
            )
        })
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(crate::exit::USAGE)
}

/// The label of the `index`-th server in the table: `A`, `B`, …, `Z`, then `S27`, ….
fn label(index: usize) -> String {
    u8::try_from(index).ok().filter(|i| *i < 26).map_or_else(
        || format!("S{}", index + 1),
        |i| char::from(b'A' + i).to_string(),
    )
}

/// One server of a bench: how to reach it and what its sweep measured so far.
struct Contender {
    label: String,
    /// The URL with credentials redacted.
    shown: String,
    model: String,
    slots: Option<u32>,
    client: ChatClient,
    sweep: Sweep,
    results: Vec<LevelResult>,
}

impl Contender {
    /// Asks the `index`-th server for its model and slots; progress goes to stderr.
    async fn connect(
        plan: &Plan,
        levels: &Levels,
        requests: usize,
        index: usize,
        url: &str,
    ) -> anyhow::Result<Contender> {
        let api_key = plan.server.api_key();
        let shown = probe::redact(url);
        let label = label(index);
        let model = probe::model(
            url,
            api_key.as_deref(),
            plan.server.model.as_deref(),
            probe::REACH_TIMEOUT,
            &crate::report::RunReporter::new(None),
        )
        .await?;
        let slots = signals::SignalReader::probe(url, api_key.as_deref())
            .await
            .1
            .max_running;
        let client = ChatClient::new(
            url,
            model.clone(),
            api_key,
            plan.generation.max_tokens,
            plan.generation.params.clone(),
        )
        .context("failed to build the HTTP client")?;
        eprintln!("gen bench: {label} = {shown} serves `{model}`");
        Ok(Contender {
            label,
            shown,
            model,
            slots,
            client,
            sweep: Sweep::new(levels, slots, requests),
            results: Vec::new(),
        })
    }

    /// Measures `level` on `prompts` and feeds the result to the sweep.
    async fn measure(
        &mut self,
        level: usize,
        prompts: &Arc<Vec<prompts::BenchRequest>>,
        requests: usize,
    ) -> anyhow::Result<()> {
        let (label, shown) = (&self.label, &self.shown);
        let progress = level_progress(label, level, requests);
        let result = measure::run_level(&self.client, prompts, level, requests, &progress).await;
        // Gone before anything else is said, the error too.
        progress.finish_and_clear();
        let result = result.map_err(|error| match error {
            RequestError::Fatal(message) => {
                anyhow::anyhow!("server {label} `{shown}` refused the bench: {message}")
            }
            other => anyhow::anyhow!("server {label} `{shown}`: {other}"),
        })?;
        eprintln!(
            "gen bench: {label} L={level}: {:.1} output tok/s, {} of {requests} completed",
            result.output_tokens_per_s, result.completed
        );
        if result.completed == 0 {
            self.sweep.abandon();
        } else {
            self.sweep.record(level, result.output_tokens_per_s);
        }
        self.results.push(result);
        Ok(())
    }

    fn report(self) -> ServerReport {
        ServerReport {
            best_concurrency: ServerReport::best(&self.results),
            stopped: self.sweep.stopped().map(|stop| stop.to_string()),
            label: self.label,
            url: self.shown,
            model: self.model,
            slots: self.slots,
            levels: self.results,
        }
    }
}

/// The line that shows a level while it runs (a level can take a minute): redrawn in place on
/// a terminal, nothing at all when stderr is not one (indicatif's stderr target hides itself).
fn level_progress(label: &str, level: usize, requests: usize) -> indicatif::ProgressBar {
    let style = indicatif::ProgressStyle::with_template(
        "gen bench: {prefix} {pos}/{len} requests finished [{elapsed}]",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(requests as u64),
        indicatif::ProgressDrawTarget::stderr(),
    )
    .with_style(style)
    .with_prefix(format!("{label} L={level}:"));
    bar.enable_steady_tick(std::time::Duration::from_millis(500));
    bar
}

/// Runs the sweeps in rounds until every one is over: in round k each server still sweeping
/// measures its next level on round k's prompts. Returns the first level that reused prompts.
async fn sweep_in_rounds(
    contenders: &mut [Contender],
    prompts: &BenchPrompts,
    requests: usize,
) -> anyhow::Result<Option<usize>> {
    let mut reused_from = None;
    for round in 0.. {
        let batch = prompts.round(round, requests);
        let mut measured = false;
        for contender in contenders.iter_mut() {
            let Some(level) = contender.sweep.next_level() else {
                continue;
            };
            if batch.reused && reused_from.is_none() {
                reused_from = Some(level);
                let samples = match prompts.requests.len() {
                    n if n == prompts.prompts => String::new(),
                    n => format!(" ({n} requests with their samples)"),
                };
                eprintln!(
                    "gen bench: warning: the {} prepared prompts{samples} ran out at L={level}; from there levels reuse prompts sent before, which a prefix cache favours",
                    prompts.prompts
                );
            }
            measured = true;
            contender.measure(level, &batch.requests, requests).await?;
        }
        if !measured {
            break;
        }
    }
    Ok(reused_from)
}
