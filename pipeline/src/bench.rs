//! `gen bench`: sweeps concurrency against one or more servers on prompts from the prepared
//! sources, and reports output tok/s, p50/p95 latency and time to first token per level.
//!
//! Servers are measured one after the other, each over its own sweep ([`levels`]); a level
//! keeps exactly L requests in flight until `--requests` have finished ([`measure`]). The
//! results go to an 80-column table or `--json` ([`report`]) and optionally an SVG plot
//! ([`plot`]). A bench never writes to the run directory.

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
use crate::inference::{ChatClient, RequestError, probe, signals};
use levels::{Levels, Sweep};
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
    let plan = Plan::load(&args.config)?;
    let prompts = prompts::load(&plan, args.requests)?;
    let urls = if args.urls.is_empty() {
        plan.server.urls.clone()
    } else {
        args.urls
            .iter()
            .map(|url| url.trim_end_matches('/').to_owned())
            .collect()
    };
    let runtime = tokio::runtime::Runtime::new().context("failed to start the async runtime")?;
    let servers = runtime.block_on(async {
        let prompts = Arc::new(prompts.messages.clone());
        let mut servers = Vec::new();
        for (index, url) in urls.iter().enumerate() {
            servers.push(sweep_server(&plan, &levels, args.requests, &prompts, index, url).await?);
        }
        anyhow::Ok(servers)
    })?;
    let any_failed = servers
        .iter()
        .any(|s| s.levels.iter().any(|l| l.failed > 0));
    let report = Report {
        requests_per_level: args.requests,
        prompts: prompts.messages.len(),
        sources: prompts.sources,
        max_tokens: plan.generation.max_tokens,
        servers,
    };
    if let Some(path) = &args.plot {
        plot::write(&report, path)?;
        eprintln!("gen bench: wrote the plot to `{}`", path.display());
    }
    if args.json {
        let text = serde_json::to_string_pretty(&report).context("failed to encode the report")?;
        println!("{text}");
    } else {
        print!("{}", report::render(&report));
    }
    Ok(ExitCode::from(if any_failed {
        crate::exit::FAILED
    } else {
        crate::exit::OK
    }))
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

/// Measures every level of one server's sweep; progress goes to stderr.
async fn sweep_server(
    plan: &Plan,
    levels: &Levels,
    requests: usize,
    prompts: &Arc<Vec<Vec<gen_sources::Message>>>,
    index: usize,
    url: &str,
) -> anyhow::Result<ServerReport> {
    let api_key = plan
        .server
        .api_key_env
        .as_ref()
        .and_then(|var| std::env::var(var).ok());
    let shown = probe::redact(url);
    let label = label(index);
    let model = probe::model(url, api_key.as_deref(), plan.server.model.as_deref()).await?;
    let slots = signals::caps(url).await.max_running;
    let client = ChatClient::new(
        url,
        model.clone(),
        api_key,
        plan.generation.max_tokens,
        plan.generation.params.clone(),
    )
    .context("failed to build the HTTP client")?;
    eprintln!("gen bench: {label} = {shown} serves `{model}`");
    let mut sweep = Sweep::new(levels, slots, requests);
    let mut results = Vec::new();
    while let Some(level) = sweep.next_level() {
        let result = measure::run_level(&client, prompts, level, requests)
            .await
            .map_err(|error| match error {
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
            sweep.abandon();
        } else {
            sweep.record(level, result.output_tokens_per_s);
        }
        results.push(result);
    }
    Ok(ServerReport {
        label,
        url: shown,
        model,
        slots,
        best_concurrency: ServerReport::best(&results),
        levels: results,
        stopped: sweep.stopped().map(|stop| stop.to_string()),
    })
}
