//! Auto concurrency: at the start the tuner asks the server what it is and what bounds it
//! ([`SignalReader::probe`]); every tick (1 s) it reads what the client saw (tokens,
//! finishes, errors; [`Telemetry`]) and what the server exposes ([`SignalReader::read`]),
//! feeds the pure [`Controller`], and applies its decision to the [`Limiter`]. What the
//! controller learnt (length statistics) and reached (limit, planned KV use, the caps it had)
//! is saved in the run directory (`controller.json`, keyed by server and model) every few
//! ticks and at the end, so a resumed run starts where this one got to.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::limiter::Limiter;
use crate::inference::controller::{
    Caps, Controller, Decision, Finish, LengthStats, Reached, Settings, TickObservation,
};
use crate::inference::liveness::{Health, Liveness};
use crate::inference::signals::SignalReader;
use crate::notice::Notice;
use crate::store::atomic;
use gen_sources::Message;

/// Ticks between two saves of `controller.json` (and one more at the end).
const SAVE_EVERY_TICKS: u64 = 10;

/// What requests report for the sampler, between two ticks.
#[derive(Debug, Default)]
pub struct Telemetry {
    sent: AtomicU32,
    sent_prompt_tokens: AtomicU64,
    output_tokens: AtomicU64,
    finishes: Mutex<Vec<Finish>>,
    retryable: AtomicU32,
    overloaded: AtomicU32,
    /// What the run has still to send, once known (0 until then): set each tick by the run.
    pub unsent: AtomicU64,
}

impl Telemetry {
    /// A request goes out with these messages.
    pub fn sent(&self, messages: &[Message]) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.sent_prompt_tokens
            .fetch_add(heuristic_prompt_tokens(messages), Ordering::Relaxed);
    }

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

    fn take(&self, in_flight: u32) -> TickObservation {
        TickObservation {
            output_tokens: self.output_tokens.swap(0, Ordering::Relaxed),
            finishes: std::mem::take(
                &mut *self.finishes.lock().expect("telemetry lock not poisoned"),
            ),
            retryable_errors: self.retryable.swap(0, Ordering::Relaxed),
            overloaded: self.overloaded.swap(0, Ordering::Relaxed),
            sent: self.sent.swap(0, Ordering::Relaxed),
            sent_prompt_tokens: self.sent_prompt_tokens.swap(0, Ordering::Relaxed),
            in_flight,
            unsent: Some(self.unsent.load(Ordering::Relaxed)).filter(|n| *n > 0),
            ..TickObservation::default()
        }
    }
}

/// A prompt's tokens before the server counts them: about four bytes of text a token, plus a
/// few for each message's chat template. Only the length prior uses it, until the first
/// completion reports the real count.
fn heuristic_prompt_tokens(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(|m| m.content.len() as u64 / 4 + 4)
        .sum()
}

/// The controller's state for `gen status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TunerView {
    pub limit: u32,
    pub ceiling: u32,
    /// The controller in plain words: "ramped 32 → 47 in 9 s; holding at 47: KV 91% full".
    pub decision: String,
}

/// `controller.json`: what the controller learnt and reached for one server and model.
#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    key: String,
    stats: LengthStats,
    limit: u32,
    /// Absent in files written before resumed runs started from them.
    reached: Option<Reached>,
}

pub struct Tuner {
    pub controller: Controller,
    pub limiter: Arc<Limiter>,
    pub telemetry: Arc<Telemetry>,
    pub liveness: Liveness,
    pub signals: SignalReader,
    pub api_key: Option<String>,
    pub url: String,
    pub key: String,
    pub stats_path: PathBuf,
    pub view: watch::Sender<TunerView>,
    /// See [`TunerTarget::launched_running_cap`].
    pub launched_running_cap: Option<u32>,
}

/// What a [`Tuner`] is for.
pub struct TunerTarget<'a> {
    pub url: &'a str,
    pub model: &'a str,
    pub api_key: Option<&'a str>,
    /// `max-concurrency`, the user's bound.
    pub user_max: Option<u32>,
    /// The running cap `[server] launch` sets, for a server that does not report it.
    pub launched_running_cap: Option<u32>,
    pub max_tokens: u32,
    /// Where `controller.json` lives.
    pub stats_path: PathBuf,
}

impl Tuner {
    /// A tuner for `target`, starting where an earlier run on the same server and model got
    /// to when the run directory says so.
    pub async fn new(target: TunerTarget<'_>, liveness: Liveness) -> Tuner {
        let (signals, reading) = SignalReader::probe(target.url, target.api_key).await;
        let caps = Caps {
            max_running: reading.max_running.or(target.launched_running_cap),
            kv_tokens: reading.kv_tokens,
            user_max: target.user_max,
        };
        let key = format!("{} {}", target.url, target.model);
        let saved: Option<Saved> = atomic::read_json(&target.stats_path)
            .ok()
            .flatten()
            .filter(|s: &Saved| s.key == key);
        let settings = Settings::default();
        let controller = match saved {
            Some(saved) => {
                let reached = saved.reached.unwrap_or(Reached {
                    limit: saved.limit,
                    kv_utilization: settings.kv_utilization,
                    caps: Caps::default(),
                });
                Controller::resume(settings, caps, target.max_tokens, saved.stats, reached)
            }
            None => Controller::new(settings, caps, target.max_tokens, None),
        };
        let decision = controller.decision();
        let limiter = Limiter::new(decision.limit);
        let view = watch::Sender::new(TunerView {
            limit: decision.limit,
            ceiling: controller.ceiling(),
            decision: controller.summary(),
        });
        liveness.reporter().notice(Notice::ConcurrencyAuto {
            url: liveness.shown(),
            limit: decision.limit,
            reason: &decision.reason,
            endpoints: &signals.endpoints().describe(),
            caps: &describe_caps(caps),
            summary: &view.borrow().decision,
        });
        Tuner {
            controller,
            limiter,
            telemetry: Arc::new(Telemetry::default()),
            liveness,
            signals,
            api_key: target.api_key.map(str::to_owned),
            url: target.url.to_owned(),
            key,
            stats_path: target.stats_path,
            view,
            launched_running_cap: target.launched_running_cap,
        }
    }

    /// Samples and decides every tick until cancelled.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(Settings::default().tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut was_down = false;
        let mut ticks: u64 = 0;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = cancel.cancelled() => {
                    self.save();
                    return;
                }
            }
            ticks += 1;
            match self.liveness.health() {
                Health::Down { .. } => {
                    was_down = true;
                    continue;
                }
                Health::Up if was_down => {
                    // Back from an outage: it may be another set-up now; read its caps again.
                    was_down = false;
                    let (signals, reading) =
                        SignalReader::probe(&self.url, self.api_key.as_deref()).await;
                    self.signals = signals;
                    let caps = Caps {
                        max_running: reading.max_running.or(self.launched_running_cap),
                        kv_tokens: reading.kv_tokens,
                        user_max: self.controller.caps().user_max,
                    };
                    let decision = self.controller.on_server_restart(caps);
                    self.apply(&decision);
                    continue;
                }
                Health::Up => {}
            }
            let reading = self.signals.read().await;
            let known = self.controller.caps();
            let caps = Caps {
                max_running: reading.max_running.or(known.max_running),
                kv_tokens: reading.kv_tokens.or(known.kv_tokens),
                user_max: known.user_max,
            };
            if caps != known {
                // The server now reports other caps without having been seen down: it was
                // restarted with other arguments between two ticks.
                let decision = self.controller.on_server_restart(caps);
                self.apply(&decision);
                continue;
            }
            let mut observation = self.telemetry.take(self.limiter.in_flight());
            observation.server_running = reading.load.running;
            observation.server_queued = reading.load.queued;
            observation.kv_usage = reading.load.kv_usage;
            observation.preemptions_total = reading.load.preemptions_total;
            let decision = self.controller.observe(&observation);
            self.apply(&decision);
            if ticks.is_multiple_of(SAVE_EVERY_TICKS) {
                self.save();
            }
        }
    }

    /// Saves what the controller learnt and reached, for the next run.
    fn save(&self) {
        let saved = Saved {
            key: self.key.clone(),
            stats: self.controller.stats().clone(),
            limit: self.controller.limit(),
            reached: Some(self.controller.reached()),
        };
        if let Err(e) = atomic::write_json(&self.stats_path, &saved) {
            tracing::warn!("cannot save the concurrency controller's state: {e}");
        }
    }

    fn apply(&mut self, decision: &Decision) {
        let from = self.limiter.limit();
        self.limiter.set_limit(decision.limit);
        let summary = self.controller.summary();
        if decision.limit != from {
            self.liveness.reporter().notice(Notice::ConcurrencyChanged {
                url: self.liveness.shown(),
                from,
                to: decision.limit,
                reason: &decision.reason,
                summary: &summary,
            });
        }
        self.view.send_replace(TunerView {
            limit: decision.limit,
            ceiling: self.controller.ceiling(),
            decision: summary,
        });
    }
}

fn describe_caps(caps: Caps) -> String {
    let running = caps.max_running.map_or_else(
        || "running cap unknown".to_owned(),
        |s| format!("{s} running at most"),
    );
    let kv = caps
        .kv_tokens
        .map_or_else(|| "KV unknown".to_owned(), |k| format!("{k} KV tokens"));
    format!("{running}, {kv}")
}
