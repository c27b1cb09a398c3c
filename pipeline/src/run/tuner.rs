//! Auto concurrency: every tick the sampler reads what the client saw (tokens, finishes,
//! errors; [`Telemetry`]) and what the server exposes ([`signals`]), feeds the pure
//! [`Controller`], and applies its decision to the [`Limiter`]. Length statistics are saved in
//! the run directory after every tick and reused after a restart, keyed by server and model.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::limiter::Limiter;
use crate::inference::controller::{
    Caps, Controller, Decision, Finish, LengthStats, Observation, Settings,
};
use crate::inference::liveness::{Health, Liveness};
use crate::inference::signals;
use crate::store::atomic;

/// What requests report for the sampler, between two ticks.
#[derive(Debug, Default)]
pub struct Telemetry {
    output_tokens: AtomicU64,
    finishes: Mutex<Vec<Finish>>,
    retryable: AtomicU32,
    overloaded: AtomicU32,
}

impl Telemetry {
    pub fn finished(&self, prompt_tokens: u64, output_tokens: u64) {
        self.output_tokens
            .fetch_add(output_tokens, Ordering::Relaxed);
        let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        self.finishes
            .lock()
            .expect("telemetry lock not poisoned")
            .push(Finish {
                prompt_tokens: clamp(prompt_tokens),
                output_tokens: clamp(output_tokens),
            });
    }

    pub fn retryable_error(&self) {
        self.retryable.fetch_add(1, Ordering::Relaxed);
    }

    pub fn overloaded(&self) {
        self.overloaded.fetch_add(1, Ordering::Relaxed);
    }

    fn take(&self, in_flight: u32) -> Observation {
        Observation {
            output_tokens: self.output_tokens.swap(0, Ordering::Relaxed),
            finishes: std::mem::take(
                &mut *self.finishes.lock().expect("telemetry lock not poisoned"),
            ),
            retryable_errors: self.retryable.swap(0, Ordering::Relaxed),
            overloaded: self.overloaded.swap(0, Ordering::Relaxed),
            in_flight,
            ..Observation::default()
        }
    }
}

/// The controller's state for `gen status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TunerView {
    pub limit: u32,
    pub ceiling: u32,
    pub decision: String,
}

/// `controller.json`: length statistics learnt for one server and model.
#[derive(Debug, Serialize, Deserialize)]
struct SavedStats {
    key: String,
    stats: LengthStats,
    limit: u32,
}

pub struct Tuner {
    pub controller: Controller,
    pub limiter: Arc<Limiter>,
    pub telemetry: Arc<Telemetry>,
    pub liveness: Liveness,
    pub url: String,
    pub key: String,
    pub stats_path: PathBuf,
    pub view: watch::Sender<TunerView>,
}

impl Tuner {
    /// A tuner for `url`/`model`, starting from saved statistics when the run has some.
    pub async fn new(
        url: &str,
        model: &str,
        user_max: Option<u32>,
        max_tokens: u32,
        stats_path: PathBuf,
        liveness: Liveness,
    ) -> Tuner {
        let mut caps = signals::caps(url).await;
        caps.user_max = user_max;
        let key = format!("{url} {model}");
        let saved: Option<SavedStats> = atomic::read_json(&stats_path)
            .ok()
            .flatten()
            .filter(|s: &SavedStats| s.key == key);
        let controller = Controller::new(
            Settings::default(),
            caps,
            max_tokens,
            saved.map(|s| s.stats),
        );
        let decision = controller.decision();
        let limiter = Limiter::new(decision.limit);
        let view = watch::Sender::new(TunerView {
            limit: decision.limit,
            ceiling: controller.ceiling(),
            decision: decision.reason.clone(),
        });
        crate::say!(
            "gen: concurrency auto: {} ({})",
            decision.limit,
            describe_caps(caps)
        );
        Tuner {
            controller,
            limiter,
            telemetry: Arc::new(Telemetry::default()),
            liveness,
            url: url.to_owned(),
            key,
            stats_path,
            view,
        }
    }

    /// Samples and decides every tick until cancelled.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(self.controller_tick());
        tick.tick().await;
        let mut was_down = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = cancel.cancelled() => {
                    self.save();
                    return;
                }
            }
            match self.liveness.health() {
                Health::Down { .. } => {
                    was_down = true;
                    continue;
                }
                Health::Up if was_down => {
                    // Back from an outage: caps may have changed; re-enter startup, keep stats.
                    was_down = false;
                    let mut caps = signals::caps(&self.url).await;
                    caps.user_max = self.controller.caps().user_max;
                    let decision = self.controller.on_server_restart(caps);
                    self.apply(&decision);
                    continue;
                }
                Health::Up => {}
            }
            let load = signals::load(&self.url).await;
            let mut observation = self.telemetry.take(self.limiter.in_flight());
            observation.server_running = load.running;
            observation.server_queued = load.queued;
            observation.kv_usage = load.kv_usage;
            observation.preemptions_total = load.preemptions_total;
            let decision = self.controller.observe(&observation);
            self.apply(&decision);
            self.save();
        }
    }

    /// Saves the length statistics (and the limit) for the next run.
    fn save(&self) {
        let saved = SavedStats {
            key: self.key.clone(),
            stats: self.controller.stats().clone(),
            limit: self.limiter.limit(),
        };
        if let Err(e) = atomic::write_json(&self.stats_path, &saved) {
            tracing::warn!("cannot save controller statistics: {e}");
        }
    }

    fn controller_tick(&self) -> std::time::Duration {
        Settings::default().tick
    }

    fn apply(&mut self, decision: &Decision) {
        if decision.limit != self.limiter.limit() {
            crate::say!(
                "gen: concurrency {} → {} ({})",
                self.limiter.limit(),
                decision.limit,
                decision.reason
            );
        }
        self.limiter.set_limit(decision.limit);
        self.view.send_replace(TunerView {
            limit: decision.limit,
            ceiling: self.controller.ceiling(),
            decision: decision.reason.clone(),
        });
    }
}

fn describe_caps(caps: Caps) -> String {
    let slots = caps
        .max_running
        .map_or_else(|| "slots unknown".to_owned(), |s| format!("{s} slots"));
    let kv = caps
        .kv_tokens
        .map_or_else(|| "KV unknown".to_owned(), |k| format!("{k} KV tokens"));
    format!("server reports {slots}, {kv}")
}
