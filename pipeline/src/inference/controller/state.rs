//! The controller's state machine: per tick it folds an [`Observation`] into the current
//! window; per window it applies the guards (first match wins), then the phase's move
//! (startup growth, steady creep, a probe and its verdict).
//!
//! - **Ceiling** = min(`max_running` + `q_headroom`, `L_kv`, user max), with
//!   `L_kv = ⌊u·KV_tokens / E_resident⌋`; a missing cap simply does not bound it.
//! - **Guards** per window: (1) retryable 5xx > max(3, 5% of finishes) → L×0.5, backoff;
//!   (2) any 503/429/stall → L×0.7, backoff; (3) preemptions beyond the tolerance (max(2, 25%
//!   of finishes)) → u−0.01, L within the new ceiling; beyond the severe level (max(8, 3×
//!   finishes)) also L×0.85; (4) server queue > `q_headroom` while running < L − `q_headroom`
//!   → L = running + `q_headroom`; (5) in-flight < L/2 → app-limited, learn nothing. Per tick:
//!   KV usage > 0.98 with the window's preemptions past the severe level → L×0.85 at once (at
//!   most once per window). After a preemption cut, preemptions cut again only once L/2
//!   requests have finished: the requests admitted before the cut keep growing until then.
//!   Two windows in a row without preemption raise `u` by 0.01 (up to 1.0).
//! - **Startup** ×1.5 per window to the ceiling (leaving early, back at the previous limit,
//!   when a step gains < 2%). **Steady**: creep max(1, L/50, (L_kv − L)/4) per window (the
//!   last term only when `L_kv` is the ceiling); every 6 windows a ±10% probe,
//!   alternately up and down; an up-probe is kept at ≥ +2%, a down-probe reverted at ≥ 3%
//!   loss, both against the window just before.
//! - **Re-entry** (server restart, counter drop, `E_resident` doubled): startup from
//!   min(L/2, ceiling), keeping the length stats and `u`. `E_resident` halved: startup from L.
//!
//! Shrinking never cancels anything: the dispatcher only withholds new submissions.

use super::settings::Settings;
use super::stats::LengthStats;
use super::types::{Caps, Decision, Observation, Phase};
use super::window::Window;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Direction {
    Up,
    Down,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Probe {
    direction: Direction,
    from: u32,
    baseline: f64,
}

/// One server's concurrency controller. See the module docs for the algorithm.
#[derive(Debug, Clone)]
pub struct Controller {
    settings: Settings,
    caps: Caps,
    stats: LengthStats,
    limit: u32,
    u: f64,
    phase: Phase,
    reason: String,
    window: Window,
    last_preemptions: Option<u64>,
    quiet_windows: u32,
    steady_windows: u32,
    next_probe_up: bool,
    probe: Option<Probe>,
    /// Startup: the limit and throughput of the window before the last growth step.
    startup_previous: Option<(u32, f64)>,
    /// `E_resident` at the last (re-)entry, to detect a 2× shift.
    reference_resident: f64,
    /// Finishes of the last window: the tick guard's preemption tolerance.
    last_window_finishes: u32,
    /// Finishes still to come before preemptions may cut L again: after a cut, the requests
    /// admitted before it keep growing (and preempting) until they are replaced.
    cut_holdoff: u32,
}

impl Controller {
    /// A controller in startup. `max_tokens` shapes the length prior when `stats` is `None`
    /// (a fresh run); pass the stats saved by an earlier run to start from what it learnt.
    pub fn new(
        settings: Settings,
        caps: Caps,
        max_tokens: u32,
        stats: Option<LengthStats>,
    ) -> Controller {
        let stats = stats.unwrap_or_else(|| {
            LengthStats::prior(
                max_tokens,
                settings.prior_prompt_tokens,
                settings.prior_weight,
            )
        });
        let mut controller = Controller {
            u: settings.kv_utilization,
            reference_resident: stats.expected_resident(),
            settings,
            caps,
            stats,
            limit: 1,
            phase: Phase::Startup,
            reason: String::new(),
            window: Window::default(),
            last_preemptions: None,
            quiet_windows: 0,
            steady_windows: 0,
            next_probe_up: true,
            probe: None,
            startup_previous: None,
            last_window_finishes: 0,
            cut_holdoff: 0,
        };
        let ceiling = controller.ceiling();
        controller.limit = controller.settings.initial_limit.clamp(1, ceiling);
        controller.reason = format!(
            "startup at {} ({})",
            controller.limit,
            controller.ceiling_reason()
        );
        controller
    }

    /// The limit in force.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The planned KV utilization `u`.
    pub fn kv_utilization(&self) -> f64 {
        self.u
    }

    /// The length statistics learnt so far (to persist in the run directory).
    pub fn stats(&self) -> &LengthStats {
        &self.stats
    }

    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// The current decision (what the last [`observe`](Self::observe) returned).
    pub fn decision(&self) -> Decision {
        Decision {
            limit: self.limit,
            phase: self.phase,
            reason: self.reason.clone(),
        }
    }

    /// `L_kv = ⌊u·KV_tokens / E_resident⌋` (at least 1), when the KV capacity is known.
    pub fn kv_limit(&self) -> Option<u32> {
        let kv = self.caps.kv_tokens?;
        let l = (self.u * kv as f64 / self.stats.expected_resident()).floor();
        Some((l.min(f64::from(u32::MAX)) as u32).max(1))
    }

    /// The most the limit may be: min(`max_running` + `q_headroom`, `L_kv`, user max), or
    /// `max_limit` when nothing is known.
    pub fn ceiling(&self) -> u32 {
        let mut ceiling = self.settings.max_limit;
        if let Some(running) = self.caps.max_running {
            ceiling = ceiling.min(running.saturating_add(self.settings.headroom(running)));
        }
        if let Some(kv) = self.kv_limit() {
            ceiling = ceiling.min(kv);
        }
        if let Some(user) = self.caps.user_max {
            ceiling = ceiling.min(user);
        }
        ceiling.max(1)
    }

    /// The server came back (or was replaced): take its new caps and re-enter startup from
    /// min(L/2, ceiling), keeping the length statistics and `u`.
    pub fn on_server_restart(&mut self, caps: Caps) -> Decision {
        self.caps = caps;
        self.last_preemptions = None;
        self.reenter("server restarted");
        self.decision()
    }

    /// Folds one tick in; at the end of a window, decides. Returns the limit to apply now.
    pub fn observe(&mut self, obs: &Observation) -> Decision {
        for finish in &obs.finishes {
            self.stats.record(
                finish.prompt_tokens,
                finish.output_tokens,
                self.settings.stats_decay,
            );
        }

        let new_preemptions = match (obs.preemptions_total, self.last_preemptions) {
            (Some(now), Some(before)) if now < before => {
                self.last_preemptions = Some(now);
                self.reenter("preemption counter dropped: server restarted");
                return self.decision();
            }
            (Some(now), Some(before)) => now - before,
            _ => 0,
        };
        if obs.preemptions_total.is_some() {
            self.last_preemptions = obs.preemptions_total;
        }

        self.cut_holdoff = self
            .cut_holdoff
            .saturating_sub(u32::try_from(obs.finishes.len()).unwrap_or(u32::MAX));
        let w = &mut self.window;
        w.ticks += 1;
        if w.ticks > self.settings.settle_ticks {
            w.measured_ticks += 1;
            w.measured_tokens += obs.output_tokens;
        }
        w.finishes += obs.finishes.len() as u32;
        w.retryable += obs.retryable_errors;
        w.overloaded += obs.overloaded;
        w.stalls += obs.stalls;
        let draining = obs.in_flight > self.limit;
        if draining {
            w.lagging_preemptions += new_preemptions;
        } else {
            w.preemptions += new_preemptions;
        }
        w.preemption_metric |= obs.preemptions_total.is_some();
        w.running.add(obs.server_running.map(f64::from));
        w.queued.add(obs.server_queued.map(f64::from));
        w.in_flight.add(Some(f64::from(obs.in_flight)));

        let kv_full = obs
            .kv_usage
            .is_some_and(|usage| usage > self.settings.kv_panic_usage);
        let severe = self.preemption_severe(self.last_window_finishes);
        if new_preemptions > 0
            && self.window.preemptions > u64::from(severe)
            && kv_full
            && !draining
            && !self.window.tick_cut
            && self.cut_holdoff == 0
        {
            self.window.tick_cut = true;
            self.cut_holdoff = self.limit / 2;
            let before = self.limit;
            self.limit = self
                .scaled(self.settings.preemption_backoff)
                .min(self.ceiling());
            self.phase = Phase::Backoff;
            self.probe = None;
            self.reason = format!(
                "kv usage {:.2} with {new_preemptions} new preemptions: {before} → {}",
                obs.kv_usage.unwrap_or(1.0),
                self.limit
            );
        }

        let resident = self.stats.expected_resident();
        let shift = resident / self.reference_resident;
        if shift >= self.settings.resident_shift || shift <= 1.0 / self.settings.resident_shift {
            let why = format!(
                "E_resident moved {} → {}",
                kilo(self.reference_resident),
                kilo(resident)
            );
            if self.phase == Phase::Startup {
                self.reference_resident = resident;
            } else if shift < 1.0 {
                // Shorter requests only make room: grow again from here, cut nothing (the
                // first completions of a run wash out the long-output prior this way).
                let limit = self.limit;
                self.reenter(&why);
                self.limit = limit.min(self.ceiling()).max(1);
                self.reason = format!(
                    "{why}: startup from {} ({})",
                    self.limit,
                    self.ceiling_reason()
                );
                return self.decision();
            } else {
                self.reenter(&why);
                return self.decision();
            }
        }

        if self.window.ticks >= self.settings.window_ticks {
            self.end_window();
        }
        // The ceiling moves with every completion; the limit never sits above it.
        let ceiling = self.ceiling();
        if self.limit > ceiling {
            self.limit = ceiling;
            self.reason = format!("lowered to {}", self.ceiling_reason());
        }
        self.decision()
    }

    fn end_window(&mut self) {
        let w = std::mem::take(&mut self.window);
        self.last_window_finishes = w.finishes;
        let tolerated = u64::from(self.preemption_tolerance(w.finishes));
        let severe = u64::from(self.preemption_severe(w.finishes));
        let s = &self.settings;
        let throughput = w.throughput();

        if w.preemption_metric && w.preemptions == 0 && w.lagging_preemptions == 0 {
            self.quiet_windows += 1;
            if self.quiet_windows >= s.quiet_windows {
                self.quiet_windows = 0;
                self.u = (self.u + s.kv_utilization_up).min(s.kv_utilization_max);
            }
        }

        let before = self.limit;
        let error_threshold = s
            .error_min
            .max((s.error_fraction * f64::from(w.finishes)).ceil() as u32);
        let headroom = s.headroom(self.limit);
        let queueing = match (w.running.get(), w.queued.get()) {
            (Some(running), Some(queued))
                if queued > f64::from(headroom)
                    && running < f64::from(self.limit.saturating_sub(headroom)) =>
            {
                Some((running, queued))
            }
            _ => None,
        };

        if w.retryable > error_threshold {
            self.limit = self.scaled(s.error_backoff);
            self.enter_backoff();
            self.reason = format!(
                "{} retryable errors (> {error_threshold}): {before} → {}",
                w.retryable, self.limit
            );
        } else if w.overloaded + w.stalls > 0 {
            self.limit = self.scaled(s.overload_backoff);
            self.enter_backoff();
            self.reason = format!(
                "{} overloaded (503/429), {} stalls: {before} → {}",
                w.overloaded, w.stalls, self.limit
            );
        } else if w.preemptions > tolerated {
            let u_before = self.u;
            self.u = (self.u - s.kv_utilization_down).max(s.kv_utilization_min);
            self.quiet_windows = 0;
            if !w.tick_cut && w.preemptions > severe && self.cut_holdoff == 0 {
                self.cut_holdoff = self.limit / 2;
                self.limit = self.scaled(self.settings.preemption_backoff);
            }
            self.limit = self.limit.min(self.ceiling());
            self.enter_backoff();
            self.reason = format!(
                "{} preemptions (> {tolerated} tolerated): u {u_before:.2} → {:.2}, {before} → {}",
                w.preemptions, self.u, self.limit
            );
        } else if let Some((running, queued)) = queueing {
            self.limit = (running.round() as u32 + headroom).max(1);
            self.enter_backoff();
            self.reason = format!(
                "server queueing: {queued:.0} queued > {headroom} while {running:.0} running: \
                 {before} → {}",
                self.limit
            );
        } else if w
            .in_flight
            .get()
            .is_some_and(|in_flight| in_flight < f64::from(self.limit) / 2.0)
        {
            if let Some(probe) = self.probe.take() {
                self.limit = probe.from;
                self.phase = Phase::Steady;
            }
            self.reason = format!(
                "app-limited: {:.0} in flight < {}/2, holding",
                w.in_flight.get().unwrap_or(0.0),
                self.limit
            );
        } else {
            match self.phase {
                Phase::Startup => self.startup_step(throughput),
                Phase::Backoff => {
                    self.phase = Phase::Steady;
                    self.steady_windows = 0;
                    self.reason = format!("holding {} after backoff", self.limit);
                }
                Phase::Probing => self.finish_probe(throughput),
                Phase::Steady => self.steady_step(throughput),
            }
        }

        let ceiling = self.ceiling();
        if self.limit > ceiling {
            self.limit = ceiling;
            if self.probe.is_some_and(|p| p.direction == Direction::Up) {
                self.probe = None;
                self.phase = Phase::Steady;
            }
            if !self.reason.contains("ceiling") {
                self.reason = format!("{}; {}", self.reason, self.ceiling_reason());
            }
        }
        self.limit = self.limit.max(1);
    }

    fn startup_step(&mut self, throughput: f64) {
        let s = &self.settings;
        if let Some((previous, previous_throughput)) = self.startup_previous
            && !self.has_caps()
            && self.limit > previous
            && throughput < previous_throughput * (1.0 + s.keep_up_gain)
        {
            let from = self.limit;
            self.limit = previous;
            self.enter_steady();
            self.reason = format!(
                "startup plateau: {from} gained {:+.1}% over {previous}, back to {previous}",
                gain(throughput, previous_throughput)
            );
            return;
        }
        let ceiling = self.ceiling();
        let next = ((f64::from(self.limit) * s.startup_growth).ceil() as u32).min(ceiling);
        if next <= self.limit {
            self.enter_steady();
            self.reason = format!("startup done at {}: {}", self.limit, self.ceiling_reason());
        } else {
            self.startup_previous = Some((self.limit, throughput));
            let from = self.limit;
            self.limit = next;
            self.reason = format!("startup {from} → {next} ({})", self.ceiling_reason());
        }
    }

    fn steady_step(&mut self, throughput: f64) {
        let s = &self.settings;
        let ceiling = self.ceiling();
        self.steady_windows += 1;
        if self.steady_windows >= s.probe_every_windows {
            self.steady_windows = 0;
            let up = ((f64::from(self.limit) * (1.0 + s.probe_step)).ceil() as u32).min(ceiling);
            let down = ((f64::from(self.limit) * (1.0 - s.probe_step)).floor() as u32).max(1);
            let want_up = self.next_probe_up;
            self.next_probe_up = !self.next_probe_up;
            // At the ceiling an up-probe has nowhere to go: its turn is skipped (a down-probe
            // there would only measure a loss we already expect).
            let (direction, to) = if want_up && up > self.limit {
                (Direction::Up, up)
            } else if !want_up && down < self.limit {
                (Direction::Down, down)
            } else {
                self.reason = format!("steady, no probe at {}", self.ceiling_reason());
                return;
            };
            self.probe = Some(Probe {
                direction,
                from: self.limit,
                baseline: throughput,
            });
            self.phase = Phase::Probing;
            self.reason = format!(
                "probe {} {} → {to}",
                if direction == Direction::Up {
                    "up"
                } else {
                    "down"
                },
                self.limit
            );
            self.limit = to;
            return;
        }
        // Under a KV ceiling, close part of the gap: after a preemption cut L comes back within
        // minutes, and `u` (learnt from preemptions) keeps it from overshooting.
        let gap = match self.kv_limit() {
            Some(kv) if kv <= ceiling => {
                (s.creep_gap * f64::from(kv.saturating_sub(self.limit))).floor() as u32
            }
            _ => 0,
        };
        let creep = (self.limit / s.creep_divisor.max(1)).max(1).max(gap);
        let next = self.limit.saturating_add(creep).min(ceiling);
        if next > self.limit {
            self.reason = format!("creep {} → {next} ({})", self.limit, self.ceiling_reason());
            self.limit = next;
        } else {
            self.reason = format!("steady at {}", self.ceiling_reason());
        }
    }

    fn finish_probe(&mut self, throughput: f64) {
        self.phase = Phase::Steady;
        let Some(probe) = self.probe.take() else {
            return;
        };
        let change = gain(throughput, probe.baseline);
        let s = &self.settings;
        let (keep, name) = match probe.direction {
            Direction::Up => (throughput >= probe.baseline * (1.0 + s.keep_up_gain), "up"),
            Direction::Down => (
                throughput > probe.baseline * (1.0 - s.revert_down_loss),
                "down",
            ),
        };
        if keep {
            self.reason = format!(
                "probe {name} kept: {} → {} ({change:+.1}%)",
                probe.from, self.limit
            );
        } else {
            self.reason = format!(
                "probe {name} reverted: {} → {} ({change:+.1}%)",
                self.limit, probe.from
            );
            self.limit = probe.from;
        }
    }

    /// Preemptions a window with `finishes` completions tolerates without a cut.
    fn preemption_tolerance(&self, finishes: u32) -> u32 {
        let s = &self.settings;
        let fraction = (s.preemption_tolerance * f64::from(finishes)).ceil() as u32;
        s.preemption_tolerance_min.max(fraction)
    }

    /// Preemptions beyond which a window with `finishes` completions also cuts L.
    fn preemption_severe(&self, finishes: u32) -> u32 {
        let s = &self.settings;
        let fraction = (s.preemption_severe * f64::from(finishes)).ceil() as u32;
        s.preemption_severe_min.max(fraction)
    }

    /// Whether the server reported a running cap or a KV capacity.
    fn has_caps(&self) -> bool {
        self.caps.max_running.is_some() || self.caps.kv_tokens.is_some()
    }

    fn enter_backoff(&mut self) {
        self.phase = Phase::Backoff;
        self.probe = None;
        self.startup_previous = None;
    }

    fn enter_steady(&mut self) {
        self.phase = Phase::Steady;
        self.steady_windows = 0;
        self.probe = None;
        self.startup_previous = None;
    }

    fn reenter(&mut self, why: &str) {
        let ceiling = self.ceiling();
        self.limit = (self.limit / 2).min(ceiling).max(1);
        self.phase = Phase::Startup;
        self.probe = None;
        self.startup_previous = None;
        self.window = Window::default();
        self.steady_windows = 0;
        self.cut_holdoff = 0;
        self.reference_resident = self.stats.expected_resident();
        self.reason = format!(
            "{why}: startup from {} ({})",
            self.limit,
            self.ceiling_reason()
        );
    }

    /// `L × factor`, rounded down, at least 1 and at most one less than L (a cut always cuts).
    fn scaled(&self, factor: f64) -> u32 {
        let l = (f64::from(self.limit) * factor).floor() as u32;
        l.min(self.limit.saturating_sub(1)).max(1)
    }

    /// What bounds the ceiling, e.g. "kv ceiling 46 (u=0.90, E_resident 7.9k tok)".
    fn ceiling_reason(&self) -> String {
        let ceiling = self.ceiling();
        if self.caps.user_max == Some(ceiling) {
            return format!("user ceiling {ceiling}");
        }
        if self.kv_limit() == Some(ceiling) {
            return format!(
                "kv ceiling {ceiling} (u={:.2}, E_resident {} tok)",
                self.u,
                kilo(self.stats.expected_resident())
            );
        }
        if let Some(running) = self.caps.max_running
            && running.saturating_add(self.settings.headroom(running)) == ceiling
        {
            return format!("cap ceiling {ceiling} ({running} running + queue headroom)");
        }
        format!("no known cap, ceiling {ceiling}")
    }
}

/// Relative change in percent.
fn gain(now: f64, before: f64) -> f64 {
    if before > 0.0 {
        (now / before - 1.0) * 100.0
    } else {
        0.0
    }
}

/// Tokens in thousands with one decimal: 7900.0 → "7.9k".
fn kilo(tokens: f64) -> String {
    format!("{:.1}k", tokens / 1000.0)
}
