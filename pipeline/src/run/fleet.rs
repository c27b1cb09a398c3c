//! The servers one run sends to (`[server] url`, or several in `urls`, or one router URL):
//! one [`Backend`] each — its client, its health ([`Liveness`]), its concurrency limit (fixed,
//! or tuned by its own [`Tuner`]) — and one shared queue in front of them: every request takes
//! a [`Lease`] on the least-loaded healthy server with a free place.
//!
//! A server found down (refused, reset, cut stream, or stalled: no token on any of its streams
//! for `[server] stall-secs` with requests in flight, confirmed by a failed health probe) stops
//! getting requests; the requests it held go back to the queue and move to another server without
//! spending an attempt. A stream without a token for twice `stall-secs` while `/health` answers
//! is abandoned and retried: chunks without a token (empty deltas) are not progress. When every server is down, leases wait: dispatch pauses. A server
//! that answers again is re-admitted, its tuner re-reading its caps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::{join_all, select_all};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::limiter::{Limiter, Slot};
use super::tuner::{Telemetry, Tuner, TunerTarget, TunerView};
use crate::config::Plan;
use crate::config::plan::Concurrency;
use crate::inference::liveness::{Health, Liveness, Outages};
use crate::inference::{ChatClient, probe, signals};
use crate::notice::Notice;

/// How often each server's own queue is read for `gen status`.
const LOAD_EVERY: Duration = Duration::from_secs(5);
use crate::status::state::ServerStatus;
use crate::sys::unix_ms;

/// One server.
#[derive(Debug)]
pub struct Backend {
    pub client: ChatClient,
    pub liveness: Liveness,
    pub limiter: Arc<Limiter>,
    pub telemetry: Arc<Telemetry>,
    /// With `concurrency = "auto"`: the tuner's ceiling and last decision.
    pub tuner: Option<watch::Receiver<TunerView>>,
    /// Its context in tokens, when it said at connection (vLLM/SGLang `max_model_len`,
    /// llama.cpp `n_ctx` per slot): what tells an answer the context cut.
    pub context: Option<u64>,
    /// Unix time (ms) of the last token (or finish) on any of its streams, or request start.
    activity: Arc<AtomicU64>,
    completed: AtomicU64,
    output_tokens: AtomicU64,
    /// Requests waiting in the server's own queue, from its metrics (`u64::MAX`: unknown).
    queued: AtomicU64,
    /// The model its first answer named ([`Fleet::answered_as`]).
    answered_by: OnceLock<String>,
    /// Its version as it reported it when the run connected.
    version: Option<String>,
}

impl Backend {
    /// A backend with nothing counted yet, no tuner and its queue unknown; `activity` is the
    /// time of the last token its client saw.
    fn new(
        client: ChatClient,
        liveness: Liveness,
        limiter: Arc<Limiter>,
        telemetry: Arc<Telemetry>,
        activity: Arc<AtomicU64>,
    ) -> Backend {
        Backend {
            client,
            liveness,
            limiter,
            telemetry,
            tuner: None,
            context: None,
            activity,
            completed: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            queued: AtomicU64::new(u64::MAX),
            answered_by: OnceLock::new(),
            version: None,
        }
    }

    /// A request is about to start (counts as activity for the stall watchdog).
    pub fn touch(&self) {
        self.activity.store(unix_ms(), Ordering::Relaxed);
    }

    /// A request finished with `output_tokens`.
    pub fn finished(&self, output_tokens: u64) {
        self.completed.fetch_add(1, Ordering::Relaxed);
        self.output_tokens
            .fetch_add(output_tokens, Ordering::Relaxed);
    }

    /// Load as a fraction of the limit, in thousandths (for least-loaded choice).
    fn load(&self) -> (u64, u32) {
        let in_flight = self.limiter.in_flight();
        let limit = self.limiter.limit().max(1);
        (u64::from(in_flight) * 1000 / u64::from(limit), in_flight)
    }

    /// This server's line of `gen status`; `elapsed` is the run's age, for tok/s.
    pub fn status(&self, elapsed: Duration) -> ServerStatus {
        let view = self.tuner.as_ref().map(|v| v.borrow().clone());
        let output_tokens = self.output_tokens.load(Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        ServerStatus {
            url: self.liveness.shown().to_owned(),
            model: self.client.model().to_owned(),
            answered_by: self
                .answered_by
                .get()
                .filter(|named| *named != self.client.model())
                .cloned(),
            version: self.version.clone(),
            concurrency: self.limiter.limit() as usize,
            down_since_unix_ms: match self.liveness.health() {
                Health::Up => None,
                Health::Down { since_unix_ms } => Some(since_unix_ms),
            },
            down_reason: self.liveness.down_reason(),
            in_flight: Some(self.limiter.in_flight()),
            ceiling: view.as_ref().map(|v| v.ceiling),
            decision: view.map(|v| v.decision),
            completed: self.completed.load(Ordering::Relaxed),
            queued: Some(self.queued.load(Ordering::Relaxed)).filter(|q| *q != u64::MAX),
            tokens_per_sec: (secs >= 1.0 && output_tokens > 0).then(|| output_tokens as f64 / secs),
        }
    }
}

/// A request's place on one server; released on drop.
#[derive(Debug)]
pub struct Lease {
    pub backend: Arc<Backend>,
    _slot: Slot,
}

/// Every server of the run, behind one queue.
#[derive(Debug, Clone)]
pub struct Fleet {
    backends: Arc<[Arc<Backend>]>,
    /// No token on any of a server's requests for this long, with requests in flight, makes
    /// the watchdog ask the server's `/health`: no answer, and it is marked down.
    stall_after: Duration,
}

impl Fleet {
    pub fn new(backends: Vec<Backend>, stall_after: Duration) -> Fleet {
        Fleet {
            backends: backends.into_iter().map(Arc::new).collect(),
            stall_after,
        }
    }

    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// Waits for a place on a healthy server: the least loaded one (in flight ÷ limit; ties to
    /// the one with fewer requests, then the first listed).
    pub async fn acquire(&self) -> Lease {
        // Most leases find a place at once: no waiters to set up.
        if let Some(lease) = self.try_acquire() {
            return lease;
        }
        loop {
            // Registered before looking, so a release or a recovery in between is not missed.
            let mut released: Vec<_> = self
                .backends
                .iter()
                .map(|b| Box::pin(b.limiter.changed()))
                .collect();
            for notified in &mut released {
                notified.as_mut().enable();
            }
            let mut health: Vec<_> = self
                .backends
                .iter()
                .map(|b| b.liveness.subscribe())
                .collect();
            if let Some(lease) = self.try_acquire() {
                return lease;
            }
            let recovered = select_all(health.iter_mut().map(|h| Box::pin(h.changed())));
            tokio::select! {
                _ = select_all(released) => {}
                _ = recovered => {}
            }
        }
    }

    fn try_acquire(&self) -> Option<Lease> {
        if let [backend] = &*self.backends {
            return (backend.liveness.health() == Health::Up)
                .then(|| backend.limiter.try_acquire())
                .flatten()
                .map(|slot| Lease {
                    backend: backend.clone(),
                    _slot: slot,
                });
        }
        let mut candidates: Vec<&Arc<Backend>> = self
            .backends
            .iter()
            .filter(|b| b.liveness.health() == Health::Up)
            .collect();
        candidates.sort_by_key(|b| b.load());
        candidates.into_iter().find_map(|backend| {
            backend.limiter.try_acquire().map(|slot| Lease {
                backend: backend.clone(),
                _slot: slot,
            })
        })
    }

    /// What an answer of `backend` whose chunks name `model` means for the run. A server's
    /// first answer fixes the model it answers as: `Ok(true)` when that is not the model the
    /// run asked for (a gateway that names its deployment otherwise than `/v1/models` does:
    /// the answers are stored under the name they carry, and said once). An answer naming
    /// another model than the run's answers so far is `Err` with what to say: the model behind
    /// a server changed, and the answers of two models must not mix in one run.
    pub fn answered_as(&self, backend: &Backend, model: &str) -> Result<bool, String> {
        let mut first = false;
        let fixed = backend.answered_by.get_or_init(|| {
            first = true;
            model.to_owned()
        });
        let earlier = if fixed == model {
            self.backends
                .iter()
                .filter_map(|b| b.answered_by.get())
                .find(|named| *named != model)
        } else {
            Some(fixed)
        };
        if let Some(earlier) = earlier {
            return Err(format!(
                "server {} answered as model `{model}`, but this run's answers so far are by \
                 `{earlier}`: the model behind the URL changed mid-run (a router or gateway \
                 switched models), and answers of two models must not mix in one dataset; the \
                 answer was not stored and the prompts left stay pending: fix the routing, then \
                 run `gen run` again",
                backend.liveness.shown()
            ));
        }
        Ok(first && model != backend.client.model())
    }

    /// Since when every server has been down (the latest of their outages), or `None` while
    /// one is up.
    pub fn all_down_since(&self) -> Option<u64> {
        self.backends
            .iter()
            .map(|b| match b.liveness.health() {
                Health::Up => None,
                Health::Down { since_unix_ms } => Some(since_unix_ms),
            })
            .collect::<Option<Vec<u64>>>()
            .and_then(|since| since.into_iter().max())
    }

    /// Requests the servers take at once now (the sum of their limits).
    pub fn capacity(&self) -> usize {
        self.backends
            .iter()
            .map(|b| b.limiter.limit() as usize)
            .sum()
    }

    pub fn in_flight(&self) -> u32 {
        self.backends.iter().map(|b| b.limiter.in_flight()).sum()
    }

    /// What the run has still to send (`None`: not known yet), for the tuners.
    pub fn set_unsent(&self, unsent: Option<u64>) {
        for backend in self.backends.iter() {
            backend
                .telemetry
                .unsent
                .store(unsent.unwrap_or(0), Ordering::Relaxed);
        }
    }

    /// Whether none of the requests in flight can finish any more: every server holding some
    /// is down, or has sent no token for `quiet` and does not answer `/health` (a server that
    /// got the same SIGTERM as `gen` — Slurm signals every process of the task — closes its
    /// port while its streams hang). `false` with nothing in flight.
    pub async fn none_can_finish(&self, quiet: Duration) -> bool {
        let now = unix_ms();
        let mut holding = false;
        for backend in self.backends.iter() {
            if backend.limiter.in_flight() == 0 {
                continue;
            }
            holding = true;
            let quiet_ms = now.saturating_sub(backend.activity.load(Ordering::Relaxed));
            if backend.liveness.health() == Health::Up
                && (quiet_ms < quiet.as_millis() as u64 || backend.liveness.health_answers().await)
            {
                return false;
            }
        }
        holding
    }

    /// Every quarter of the stall time, marks down a server with requests in flight but no
    /// token for the stall time whose `/health` does not answer; every
    /// [`LOAD_EVERY`], reads each healthy server's own queue from its metrics for the status.
    pub async fn watch(self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.stall_after / 4);
        let mut load = tokio::time::interval(LOAD_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = load.tick() => {
                    for backend in self.backends.iter() {
                        let queued = match backend.liveness.health() {
                            Health::Up => signals::load(backend.liveness.url()).await.queued,
                            Health::Down { .. } => None,
                        };
                        backend
                            .queued
                            .store(queued.map_or(u64::MAX, u64::from), Ordering::Relaxed);
                    }
                    continue;
                }
                () = cancel.cancelled() => return,
            }
            let now = unix_ms();
            for backend in self.backends.iter() {
                let quiet_ms = now.saturating_sub(backend.activity.load(Ordering::Relaxed));
                if backend.limiter.in_flight() > 0
                    && backend.liveness.health() == Health::Up
                    && quiet_ms >= self.stall_after.as_millis() as u64
                {
                    let reason = format!(
                        "no token on any of its {} streams for {} s",
                        backend.limiter.in_flight(),
                        quiet_ms / 1000
                    );
                    backend.liveness.confirm_down(&reason).await;
                }
            }
        }
    }
}

/// What [`connect`] found.
pub struct Connected {
    pub fleet: Fleet,
    /// The model every server serves.
    pub model: String,
    /// The tuners of `concurrency = "auto"`, running until `cancel`.
    pub tuners: Vec<JoinHandle<()>>,
}

/// Probes every server in `urls` for its model (they must serve the same one), then builds
/// one backend each with its limiter or tuner. With several servers, one that does not answer
/// yet starts as down and joins when it does; with one, that is an error.
pub async fn connect(
    plan: &Plan,
    urls: &[String],
    api_key: Option<String>,
    run_dir: &crate::store::RunDir,
    cancel: &CancellationToken,
    reporter: &crate::report::RunReporter,
) -> anyhow::Result<Connected> {
    let (model, unreachable) = served_model(plan, urls, api_key.as_deref(), reporter).await?;
    let mut backends = Vec::new();
    let mut tuners = Vec::new();
    let outages = Outages::new(urls.len());
    for (i, url) in urls.iter().enumerate() {
        let liveness = Liveness::new(url, reporter.clone(), outages.clone());
        let activity = Arc::new(AtomicU64::new(unix_ms()));
        let client = ChatClient::new(
            url,
            model.clone(),
            api_key.clone(),
            plan.generation.max_tokens,
            plan.generation.params.clone(),
        )
        .context("failed to build the HTTP client")?
        .with_activity(activity.clone())
        // The watchdog asks `/health` after `stall-secs` without a token on any stream; one
        // stream gets twice that (120 s by default) before it is abandoned as stalled.
        .with_stall(plan.server.stall_after.saturating_mul(2));
        let (limiter, telemetry, tuner) = match plan.generation.concurrency {
            Concurrency::Fixed(n) => {
                let (url, limit) = (liveness.shown(), n.get());
                reporter.notice(Notice::ConcurrencyFixed { url, limit });
                let limit = u32::try_from(limit).unwrap_or(u32::MAX);
                (Limiter::new(limit), Arc::new(Telemetry::default()), None)
            }
            Concurrency::Auto { max } => {
                let max = max.map(|m| u32::try_from(m).unwrap_or(u32::MAX));
                let tuner = Tuner::new(
                    TunerTarget {
                        url,
                        model: &model,
                        api_key: api_key.as_deref(),
                        user_max: max,
                        launched_running_cap: plan
                            .server
                            .launch
                            .as_deref()
                            .and_then(signals::launch::running_cap),
                        max_tokens: plan.generation.max_tokens,
                        stats_path: controller_stats(run_dir, i),
                    },
                    liveness.clone(),
                )
                .await;
                let parts = (
                    tuner.limiter.clone(),
                    tuner.telemetry.clone(),
                    Some(tuner.view.subscribe()),
                );
                tuners.push(tokio::spawn(tuner.run(cancel.clone())));
                parts
            }
        };
        let down = unreachable.iter().find(|(u, _)| u == url);
        let (context, version) = match down {
            Some((_, reason)) => {
                liveness.report_down(reason);
                (None, None)
            }
            None => (
                crate::inference::checks::context_length(url, &model, api_key.as_deref()).await,
                probe::version(url, api_key.as_deref()).await,
            ),
        };
        backends.push(Backend {
            tuner,
            context,
            version,
            ..Backend::new(client, liveness, limiter, telemetry, activity)
        });
    }
    Ok(Connected {
        fleet: Fleet::new(backends, plan.server.stall_after),
        model,
        tuners,
    })
}

/// Where server `i`'s tuner keeps its statistics: one file per server, since servers may
/// differ (GPUs, MTP, caches).
fn controller_stats(run_dir: &crate::store::RunDir, i: usize) -> std::path::PathBuf {
    match i {
        0 => run_dir.root().join("controller.json"),
        _ => run_dir.root().join(format!("controller.{i}.json")),
    }
}

/// The model the servers in `urls` serve (they must serve the same one), and the servers that
/// do not answer yet with why (an error when none answers, or the only one does not).
async fn served_model(
    plan: &Plan,
    urls: &[String],
    api_key: Option<&str>,
    reporter: &crate::report::RunReporter,
) -> anyhow::Result<(String, Vec<(String, String)>)> {
    let wanted = plan.server.model.as_deref();
    // One server is waited for while it starts; of several, one not up yet joins later as
    // down, so the others need not wait for it.
    let wait = match urls.len() {
        1 => plan.server.startup_timeout,
        _ => probe::REACH_TIMEOUT,
    };
    let probes = join_all(
        urls.iter()
            .map(|url| probe::model(url, api_key, wanted, wait, reporter)),
    )
    .await;
    let mut model: Option<(String, String)> = None;
    let mut unreachable = Vec::new();
    for (url, probed) in urls.iter().zip(probes) {
        match probed {
            Ok(served) => match &model {
                None => model = Some((served, probe::redact(url))),
                Some((first, first_url)) if *first != served => anyhow::bail!(
                    "the servers serve different models: {first_url} serves `{first}`, {} serves `{served}`; list servers of one model in `urls` (or set `[server] model`)",
                    probe::redact(url)
                ),
                Some(_) => {}
            },
            // A wrong model is the config's fault, whichever server says so.
            Err(e) if urls.len() == 1 || matches!(e, probe::ProbeError::ModelNotServed { .. }) => {
                return Err(e.into());
            }
            Err(e) => unreachable.push((url.clone(), e.to_string())),
        }
    }
    let Some((model, _)) = model else {
        let reasons: Vec<String> = unreachable.iter().map(|(_, e)| e.clone()).collect();
        anyhow::bail!("no server answers: {}", reasons.join("; "));
    };
    Ok((model, unreachable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(url: &str, limit: u32) -> Backend {
        Backend::new(
            ChatClient::new(url, "m".into(), None, 8, serde_json::Map::new()).expect("client"),
            Liveness::new(url, crate::report::RunReporter::new(None), Outages::new(2)),
            Limiter::new(limit),
            Arc::new(Telemetry::default()),
            Arc::new(AtomicU64::new(0)),
        )
    }

    fn url_of(lease: &Lease) -> String {
        lease.backend.liveness.shown().to_owned()
    }

    #[tokio::test(start_paused = true)]
    async fn leases_go_to_the_least_loaded_server_relative_to_its_limit() {
        let fleet = Fleet::new(
            vec![
                backend("http://127.0.0.1:1", 2),
                backend("http://127.0.0.1:2", 4),
            ],
            Duration::from_secs(60),
        );
        let mut leases = Vec::new();
        for _ in 0..6 {
            leases.push(fleet.acquire().await);
        }
        let on = |url: &str| leases.iter().filter(|l| url_of(l) == url).count();
        assert_eq!((on("http://127.0.0.1:1"), on("http://127.0.0.1:2")), (2, 4));
        // Full: the next lease waits until one is released, and takes its place.
        let waiting = tokio::spawn({
            let fleet = fleet.clone();
            async move { url_of(&fleet.acquire().await) }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        let index = leases
            .iter()
            .position(|l| url_of(l) == "http://127.0.0.1:1")
            .expect("one on server 1");
        leases.remove(index);
        assert_eq!(waiting.await.expect("join"), "http://127.0.0.1:1");
    }

    #[tokio::test(start_paused = true)]
    async fn a_down_server_gets_nothing_and_all_down_pauses_until_one_returns() {
        let fleet = Fleet::new(
            vec![
                backend("http://127.0.0.1:1", 4),
                backend("http://127.0.0.1:2", 4),
            ],
            Duration::from_secs(60),
        );
        let first = fleet.backends()[0].clone();
        let second = fleet.backends()[1].clone();
        let down = Health::Down { since_unix_ms: 1 };
        first.liveness.force(down);
        for _ in 0..3 {
            let lease = fleet.acquire().await;
            assert_eq!(url_of(&lease), "http://127.0.0.1:2");
        }
        assert_eq!(fleet.all_down_since(), None);
        second.liveness.force(down);
        assert!(fleet.all_down_since().is_some());
        let waiting = tokio::spawn({
            let fleet = fleet.clone();
            async move { url_of(&fleet.acquire().await) }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "every server is down: dispatch pauses"
        );
        second.liveness.force(Health::Up);
        assert_eq!(waiting.await.expect("join"), "http://127.0.0.1:2");
    }
}
