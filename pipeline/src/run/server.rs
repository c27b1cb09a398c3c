//! The run's inference servers: launching the managed one (when configured) and connecting
//! to every server before anything can fail, the checks a run needs from a server, and, while
//! the run goes on, watching them: a managed server that exits is restarted up to
//! `max-restarts` times, an outage past `max-outage-secs` ends the run. What it finds is
//! returned as a [`Failure`] for the event loop to act on; it never stops the run itself.

use std::time::Instant;

use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;

use super::events::Failure;
use super::fleet::{self, Fleet};
use crate::config::Plan;
use crate::inference::checks;
use crate::inference::managed::{self, LaunchError, ManagedServer};
use crate::inference::probe;
use crate::notice::Notice;
use crate::report::RunReporter;
use crate::status::state::ServerStatus;
use crate::store::RunDir;

type Restart = JoinHandle<Result<ManagedServer, LaunchError>>;

/// The servers of a running run.
pub(super) struct Servers {
    pub(super) fleet: Fleet,
    /// The model every server serves.
    pub(super) model: String,
    /// The tuners of `concurrency = "auto"`, running until the dispatch is cancelled.
    tuners: Vec<JoinHandle<()>>,
    /// The server `gen` launched, while it runs.
    managed: Option<ManagedServer>,
    /// Its restart, while one is under way.
    restarting: Option<Restart>,
    /// An outage of every server was explained from the configured server log.
    explained_outage: bool,
    started_at: Instant,
}

/// What [`Servers::launch`] found.
pub(super) enum Launched {
    Up(Option<ManagedServer>),
    /// A signal came while the managed server started.
    Interrupted,
}

impl Servers {
    /// Starts the managed server when the plan launches one.
    pub(super) async fn launch(
        plan: &Plan,
        run_dir: &RunDir,
        cancel: &CancellationToken,
        reporter: &RunReporter,
    ) -> anyhow::Result<Launched> {
        let Some(launch) = &plan.server.launch else {
            return Ok(Launched::Up(None));
        };
        // A signal while it loads (minutes, for a large model) stops the run there.
        let log = run_dir.server_log();
        reporter.notice(Notice::StartingServer { log: &log });
        tokio::select! {
            started = ManagedServer::start(&plan.server, launch, &log) => Ok(Launched::Up(Some(started?))),
            () = cancel.cancelled() => {
                reporter.notice(Notice::InterruptedWhileServerStarts { by: super::stop::interrupted_by() });
                Ok(Launched::Interrupted)
            }
        }
    }

    /// Connects to every server (the managed one, or the configured URLs), then checks the
    /// run's pinned settings and what the run needs of a server. On an error the managed
    /// server is stopped.
    pub(super) async fn connect(
        plan: &Plan,
        run_dir: &RunDir,
        managed: Option<ManagedServer>,
        pin: impl FnOnce(&str) -> anyhow::Result<()>,
        dispatch_cancel: &CancellationToken,
        reporter: &RunReporter,
    ) -> anyhow::Result<Servers> {
        let api_key = plan.server.api_key();
        let urls = match &managed {
            Some(server) => vec![server.url.clone()],
            None => plan.server.urls.clone(),
        };
        let connected = fleet::connect(
            plan,
            &urls,
            api_key.clone(),
            run_dir,
            dispatch_cancel,
            reporter,
        );
        let connected = match connected.await {
            Ok(c) => c,
            Err(e) => return Err(stop_after(managed, dispatch_cancel, e).await),
        };
        if let Some(server) = &managed {
            for backend in connected.fleet.backends() {
                backend.liveness.require_process(server.gate());
            }
        }
        for url in &urls {
            let (url, model) = (&probe::redact(url), &connected.model);
            reporter.notice(Notice::ServerServes { url, model });
        }
        let model = &connected.model;
        let checked = match pin(model) {
            Ok(()) => server_checks(plan, &connected.fleet, &urls, model, api_key, reporter).await,
            Err(e) => Err(e),
        };
        if let Err(e) = checked {
            return Err(stop_after(managed, dispatch_cancel, e).await);
        }
        Ok(Servers {
            fleet: connected.fleet,
            model: connected.model,
            tuners: connected.tuners,
            managed,
            restarting: None,
            explained_outage: false,
            started_at: Instant::now(),
        })
    }

    /// Every server's state, for `status.json`.
    pub(super) fn statuses(&self) -> Vec<ServerStatus> {
        self.fleet
            .backends()
            .iter()
            .map(|b| b.status(self.started_at.elapsed()))
            .collect()
    }

    /// The restart under way ends (pending forever while none is, for `select!`).
    pub(super) async fn restarted(
        &mut self,
    ) -> Result<Result<ManagedServer, LaunchError>, JoinError> {
        match self.restarting.as_mut() {
            Some(restart) => {
                let ended = restart.await;
                self.restarting = None;
                ended
            }
            None => std::future::pending().await,
        }
    }

    /// Once per tick: whether the managed server exited (then restarts it, or gives up past
    /// `max-restarts`), explains an outage from the server log, and gives up an outage past
    /// `max-outage-secs`; `gone`: the run already has no server (only the outage is
    /// explained).
    pub(super) async fn watch(
        &mut self,
        plan: &Plan,
        run_dir: &RunDir,
        gone: bool,
        reporter: &RunReporter,
    ) -> Option<Failure> {
        let exited = match gone {
            true => None,
            false => self.watch_managed(plan, run_dir, reporter).await,
        };
        // An external server that went down: its log, if configured, says why.
        let all_down_since = self.fleet.all_down_since();
        if let (Some(log), Some(_)) = (&plan.server.log, all_down_since)
            && !self.explained_outage
        {
            self.explained_outage = true;
            let diagnosis = &managed::diagnosis(log);
            reporter.notice(Notice::ServerLog { log, diagnosis });
        } else if all_down_since.is_none() {
            self.explained_outage = false;
        }
        if exited.is_some() {
            return exited;
        }
        let (max, since) = (plan.server.max_outage?, all_down_since?);
        if gone || crate::sys::unix_ms().saturating_sub(since) < max.as_millis() as u64 {
            return None;
        }
        let message = format!(
            "giving up: no server has answered for {} s (`max-outage-secs`); nothing was marked failed: run `gen run` again once a server is back",
            max.as_secs()
        );
        reporter.notice(Notice::OutageGaveUp { message: &message });
        Some(Failure::ServerGone(message))
    }

    async fn watch_managed(
        &mut self,
        plan: &Plan,
        run_dir: &RunDir,
        reporter: &RunReporter,
    ) -> Option<Failure> {
        let exit = self.managed.as_ref().and_then(ManagedServer::exited)?;
        let mut server = self.managed.take()?;
        server.log_complete().await;
        let log = run_dir.server_log();
        let message = format!(
            "the inference server exited ({exit}); last lines of `{}`:\n{}\n{}",
            log.display(),
            managed::tail(&log, 25),
            managed::diagnosis(&log)
        );
        reporter.notice(Notice::ServerExited { message: &message });
        if server.restarts >= plan.server.max_restarts {
            return Some(Failure::ServerGone(message));
        }
        reporter.notice(Notice::ServerRestarting {
            exit: &exit.to_string(),
            restart: server.restarts + 1,
            max: plan.server.max_restarts,
        });
        self.restarting = Some(tokio::spawn(server.restart()));
        None
    }

    /// A restart ended: the server is back, or the run has no server left.
    pub(super) fn restart_ended(
        &mut self,
        restarted: Result<Result<ManagedServer, LaunchError>, JoinError>,
        reporter: &RunReporter,
    ) -> anyhow::Result<Option<Failure>> {
        match restarted {
            Ok(Ok(server)) => {
                let restarts = server.restarts;
                reporter.notice(Notice::ServerRestarted { restarts });
                self.managed = Some(server);
                Ok(None)
            }
            Ok(Err(e)) => {
                // Said once, as the run's error.
                let message = format!("the inference server could not be restarted: {e}");
                reporter.notice(Notice::ServerRestartFailed { message: &message });
                Ok(Some(Failure::ServerGone(message)))
            }
            Err(e) => anyhow::bail!("the server restart task failed: {e}"),
        }
    }

    /// After the dispatch was cancelled: waits for the tuners (they save what they learnt),
    /// then stops the managed server.
    pub(super) async fn wait_tuners(&mut self) {
        for task in self.tuners.drain(..) {
            task.await.ok();
        }
    }

    pub(super) async fn stop(self) {
        if let Some(server) = self.managed {
            server.stop().await;
        }
    }
}

/// Cancels the dispatch and stops the managed server after `error`; returns it.
async fn stop_after(
    managed: Option<ManagedServer>,
    dispatch_cancel: &CancellationToken,
    error: anyhow::Error,
) -> anyhow::Error {
    dispatch_cancel.cancel();
    if let Some(server) = managed {
        server.stop().await;
    }
    error
}

/// Before generating, on the first server that answers: its context holds `max-tokens` plus a
/// margin for the prompt, and — when the config asks for thinking — it separates reasoning
/// (its reasoning parser is on), and — when a source asks for `token-ids` — its answers carry
/// token ids, so days of output are not generated without them.
async fn server_checks(
    plan: &Plan,
    fleet: &Fleet,
    urls: &[String],
    model: &str,
    api_key: Option<String>,
    reporter: &RunReporter,
) -> anyhow::Result<()> {
    let up = fleet
        .backends()
        .iter()
        .zip(urls)
        .find(|(b, _)| b.liveness.health() == crate::inference::liveness::Health::Up);
    let Some((_, url)) = up else {
        return Ok(());
    };
    let context = checks::context_at(plan, url, model, api_key.as_deref()).await;
    match context.level {
        crate::inference::checks::Level::Fail => anyhow::bail!(
            "server {}: {} (see `gen doctor {}`)",
            probe::redact(url),
            context.message,
            plan.config_path.display()
        ),
        crate::inference::checks::Level::Warn => {
            let message = &context.message;
            reporter.notice(Notice::CheckWarned {
                check: "context",
                message,
            });
        }
        crate::inference::checks::Level::Ok => {}
    }
    if checks::thinking_expected(plan).is_some() {
        let check = checks::reasoning_probe(plan, url, model, api_key.clone()).await;
        match check.level {
            crate::inference::checks::Level::Fail => anyhow::bail!(
                "{} (override: remove `chat-template-kwargs` thinking settings)",
                check.message
            ),
            crate::inference::checks::Level::Warn => {
                let message = &check.message;
                reporter.notice(Notice::CheckWarned {
                    check: "reasoning",
                    message,
                });
            }
            crate::inference::checks::Level::Ok => {}
        }
    }
    if let Some(check) = checks::token_ids_probe(plan, url, model, api_key).await {
        match check.level {
            crate::inference::checks::Level::Fail => {
                anyhow::bail!("server {}: {}", probe::redact(url), check.message)
            }
            crate::inference::checks::Level::Warn => {
                let message = &check.message;
                reporter.notice(Notice::CheckWarned {
                    check: "token ids",
                    message,
                });
            }
            crate::inference::checks::Level::Ok => {}
        }
    }
    Ok(())
}
