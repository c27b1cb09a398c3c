//! Startup. With a running cap or the KV capacity known the controller starts at the ceiling
//! (at most `start_without_running_cap` when the running cap is unknown) and, every
//! `ramp_ticks`, follows it upward (×`ramp_growth` at most per step; above the bounded start
//! ×`ramp_growth_without_running_cap` while the running cap is unknown, so a step passes an
//! unknown cap by a quarter at most, and one at a power of two — vLLM's defaults — by the queue
//! headroom) as the first completions
//! refine `E_resident` (never while the server queues behind the limit). It keeps following
//! while that estimate still rises — the prior washes out over the first generations, so
//! touching the ceiling once says little — and stops at the first sign of saturation: a
//! preemption, the KV cache `ramp_kv_full`, or a server queue that stays while fewer than the
//! limit run (then the running count is the server's real cap: SGLang's hybrid models and
//! vLLM's unreported `max_num_seqs` run fewer than the caps say; a server seen running more
//! later raises it). Knowing nothing, it grows ×1.5 per window while throughput rises
//! ([`Controller::startup_step`]).

use super::state::Controller;
use super::types::{ControllerPhase, TickObservation};
use super::words::percent;

/// The ramp's bookkeeping, kept for the status line too.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Ramp {
    /// The limits it went through, first to last.
    pub(super) path: Vec<u32>,
    pub(super) began_tick: u64,
    pub(super) last_step_tick: u64,
    /// When and why it ended.
    pub(super) ended: Option<(u64, String)>,
    /// Ticks in a row with a server queue while fewer than the limit ran.
    queue_ticks: u32,
    /// The most requests the server ran during those ticks.
    running_peak: u32,
    /// Completions since it began.
    pub(super) finishes: u64,
    /// The highest ceiling it saw, and its completions when the ceiling last rose there.
    ceiling_high: u32,
    finishes_at_high: u64,
    /// While the running cap is unknown: the power of two the limit stopped just past (by the
    /// queue headroom) before going further. vLLM's default `max_num_seqs` is one (128 per CPU
    /// socket, 256 on most GPUs, 1024 on H100 and up), so a server capped there shows its
    /// queue with no more waiting than the headroom.
    pub(super) at_power_of_two: Option<u32>,
    /// While the server shows headroom (KV below plan, no more waiting than the queue
    /// headroom): the requests the
    /// cache would hold at the planned use at their size now (at most `ramp_room` × the KV
    /// ceiling); 0 otherwise. The first generation of a job starts together and is young,
    /// so the cache has room the steady-state ceiling does not count; what is sent into it
    /// beyond that ceiling drains once the ramp ends.
    pub(super) room: u32,
}

impl Ramp {
    pub(super) fn begin(&mut self, tick: u64, limit: u32) {
        *self = Ramp {
            path: vec![limit],
            began_tick: tick,
            last_step_tick: tick,
            ..Ramp::default()
        };
    }

    pub(super) fn end(&mut self, tick: u64, why: String) {
        if self.ended.is_none() {
            self.ended = Some((tick, why));
        }
    }

    fn step(&mut self, tick: u64, limit: u32) {
        self.last_step_tick = tick;
        if self.path.last() != Some(&limit) {
            self.path.push(limit);
        }
    }
}

impl Controller {
    /// One tick of the ramp (startup with known caps).
    pub(super) fn ramp_tick(&mut self, obs: &TickObservation, new_preemptions: u64) {
        if self.phase != ControllerPhase::Startup || !self.has_caps() {
            return;
        }
        if new_preemptions > 0 {
            let why = format!("{new_preemptions} preemptions, the KV cache is full");
            return self.end_ramp(why);
        }
        if let Some(usage) = obs.kv_usage.filter(|u| *u >= self.settings.ramp_kv_full) {
            return self.end_ramp(format!("KV cache {} full", percent(usage)));
        }
        if self.ramp_found_running_cap(obs) {
            return;
        }
        // A queue within the headroom is requests on their way in, not a cache that is full.
        self.ramp.room = match (self.kv_limit(), self.room_now(obs)) {
            (Some(kv), Some(room)) => room.min((f64::from(kv) * self.settings.ramp_room) as u32),
            _ => 0,
        };
        if self.ticks < self.ramp.last_step_tick + u64::from(self.settings.ramp_ticks) {
            return;
        }
        self.ramp_step(obs);
    }

    /// Counts the ticks in a row the server queues while it runs fewer than the limit; once
    /// they last `ramp_queue_ticks`, the running count is the server's real cap: the limit
    /// goes there and the ramp ends (`true`).
    fn ramp_found_running_cap(&mut self, obs: &TickObservation) -> bool {
        let s = &self.settings;
        let headroom = s.headroom(self.limit);
        let at_cap = |queued: u32, running: u32| match self.ramp.at_power_of_two {
            Some(power) => queued > 0 && running <= power,
            None => queued > headroom && running.saturating_add(headroom) < self.limit,
        };
        match (obs.server_queued, obs.server_running) {
            (Some(queued), Some(running)) if at_cap(queued, running) => {
                self.ramp.queue_ticks += 1;
                self.ramp.running_peak = self.ramp.running_peak.max(running);
            }
            _ => {
                self.ramp.queue_ticks = 0;
                self.ramp.running_peak = 0;
            }
        }
        if self.ramp.queue_ticks < s.ramp_queue_ticks {
            return false;
        }
        let running = self.ramp.running_peak.max(1);
        let from = self.limit;
        // With room left in the KV cache, what stops the server is a cap it did not
        // report; remember it, so later ramps do not queue at it again.
        if self.caps.max_running.is_none()
            && obs
                .kv_usage
                .is_none_or(|usage| usage < s.kv_utilization_min.max(0.8))
        {
            self.seen_running_cap = Some(running);
        }
        self.limit = running
            .saturating_add(s.headroom(running))
            .min(self.ceiling())
            .max(1);
        self.last_cut = format!("the server runs {running} at once");
        self.ramp.step(self.ticks, self.limit);
        self.end_ramp(format!(
            "the server runs {running} at once and queues the rest ({from} → {})",
            self.limit
        ));
        true
    }

    /// A server seen running more than the running cap learnt from a queue runs at least that
    /// many (the queue was seen at a dip: requests finishing between two samples): the cap
    /// rises, and a limit that was at the ceiling goes with it.
    pub(super) fn follow_running_cap(&mut self, obs: &TickObservation) {
        let (Some(seen), Some(running)) = (self.seen_running_cap, obs.server_running) else {
            return;
        };
        if running <= seen || self.caps.max_running.is_some() {
            return;
        }
        let at_ceiling = self.limit >= self.ceiling();
        self.seen_running_cap = Some(running);
        let ceiling = self.ceiling();
        if at_ceiling && ceiling > self.limit {
            self.reason = format!(
                "the server ran {running} at once, more than it seemed to: {} → {ceiling}",
                self.limit
            );
            self.limit = ceiling;
        }
    }

    /// A step of the ramp: toward the ceiling when the job fills the limit; the ramp ends at
    /// the ceiling once that is settled.
    fn ramp_step(&mut self, obs: &TickObservation) {
        let s = &self.settings;
        let headroom = s.headroom(self.limit);
        let ceiling = self.ceiling();
        if ceiling > self.ramp.ceiling_high {
            self.ramp.ceiling_high = ceiling;
            self.ramp.finishes_at_high = self.ramp.finishes;
        }
        // Grow only a limit the job fills and the server runs: a larger one would say nothing,
        // and one the server queues behind (counted in `ramp_found_running_cap`) only makes
        // the queue longer.
        let past_power = match (self.ramp.at_power_of_two, obs.server_running) {
            (Some(power), Some(running)) => running > power,
            _ => true,
        };
        if self.limit < ceiling
            && obs.in_flight.saturating_add(headroom) >= self.limit
            && self.ramp.queue_ticks == 0
            && past_power
        {
            let from = self.limit;
            let unknown_cap = self.running_cap().is_none();
            let growth = if unknown_cap && from >= s.start_without_running_cap {
                s.ramp_growth_without_running_cap
            } else {
                s.ramp_growth
            };
            let grown = (f64::from(self.limit) * growth).ceil() as u32;
            // A step past a power of two stops just past it first: an unknown cap there
            // shows as a queue of the headroom, not of the whole step.
            let power = grown.checked_next_power_of_two().map_or(0, |p| p / 2);
            let probe = unknown_cap && power >= s.start_without_running_cap && from <= power;
            let grown = if probe {
                power + s.headroom(power)
            } else {
                grown
            };
            self.limit = grown.min(ceiling).max(from + 1);
            self.ramp.at_power_of_two = Some(power).filter(|p| probe && self.limit > *p);
            self.reason = format!(
                "ramping {from} → {} ({}; KV {}, {} waiting at the server)",
                self.limit,
                self.ceiling_reason(),
                obs.kv_usage
                    .map_or_else(|| "use unknown".to_owned(), percent),
                obs.server_queued
                    .map_or_else(|| "unknown".to_owned(), |q| q.to_string()),
            );
        }
        self.ramp.step(self.ticks, self.limit);
        // A ceiling set by the KV cache is settled once a generation of requests has finished
        // since it last rose (the first completions are the short ones, and the length prior
        // fades only with them), or once the cache is as full as planned; one set by a
        // running cap once a queue had time to show.
        let s = &self.settings;
        let kv_bound = self.kv_limit().map(|kv| kv.max(self.ramp.room)) == Some(ceiling);
        let settled = if kv_bound {
            self.ramp.finishes >= self.ramp.finishes_at_high + u64::from(self.limit)
                || obs.kv_usage.is_some_and(|usage| usage >= self.u)
        } else {
            self.ticks >= self.ramp.began_tick + 2 * u64::from(s.ramp_queue_ticks)
        };
        if settled && self.limit >= ceiling {
            self.end_ramp(format!("at {}", self.ceiling_reason()));
        }
    }

    fn end_ramp(&mut self, why: String) {
        self.reason = format!("ramp done at {}: {why}", self.limit);
        self.ramp.end(self.ticks, why);
        self.ramp.room = 0;
        self.enter_steady();
    }

    /// Blind startup (no caps): ×`startup_growth` per window, back to the previous limit when
    /// a step gains less than `keep_up_gain`.
    pub(super) fn startup_step(&mut self, throughput: f64) {
        let s = &self.settings;
        if let Some((previous, previous_throughput)) = self.startup_previous
            && self.limit > previous
            && throughput < previous_throughput * (1.0 + s.keep_up_gain)
        {
            let from = self.limit;
            self.limit = previous;
            self.enter_steady();
            self.ramp.step(self.ticks, self.limit);
            self.ramp
                .end(self.ticks, format!("{from} did not pay over {previous}"));
            self.reason = format!(
                "startup plateau: {from} gained {:+.1}% over {previous}, back to {previous}",
                super::words::gain(throughput, previous_throughput)
            );
            return;
        }
        let ceiling = self.ceiling();
        let next = ((f64::from(self.limit) * s.startup_growth).ceil() as u32).min(ceiling);
        if next <= self.limit {
            self.enter_steady();
            self.ramp
                .end(self.ticks, format!("at {}", self.ceiling_reason()));
            self.reason = format!("startup done at {}: {}", self.limit, self.ceiling_reason());
        } else {
            self.startup_previous = Some((self.limit, throughput));
            let from = self.limit;
            self.limit = next;
            self.ramp.step(self.ticks, self.limit);
            self.reason = format!("startup {from} → {next} ({})", self.ceiling_reason());
        }
    }
}
