//! The `gen run` event loop. It alone owns the run state: preparation workers, the dispatcher
//! and the clock report to it by message, and it alone writes `status.json` and the output
//! files.
//!
//! Order of a run: read what the run directory already holds (finished sources are skipped,
//! completed prompts are not sent again); if nothing is left, stop without touching the server;
//! otherwise make sure the server answers (launching it when configured) *before* any source
//! can be marked failed; then prepare sources in worker processes, at most
//! `max-parallel-prep` at once, and start generating each source as soon as it is prepared.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::dispatch::{DispatchEvent, Dispatcher};
use super::feed::{Feed, Skip};
use super::fleet::{self, Fleet};
use super::kernel_log::KernelLogFollower;
use super::observe;
use super::record::{self, RejectKind, RejectedRecord};
use super::supervisor::{self, WorkerCommand, WorkerReport};
use crate::config::Plan;
use crate::inference::managed::{self, ManagedServer};
use crate::inference::probe;
use crate::prep;
use crate::status::state::{self, Phase, RunStatus, SourceStatus, VerdictLine};
use crate::store::frames::FrameWriter;
use crate::store::{RunDir, atomic, layout::LAYOUT_VERSION};
use gen_diagnostics::Verdict;

/// Completions buffered before a frame is written (a frame is also written every tick).
const FRAME_RECORDS: usize = 64;
/// Dispatch events handled per turn of the loop.
const EVENT_BATCH: usize = 256;
/// Dispatch events waiting for the loop, at most (then finished requests wait to report).
const EVENT_BACKLOG: usize = 1024;
const TICK: Duration = Duration::from_secs(1);
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How long requests in flight may finish after Ctrl-C or SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// Overrides [`SHUTDOWN_GRACE`], in seconds: a scheduler that kills a fixed time after
/// SIGTERM (Slurm's `KillWait`, 30 s by default) needs `gen` done before then.
pub const SHUTDOWN_GRACE_ENV: &str = "GEN_SHUTDOWN_GRACE_SECS";

fn shutdown_grace() -> Duration {
    std::env::var(SHUTDOWN_GRACE_ENV)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map_or(SHUTDOWN_GRACE, Duration::from_secs)
}

/// How a run ended (errors that stop the run early are `Err`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every source already had every prompt completed; the server was not contacted.
    NothingToDo,
    /// The run went through; these sources still have work left (a rerun retries them), and
    /// these have prompts the server refused (per source; `--retry-rejected` sends them again).
    Finished {
        failed: Vec<String>,
        refused: Vec<(String, u64)>,
    },
    /// Interrupted by a signal; everything completed so far is stored.
    Interrupted,
}

/// Which sources a run touches.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only sources whose phase was `failed` in the last run.
    pub only_failed: bool,
    /// Only these sources (all when empty).
    pub sources: Vec<String>,
    /// Resume even though model or sampling settings changed since the run started.
    pub allow_config_change: bool,
    /// Keep a source's preparation although its inputs changed since.
    pub keep_preparation: bool,
    /// Only this host's share of every source's prompts.
    pub shard: Option<super::shard::Shard>,
    /// Send the prompts the server refused again (`--retry-rejected`).
    pub retry_rejected: bool,
    /// Under `--shard auto`: checked before every write, so a task that lost its shard
    /// stops before writing to it again.
    pub fence: Option<crate::scale::owner::Fence>,
    /// Prepare the selected sources and stop there: no server is needed (`gen prepare`).
    pub prepare_only: bool,
}

impl Selection {
    /// `prep_failed`: the source's last preparation worker failed (its `worker.json`), which
    /// counts as failed even when the run stopped before `status.json` could say so.
    fn includes(&self, name: &str, previous: Option<&RunStatus>, prep_failed: bool) -> bool {
        if !self.sources.is_empty() && !self.sources.iter().any(|s| s == name) {
            return false;
        }
        if self.only_failed {
            return prep_failed
                || previous
                    .and_then(|p| p.sources.iter().find(|s| s.name == name))
                    .is_some_and(|s| s.phase == Phase::Failed);
        }
        true
    }
}

struct SourceState {
    status: SourceStatus,
    /// Prompts with a completion when the run started (handed to the feed when it opens).
    done_ids: HashSet<String>,
    /// Prompts settled without a completion: rejected by the server, truncated and dropped,
    /// or duplicates of an earlier source.
    settled_ids: HashSet<String>,
    /// Completions stored in this run.
    completed_here: u64,
    /// Counted and ready to stream, until its dispatch starts.
    feed: Option<Feed>,
    /// Its prompts were counted in this run (at most once).
    opened: bool,
    /// Content hashes of its prompts, for later sources' cross-source deduplication.
    hashes: Option<Arc<HashSet<u64>>>,
    /// Content hashes of its prompts answered before this run, for an earlier source that is
    /// prepared only now (what was generated is not generated again).
    answered_hashes: Option<Arc<HashSet<u64>>>,
    /// Prompts settled as duplicates of another source in earlier runs.
    settled_duplicates: u64,
    /// Prepared again in this run, leaving out the earlier sources' prompts (at most once).
    reprepared: bool,
    /// The earlier sources' content hashes, until its preparation again starts.
    exclude: Option<Vec<u64>>,
    /// When generation of this source started in this run.
    generating_since: Option<Instant>,
    /// Peak RSS of its preparation worker in this run.
    peak_rss_bytes: Option<u64>,
    writer: Option<FrameWriter>,
    /// Prompts the server refused and nothing answered since (recorded in `rejected.jsonl`).
    refused: u64,
    /// Not prepared, and the last preparation worker failed.
    prep_failed: bool,
}

/// Sources whose inputs changed after answers were generated from their preparation.
#[derive(Debug, thiserror::Error)]
#[error(
    "the inputs of {} changed since {} prepared, and answers were generated from {}:\n{}\npreparing again would mix two datasets in `{run_dir}`: use a new run directory (`--run-dir`), or pass `--keep-preparation` to go on with the prompts prepared before",
    if changed.len() == 1 { "a source".to_owned() } else { format!("{} sources", changed.len()) },
    if changed.len() == 1 { "it was" } else { "they were" },
    if changed.len() == 1 { "it" } else { "them" },
    changed.iter().map(|(name, changes)| format!("  `{name}`: {}", changes.join("; "))).collect::<Vec<_>>().join("\n")
)]
pub struct InputsChanged {
    pub run_dir: String,
    /// Per source, what changed.
    pub changed: Vec<(String, Vec<String>)>,
}

/// What [`Orchestrator::open_source`] did with a prepared source.
enum Opened {
    /// Counted: done, or with a feed of what is left.
    Counted,
    /// To prepare again without the earlier sources' prompts.
    PrepareAgain,
}

struct Orchestrator<'p> {
    plan: &'p Plan,
    run_dir: RunDir,
    sources: Vec<SourceState>,
    status: RunStatus,
    tokens: u64,
    started: Instant,
    shard: Option<super::shard::Shard>,
    fence: Option<crate::scale::owner::Fence>,
    kernel_log: Option<KernelLogFollower>,
    events: crate::store::events::EventLog,
    /// What the last status write said, to log changes as events.
    logged_phases: Vec<Phase>,
    /// Per server, what the last status write said.
    logged_limit: Vec<Option<usize>>,
    logged_down: Vec<Option<u64>>,
    /// The last status write failed (warned once until one succeeds).
    status_unwritten: bool,
}

/// `gen run`: see the module documentation.
///
/// The loop runs as a task of the runtime rather than on the thread that blocks on this
/// future: every completion wakes it, and waking the blocked caller's thread is a futex call
/// each time (~5% of `gen run`'s CPU against an instant server), while a task woken from a
/// worker thread just runs next on that worker.
pub async fn run(
    plan: &Plan,
    run_dir: &RunDir,
    selection: &Selection,
    cancel: CancellationToken,
) -> anyhow::Result<RunOutcome> {
    let (plan, run_dir, selection) = (plan.clone(), run_dir.clone(), selection.clone());
    let task = tokio::spawn(async move { run_loop(&plan, &run_dir, &selection, cancel).await });
    match task.await {
        Ok(outcome) => outcome,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(anyhow::anyhow!("the run's task stopped: {e}")),
    }
}

async fn run_loop(
    plan: &Plan,
    run_dir: &RunDir,
    selection: &Selection,
    cancel: CancellationToken,
) -> anyhow::Result<RunOutcome> {
    create_private_dir(run_dir.root())?;
    // One `gen run` per run directory; held until this function returns.
    let _lock = super::lock::RunLock::acquire(run_dir)?;
    let previous: Option<RunStatus> = atomic::read_json(&run_dir.status()).ok().flatten();
    let settings =
        record::settings_fingerprint(plan.generation.max_tokens, &plan.generation.params);
    let resend = record::Resend {
        all_refused: selection.retry_rejected,
        settings: Some(settings.clone()),
    };
    let mut orchestrator = Orchestrator::load(plan, run_dir, &resend)?;
    orchestrator.events.append(
        "run_started",
        None,
        format!("pid {} on {}", std::process::id(), state::host_name()),
    );
    orchestrator.shard = selection.shard;
    orchestrator.fence = selection.fence.clone();
    let selected: Vec<bool> = orchestrator
        .sources
        .iter()
        .map(|s| selection.includes(&s.status.name, previous.as_ref(), s.prep_failed))
        .collect();
    if selection.only_failed && !selected.contains(&true) {
        crate::say!("gen: no source failed in the last run: nothing to restart");
        return Ok(RunOutcome::NothingToDo);
    }
    orchestrator.check_inputs(&selected, selection.keep_preparation)?;
    let mut needs_prep: Vec<usize> = (0..orchestrator.sources.len())
        .filter(|i| selected[*i] && orchestrator.sources[*i].status.prepared.is_none())
        .collect();
    for (i, selected) in selected.iter().enumerate() {
        if !selected
            && let Some(old) = previous.as_ref().and_then(|p| {
                p.sources
                    .iter()
                    .find(|s| s.name == orchestrator.sources[i].status.name)
            })
        {
            // Untouched this run: keep what the last run said about it, but the counts of
            // its stored completions as the files have them.
            let now = &orchestrator.sources[i].status;
            orchestrator.sources[i].status = SourceStatus {
                done: now.done,
                truncated: now.truncated,
                ..old.clone()
            };
        }
    }
    needs_prep.extend(orchestrator.open_ready(&selected));
    if needs_prep.is_empty() && orchestrator.sources.iter().all(|s| s.feed.is_none()) {
        orchestrator.status.finished = true;
        orchestrator.write_status()?;
        let refused = orchestrator.refused(&selected);
        if !refused.is_empty() {
            crate::say!("gen: nothing to send: every prompt is completed or settled");
            return Ok(RunOutcome::Finished {
                failed: Vec::new(),
                refused,
            });
        }
        crate::say!("gen: nothing to do: every prompt of every source is already completed");
        return Ok(RunOutcome::NothingToDo);
    }
    // Refuse a plan this machine cannot hold, with the numbers, before anything starts.
    let overrides = crate::doctor::Overrides {
        run_dir: Some(run_dir.root().to_path_buf()),
        ..crate::doctor::Overrides::from_env()
    };
    let preflight = crate::doctor::preflight(plan, &overrides);
    for warning in preflight.warnings() {
        crate::say!("gen: warning: {}: {}", warning.name, warning.message);
    }
    if let Some(refusal) = preflight.refusal() {
        anyhow::bail!(
            "the plan does not fit this machine: {refusal} (see `gen doctor {}`)",
            plan.config_path.display()
        );
    }
    orchestrator.write_status()?;
    if selection.prepare_only {
        return prepare_only(&mut orchestrator, needs_prep, &cancel).await;
    }

    // The servers must answer before anything can fail.
    let api_key = plan
        .server
        .api_key_env
        .as_ref()
        .and_then(|var| std::env::var(var).ok());
    let mut managed = match &plan.server.launch {
        Some(launch) => {
            crate::say!(
                "gen: starting the inference server (log: {})",
                run_dir.server_log().display()
            );
            // A signal while it loads (minutes, for a large model) stops the run there.
            let log = run_dir.server_log();
            tokio::select! {
                started = ManagedServer::start(&plan.server, launch, &log) => Some(started?),
                () = cancel.cancelled() => {
                    crate::say!("gen: {} while the inference server started", super::stop::interrupted_by());
                    orchestrator.status.finished = true;
                    orchestrator.status.stopped_by = Some(super::stop::reason());
                    orchestrator.write_status()?;
                    return Ok(RunOutcome::Interrupted);
                }
            }
        }
        None => None,
    };
    let urls = match &managed {
        Some(server) => vec![server.url.clone()],
        None => plan.server.urls.clone(),
    };
    let dispatch_cancel = CancellationToken::new();
    // An external server may still be loading: the wait for it ends on a signal too.
    let connected = tokio::select! {
        connected = fleet::connect(plan, &urls, api_key.clone(), run_dir, &dispatch_cancel) => connected,
        () = cancel.cancelled() => {
            crate::say!("gen: {} while waiting for the inference server", super::stop::interrupted_by());
            if let Some(server) = managed {
                server.stop().await;
            }
            orchestrator.status.finished = true;
            orchestrator.status.stopped_by = Some(super::stop::reason());
            orchestrator.write_status()?;
            return Ok(RunOutcome::Interrupted);
        }
    };
    let fleet::Connected {
        fleet,
        model,
        tuners,
    } = match connected {
        Ok(connected) => connected,
        Err(e) => {
            if let Some(server) = managed {
                server.stop().await;
            }
            return Err(e);
        }
    };
    if let Some(server) = &managed {
        for backend in fleet.backends() {
            backend.liveness.require_process(server.gate());
        }
    }
    for url in &urls {
        crate::say!("gen: server {} serves `{model}`", probe::redact(url));
    }
    let pin = super::pin::RunPin {
        layout: LAYOUT_VERSION,
        model: model.clone(),
        max_tokens: plan.generation.max_tokens,
        params: plan.generation.params.clone(),
        shard: selection.shard.map(|s| s.to_string()),
    };
    // Before anything is stored, new settings mix nothing (a run stopped by a refused
    // setting is rerun with a fixed one).
    let nothing_stored = orchestrator.sources.iter().all(|s| s.status.done == 0);
    let checked =
        match pin.check_or_record(run_dir, selection.allow_config_change || nothing_stored) {
            Ok(()) => server_checks(plan, &fleet, &urls, &model, api_key.clone()).await,
            Err(e) => Err(e),
        };
    if let Err(e) = checked {
        dispatch_cancel.cancel();
        if let Some(server) = managed {
            server.stop().await;
        }
        return Err(e);
    }
    let started_at = Instant::now();
    orchestrator.status.servers = fleet
        .backends()
        .iter()
        .map(|b| b.status(started_at.elapsed()))
        .collect();
    tokio::spawn(fleet.clone().watch(dispatch_cancel.clone()));

    let (events_tx, mut events) = mpsc::channel(EVENT_BACKLOG);
    let mut received = Vec::with_capacity(EVENT_BATCH);
    // On a signal, admission stops at once; requests in flight get a grace period to finish
    // (their completions are kept), then are aborted.
    let stop_admitting = cancel.child_token();
    let dispatcher = Dispatcher {
        fleet: fleet.clone(),
        model: model.as_str().into(),
        max_tokens: plan.generation.max_tokens,
        max_attempts: plan.generation.max_attempts,
        events: events_tx,
        cancel: dispatch_cancel.clone(),
        stop_admitting: stop_admitting.clone(),
        refusals: Arc::default(),
        settings: settings.as_str().into(),
    };
    let mut dispatching = 0usize;
    for (i, feed) in orchestrator.take_feeds() {
        let length = plan.worker(&orchestrator.sources[i].status.name).on_length;
        tokio::spawn(dispatcher.clone().run_source(i, feed, length));
        dispatching += 1;
    }

    if !needs_prep.is_empty() {
        // Followed from before the first worker starts, so no OOM report scrolls away unread.
        orchestrator.kernel_log = Some(KernelLogFollower::start());
    }
    crate::report::start_bars(
        &orchestrator
            .sources
            .iter()
            .map(|s| s.status.name.clone())
            .collect::<Vec<_>>(),
    );
    let mut prep_queue: VecDeque<usize> = needs_prep.into();
    let mut preps: JoinSet<(usize, std::io::Result<WorkerReport>)> = JoinSet::new();
    let prep_cancel = cancel.child_token();
    orchestrator.start_preps(&mut prep_queue, &mut preps, &prep_cancel)?;
    orchestrator.refresh_status();

    let mut fatal: Option<String> = None;
    let mut server_died: Option<String> = None;
    let mut restarting: Option<
        tokio::task::JoinHandle<Result<ManagedServer, managed::LaunchError>>,
    > = None;
    let mut explained_outage = false;
    let mut tick = tokio::time::interval(TICK);
    let mut last_progress = Instant::now();
    let mut interrupted = false;
    while !(preps.is_empty() && prep_queue.is_empty() && dispatching == 0) {
        tokio::select! {
            Some(joined) = preps.join_next() => {
                let (i, report) = joined.context("a preparation supervisor panicked")?;
                orchestrator.finish_prep(i, report, interrupted).await?;
                if !interrupted && fatal.is_none() {
                    prep_queue.extend(orchestrator.open_ready(&selected));
                    for (i, feed) in orchestrator.take_feeds() {
                        let length = plan.worker(&orchestrator.sources[i].status.name).on_length;
                        tokio::spawn(dispatcher.clone().run_source(i, feed, length));
                        dispatching += 1;
                    }
                }
                if !interrupted {
                    orchestrator.start_preps(&mut prep_queue, &mut preps, &prep_cancel)?;
                }
                orchestrator.refresh_status();
            }
            // Every event that has arrived, in order: one wake-up of this loop per batch.
            1.. = events.recv_many(&mut received, EVENT_BATCH) => for event in received.drain(..) {
                match event {
                    DispatchEvent::Completed { source, record } => {
                        orchestrator.tokens += record.usage.as_ref().map_or(0, |u| u.completion_tokens);
                        let state = &mut orchestrator.sources[source];
                        state.status.done += 1;
                        state.status.output_tokens += record.usage.as_ref().map_or(0, |u| u.completion_tokens);
                        if record.finish_reason.as_deref() == Some("length") {
                            state.status.truncated += 1;
                        }
                        state.completed_here += 1;
                        let writer = state.writer.as_mut().expect("a generating source has a writer");
                        writer.push(&record)?;
                        if writer.pending() >= FRAME_RECORDS {
                            // Written now, fsynced on the next tick.
                            if let Some(fence) = &orchestrator.fence { fence.check()?; }
                            writer.write_frame().with_context(|| format!("failed to write `{}`", writer.path().display()))?;
                        }
                    }
                    DispatchEvent::GaveUp { source, record } => {
                        orchestrator.record_rejected(source, &record)?;
                    }
                    DispatchEvent::Fatal(message) => {
                        if fatal.is_none() {
                            crate::say!("gen: stopping: {message}");
                            fatal = Some(message);
                            dispatch_cancel.cancel();
                            prep_cancel.cancel();
                            prep_queue.clear();
                        }
                    }
                    DispatchEvent::SourceFinished { source } => {
                        dispatching -= 1;
                        // Stopped early (a signal, a fatal answer, no server): resumable, not failed.
                        let stopped = interrupted || fatal.is_some() || server_died.is_some();
                        orchestrator.finish_generation(source, stopped)?;
                        orchestrator.refresh_status();
                    }
                }
            },
            _ = tick.tick() => {
                orchestrator.status.servers = fleet
                    .backends()
                    .iter()
                    .map(|b| b.status(started_at.elapsed()))
                    .collect();
                orchestrator.flush_all()?;
                orchestrator.refresh_rates();
                orchestrator.refresh_status();
                crate::report::update_bars(&orchestrator.status.sources);
                if last_progress.elapsed() >= PROGRESS_EVERY && !crate::report::bars_wanted() {
                    orchestrator.print_progress();
                    last_progress = Instant::now();
                }
                if server_died.is_none()
                    && let Some(exit) = managed.as_ref().and_then(ManagedServer::exited)
                {
                    if let Some(server) = managed.as_mut() {
                        server.log_complete().await;
                    }
                    let log = run_dir.server_log();
                    let message = format!("the inference server exited ({exit}); last lines of `{}`:\n{}\n{}", log.display(), managed::tail(&log, 25), managed::diagnosis(&log));
                    crate::say!("gen: {message}");
                    let server = managed.take().expect("checked above");
                    if server.restarts < plan.server.max_restarts {
                        crate::say!("gen: restarting the inference server ({} of {}); requests wait for it", server.restarts + 1, plan.server.max_restarts);
                        orchestrator.events.append("server_restart", None, format!("{exit}; restart {} of {}", server.restarts + 1, plan.server.max_restarts));
                        restarting = Some(tokio::spawn(server.restart()));
                    } else {
                        server_died = Some(message);
                        // Its requests wait for a server that will not come back: none starts.
                        dispatch_cancel.cancel();
                        stop_admitting.cancel();
                    }
                }
                // An external server that went down: its log, if configured, says why.
                let all_down_since = fleet.all_down_since();
                if let (Some(log), Some(_)) = (&plan.server.log, all_down_since)
                    && !explained_outage
                {
                    explained_outage = true;
                    crate::say!("gen: server log `{}`:\n{}", log.display(), managed::diagnosis(log));
                } else if all_down_since.is_none() {
                    explained_outage = false;
                }
                if let (Some(max), Some(since)) = (plan.server.max_outage, all_down_since)
                    && server_died.is_none()
                    && state::unix_ms().saturating_sub(since) >= max.as_millis() as u64
                {
                    let message = format!(
                        "giving up: no server has answered for {} s (`max-outage-secs`); nothing was marked failed: run `gen run` again once a server is back",
                        max.as_secs()
                    );
                    crate::say!("gen: {message}");
                    orchestrator.events.append("outage_give_up", None, message.clone());
                    server_died = Some(message);
                    dispatch_cancel.cancel();
                    stop_admitting.cancel();
                }
            }
            restarted = async { restarting.as_mut().expect("guarded").await }, if restarting.is_some() => {
                restarting = None;
                match restarted {
                    Ok(Ok(server)) => {
                        crate::say!("gen: the inference server is back (restart {})", server.restarts);
                        managed = Some(server);
                    }
                    Ok(Err(e)) => {
                        // Said once, as the run's error.
                        let message = format!("the inference server could not be restarted: {e}");
                        orchestrator.events.append("server_restart_failed", None, message.clone());
                        server_died = Some(message);
                        dispatch_cancel.cancel();
                        stop_admitting.cancel();
                    }
                    Err(e) => anyhow::bail!("the server restart task failed: {e}"),
                }
            }
            () = cancel.cancelled(), if !interrupted => {
                crate::say!(
                    "gen: {}: no new requests; {} in flight get {} s to finish (a second Ctrl-C stops at once)",
                    super::stop::interrupted_by(),
                    fleet.in_flight(),
                    shutdown_grace().as_secs()
                );
                interrupted = true;
                prep_queue.clear();
                let abort = dispatch_cancel.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(shutdown_grace()).await;
                    abort.cancel();
                });
            }
        }
    }
    // Stops the tuners too, which save what they learnt.
    dispatch_cancel.cancel();
    for task in tuners {
        task.await.ok();
    }
    orchestrator.flush_all()?;
    for source in &orchestrator.sources {
        let tally = crate::store::tally::Tally {
            truncated: source.status.truncated,
        };
        // Only a shortcut for the next start: without it, that start counts again.
        crate::store::tally::save(&orchestrator.run_dir.source(&source.status.name), tally).ok();
    }
    let ending = if interrupted {
        super::stop::interrupted_by()
    } else if fatal.is_some() || server_died.is_some() {
        "stopped by an error"
    } else {
        "finished"
    };
    orchestrator.events.append("run_finished", None, ending);
    crate::report::finish_bars();
    orchestrator.status.finished = true;
    if interrupted {
        orchestrator.status.stopped_by = Some(super::stop::reason());
    }
    orchestrator.status.servers = fleet
        .backends()
        .iter()
        .map(|b| b.status(started_at.elapsed()))
        .collect();
    orchestrator.write_status()?;
    orchestrator.print_progress();
    if let Some(server) = managed {
        server.stop().await;
    }
    if let Some(message) = fatal {
        anyhow::bail!("the server refused the requests: {message}");
    }
    if let Some(message) = server_died {
        anyhow::bail!(message);
    }
    if interrupted {
        return Ok(RunOutcome::Interrupted);
    }
    let failed = orchestrator
        .sources
        .iter()
        .zip(&selected)
        .filter(|(s, selected)| **selected && s.status.phase != Phase::Done)
        .map(|(s, _)| s)
        .map(|s| s.status.name.clone())
        .collect();
    let refused = orchestrator.refused(&selected);
    Ok(RunOutcome::Finished { failed, refused })
}

/// Before generating, on the first server that answers: its context holds `max-tokens` plus a
/// margin for the prompt, and — when the config asks for thinking — it separates reasoning
/// (its reasoning parser is on), so days of output are not generated without it.
async fn server_checks(
    plan: &Plan,
    fleet: &Fleet,
    urls: &[String],
    model: &str,
    api_key: Option<String>,
) -> anyhow::Result<()> {
    let up = fleet
        .backends()
        .iter()
        .zip(urls)
        .find(|(b, _)| b.liveness.health() == crate::inference::liveness::Health::Up);
    let Some((_, url)) = up else {
        return Ok(());
    };
    let context = crate::doctor::server::context_at(plan, url, model, api_key.as_deref()).await;
    match context.level {
        crate::doctor::Level::Fail => anyhow::bail!(
            "server {}: {} (see `gen doctor {}`)",
            probe::redact(url),
            context.message,
            plan.config_path.display()
        ),
        crate::doctor::Level::Warn => crate::say!("gen: warning: context: {}", context.message),
        crate::doctor::Level::Ok => {}
    }
    if crate::doctor::server::thinking_expected(plan).is_some() {
        let check = crate::doctor::server::reasoning_probe(plan, url, model, api_key).await;
        match check.level {
            crate::doctor::Level::Fail => anyhow::bail!(
                "{} (override: remove `chat-template-kwargs` thinking settings)",
                check.message
            ),
            crate::doctor::Level::Warn => {
                crate::say!("gen: warning: reasoning: {}", check.message);
            }
            crate::doctor::Level::Ok => {}
        }
    }
    Ok(())
}

fn create_private_dir(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("failed to create `{}`: {e}", path.display()),
            )
        })
}

impl<'p> Orchestrator<'p> {
    fn load(
        plan: &'p Plan,
        run_dir: &RunDir,
        resend: &record::Resend,
    ) -> anyhow::Result<Orchestrator<'p>> {
        // Left by a process that died mid-write, or by a full disk; this run holds the lock.
        remove_stale_temps(run_dir.root())?;
        let mut sources = Vec::new();
        for spec in &plan.sources {
            let name = spec.name();
            let dir = run_dir.source(name);
            create_private_dir(dir.root())?;
            remove_stale_temps(dir.root())?;
            let partial_prompts = dir.prompts().with_extension("zst.tmp");
            if partial_prompts.exists() {
                fs_err::remove_file(&partial_prompts)?;
            }
            settle_first_sample(&dir)?;
            let manifest = prep::read_manifest(run_dir, name)?;
            let across = manifest
                .as_ref()
                .map_or(0, |m| m.counters.duplicates_across);
            let settled = record::settled_ids(&dir.rejected(), resend)
                .with_context(|| format!("failed to read `{}`", dir.rejected().display()))?;
            let stored = crate::store::done::load(&dir.completions())
                .with_context(|| format!("failed to read `{}`", dir.completions().display()))?;
            let warnings = report_repairs(run_dir, name, &stored.repairs);
            let tally = crate::store::tally::load(&dir)
                .with_context(|| format!("failed to read `{}`", dir.completions().display()))?;
            let done_ids = stored.ids;
            let refused = settled
                .refused
                .iter()
                .filter(|id| !done_ids.contains(*id))
                .count() as u64;
            let previous: Option<WorkerReport> = atomic::read_json::<WorkerFile>(&dir.worker())
                .ok()
                .flatten()
                .filter(|w| !w.succeeded)
                .map(|w| w.report);
            let prep_failed = manifest.is_none() && previous.is_some();
            let note = match (&manifest, previous) {
                (None, Some(report)) => format!(
                    "last preparation failed ({}); retrying",
                    report.exit.describe()
                ),
                _ => String::new(),
            };
            sources.push(SourceState {
                status: SourceStatus {
                    phase: if manifest.is_some() {
                        Phase::Prepared
                    } else {
                        Phase::Pending
                    },
                    prepared: manifest.as_ref().map(|m| m.prompts),
                    done: done_ids.len() as u64,
                    rejected: settled.ids.len() as u64,
                    duplicates: settled.duplicates + across,
                    truncated: tally.truncated,
                    note,
                    // The preparation's own warning first, then what this start repaired.
                    warnings: manifest
                        .as_ref()
                        .and_then(prep::PrepManifest::warning)
                        .into_iter()
                        .chain(warnings)
                        .collect(),
                    ..SourceStatus::new(name, Phase::Pending)
                },
                done_ids,
                settled_ids: settled.ids,
                completed_here: 0,
                feed: None,
                opened: false,
                hashes: None,
                answered_hashes: None,
                settled_duplicates: settled.duplicates,
                reprepared: false,
                exclude: None,
                generating_since: None,
                peak_rss_bytes: None,
                writer: None,
                refused,
                prep_failed,
            });
        }
        let status = RunStatus {
            layout: LAYOUT_VERSION,
            config: plan.config_path.display().to_string(),
            pid: std::process::id(),
            host: state::host_name(),
            started_unix_ms: state::unix_ms(),
            heartbeat_unix_ms: state::unix_ms(),
            finished: false,
            servers: Vec::new(),
            sources: Vec::new(),
            machine: None,
            stopped_by: None,
        };
        Ok(Orchestrator {
            plan,
            run_dir: run_dir.clone(),
            sources,
            status,
            tokens: 0,
            started: Instant::now(),
            shard: None,
            fence: None,
            events: crate::store::events::EventLog::new(run_dir.events()),
            logged_phases: Vec::new(),
            logged_limit: Vec::new(),
            logged_down: Vec::new(),
            status_unwritten: false,
            kernel_log: None,
        })
    }

    /// Compares every selected, prepared source with its inputs now. A changed source of which
    /// nothing was generated is prepared again; one with answers keeps its preparation only
    /// with `keep` (recorded in its manifest, so later runs compare with the inputs it was kept
    /// for), else the run is refused, naming every change.
    fn check_inputs(&mut self, selected: &[bool], keep: bool) -> anyhow::Result<()> {
        let mut refused = Vec::new();
        for (i, _) in selected
            .iter()
            .enumerate()
            .filter(|(_, selected)| **selected)
        {
            let name = self.sources[i].status.name.clone();
            let Some(mut manifest) = prep::read_manifest(&self.run_dir, &name)? else {
                continue;
            };
            let dir = self.run_dir.source(&name);
            let output = prep::custom_output(&self.run_dir, &name).0;
            let reader = match self.plan.worker(&name).command {
                Some(_) => super::inputs::Reader::Custom {
                    output: manifest.counters.files.first().unwrap_or(&output),
                },
                None => super::inputs::Reader::Builtin {
                    base_dir: &self.plan.base_dir,
                },
            };
            let comparison = super::inputs::compare(
                &self.plan.sources[i],
                &reader,
                &super::inputs::recorded(&manifest),
            );
            if comparison.changes.is_empty() {
                // A manifest written before sizes and times were recorded gets them now, so
                // its files are not read in full again on every run.
                let unrecorded = manifest.input_stats.is_empty() && manifest.kept_for.is_none();
                if unrecorded && !comparison.now.stats.is_empty() {
                    manifest.input_stats = comparison.now.stats;
                    atomic::write_json(&dir.manifest(), &manifest).with_context(|| {
                        format!("failed to write `{}`", dir.manifest().display())
                    })?;
                }
                continue;
            }
            let changes = comparison.changes.join("; ");
            let state = &mut self.sources[i];
            let generated = !state.done_ids.is_empty()
                || state.settled_ids.len() as u64 > state.settled_duplicates;
            if !generated {
                // Nothing was answered: its duplicates and failed attempts are re-decided
                // from the new prompts.
                fs_err::remove_file(dir.manifest())?;
                if dir.rejected().exists() {
                    fs_err::remove_file(dir.rejected())?;
                }
                state.settled_ids.clear();
                state.settled_duplicates = 0;
                let status = &mut state.status;
                status.prepared = None;
                status.phase = Phase::Pending;
                status.rejected = 0;
                status.duplicates = 0;
                status.note = format!("inputs changed ({changes}); preparing again");
                crate::say!(
                    "gen: `{name}`: changed since it was prepared: {changes}; nothing of it was \
                     generated yet: preparing it again"
                );
                self.events
                    .append("inputs_changed", Some(&name), status.note.clone());
            } else if keep {
                manifest.kept_for = Some(comparison.now);
                atomic::write_json(&dir.manifest(), &manifest)
                    .with_context(|| format!("failed to write `{}`", dir.manifest().display()))?;
                let message = format!(
                    "changed since it was prepared: {changes}; going on with the prompts \
                     prepared before (--keep-preparation)"
                );
                crate::say!("gen: `{name}`: {message}");
                self.events.append("inputs_changed", Some(&name), message);
            } else {
                refused.push((name, comparison.changes));
            }
        }
        if refused.is_empty() {
            return Ok(());
        }
        Err(InputsChanged {
            run_dir: self.run_dir.root().display().to_string(),
            changed: refused,
        }
        .into())
    }

    /// Counts the prompts of every selected, prepared source not counted yet whose earlier
    /// sources are settled (prepared, failed or not in this run): cross-source deduplication
    /// needs them first. Returns the sources to prepare again (see [`Self::open_source`]).
    fn open_ready(&mut self, selected: &[bool]) -> Vec<usize> {
        let mut again = Vec::new();
        for i in 0..self.sources.len() {
            let state = &self.sources[i];
            if !selected[i] || state.opened || state.status.prepared.is_none() {
                continue;
            }
            let blocked = (0..i).any(|j| {
                let earlier = &self.sources[j].status;
                selected[j] && earlier.prepared.is_none() && earlier.phase != Phase::Failed
            });
            if blocked {
                continue;
            }
            match self.open_source(i) {
                Ok(Opened::Counted) => {}
                Ok(Opened::PrepareAgain) => again.push(i),
                Err(e) => {
                    // This source's files are unreadable: it fails, the others go on.
                    let state = &mut self.sources[i].status;
                    state.phase = Phase::Failed;
                    state.note = format!("{e:#}");
                    crate::say!("gen: `{}` failed: {}", state.name, state.note);
                }
            }
        }
        again
    }

    /// Counts source `i`'s prompts, settles as duplicates those an earlier source holds or a
    /// later source already answered, and keeps a feed of the rest (opening its output) when
    /// there are any.
    ///
    /// When earlier sources hold some of its prompts, its sample had to leave rows out and
    /// nothing of it has been answered or settled yet, it is not counted but prepared again
    /// instead, leaving the earlier sources' prompts out of its sample (their content hashes
    /// in `earlier-prompts.hashes`, written when that worker starts), so it still gets `limit`
    /// prompts of its own. A custom worker's source (its worker would have to run again) and
    /// any source under `--shard` (every host must prepare the same prompts) settle their
    /// duplicates instead.
    fn open_source(&mut self, i: usize) -> anyhow::Result<Opened> {
        let name = self.sources[i].status.name.clone();
        let dir = self.run_dir.source(&name);
        let earlier = if self.plan.sources[i].dedup() {
            self.held_elsewhere(i)?
        } else {
            Arc::default()
        };
        let earlier_hashes = Arc::clone(&earlier);
        let counters = prep::read_manifest(&self.run_dir, &name)?.map(|m| m.counters);
        // Earlier sources' prompts its worker left out of the sample.
        let left_out = counters.as_ref().map_or(0, |c| c.duplicates_across);
        // Whether its sample had to leave rows out: only then can another sample do better.
        let sampled_out = counters.as_ref().map_or(0, |c| c.sampled_out);
        let state = &mut self.sources[i];
        state.opened = true;
        let skip = Skip {
            done: std::mem::take(&mut state.done_ids),
            settled: std::mem::take(&mut state.settled_ids),
            shard: self.shard,
            elsewhere: earlier,
        };
        let worker = self.plan.worker(&name);
        let (census, feed) = Feed::open(&dir.prompts(), skip, worker.order)?;
        let earlier_duplicates = census.duplicates.iter().filter(|(_, j)| *j < i).count();
        // Not with `--shard`: every host must prepare the same prompts, and a host sees the
        // duplicates of its own share only.
        if earlier_duplicates > 0
            && sampled_out > 0
            && census.done == 0
            && census.settled == 0
            && worker.command.is_none()
            && self.shard.is_none()
            && !state.reprepared
        {
            state.exclude = Some(
                earlier_hashes
                    .iter()
                    .filter(|(_, j)| **j < i)
                    .map(|(hash, _)| *hash)
                    .collect(),
            );
            state.reprepared = true;
            state.opened = false;
            state.hashes = None;
            let status = &mut state.status;
            status.phase = Phase::Pending;
            status.prepared = None;
            status.note = format!(
                "preparing again: {earlier_duplicates} of its prompts are in earlier sources; \
                 sampling others instead"
            );
            crate::say!("gen: `{name}`: {}", status.note);
            self.events
                .append("prepare_again", Some(&name), status.note.clone());
            return Ok(Opened::PrepareAgain);
        }
        if !census.duplicates.is_empty() {
            let mut records = Vec::new();
            for (id, j) in &census.duplicates {
                let holder = &self.sources[*j].status.name;
                let reason = if *j < i {
                    format!("the same prompt is in the earlier source `{holder}`, which answers it")
                } else {
                    format!(
                        "the same prompt was already answered in the later source `{holder}` \
                         (this source was prepared after it had generated)"
                    )
                };
                records.push(RejectedRecord {
                    id: id.clone(),
                    kind: RejectKind::Duplicate,
                    reason,
                    attempts: 0,
                    created_unix_ms: state::unix_ms(),
                    settings: None,
                });
            }
            crate::store::append::json_lines(&dir.rejected(), &records, true)?;
            let later = census.duplicates.iter().filter(|(_, j)| *j > i).count();
            let earlier = census.duplicates.len() - later;
            let note = match (earlier, later) {
                (n, 0) => format!(
                    "{n} prompts are duplicates of earlier sources (the earlier source answers them)"
                ),
                (0, n) => format!(
                    "{n} prompts were already answered in later sources (prepared before this one)"
                ),
                (n, m) => format!(
                    "{n} prompts are duplicates of earlier sources (the earlier source answers \
                     them), {m} were already answered in later sources"
                ),
            };
            crate::say!("gen: `{name}`: {note}");
            self.events.append("duplicates_across", Some(&name), note);
        }
        let state = &mut self.sources[i];
        state.status.prepared = Some(census.prepared);
        state.status.done = census.done;
        state.status.rejected = census.settled + census.duplicates.len() as u64;
        state.status.duplicates =
            state.settled_duplicates + census.duplicates.len() as u64 + left_out;
        if census.pending == 0 {
            state.status.phase = Phase::Done;
        } else {
            let (writer, _) = FrameWriter::open_indexed(&dir.completions())?;
            state.writer = Some(writer);
            state.feed = Some(feed);
        }
        Ok(Opened::Counted)
    }

    /// The content hashes source `i` must not send, each with the source holding it: every
    /// prompt of a prepared source before `i` (the first such source wins), then every prompt
    /// a later source answered before this run — it had generated while `i` was not prepared
    /// (its preparation failed), and what was generated is not generated twice.
    fn held_elsewhere(
        &mut self,
        i: usize,
    ) -> anyhow::Result<Arc<std::collections::HashMap<u64, usize>>> {
        let mut earlier = std::collections::HashMap::new();
        for j in 0..i {
            let name = self.sources[j].status.name.clone();
            if self.sources[j].hashes.is_none() {
                if prep::read_manifest(&self.run_dir, &name)?.is_none() {
                    continue;
                }
                let path = self.run_dir.source(&name).prompts();
                let hashes = super::feed::content_hashes(&path)?;
                self.sources[j].hashes = Some(Arc::new(hashes));
            }
            if let Some(hashes) = &self.sources[j].hashes {
                for hash in hashes.iter() {
                    earlier.entry(*hash).or_insert(j);
                }
            }
        }
        for j in i + 1..self.sources.len() {
            // A later source that opened in this run has handed its done-set to its feed; it
            // opened before `i` only if `i` was not prepared then, and `i` is not prepared
            // twice in one run.
            let later = &self.sources[j];
            if later.opened || later.done_ids.is_empty() {
                continue;
            }
            if later.answered_hashes.is_none() {
                let name = later.status.name.clone();
                if prep::read_manifest(&self.run_dir, &name)?.is_none() {
                    continue;
                }
                let path = self.run_dir.source(&name).prompts();
                let mut answered = HashSet::new();
                let done = &self.sources[j].done_ids;
                super::feed::for_each_prompt(&path, |prompt| {
                    if done.contains(&prompt.id) {
                        answered.insert(gen_sources::prompt::content_hash(&prompt.messages));
                    }
                })?;
                self.sources[j].answered_hashes = Some(Arc::new(answered));
            }
            if let Some(hashes) = &self.sources[j].answered_hashes {
                for hash in hashes.iter() {
                    earlier.entry(*hash).or_insert(j);
                }
            }
        }
        Ok(Arc::new(earlier))
    }

    /// Starts streaming every source counted with prompts left; marks them generating.
    fn take_feeds(&mut self) -> Vec<(usize, super::feed::Prompts)> {
        let mut started = Vec::new();
        for (i, state) in self.sources.iter_mut().enumerate() {
            if let Some(feed) = state.feed.take() {
                state.status.phase = Phase::Generating;
                started.push((i, feed.start()));
            }
        }
        started
    }

    fn start_preps(
        &mut self,
        queue: &mut VecDeque<usize>,
        preps: &mut JoinSet<(usize, std::io::Result<WorkerReport>)>,
        cancel: &CancellationToken,
    ) -> anyhow::Result<()> {
        self.fenced()?;
        let exe =
            std::env::current_exe().context("cannot find the `gen` executable to start workers")?;
        while preps.len() < self.plan.max_parallel_prep.get() {
            let Some(i) = queue.pop_front() else { break };
            let name = self.sources[i].status.name.clone();
            let dir = self.run_dir.source(&name);
            let log = dir.prep_log();
            if log.exists() {
                fs_err::rename(&log, dir.root().join("prep.previous.log"))?;
            }
            let worker = self.plan.worker(&name);
            let mut args = prep::worker_args(&self.plan.config_path, &name, self.run_dir.root());
            // Written by this run for this preparation only: a later first preparation (after
            // a crash, or changed settings) starts from the full sample and is checked again.
            // The first sample is set aside, not deleted, until the new one is complete.
            if let Some(hashes) = self.sources[i].exclude.take() {
                prep::write_hashes(&dir.earlier_hashes(), hashes)?;
                // Manifest first: from then on the source is unprepared, whatever stops here.
                fs_err::rename(dir.manifest(), dir.first_manifest())?;
                fs_err::rename(dir.prompts(), dir.first_prompts())?;
                args.insert(
                    args.len() - 2,
                    prep::option("--exclude-hashes", &dir.earlier_hashes()),
                );
            }
            let mut command = WorkerCommand {
                program: exe.clone(),
                args,
                envs: Vec::new(),
                log,
                memory_limit: worker.memory_limit,
                stall_timeout: Some(self.plan.stall_timeout),
                progress_files: vec![dir.prompts().with_extension("zst.tmp"), dir.prompts()],
                name: name.clone(),
            };
            if let Some(custom) = &worker.command {
                let (output, done) = prep::custom_output(&self.run_dir, &name);
                for stale in [&output, &done] {
                    if stale.exists() {
                        fs_err::remove_file(stale)?;
                    }
                }
                let env = |var: &str| std::env::var(var).ok();
                let expanded = custom
                    .iter()
                    .map(|a| managed::expand(a, 0, &env))
                    .collect::<Result<Vec<_>, _>>()
                    .with_context(|| format!("source `{name}`: bad `command`"))?;
                command.program = expanded[0].clone().into();
                command.args = expanded[1..].iter().map(Into::into).collect();
                command.envs = vec![
                    ("GEN_OUTPUT".into(), output.display().to_string()),
                    ("GEN_DONE".into(), done.display().to_string()),
                    ("GEN_SOURCE".into(), name.clone()),
                ];
                command.progress_files = vec![output];
            }
            self.sources[i].status.phase = Phase::Preparing;
            self.sources[i].status.note.clear();
            crate::say!("gen: preparing `{name}`");
            let cancel = cancel.clone();
            preps.spawn(async move { (i, supervisor::supervise(&command, cancel).await) });
        }
        Ok(())
    }

    /// Records how a worker ended.
    async fn finish_prep(
        &mut self,
        i: usize,
        report: std::io::Result<WorkerReport>,
        interrupted: bool,
    ) -> anyhow::Result<()> {
        let name = self.sources[i].status.name.clone();
        let dir = self.run_dir.source(&name);
        let restored = settle_first_sample(&dir)?;
        let report = match report {
            Ok(report) => report,
            Err(e) => {
                let state = &mut self.sources[i].status;
                state.phase = Phase::Failed;
                state.note = format!("could not start the preparation worker: {e}");
                crate::say!("gen: `{name}`: {}", state.note);
                return Ok(());
            }
        };
        let worker = self.plan.worker(&name);
        let mut import_error = None;
        if worker.command.is_some() && custom_output_complete(&self.run_dir, &name, worker.expected)
        {
            let (plan, run_dir, source) = (self.plan.clone(), self.run_dir.clone(), name.clone());
            let imported = tokio::task::spawn_blocking(move || {
                prep::import_custom_output(&plan, &run_dir, &source)
            })
            .await
            .context("the import of a custom worker's output panicked")?;
            if let Err(e) = imported {
                import_error = Some(format!("{e:#}"));
            }
        }
        let manifest = prep::read_manifest(&self.run_dir, &name)?;
        self.sources[i].peak_rss_bytes = Some(report.peak_rss_bytes);
        let verdict = if report.exit.success() && manifest.is_some() {
            None
        } else {
            if matches!(
                report.exit,
                supervisor::ExitRecord::Signal {
                    signal: libc::SIGKILL,
                    ..
                }
            ) {
                // The kill line is logged before the signal lands, but the reader thread may lag.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let kernel_log = self.kernel_log.as_ref().map_or_else(
                || gen_diagnostics::KernelLog::Unavailable {
                    reason: "not followed".into(),
                },
                KernelLogFollower::snapshot,
            );
            let kernel_log = match kernel_log {
                gen_diagnostics::KernelLog::Unavailable { reason } => {
                    super::kernel_log::fallback_snapshot(reason).await
                }
                text => text,
            };
            let observation =
                observe::observation(&report, &dir.prep_log(), kernel_log, manifest.is_some());
            Some(observe::verdict(&observation))
        };
        let succeeded = manifest.is_some();
        atomic::write_json(
            &dir.worker(),
            &WorkerFile {
                succeeded,
                report: report.clone(),
                verdict_ms: verdict
                    .as_ref()
                    .map(|_| super::sys::monotonic_usec().saturating_sub(report.exit_usec) / 1000),
                verdict: verdict.clone(),
            },
        )?;
        self.sources[i].status.verdict = verdict.as_ref().map(VerdictLine::from);
        if let Some(verdict) = &verdict {
            let detail = format!(
                "{}: {}; {}",
                report.exit.describe(),
                verdict.headline(),
                verdict.next_action()
            );
            self.events.append("worker_verdict", Some(&name), detail);
        }
        let Some(manifest) = manifest else {
            // A worker that was killed leaves its partial prompts file: space for nothing.
            let partial = dir.prompts().with_extension("zst.tmp");
            if partial.exists() {
                fs_err::remove_file(&partial)?;
            }
            let state = &mut self.sources[i].status;
            if interrupted {
                state.phase = Phase::Pending;
                state.note = "interrupted during preparation".into();
            } else {
                state.phase = Phase::Failed;
                let disk_full = disk_full(&dir.prep_log());
                state.note = match &verdict {
                    _ if disk_full.is_some() => format!(
                        "the disk is full: {}; free space, then run `gen run --only-failed`",
                        disk_full.unwrap_or_default()
                    ),
                    _ if import_error.is_some() => format!(
                        "the worker's output could not be read: {}",
                        import_error.unwrap_or_default()
                    ),
                    Some(v) if v.class != gen_diagnostics::Class::Success => {
                        format!("{}; {}", v.headline(), v.next_action())
                    }
                    _ => format!(
                        "preparation ended ({}) without completing its output: {}",
                        report.exit.describe(),
                        last_line(&dir.prep_log())
                    ),
                };
                crate::say!("gen: `{name}` failed: {}", state.note);
                if let Some(v) = &verdict {
                    for line in &v.evidence {
                        crate::say!("gen:   evidence: {line}");
                    }
                }
            }
            return Ok(());
        };
        let state = &mut self.sources[i].status;
        state.prepared = Some(manifest.prompts);
        if let Some(warning) = manifest.warning() {
            crate::say!("gen: warning: `{name}`: {warning}");
            state.warnings.push(warning);
        }
        state.phase = Phase::Prepared;
        if !report.exit.success() {
            // The manifest is written last: the output is complete, the crash came after it.
            let headline = verdict
                .as_ref()
                .map_or_else(|| report.exit.describe(), Verdict::headline);
            state.note = format!("{headline}; output kept");
            crate::say!("gen: `{name}`: {}", state.note);
        }
        crate::say!("gen: prepared `{name}`: {} prompts", manifest.prompts);
        if restored {
            state.note = format!(
                "preparing again without earlier sources' prompts failed ({}); the first sample \
                 is kept and its prompts in earlier sources are settled as duplicates",
                report.exit.describe()
            );
            crate::say!("gen: `{name}`: {}", state.note);
        }
        Ok(())
    }

    fn record_rejected(&mut self, i: usize, record: &RejectedRecord) -> anyhow::Result<()> {
        self.fenced()?;
        let path = self.run_dir.source(&self.sources[i].status.name).rejected();
        crate::store::append::json_lines(&path, std::slice::from_ref(record), false)?;
        let source = &mut self.sources[i];
        source.refused += u64::from(record.kind == RejectKind::Rejected);
        let state = &mut source.status;
        let what = match record.kind {
            RejectKind::Rejected => "rejected",
            RejectKind::Truncated => "truncated",
            RejectKind::Exhausted => "out of attempts",
            RejectKind::Duplicate => "duplicate",
        };
        if record.kind == RejectKind::Exhausted {
            state.failed += 1;
            state.note = format!(
                "{} failed (retried on the next run); last: {}",
                state.failed, record.reason
            );
        } else {
            state.rejected += 1;
            if state.failed == 0 {
                state.note = format!(
                    "{} settled without answer; last {what}: {}",
                    state.rejected, record.reason
                );
            }
        }
        Ok(())
    }

    /// The selected sources with prompts the server refused, and how many.
    fn refused(&self, selected: &[bool]) -> Vec<(String, u64)> {
        self.sources
            .iter()
            .zip(selected)
            .filter(|(s, selected)| **selected && s.refused > 0)
            .map(|(s, _)| (s.status.name.clone(), s.refused))
            .collect()
    }

    fn finish_generation(&mut self, i: usize, stopped: bool) -> anyhow::Result<()> {
        self.fenced()?;
        let state = &mut self.sources[i];
        if let Some(writer) = state.writer.as_mut() {
            writer.flush()?;
        }
        let status = &mut state.status;
        if status.prepared == Some(status.done + status.rejected) {
            status.phase = Phase::Done;
            status.note = if status.rejected > 0 {
                format!(
                    "{} rejected by the server (see rejected.jsonl)",
                    status.rejected
                )
            } else {
                String::new()
            };
            crate::say!("gen: `{}` done: {} completions", status.name, status.done);
        } else if stopped {
            status.phase = Phase::Prepared;
        } else {
            status.phase = Phase::Failed;
            crate::say!("gen: `{}`: {}", status.name, status.note);
        }
        Ok(())
    }

    fn flush_all(&mut self) -> anyhow::Result<()> {
        self.fenced()?;
        for state in &mut self.sources {
            if let Some(writer) = state.writer.as_mut() {
                writer
                    .flush()
                    .with_context(|| format!("failed to write `{}`", writer.path().display()))?;
            }
        }
        Ok(())
    }

    /// Refreshes rates, ETAs and the machine's memory (once per tick).
    fn refresh_rates(&mut self) {
        for source in &mut self.sources {
            let status = &mut source.status;
            if status.phase != Phase::Generating {
                status.tokens_per_sec = None;
                status.eta_secs = None;
                continue;
            }
            let since = *source.generating_since.get_or_insert_with(Instant::now);
            let secs = since.elapsed().as_secs_f64();
            if secs < 1.0 || status.output_tokens == 0 {
                continue;
            }
            let rate = status.output_tokens as f64 / secs;
            status.tokens_per_sec = Some(rate);
            // Mean tokens per completion in this run, times what is left.
            let completed_here = source.completed_here.max(1) as f64;
            let per_completion = status.output_tokens as f64 / completed_here;
            let remaining = status
                .prepared
                .unwrap_or(0)
                .saturating_sub(status.done + status.rejected) as f64;
            status.eta_secs = Some((remaining * per_completion / rate).round() as u64);
        }
        let peak = self.sources.iter().filter_map(|s| s.peak_rss_bytes).max();
        self.status.machine = state::MachineStatus::read(peak);
    }

    /// Appends an event for every change since the last status write.
    fn log_changes(&mut self) {
        for (i, source) in self.sources.iter().enumerate() {
            let phase = source.status.phase;
            if self.logged_phases.get(i) != Some(&phase) {
                let detail = if source.status.note.is_empty() {
                    phase.label().to_owned()
                } else {
                    format!("{}: {}", phase.label(), source.status.note)
                };
                self.events
                    .append("source_phase", Some(&source.status.name), detail);
            }
        }
        self.logged_phases = self.sources.iter().map(|s| s.status.phase).collect();
        let all_down = !self.status.servers.is_empty()
            && self
                .status
                .servers
                .iter()
                .all(|s| s.down_since_unix_ms.is_some());
        self.logged_down.resize(self.status.servers.len(), None);
        self.logged_limit.resize(self.status.servers.len(), None);
        for (i, server) in self.status.servers.iter().enumerate() {
            if server.down_since_unix_ms != self.logged_down[i] {
                match server.down_since_unix_ms {
                    Some(_) => self.events.append("server_down", None, {
                        let why = server
                            .down_reason
                            .as_ref()
                            .map_or_else(String::new, |r| format!(" ({r})"));
                        if all_down {
                            format!("{} stopped answering{why}; dispatch paused", server.url)
                        } else {
                            format!(
                                "{} stopped answering{why}; its requests go to the others",
                                server.url
                            )
                        }
                    }),
                    None => self.events.append(
                        "server_up",
                        None,
                        format!("{} answers again; dispatch resumed", server.url),
                    ),
                }
                self.logged_down[i] = server.down_since_unix_ms;
            }
            if Some(server.concurrency) != self.logged_limit[i] {
                let why = server
                    .decision
                    .clone()
                    .unwrap_or_else(|| "fixed".to_owned());
                self.events.append(
                    "concurrency",
                    None,
                    format!("{} {} ({why})", server.url, server.concurrency),
                );
                self.logged_limit[i] = Some(server.concurrency);
            }
        }
    }

    /// Under `--shard auto`: `Err` once this task no longer owns its shard.
    fn fenced(&self) -> anyhow::Result<()> {
        match &self.fence {
            Some(fence) => Ok(fence.check()?),
            None => Ok(()),
        }
    }

    fn write_status(&mut self) -> anyhow::Result<()> {
        self.fenced()?;
        self.log_changes();
        self.status.heartbeat_unix_ms = state::unix_ms();
        self.status.sources = self.sources.iter().map(|s| s.status.clone()).collect();
        state::write(&self.run_dir.status(), &self.status)
            .with_context(|| format!("failed to write `{}`", self.run_dir.status().display()))
    }

    /// [`Self::write_status`] while the run goes on: a failure (a full disk) is said once and
    /// retried on the next change or tick, so what filled the disk — a worker, whose failure
    /// frees its files — is reported instead of the status file, and the run is not stopped
    /// for its status alone.
    fn refresh_status(&mut self) {
        match self.write_status() {
            Ok(()) => self.status_unwritten = false,
            Err(e) if !self.status_unwritten => {
                self.status_unwritten = true;
                crate::say!("gen: warning: {e:#}; retrying on every change");
            }
            Err(_) => {}
        }
    }

    fn print_progress(&self) {
        let prepared: u64 = self.sources.iter().filter_map(|s| s.status.prepared).sum();
        let done: u64 = self.sources.iter().map(|s| s.status.done).sum();
        let failed: u64 = self.sources.iter().map(|s| s.status.failed).sum();
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        crate::say!(
            "gen: [{:>4.0}s] {done}/{prepared} completed, {failed} failed, {:.1} output tok/s",
            secs,
            self.tokens as f64 / secs
        );
    }
}

/// `gen prepare`: the preparation part of a run and nothing else, so no server is needed.
/// Each source in `needs_prep` is prepared by its worker exactly as `gen run` does it (memory
/// limit, verdict, status); a signal stops the workers the same way.
async fn prepare_only(
    orchestrator: &mut Orchestrator<'_>,
    needs_prep: Vec<usize>,
    cancel: &CancellationToken,
) -> anyhow::Result<RunOutcome> {
    if !needs_prep.is_empty() {
        orchestrator.kernel_log = Some(KernelLogFollower::start());
    }
    let prepared_here = needs_prep.clone();
    let mut queue: VecDeque<usize> = needs_prep.into();
    let mut preps: JoinSet<(usize, std::io::Result<WorkerReport>)> = JoinSet::new();
    orchestrator.start_preps(&mut queue, &mut preps, cancel)?;
    orchestrator.refresh_status();
    while let Some(joined) = preps.join_next().await {
        let (i, report) = joined.context("a preparation supervisor panicked")?;
        let interrupted = cancel.is_cancelled();
        orchestrator.finish_prep(i, report, interrupted).await?;
        if !interrupted {
            orchestrator.start_preps(&mut queue, &mut preps, cancel)?;
        }
        orchestrator.refresh_status();
    }
    orchestrator.status.finished = true;
    if cancel.is_cancelled() {
        orchestrator.status.stopped_by = Some(super::stop::reason());
    }
    orchestrator.write_status()?;
    if cancel.is_cancelled() {
        return Ok(RunOutcome::Interrupted);
    }
    let failed = prepared_here
        .into_iter()
        .map(|i| &orchestrator.sources[i].status)
        .filter(|s| s.phase == Phase::Failed)
        .map(|s| s.name.clone())
        .collect();
    Ok(RunOutcome::Finished {
        failed,
        refused: Vec::new(),
    })
}

/// `worker.json`: the last preparation worker's report and whether it prepared its source.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WorkerFile {
    pub succeeded: bool,
    pub report: WorkerReport,
    /// The diagnostics verdict, when the worker did not simply succeed.
    #[serde(default)]
    pub verdict: Option<Verdict>,
    /// Milliseconds from the worker's exit to its verdict (the budget is 1 s).
    #[serde(default)]
    pub verdict_ms: Option<u64>,
}

/// Says what [`crate::store::done::load`] put right in source `name`'s completions: a torn
/// tail quietly (a crash's normal leftover), anything that lost or moved records loudly, on
/// stderr and in `events.jsonl`; returns those for the source's status.
fn report_repairs(
    run_dir: &RunDir,
    name: &str,
    repairs: &[crate::store::done::Repair],
) -> Vec<String> {
    let mut events = crate::store::events::EventLog::new(run_dir.events());
    let mut warnings = Vec::new();
    for repair in repairs {
        if repair.is_loud() {
            crate::say!("gen: WARNING: `{name}`: {repair}");
            events.append("completions_repaired", Some(name), repair.to_string());
            warnings.push(repair.to_string());
        } else {
            tracing::info!(source = name, "{repair}");
        }
    }
    warnings
}

/// After a preparation again (see [`Orchestrator::open_source`]): drops the first sample set
/// aside when the new one is complete, or puts it back when it is not (the worker failed, or
/// `gen` stopped). Returns whether it was put back.
fn settle_first_sample(dir: &crate::store::layout::SourceDir) -> std::io::Result<bool> {
    if !dir.first_manifest().exists() {
        return Ok(false);
    }
    if dir.manifest().exists() {
        fs_err::remove_file(dir.first_manifest())?;
        fs_err::remove_file(dir.first_prompts()).ok();
        return Ok(false);
    }
    // Prompts first, manifest last, as a preparation writes them; each step can be redone.
    if dir.first_prompts().exists() {
        fs_err::rename(dir.first_prompts(), dir.prompts())?;
    }
    fs_err::rename(dir.first_manifest(), dir.manifest())?;
    Ok(true)
}

fn remove_stale_temps(dir: &std::path::Path) -> anyhow::Result<()> {
    for path in atomic::remove_stale_temps(dir)? {
        tracing::info!("removed the stale temporary file `{}`", path.display());
    }
    Ok(())
}

/// A custom worker's output counts as complete only with its done marker, and with the
/// expected number of rows when the config gives one.
fn custom_output_complete(run_dir: &RunDir, source: &str, expected: Option<u64>) -> bool {
    let (output, done) = prep::custom_output(run_dir, source);
    if !done.exists() {
        return false;
    }
    match expected {
        None => true,
        Some(expected) => {
            let text = fs_err::read(&output).unwrap_or_default();
            let rows = text
                .split(|b| *b == b'\n')
                .filter(|l| !l.trim_ascii().is_empty())
                .count() as u64;
            rows >= expected
        }
    }
}

/// The error a worker's log ends with when it ran out of disk space (`ENOSPC`): its `error:`
/// line (the file it could not write) and the cause.
fn disk_full(log: &std::path::Path) -> Option<String> {
    const ENOSPC: &str = "No space left on device (os error 28)";
    let text = fs_err::read(log)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .ok()?;
    if !text.contains(ENOSPC) {
        return None;
    }
    let error = text.lines().rev().find_map(|l| l.strip_prefix("error: "))?;
    Some(format!("{error}: {ENOSPC}"))
}

fn last_line(path: &std::path::Path) -> String {
    let text = fs_err::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::settle_first_sample;
    use crate::store::layout::RunDir;

    /// A source directory holding `files` (name → content).
    fn source(files: &[(&str, &str)]) -> (tempfile::TempDir, crate::store::layout::SourceDir) {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = RunDir::new(root.path()).source("s");
        fs_err::create_dir_all(dir.root()).expect("mkdir");
        for (name, text) in files {
            fs_err::write(dir.root().join(name), text).expect("write");
        }
        (root, dir)
    }

    fn names(dir: &crate::store::layout::SourceDir) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = fs_err::read_dir(dir.root())
            .expect("read_dir")
            .flatten()
            .map(|e| {
                let text = fs_err::read_to_string(e.path()).expect("read");
                (e.file_name().to_string_lossy().into_owned(), text)
            })
            .collect();
        files.sort();
        files
    }

    fn owned(files: &[(&str, &str)]) -> Vec<(String, String)> {
        files
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
            .collect()
    }

    #[test]
    fn a_complete_new_sample_replaces_the_first() {
        let (_root, dir) = source(&[
            ("manifest.first.json", "first"),
            ("prompts.first.jsonl.zst", "first"),
            ("manifest.json", "new"),
            ("prompts.jsonl.zst", "new"),
        ]);
        assert!(!settle_first_sample(&dir).expect("settle"));
        assert_eq!(
            names(&dir),
            owned(&[("manifest.json", "new"), ("prompts.jsonl.zst", "new")])
        );
    }

    #[test]
    fn a_failed_new_sample_gives_the_first_back_from_any_step() {
        let first = [("manifest.json", "first"), ("prompts.jsonl.zst", "first")];
        for files in [
            // The worker failed after writing part of its temporary file.
            &[
                ("manifest.first.json", "first"),
                ("prompts.first.jsonl.zst", "first"),
                ("prompts.jsonl.zst.tmp", "partial"),
            ][..],
            // It renamed its new prompts into place, then died before its manifest.
            &[
                ("manifest.first.json", "first"),
                ("prompts.first.jsonl.zst", "first"),
                ("prompts.jsonl.zst", "new"),
            ],
            // `gen` stopped between setting the manifest and the prompts aside.
            &[
                ("manifest.first.json", "first"),
                ("prompts.jsonl.zst", "first"),
            ],
        ] {
            let (_root, dir) = source(files);
            assert!(settle_first_sample(&dir).expect("settle"), "{files:?}");
            let left: Vec<(String, String)> = names(&dir)
                .into_iter()
                .filter(|(n, _)| !n.ends_with(".tmp"))
                .collect();
            assert_eq!(left, owned(&first), "{files:?}");
            assert!(!settle_first_sample(&dir).expect("again"), "{files:?}");
        }
    }

    #[test]
    fn nothing_set_aside_changes_nothing() {
        let files = [("manifest.json", "m"), ("prompts.jsonl.zst", "p")];
        let (_root, dir) = source(&files);
        assert!(!settle_first_sample(&dir).expect("settle"));
        assert_eq!(names(&dir), owned(&files));
    }
}
