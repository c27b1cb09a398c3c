//! The `gen run` event loop. It alone owns the run state: preparation workers, the dispatcher,
//! the servers' watch and the clock report to it as [`RunEvent`]s, which [`Orchestrator::handle`]
//! acts on between wake-ups; it alone writes `status.json` and the output files. The sources'
//! state lives in [`super::sources`], the workers in [`super::preparation`], the servers in
//! [`super::server`].
//!
//! Order of a run: read what the run directory already holds (finished sources are skipped,
//! completed prompts are not sent again); if nothing is left, stop without touching the server.
//! Otherwise prepare sources in worker processes, at most `max-parallel-prep` at once, while
//! the servers start (launched when configured) and are checked: their start-up is one more
//! event of the same loop ([`RunEvent::ServersReady`]). Generation starts once they answer,
//! each source as soon as it is prepared. Servers that cannot be started or connected, or a
//! signal before they answer, stop the workers (their sources are prepared next run) and end
//! the run; no source is marked failed for want of a server. `gen prepare` is the same loop
//! without servers.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::dispatch::{DispatchEvent, Dispatcher, SourceRequests};
use super::events::{Failure, RunEvent, Stopping};
use super::preparation::Preparation;
use super::server::{Launched, Servers};
use super::sources::Sources;
use crate::config::Plan;
use crate::inference::managed::LaunchError;
use crate::inference::managed::ManagedServer;
use crate::notice::Notice;
use crate::report::RunReporter;
use crate::status::state::{self, Phase, RunStatus, SourceStatus};
use crate::store::private::create_private_dir;
use crate::store::records as record;
use crate::store::{RunDir, atomic, layout::LAYOUT_VERSION};
use tokio::task::JoinError;

pub use super::sources::InputsChanged;

/// Dispatch events handled per turn of the loop.
const EVENT_BATCH: usize = 256;
/// Dispatch events waiting for the loop, at most (then finished requests wait to report).
const EVENT_BACKLOG: usize = 1024;
const TICK: Duration = Duration::from_secs(1);
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How long requests in flight may finish after Ctrl-C or SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// During the grace period: how long the streams in flight may go without a token, with no
/// server answering `/health`, before they are given up as unable to finish.
const GONE_QUIET: Duration = Duration::from_secs(2);
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
    /// Sources whose stored answers are set aside, to be generated again (`--regenerate`).
    pub regenerate: Vec<String>,
    /// Keep a source's preparation although its inputs changed since.
    pub keep_preparation: bool,
    /// Only this host's share of every source's prompts.
    pub shard: Option<crate::scale::shard::Shard>,
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
        if self.regenerate.iter().any(|s| s == name) {
            return true;
        }
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

/// The run's state before and while it runs: its sources, `status.json` and `events.jsonl`.
struct RunState<'p> {
    plan: &'p Plan,
    run_dir: RunDir,
    /// Per source (plan order), whether this run touches it.
    selected: Vec<bool>,
    sources: Sources<'p>,
    status: RunStatus,
    reporter: RunReporter,
    /// Output tokens generated in this run.
    tokens: u64,
    started: Instant,
    /// The last status write failed (warned once until one succeeds).
    status_unwritten: bool,
}

/// What reading the run directory decided.
enum Start<'p> {
    /// Nothing to send: the run ends without contacting a server.
    Over(RunOutcome),
    /// Go on, preparing these sources first.
    Run(Box<RunState<'p>>, Vec<usize>),
}

/// The running run: the state plus what reports to it.
struct Orchestrator<'p> {
    state: RunState<'p>,
    preparation: Preparation,
    /// Once they answer ([`RunEvent::ServersReady`]); `gen prepare` has none.
    servers: Option<Servers>,
    /// Built with the servers; until then its channel's sender waits in `events`.
    dispatcher: Option<Dispatcher>,
    events: Option<mpsc::Sender<DispatchEvent>>,
    /// Cancels the requests in flight (and the tuners).
    dispatch_cancel: CancellationToken,
    /// No new request starts: the signal's own token.
    stop_admitting: CancellationToken,
    /// The signal.
    cancel: CancellationToken,
    /// Sources whose dispatch has not finished.
    dispatching: usize,
    stopping: Stopping,
    /// The servers could not be started or connected: the run ends with this error once the
    /// workers have stopped.
    startup_failed: Option<anyhow::Error>,
    /// `gen prepare`: the sources it prepares (its outcome names those that failed).
    prepare_only: Option<Vec<usize>>,
    last_progress: Instant,
}

/// Starting the servers: the managed one launched, every one connected and checked.
/// `Ok(None)`: a signal came first.
type Startup<'p> = std::pin::Pin<
    Box<dyn std::future::Future<Output = anyhow::Result<Option<Servers>>> + Send + 'p>,
>;

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
    reporter: RunReporter,
) -> anyhow::Result<RunOutcome> {
    let (plan, run_dir, selection) = (plan.clone(), run_dir.clone(), selection.clone());
    let task =
        tokio::spawn(async move { run_loop(&plan, &run_dir, &selection, cancel, reporter).await });
    match task.await {
        Ok(outcome) => outcome,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(anyhow::anyhow!("the run's task stopped: {e}")),
    }
}

/// The event loop: the `select!` only turns what happened into a [`RunEvent`].
async fn run_loop(
    plan: &Plan,
    run_dir: &RunDir,
    selection: &Selection,
    cancel: CancellationToken,
    reporter: RunReporter,
) -> anyhow::Result<RunOutcome> {
    create_private_dir(run_dir.root())?;
    // One `gen run` per run directory; held until this function returns.
    let _lock = lock_run_dir(run_dir, selection, &reporter)?;
    let (state, needs_prep) = match RunState::open(plan, run_dir, selection, reporter)? {
        Start::Over(outcome) => return Ok(outcome),
        Start::Run(state, needs_prep) => (*state, needs_prep),
    };
    let (mut orchestrator, mut dispatched) =
        Orchestrator::new(state, needs_prep, selection, &cancel)?;
    let mut startup = (!selection.prepare_only).then(|| orchestrator.startup(selection));
    let mut received = Vec::with_capacity(EVENT_BATCH);
    let mut tick = tokio::time::interval(TICK);
    while startup.is_some() || !orchestrator.is_over() {
        let event = tokio::select! {
            ready = started(&mut startup) => {
                startup = None;
                Some(RunEvent::ServersReady(ready))
            }
            ended = orchestrator.preparation.next_ended() => Some(RunEvent::PreparationEnded(ended)),
            1.. = dispatched.recv_many(&mut received, EVENT_BATCH) => None,
            _ = tick.tick() => Some(RunEvent::Ticked),
            restarted = restart_of(&mut orchestrator.servers) => Some(RunEvent::ServerRestarted(restarted)),
            // While the servers start, the start-up itself answers a signal.
            () = cancel.cancelled(), if startup.is_none() && !orchestrator.stopping.interrupted() => {
                Some(RunEvent::Interrupted)
            }
        };
        match event {
            Some(event) => orchestrator.handle(event).await?,
            // Every event that has arrived, in order: one wake-up of this loop per batch.
            None => {
                for event in received.drain(..) {
                    orchestrator.handle(RunEvent::Dispatched(event)).await?;
                }
            }
        }
    }
    orchestrator.finish().await
}

/// The run directory's lock, or none where it cannot be had and need not be. Under
/// `--shard auto` the shard's lease and epoch guard the directory: a task that took the shard
/// over from an owner frozen past its lease finds that owner's `flock` still held (the owner
/// stops before its next write, fenced), and that must not stop the successor. A file system
/// that cannot lock at all (some Lustre mounts: ENOSYS) is no reason to refuse every run.
fn lock_run_dir(
    run_dir: &RunDir,
    selection: &Selection,
    reporter: &RunReporter,
) -> anyhow::Result<Option<super::lock::RunLock>> {
    use super::lock::{LockError, RunLock};
    let leased = selection.fence.is_some();
    match RunLock::acquire(run_dir) {
        Ok(lock) => Ok(Some(lock)),
        Err(LockError::Held { .. } | LockError::HeldUnnamed { .. }) if leased => {
            reporter.notice(Notice::LockHeldPastLease);
            Ok(None)
        }
        Err(error @ LockError::Unsupported { .. }) => {
            let error = &error.to_string();
            reporter.notice(Notice::LockUnsupported { error, leased });
            Ok(None)
        }
        Err(error) => Err(error.into()),
    }
}

impl<'p> RunState<'p> {
    /// Reads what the run directory already holds and decides what is left to do.
    fn open(
        plan: &'p Plan,
        run_dir: &RunDir,
        selection: &Selection,
        reporter: RunReporter,
    ) -> anyhow::Result<Start<'p>> {
        let previous: Option<RunStatus> = atomic::read_json(&run_dir.status()).ok().flatten();
        for name in &selection.regenerate {
            let aside = run_dir.source(name).supersede(crate::sys::unix_ms())?;
            if let Some(file) = &aside {
                reporter.notice(Notice::AnswersSetAside { source: name, file });
            }
        }
        let resend = record::Resend {
            all_refused: selection.retry_rejected,
            settings: Some(settings_fingerprint(plan)),
        };
        let sources = Sources::load(plan, run_dir, &resend, selection, &reporter)?;
        reporter.notice(Notice::RunStarted {
            pid: std::process::id(),
            host: &crate::sys::host_name(),
        });
        let selected: Vec<bool> = sources
            .iter()
            .map(|s| selection.includes(&s.status.name, previous.as_ref(), s.prep_failed))
            .collect();
        if selection.only_failed && !selected.contains(&true) {
            reporter.notice(Notice::NothingToRestart);
            return Ok(Start::Over(RunOutcome::NothingToDo));
        }
        let mut state = RunState::new(plan, run_dir, selected, sources, reporter);
        let selected = state.selected.clone();
        for (i, selected) in selected.iter().enumerate() {
            let name = &state.sources[i].status.name;
            if !selected
                && let Some(old) = previous
                    .as_ref()
                    .and_then(|p| p.sources.iter().find(|s| s.name == *name))
            {
                // Untouched this run: keep what the last run said about it, but the counts of
                // its stored completions as the files have them.
                let now = &state.sources[i].status;
                state.sources[i].status = SourceStatus {
                    done: now.done,
                    truncated: now.truncated,
                    cut_by_context: now.cut_by_context,
                    output_tokens: now.output_tokens,
                    ..old.clone()
                };
            }
        }
        // Where every source starts; from here on each change is recorded where it happens.
        for source in state.sources.iter().map(|s| &s.status) {
            state.reporter.notice(Notice::SourcePhase {
                source: &source.name,
                phase: source.phase.label(),
                note: &source.note,
            });
        }
        state
            .sources
            .check_inputs(&selected, selection.keep_preparation, &state.reporter)?;
        let mut needs_prep: Vec<usize> = (0..state.sources.len())
            .filter(|i| selected[*i] && state.sources[*i].status.prepared.is_none())
            .collect();
        needs_prep.extend(state.sources.open_ready(&selected, &state.reporter));
        if needs_prep.is_empty() && !state.sources.has_feeds() {
            return state.nothing_left().map(Start::Over);
        }
        state.say_resuming();
        state.preflight()?;
        state.write_status()?;
        Ok(Start::Run(Box::new(state), needs_prep))
    }

    fn new(
        plan: &'p Plan,
        run_dir: &RunDir,
        selected: Vec<bool>,
        sources: Sources<'p>,
        reporter: RunReporter,
    ) -> RunState<'p> {
        let status = RunStatus {
            layout: LAYOUT_VERSION,
            config: plan.config_path.display().to_string(),
            pid: std::process::id(),
            host: crate::sys::host_name(),
            started_unix_ms: crate::sys::unix_ms(),
            heartbeat_unix_ms: crate::sys::unix_ms(),
            ..RunStatus::default()
        };
        RunState {
            plan,
            run_dir: run_dir.clone(),
            selected,
            sources,
            status,
            reporter,
            tokens: 0,
            started: Instant::now(),
            status_unwritten: false,
        }
    }

    /// Nothing is left to send or prepare: says so and ends the run. A selected source that is
    /// not done (its files could not be read) is not "nothing to do".
    fn nothing_left(&mut self) -> anyhow::Result<RunOutcome> {
        self.status.finished = true;
        self.write_status()?;
        let refused = self.sources.refused(&self.selected);
        let failed = self.sources.unfinished(&self.selected);
        if !failed.is_empty() {
            return Ok(RunOutcome::Finished { failed, refused });
        }
        if !refused.is_empty() {
            self.reporter.notice(Notice::NothingToSend);
            return Ok(RunOutcome::Finished {
                failed: Vec::new(),
                refused,
            });
        }
        self.reporter.notice(Notice::NothingToDo);
        let now = (self.plan.sources.iter())
            .map(|s| (s.name().to_owned(), s.settings.clone()))
            .collect();
        let stored_in = self.sources.stored_in();
        let config = &self.plan.config_path.display().to_string();
        for (name, how) in crate::store::pin::RunPin::changed_since(&self.run_dir, &now, &stored_in)
        {
            self.reporter.notice(Notice::SettingsChangedSince {
                source: &name,
                how: &how.join("; "),
                config,
            });
        }
        Ok(RunOutcome::NothingToDo)
    }

    /// Refuses a plan this machine cannot hold, with the numbers, before anything starts.
    fn preflight(&self) -> anyhow::Result<()> {
        let overrides = crate::doctor::Overrides {
            run_dir: Some(self.run_dir.root().to_path_buf()),
            ..crate::doctor::Overrides::from_env()
        };
        let preflight = crate::doctor::preflight(self.plan, &overrides);
        for warning in preflight.warnings() {
            self.reporter.notice(Notice::CheckWarned {
                check: warning.name,
                message: &warning.message,
            });
        }
        if let Some(refusal) = preflight.refusal() {
            anyhow::bail!(
                "the plan does not fit this machine: {refusal} (see `gen doctor {}`)",
                self.plan.config_path.display()
            );
        }
        Ok(())
    }

    fn write_status(&mut self) -> anyhow::Result<()> {
        self.sources.fenced()?;
        self.status.heartbeat_unix_ms = crate::sys::unix_ms();
        self.status.sources = self.sources.statuses();
        self.status.eta_secs = self.progress(0).eta.map(|eta| eta.as_secs());
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
                let error = &format!("{e:#}");
                self.reporter.notice(Notice::StatusUnwritten { error });
            }
            Err(_) => {}
        }
    }

    /// Where the whole run stands (`in_flight`: requests in flight now).
    fn progress(&self, in_flight: u32) -> crate::report::Progress {
        let mut progress = crate::report::Progress {
            elapsed: self.started.elapsed(),
            in_flight,
            ..crate::report::Progress::default()
        };
        let mut remaining = 0;
        for (source, _) in self.sources.iter().zip(&self.selected).filter(|(_, s)| **s) {
            let status = &source.status;
            progress.done += status.done;
            progress.total += status.prepared.unwrap_or(0);
            progress.failed += status.failed;
            remaining += status
                .prepared
                .unwrap_or(0)
                .saturating_sub(status.done + status.rejected);
            match status.phase {
                Phase::Generating => progress.generating += 1,
                Phase::Preparing => progress.preparing += 1,
                Phase::Pending | Phase::Prepared => progress.queued += 1,
                _ => {}
            }
        }
        let secs = progress.elapsed.as_secs_f64().max(0.001);
        progress.tokens_per_sec = self.tokens as f64 / secs;
        // What is left at this run's tokens per completion and rate.
        let completed_here = self.sources.completed_here();
        if self.tokens > 0 && completed_here > 0 {
            let per_completion = self.tokens as f64 / completed_here as f64;
            let eta = remaining as f64 * per_completion / progress.tokens_per_sec;
            progress.eta = Some(Duration::from_secs_f64(eta.min(1e9)));
        }
        progress
    }

    /// Prompts (samples) the run has still to send, once every selected source is counted
    /// and generating or done: the controllers' end of the job.
    fn unsent(&self, in_flight: u32) -> Option<u64> {
        let mut left = 0;
        for (source, _) in self.sources.iter().zip(&self.selected).filter(|(_, s)| **s) {
            let s = &source.status;
            if !matches!(s.phase, Phase::Generating | Phase::Done) {
                return None;
            }
            left += s.prepared?.saturating_sub(s.done + s.rejected + s.failed);
        }
        Some(left.saturating_sub(u64::from(in_flight)))
    }

    /// On a rerun, says how much earlier runs already did.
    fn say_resuming(&self) {
        let selected = || self.sources.iter().zip(&self.selected).filter(|(_, s)| **s);
        let done: u64 = selected().map(|(s, _)| s.status.done).sum();
        if done == 0 {
            return;
        }
        let prepared: u64 = selected().filter_map(|(s, _)| s.status.prepared).sum();
        self.reporter.notice(Notice::Resuming { done, prepared });
    }
}

fn settings_fingerprint(plan: &Plan) -> String {
    record::settings_fingerprint(plan.generation.max_tokens, &plan.generation.params)
}

impl<'p> Orchestrator<'p> {
    /// Starts the first preparation workers (preparation needs no server: it goes on while
    /// one loads); the servers are started by [`Orchestrator::startup`].
    fn new(
        mut state: RunState<'p>,
        needs_prep: Vec<usize>,
        selection: &Selection,
        cancel: &CancellationToken,
    ) -> anyhow::Result<(Orchestrator<'p>, mpsc::Receiver<DispatchEvent>)> {
        let mut preparation = Preparation::new(needs_prep.clone(), cancel.child_token());
        preparation.start(&mut state.sources, &state.reporter)?;
        if !selection.prepare_only {
            state.status.waiting_for = Some(if state.plan.server.launch.is_some() {
                "the inference server it launched to start".to_owned()
            } else {
                "the inference server to answer".to_owned()
            });
        }
        state.refresh_status();
        let (events, dispatched) = mpsc::channel(EVENT_BACKLOG);
        let orchestrator = Orchestrator {
            state,
            preparation,
            servers: None,
            dispatcher: None,
            events: Some(events),
            dispatch_cancel: CancellationToken::new(),
            // On a signal, admission stops at once; requests in flight get a grace period to
            // finish (their completions are kept), then are aborted.
            stop_admitting: cancel.child_token(),
            cancel: cancel.clone(),
            dispatching: 0,
            stopping: Stopping::No,
            startup_failed: None,
            prepare_only: selection.prepare_only.then_some(needs_prep),
            last_progress: Instant::now(),
        };
        Ok((orchestrator, dispatched))
    }

    /// Launches the managed server (when the plan has one) and connects to every server,
    /// pinning the run's settings on first contact; a signal ends the wait.
    fn startup(&self, selection: &Selection) -> Startup<'p> {
        let state = &self.state;
        let (plan, run_dir, reporter) = (state.plan, state.run_dir.clone(), state.reporter.clone());
        // Only what is stored is pinned: new settings for a source with nothing stored mix
        // nothing (a run stopped by a refused setting is rerun with a fixed one).
        let stored_in = state.sources.stored_in();
        let (cancel, dispatch_cancel) = (self.cancel.clone(), self.dispatch_cancel.clone());
        let (shard, allow_change) = (selection.shard, selection.allow_config_change);
        Box::pin(async move {
            let managed = match Servers::launch(plan, &run_dir, &cancel, &reporter).await? {
                Launched::Up(managed) => managed,
                Launched::Interrupted => return Ok(None),
            };
            let pin = |model: &str| {
                crate::store::pin::RunPin {
                    layout: LAYOUT_VERSION,
                    model: model.to_owned(),
                    max_tokens: plan.generation.max_tokens,
                    params: plan.generation.params.clone(),
                    sources: (plan.sources.iter())
                        .map(|s| (s.name().to_owned(), s.settings.clone()))
                        .collect(),
                    shard,
                }
                .check_or_record(&run_dir, allow_change, &stored_in, &reporter)
            };
            let connected =
                Servers::connect(plan, &run_dir, managed, pin, &dispatch_cancel, &reporter);
            // An external server may still be loading: the wait for it ends on a signal too.
            tokio::select! {
                servers = connected => servers.map(Some),
                () = cancel.cancelled() => {
                    let by = super::stop::interrupted_by();
                    reporter.notice(Notice::InterruptedWaitingForServer { by });
                    Ok(None)
                }
            }
        })
    }

    /// What starting the servers came to: serving, a signal, or an error. Without servers the
    /// running workers are stopped: their sources are prepared next run.
    fn servers_ready(&mut self, ready: anyhow::Result<Option<Servers>>) -> anyhow::Result<()> {
        match ready {
            Ok(Some(servers)) => return self.serve(servers),
            Ok(None) => {
                self.stopping.interrupt();
            }
            Err(error) => self.startup_failed = Some(error),
        }
        self.preparation.stop(true);
        Ok(())
    }

    /// The servers answer: the dispatch of every source already counted starts, and the
    /// progress display.
    fn serve(&mut self, servers: Servers) -> anyhow::Result<()> {
        let state = &mut self.state;
        state.status.servers = servers.statuses();
        state.status.waiting_for = None;
        tokio::spawn(servers.fleet.clone().watch(self.dispatch_cancel.clone()));
        self.dispatcher = Some(Dispatcher {
            fleet: servers.fleet.clone(),
            model: servers.model.as_str().into(),
            max_attempts: state.plan.generation.max_attempts,
            events: self
                .events
                .take()
                .context("the servers were started twice")?,
            cancel: self.dispatch_cancel.clone(),
            stop_admitting: self.stop_admitting.clone(),
            refusals: std::sync::Arc::default(),
        });
        self.servers = Some(servers);
        self.start_dispatch();
        let state = &mut self.state;
        let names: Vec<String> = (state.sources.iter())
            .map(|s| s.status.name.clone())
            .collect();
        state.reporter.start_progress(&names);
        self.preparation
            .start(&mut state.sources, &state.reporter)?;
        state.refresh_status();
        Ok(())
    }

    /// Every worker ended and every source's dispatch finished.
    fn is_over(&self) -> bool {
        self.preparation.is_idle() && self.dispatching == 0
    }

    /// Does what `event` calls for; `Err` stops the run at once.
    async fn handle(&mut self, event: RunEvent) -> anyhow::Result<()> {
        match event {
            RunEvent::PreparationEnded(ended) => {
                let ended = ended.context("a preparation supervisor panicked")?;
                self.preparation_ended(ended).await
            }
            RunEvent::Dispatched(event) => self.dispatched(event),
            RunEvent::Ticked => self.ticked().await,
            RunEvent::ServersReady(ready) => self.servers_ready(ready),
            RunEvent::ServerRestarted(restarted) => {
                let servers = self.servers.as_mut().context("a restart without servers")?;
                if let Some(failure) = servers.restart_ended(restarted, &self.state.reporter)? {
                    self.fail(failure);
                }
                Ok(())
            }
            RunEvent::Interrupted => {
                self.interrupted();
                Ok(())
            }
        }
    }

    async fn preparation_ended(&mut self, ended: super::preparation::Ended) -> anyhow::Result<()> {
        // A worker that ends after a signal (before this loop's wake-up for it, too), or once
        // the servers failed to start, was stopped: its source is prepared next run.
        let interrupted = self.stopping.interrupted()
            || self.cancel.is_cancelled()
            || self.startup_failed.is_some();
        let state = &mut self.state;
        self.preparation
            .finish(&mut state.sources, ended, interrupted, &state.reporter)
            .await?;
        if !interrupted && !self.stopping.refused() {
            let selected = &state.selected;
            self.preparation
                .enqueue(state.sources.open_ready(selected, &state.reporter));
            self.start_dispatch();
        }
        if !interrupted {
            self.preparation
                .start(&mut self.state.sources, &self.state.reporter)?;
        }
        self.state.refresh_status();
        Ok(())
    }

    fn dispatched(&mut self, event: DispatchEvent) -> anyhow::Result<()> {
        // The dispatch stops admitting on the signal's own token, so a source's end can arrive
        // before this loop's wake-up for the signal: the signal comes first (the source
        // stopped, it did not fail, and the run says why).
        if matches!(event, DispatchEvent::SourceFinished { .. })
            && self.stop_admitting.is_cancelled()
            && !self.stopping.is_stopping()
        {
            self.interrupted();
        }
        let sources = &mut self.state.sources;
        match event {
            DispatchEvent::Completed { source, record } => {
                self.state.tokens += sources.completed(source, &record, &self.state.reporter)?;
            }
            DispatchEvent::GaveUp { source, record } => sources.record_rejected(source, &record)?,
            DispatchEvent::Fatal(message) => self.fail(Failure::Refused(message)),
            DispatchEvent::ModelChanged(message) => self.fail(Failure::ModelChanged(message)),
            DispatchEvent::SourceFinished { source } => {
                self.dispatching -= 1;
                // Stopped early (a signal, a fatal answer, no server): resumable, not failed.
                let stopped = self.stopping.is_stopping();
                sources.finish_generation(source, stopped, &self.state.reporter)?;
                self.state.refresh_status();
            }
        }
        Ok(())
    }

    async fn ticked(&mut self) -> anyhow::Result<()> {
        let state = &mut self.state;
        // The heartbeat goes on while a server loads (minutes): `gen status` must not call a
        // run that waits dead.
        let Some(servers) = &mut self.servers else {
            state.refresh_status();
            return Ok(());
        };
        state.status.servers = servers.statuses();
        state.sources.flush_all()?;
        state.sources.refresh_rates();
        state.status.machine = state::MachineStatus::read(state.sources.peak_rss_bytes());
        state.refresh_status();
        state.reporter.progress(&state.status.sources);
        let in_flight = servers.fleet.in_flight();
        servers.fleet.set_unsent(state.unsent(in_flight));
        // On a terminal the status line under the bars; in a log a line now and then.
        let shown = state.reporter.status_line(&state.progress(in_flight));
        if !shown && self.last_progress.elapsed() >= PROGRESS_EVERY {
            state.reporter.say_progress(&state.progress(in_flight));
            self.last_progress = Instant::now();
        }
        if self.stopping.interrupted()
            && !self.dispatch_cancel.is_cancelled()
            && servers.fleet.none_can_finish(GONE_QUIET).await
        {
            state.reporter.notice(Notice::InFlightCannotFinish {
                in_flight,
                quiet: GONE_QUIET,
            });
            self.dispatch_cancel.cancel();
        }
        // Stopping: a server that exited (it got the signal too) is not started again.
        let gone = self.stopping.server_gone() || self.stopping.interrupted();
        let watched = servers
            .watch(state.plan, &state.run_dir, gone, &state.reporter)
            .await;
        if let Some(failure) = watched {
            self.fail(failure);
        }
        Ok(())
    }

    /// Starts dispatching every source counted with prompts left.
    fn start_dispatch(&mut self) {
        let Some(dispatcher) = &self.dispatcher else {
            return;
        };
        for (i, feed) in self.state.sources.take_feeds(&self.state.reporter) {
            let plan = self.state.plan;
            let length = plan.sources[i].worker.on_length;
            let requests = SourceRequests::new(length, plan.sources[i].settings.clone());
            tokio::spawn(dispatcher.clone().run_source(i, feed, requests));
            self.dispatching += 1;
        }
    }

    /// The first signal: no new requests or workers; requests in flight get a grace period.
    fn interrupted(&mut self) {
        if let Some(servers) = &self.servers {
            // Requests waiting for a server end at once (see `Dispatcher::healthy_backend`).
            self.state.reporter.notice(Notice::Interrupted {
                by: super::stop::interrupted_by(),
                in_flight: servers.fleet.in_flight(),
                grace: shutdown_grace(),
            });
        }
        self.stopping.interrupt();
        self.preparation.stop(false);
        let abort = self.dispatch_cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(shutdown_grace()).await;
            abort.cancel();
        });
    }

    /// An error ends the run: the dispatch stops (and, for a refusal, the workers too).
    fn fail(&mut self, failure: Failure) {
        match &failure {
            Failure::Refused(message) | Failure::ModelChanged(message) => {
                if !self.stopping.refused() {
                    let reason = message.as_str();
                    self.state.reporter.notice(Notice::Stopping { reason });
                    self.dispatch_cancel.cancel();
                    self.preparation.stop(true);
                }
            }
            Failure::ServerGone(_) => {
                // Its requests wait for a server that will not come back: none starts.
                self.dispatch_cancel.cancel();
                self.stop_admitting.cancel();
            }
        }
        self.stopping.fail(failure);
    }

    /// After the loop: stores everything, says how the run ended.
    async fn finish(mut self) -> anyhow::Result<RunOutcome> {
        let Some(mut servers) = self.servers.take() else {
            return self.finish_unserved();
        };
        // Stops the tuners too, which save what they learnt.
        self.dispatch_cancel.cancel();
        servers.wait_tuners().await;
        let state = &mut self.state;
        state.sources.flush_all()?;
        state.sources.save_tallies();
        let ending = self.stopping.ending();
        state.reporter.notice(Notice::RunFinished { ending });
        state.reporter.finish_progress();
        state.status.finished = true;
        if self.stopping.interrupted() {
            state.status.stopped_by = Some(super::stop::reason());
        }
        state.status.servers = servers.statuses();
        state.write_status()?;
        state.reporter.say_progress(&state.progress(0));
        servers.stop().await;
        if let Some(error) = self.stopping.error() {
            return Err(error);
        }
        if self.stopping.interrupted() {
            return Ok(RunOutcome::Interrupted);
        }
        Ok(RunOutcome::Finished {
            failed: self.state.sources.unfinished(&self.state.selected),
            refused: self.state.sources.refused(&self.state.selected),
        })
    }

    /// After the loop, when no server ever answered: `gen prepare`, a signal while the servers
    /// started, or a start-up that failed (its error is the run's).
    fn finish_unserved(mut self) -> anyhow::Result<RunOutcome> {
        let interrupted = self.stopping.interrupted() || self.cancel.is_cancelled();
        let state = &mut self.state;
        if interrupted || self.prepare_only.is_some() {
            state.status.finished = true;
        }
        if interrupted {
            state.status.stopped_by = Some(super::stop::reason());
        }
        state.write_status()?;
        if let Some(error) = self.startup_failed {
            return Err(error);
        }
        if interrupted {
            return Ok(RunOutcome::Interrupted);
        }
        let failed = (self.prepare_only.unwrap_or_default().into_iter())
            .map(|i| &self.state.sources[i].status)
            .filter(|s| s.phase == Phase::Failed)
            .map(|s| s.name.clone())
            .collect();
        Ok(RunOutcome::Finished {
            failed,
            refused: Vec::new(),
        })
    }
}

/// The servers' start-up ends (pending forever when none is under way, for `select!`).
async fn started(startup: &mut Option<Startup<'_>>) -> anyhow::Result<Option<Servers>> {
    match startup {
        Some(startup) => startup.await,
        None => std::future::pending().await,
    }
}

/// The managed server's restart ends (pending forever while there is none, for `select!`).
async fn restart_of(
    servers: &mut Option<Servers>,
) -> Result<Result<ManagedServer, LaunchError>, JoinError> {
    match servers {
        Some(servers) => servers.restarted().await,
        None => std::future::pending().await,
    }
}
