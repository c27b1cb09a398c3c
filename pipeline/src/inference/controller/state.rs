//! The controller's state machine: per tick it folds a [`TickObservation`] into the current
//! window and, while starting, ramps ([`super::ramp`]); per window it applies the guards
//! (first match wins), then the phase's move (blind startup growth, steady creep, a probe and
//! its verdict, [`super::steady`]).
//!
//! - **Ceiling** = min(`max_running` + `q_headroom`, `L_kv`, user max), with
//!   `L_kv = ⌊u·KV_tokens / E_resident⌋`; a missing cap simply does not bound it.
//! - **Start**: at the ceiling when the server reports a running cap or its KV capacity (at
//!   most 128 when it tells no running cap: the ramp grows from there, a quarter a step, while
//!   the server runs what it is sent); again from the first prompts' lengths once they are
//!   sent (the length prior takes their mean until the first completion). The ramp then
//!   follows the ceiling up every 2 s as completions refine `E_resident` — for as long as
//!   that estimate still rises, and past it up to 1.5× while the cache has room at the
//!   requests' size now (a young first generation) — and stops at the first saturation
//!   sign: a preemption, KV ≥ 95% full (or as full as planned at the ceiling), or a server
//!   queue that stays while fewer than the limit run, which makes the running count the cap
//!   (raised later if the server ever runs more); at 8, ×1.5 per window, when it reports
//!   neither. A resumed run starts at the limit it reached ([`Controller::resume`]),
//!   checked against the current caps.
//! - **End of the job**: once what is left to send is at most twice L, it goes at once, as far
//!   as the cache holds it at the requests' size now (within the running cap and the user's
//!   bound; with the cap unknown, just past the power of two the server runs, as the ramp);
//!   the limit stays there for the rest of the job.
//! - **Guards** per window: (1) retryable 5xx > max(3, 5% of finishes) → L×0.5, backoff;
//!   (2) any 503/429/stall → L×0.7, backoff; (3) preemptions beyond the tolerance (max(2, 25%
//!   of finishes)) → u−0.01, L within the new ceiling; beyond the severe level (max(8, 3×
//!   finishes)) also L×0.85; (4) server queue > `q_headroom` while running < L − `q_headroom`
//!   → L = running + `q_headroom`; (5) in-flight < L/2 → app-limited, learn nothing. Per tick:
//!   KV usage > 0.98 with the window's preemptions past the severe level → L×0.85 at once (at
//!   most once per window). After a preemption cut, preemptions cut again only once L/2
//!   requests have finished: the requests admitted before the cut keep growing until then.
//!   Two windows in a row without preemption raise `u` by 0.01 (up to 1.0).
//! - **Steady**: creep max(1, L/50, (L_kv − L)/4) per window (the last term only when `L_kv`
//!   is the ceiling); every 6 windows a ±10% probe, alternately up and down; an up-probe is
//!   kept at ≥ +2%, a down-probe reverted at ≥ 3% loss, both against the window just before.
//! - **Re-entry**: a server back with the same caps resumes at its limit; with other caps, or
//!   when `E_resident` doubled, startup from min(L/2, ceiling), keeping the length stats and
//!   `u`. `E_resident` halved: startup from L.
//!
//! Shrinking never cancels anything: the dispatcher only withholds new submissions.

use super::ramp::Ramp;
use super::settings::Settings;
use super::stats::LengthStats;
use super::types::{Caps, ControllerPhase, Decision, Reached, TickObservation};
use super::window::Window;
use super::words::{kilo, percent};

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Direction {
    Up,
    Down,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Probe {
    pub(super) direction: Direction,
    pub(super) from: u32,
    pub(super) baseline: f64,
}

/// The server's load as the last tick saw it, for the status line.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct LastSeen {
    pub(super) running: Option<u32>,
    pub(super) queued: Option<u32>,
    pub(super) kv_usage: Option<f64>,
}

/// One server's concurrency controller. See the module docs for the algorithm.
#[derive(Debug, Clone)]
pub struct Controller {
    pub(super) settings: Settings,
    pub(super) caps: Caps,
    pub(super) stats: LengthStats,
    pub(super) limit: u32,
    pub(super) u: f64,
    pub(super) phase: ControllerPhase,
    pub(super) reason: String,
    pub(super) window: Window,
    pub(super) last_preemptions: Option<u64>,
    pub(super) quiet_windows: u32,
    pub(super) steady_windows: u32,
    pub(super) next_probe_up: bool,
    pub(super) probe: Option<Probe>,
    /// Blind startup: the limit and throughput of the window before the last growth step.
    pub(super) startup_previous: Option<(u32, f64)>,
    /// `E_resident` at the last (re-)entry, to detect a 2× shift.
    pub(super) reference_resident: f64,
    /// Finishes of the last window: the tick guard's preemption tolerance.
    pub(super) last_window_finishes: u32,
    /// Finishes still to come before preemptions may cut L again: after a cut, the requests
    /// admitted before it keep growing (and preempting) until they are replaced.
    pub(super) cut_holdoff: u32,
    /// Ticks observed so far.
    pub(super) ticks: u64,
    pub(super) ramp: Ramp,
    pub(super) last_seen: LastSeen,
    /// Why the limit was last lowered, in a few words, for the status line.
    pub(super) last_cut: String,
    /// A running cap the server did not report but showed: it queued requests while running
    /// this many with the KV cache not full (vLLM's `max_num_seqs`, a hybrid model's cap).
    pub(super) seen_running_cap: Option<u32>,
    /// While the length statistics are the prior alone: requests sent and their prompts'
    /// estimated tokens, whose mean is the prior's prompt length.
    pub(super) prompts_sent: Option<(u64, u64)>,
    /// The end of the job: the limit that sent what was left (0 before), in force above
    /// `limit` from then on ([`Settings::tail`]).
    pub(super) tail: u32,
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
        let prompts_sent = stats.is_none().then_some((0, 0));
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
            phase: ControllerPhase::Startup,
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
            ticks: 0,
            ramp: Ramp::default(),
            last_seen: LastSeen::default(),
            last_cut: String::new(),
            seen_running_cap: None,
            prompts_sent,
            tail: 0,
        };
        controller.start(0, "");
        controller
    }

    /// Starts (again, `at` a tick) at the ceiling, or at most `start_without_running_cap`
    /// when the server tells its KV capacity but no running cap, or at `initial_limit` when
    /// it tells neither. `why` prefixes the reason.
    fn start(&mut self, at: u64, why: &str) {
        let ceiling = self.ceiling();
        let s = &self.settings;
        self.limit = match (self.has_caps(), self.running_cap()) {
            (true, Some(_)) => ceiling,
            (true, None) => ceiling.min(s.start_without_running_cap.max(1)),
            (false, _) => s.initial_limit.clamp(1, ceiling),
        };
        self.ramp.begin(at, self.limit);
        let unknown_cap = if self.limit < ceiling && self.has_caps() {
            ": the server does not say how many requests it runs at once"
        } else {
            ""
        };
        self.reason = format!(
            "{why}starting at {}{unknown_cap} ({})",
            self.limit,
            self.ceiling_reason()
        );
    }

    /// A controller that starts where an earlier run (or this server before a restart) got
    /// to: at its limit and planned KV use, within the ceiling of the current `caps`. With the
    /// same caps it goes on in steady state; with others it ramps from there.
    pub fn resume(
        settings: Settings,
        caps: Caps,
        max_tokens: u32,
        stats: LengthStats,
        reached: Reached,
    ) -> Controller {
        let mut controller = Controller::new(settings, caps, max_tokens, Some(stats));
        let s = &controller.settings;
        controller.u = reached
            .kv_utilization
            .clamp(s.kv_utilization_min, s.kv_utilization_max);
        let ceiling = controller.ceiling();
        controller.limit = reached.limit.clamp(1, ceiling);
        controller.ramp.begin(0, controller.limit);
        if same_server(reached.caps, caps) {
            controller.phase = ControllerPhase::Steady;
            controller.ramp.end(0, "resumed".to_owned());
            controller.reason = format!(
                "resuming at {}, the limit reached before ({})",
                controller.limit,
                controller.ceiling_reason()
            );
        } else {
            controller.reason = format!(
                "resuming at {} (reached {} before, with other server caps; {})",
                controller.limit,
                reached.limit,
                controller.ceiling_reason()
            );
        }
        controller
    }

    /// What to keep for a resumed run.
    pub fn reached(&self) -> Reached {
        Reached {
            limit: self.limit,
            kv_utilization: self.u,
            caps: self.caps,
        }
    }

    /// The limit in force.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    pub fn phase(&self) -> ControllerPhase {
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
            limit: self.limit.max(self.tail),
            phase: self.phase,
            reason: self.reason.clone(),
        }
    }

    /// `L_kv = ⌊u·KV_tokens / E_resident⌋` (at least 1), when the KV capacity is known.
    pub fn kv_limit(&self) -> Option<u32> {
        self.kv_limit_for(self.stats.expected_resident())
    }

    pub(super) fn kv_limit_for(&self, resident: f64) -> Option<u32> {
        let kv = self.caps.kv_tokens?;
        let l = (self.u * kv as f64 / resident.max(1.0)).floor();
        Some((l.min(f64::from(u32::MAX)) as u32).max(1))
    }

    /// The most the limit may be: min(`max_running` + `q_headroom`, `L_kv`, user max), or
    /// `max_limit` when nothing is known.
    pub fn ceiling(&self) -> u32 {
        self.ceiling_with(self.kv_limit())
    }

    pub(super) fn ceiling_with(&self, kv_limit: Option<u32>) -> u32 {
        let mut ceiling = self.settings.max_limit;
        if let Some(running) = self.running_cap() {
            ceiling = ceiling.min(running.saturating_add(self.settings.headroom(running)));
        }
        if let Some(kv) = kv_limit {
            let room = match self.phase {
                ControllerPhase::Startup => self.ramp.room,
                _ => 0,
            };
            ceiling = ceiling.min(kv.max(room));
        }
        if let Some(user) = self.caps.user_max {
            ceiling = ceiling.min(user);
        }
        ceiling.max(1)
    }

    /// The most requests the server runs at once: reported, or seen.
    pub(super) fn running_cap(&self) -> Option<u32> {
        self.caps.max_running.or(self.seen_running_cap)
    }

    /// The server came back (or was replaced). With the same caps it resumes at the limit it
    /// had; with others it takes them and re-enters startup from min(L/2, ceiling). The length
    /// statistics and `u` are kept either way.
    pub fn on_server_restart(&mut self, caps: Caps) -> Decision {
        let same = same_server(self.caps, caps);
        self.caps = caps;
        if !same {
            self.seen_running_cap = None;
        }
        self.last_preemptions = None;
        if same {
            let limit = self.limit.min(self.ceiling()).max(1);
            self.reenter("server restarted");
            self.limit = limit;
            self.phase = ControllerPhase::Steady;
            self.ramp.end(self.ticks, "resumed".to_owned());
            self.reason = format!(
                "server restarted with the same caps: resuming at {} ({})",
                self.limit,
                self.ceiling_reason()
            );
        } else {
            self.reenter("server restarted with other caps");
        }
        self.decision()
    }

    /// Folds one tick in; at the end of a window, decides. Returns the limit to apply now.
    pub fn observe(&mut self, obs: &TickObservation) -> Decision {
        self.ticks += 1;
        self.learn(obs);
        self.follow_running_cap(obs);
        let Some(new_preemptions) = self.new_preemptions(obs) else {
            return self.decision();
        };
        let draining = self.fold_into_window(obs, new_preemptions);
        self.kv_full_cut(obs, new_preemptions, draining);
        if self.follow_resident_shift() {
            return self.decision();
        }
        if self.window.ticks >= self.settings.window_ticks {
            self.end_window();
        }
        self.ramp_tick(obs, new_preemptions);
        // The ceiling moves with every completion; the limit never sits above it.
        let ceiling = self.ceiling();
        if self.limit > ceiling {
            self.limit = ceiling;
            self.reason = format!("lowered to {}", self.ceiling_reason());
        }
        self.send_the_tail(obs);
        self.decision()
    }

    /// The end of the job ([`Settings::tail`]): once what is left to send is within `tail` × L,
    /// it goes now, as far as the cache holds it at the requests' size now and within the
    /// caps and the user's bound.
    fn send_the_tail(&mut self, obs: &TickObservation) {
        let (Some(unsent), Some(room)) = (obs.unsent, self.room_now(obs)) else {
            return;
        };
        if unsent == 0 || unsent as f64 > self.settings.tail * f64::from(self.limit) {
            return;
        }
        // A running cap the server does not say is passed as the ramp passes it: just past the
        // power of two it runs (vLLM's defaults), further once it runs more.
        let s = &self.settings;
        let unknown_cap = match (self.running_cap(), obs.server_running) {
            (None, Some(running)) => {
                let power = running.max(s.start_without_running_cap).next_power_of_two();
                power.saturating_add(s.headroom(power))
            }
            _ => u32::MAX,
        };
        let unsent = u32::try_from(unsent).unwrap_or(u32::MAX);
        let all = obs
            .in_flight
            .saturating_add(unsent)
            .min(self.ceiling_with(Some(room)))
            .min(unknown_cap);
        if all > self.limit.max(self.tail) {
            self.tail = all;
            self.reason = format!(
                "the job's last {unsent} prompts: {} → {all} while the KV cache has room",
                self.limit
            );
        }
    }

    /// While the server shows headroom (KV below plan, no more waiting than the queue
    /// headroom): the requests the cache holds at the planned use at their size now.
    pub(super) fn room_now(&self, obs: &TickObservation) -> Option<u32> {
        let headroom = self.settings.headroom(self.limit);
        match (obs.server_running, obs.server_queued, obs.kv_usage) {
            (Some(running), Some(queued), Some(usage))
                if queued <= headroom && usage > 0.0 && usage < self.u =>
            {
                Some((f64::from(running) * self.u / usage).min(f64::from(u32::MAX)) as u32)
            }
            _ => None,
        }
    }

    /// Takes the tick's completions into the length statistics and the ramp's count, and its
    /// server load into what the status line shows.
    fn learn(&mut self, obs: &TickObservation) {
        // Before any completion the prior takes the prompts sent (those of this tick too: a
        // fast server answers within the first tick); real lengths from then on, the prior
        // keeping the prompt length it had.
        if let Some((sent, tokens)) = &mut self.prompts_sent
            && obs.sent > 0
        {
            let first = *sent == 0;
            *sent += u64::from(obs.sent);
            *tokens += obs.sent_prompt_tokens;
            let mean = *tokens as f64 / *sent as f64;
            self.stats.set_mean_prompt(mean);
            // The start assumed prompts of `prior_prompt_tokens`: start again from what the
            // first ones say, unless the ramp already moved (a correction of the start, not a
            // step: the ramp's first step still comes `ramp_ticks` after the start).
            if first && self.phase == ControllerPhase::Startup && self.ramp.path.len() == 1 {
                self.reference_resident = self.stats.expected_resident();
                self.start(
                    self.ramp.began_tick,
                    &format!("prompts of {} tokens: ", kilo(mean)),
                );
            }
        }
        if !obs.finishes.is_empty() {
            self.prompts_sent = None;
        }
        for finish in &obs.finishes {
            self.stats.record(
                finish.prompt_tokens,
                finish.output_tokens,
                self.settings.stats_decay,
            );
        }
        self.ramp.finishes += obs.finishes.len() as u64;
        self.last_seen = LastSeen {
            running: obs.server_running,
            queued: obs.server_queued,
            kv_usage: obs.kv_usage,
        };
    }

    /// Preemptions since the last tick; `None` when the server's counter dropped: it
    /// restarted, and the controller re-entered startup.
    fn new_preemptions(&mut self, obs: &TickObservation) -> Option<u64> {
        let new_preemptions = match (obs.preemptions_total, self.last_preemptions) {
            (Some(now), Some(before)) if now < before => {
                self.last_preemptions = Some(now);
                self.reenter("the server's preemption counter dropped: it restarted");
                return None;
            }
            (Some(now), Some(before)) => now - before,
            _ => 0,
        };
        if obs.preemptions_total.is_some() {
            self.last_preemptions = obs.preemptions_total;
        }
        Some(new_preemptions)
    }

    /// Adds the tick to the window's accumulators. Returns whether more requests are in flight
    /// than the limit (an earlier cut still draining: its preemptions count as lagging).
    fn fold_into_window(&mut self, obs: &TickObservation, new_preemptions: u64) -> bool {
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
        draining
    }

    /// The per-tick guard: KV usage past `kv_panic_usage` with the window's preemptions past
    /// the severe level cuts L at once (at most once per window, and not while an earlier
    /// cut's requests are still being replaced).
    fn kv_full_cut(&mut self, obs: &TickObservation, new_preemptions: u64, draining: bool) {
        let kv_full = obs
            .kv_usage
            .is_some_and(|usage| usage > self.settings.kv_panic_usage);
        // Against the last window's finishes; in the first window, where there is none, against
        // this one's so far (a fast job's first burst of preemptions is no thrashing).
        let first_window = self.ticks <= u64::from(self.settings.window_ticks);
        let severe = self.preemption_severe(if first_window {
            self.window.finishes
        } else {
            self.last_window_finishes
        });
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
            self.enter_backoff();
            self.last_cut = format!("{new_preemptions} preemptions with the KV cache full");
            self.reason = format!(
                "KV cache {} full with {new_preemptions} new preemptions: {before} → {}",
                percent(obs.kv_usage.unwrap_or(1.0)),
                self.limit
            );
        }
    }

    /// When `E_resident` moved by `resident_shift` or more since the last (re-)entry: in
    /// startup, or when requests got longer but the KV cache still holds the limit at their new
    /// size, the new value is the reference; otherwise startup again, from L when requests got
    /// shorter, from L/2 when they got longer. Returns whether it started again (the tick's
    /// decision is then made).
    fn follow_resident_shift(&mut self) -> bool {
        let resident = self.stats.expected_resident();
        let shift = resident / self.reference_resident;
        let shifted =
            shift >= self.settings.resident_shift || shift <= 1.0 / self.settings.resident_shift;
        if !shifted {
            return false;
        }
        let why = format!(
            "requests hold {} tokens now, {} before",
            kilo(resident),
            kilo(self.reference_resident)
        );
        // Longer requests matter only where the cache binds: a cache known to hold the limit at
        // their new size (a running cap binds: vLLM's 128 with its cache 1% full) cuts nothing.
        let cache_holds_limit = self
            .kv_limit_for(resident)
            .is_some_and(|kv| kv >= self.limit);
        if self.phase == ControllerPhase::Startup || (shift > 1.0 && cache_holds_limit) {
            self.reference_resident = resident;
            return false;
        }
        if shift < 1.0 {
            // Shorter requests only make room: grow again from here, cut nothing (the
            // first completions of a run wash out the long-output prior this way).
            let limit = self.limit;
            self.reenter(&why);
            self.limit = limit.min(self.ceiling()).max(1);
            self.ramp.begin(self.ticks, self.limit);
            self.reason = format!(
                "{why}: starting again from {} ({})",
                self.limit,
                self.ceiling_reason()
            );
        } else {
            self.last_cut = why.clone();
            self.reenter(&why);
        }
        true
    }

    /// Decides at the end of a window: the first guard that fires, else the phase's move;
    /// then the limit is kept within the ceiling.
    fn end_window(&mut self) {
        let w = std::mem::take(&mut self.window);
        self.last_window_finishes = w.finishes;
        let s = &self.settings;
        if w.preemption_metric && w.preemptions == 0 && w.lagging_preemptions == 0 {
            self.quiet_windows += 1;
            if self.quiet_windows >= s.quiet_windows {
                self.quiet_windows = 0;
                self.u = (self.u + s.kv_utilization_up).min(s.kv_utilization_max);
            }
        }
        if !self.window_guard(&w) {
            self.phase_step(w.throughput());
        }
        let ceiling = self.ceiling();
        if self.limit > ceiling {
            self.limit = ceiling;
            if self.probe.is_some_and(|p| p.direction == Direction::Up) {
                self.probe = None;
                self.phase = ControllerPhase::Steady;
            }
            self.reason = format!("{}; at most {}", self.reason, self.ceiling_reason());
        }
        self.limit = self.limit.max(1);
    }

    /// Applies the first of the window guards that fires on `w` (in order: retryable errors,
    /// overload, preemptions, a server queue, app-limited); `false` when none does.
    fn window_guard(&mut self, w: &Window) -> bool {
        let s = &self.settings;
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
            self.cut(
                s.error_backoff,
                format!("{} server errors in a minute", w.retryable),
                format!(
                    "{} retryable server errors (more than {error_threshold})",
                    w.retryable
                ),
            );
        } else if w.overloaded + w.stalls > 0 {
            self.cut(
                s.overload_backoff,
                format!(
                    "{} overloaded answers, {} stalled streams",
                    w.overloaded, w.stalls
                ),
                format!(
                    "{} overloaded answers (503/429), {} stalled streams",
                    w.overloaded, w.stalls
                ),
            );
        } else if w.preemptions > u64::from(self.preemption_tolerance(w.finishes)) {
            self.preemption_cut(w);
        } else if let Some((running, queued)) = queueing {
            let before = self.limit;
            self.limit = (running.round() as u32 + headroom).max(1);
            self.enter_backoff();
            self.last_cut = format!("the server queued {queued:.0} while running {running:.0}");
            self.reason = format!(
                "the server queues {queued:.0} while it runs {running:.0}: {before} → {}",
                self.limit
            );
        } else if let Some(in_flight) = w
            .in_flight
            .get()
            .filter(|in_flight| *in_flight < f64::from(self.limit) / 2.0)
        {
            if let Some(probe) = self.probe.take() {
                self.limit = probe.from;
                self.phase = ControllerPhase::Steady;
            }
            self.reason = format!(
                "app-limited: {in_flight:.0} in flight, under half of {}: holding",
                self.limit
            );
        } else {
            return false;
        }
        true
    }

    /// Cuts L by `factor` into backoff, saying why (`last_cut` for the status line, `why`
    /// before the change for the decision).
    fn cut(&mut self, factor: f64, last_cut: String, why: String) {
        let before = self.limit;
        self.limit = self.scaled(factor);
        self.enter_backoff();
        self.last_cut = last_cut;
        self.reason = format!("{why}: {before} → {}", self.limit);
    }

    /// Preemptions beyond the tolerance: plan less KV use (`u` down); beyond the severe level
    /// (unless the tick guard cut already, or an earlier cut is still being replaced) cut L too.
    fn preemption_cut(&mut self, w: &Window) {
        let tolerated = self.preemption_tolerance(w.finishes);
        let severe = u64::from(self.preemption_severe(w.finishes));
        let s = &self.settings;
        let before = self.limit;
        let u_before = self.u;
        self.u = (self.u - s.kv_utilization_down).max(s.kv_utilization_min);
        self.quiet_windows = 0;
        if !w.tick_cut && w.preemptions > severe && self.cut_holdoff == 0 {
            self.cut_holdoff = self.limit / 2;
            self.limit = self.scaled(self.settings.preemption_backoff);
        }
        self.limit = self.limit.min(self.ceiling());
        self.enter_backoff();
        self.last_cut = format!("{} preemptions in a minute", w.preemptions);
        self.reason = format!(
            "{} preemptions (more than the {tolerated} tolerated): planning {} KV use \
             instead of {}, {before} → {}",
            w.preemptions,
            percent(self.u),
            percent(u_before),
            self.limit
        );
    }

    /// The phase's move in a window no guard fired in.
    fn phase_step(&mut self, throughput: f64) {
        match self.phase {
            ControllerPhase::Startup if !self.has_caps() => self.startup_step(throughput),
            ControllerPhase::Startup => {}
            ControllerPhase::Backoff => {
                self.phase = ControllerPhase::Steady;
                self.steady_windows = 0;
                self.reason = format!("holding {} after lowering it", self.limit);
            }
            ControllerPhase::Probing => self.finish_probe(throughput),
            ControllerPhase::Steady => self.steady_step(throughput),
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
    pub(super) fn has_caps(&self) -> bool {
        self.caps.max_running.is_some() || self.caps.kv_tokens.is_some()
    }

    pub(super) fn enter_backoff(&mut self) {
        if self.phase == ControllerPhase::Startup {
            self.ramp.end(self.ticks, "lowered".to_owned());
        }
        self.phase = ControllerPhase::Backoff;
        self.probe = None;
        self.startup_previous = None;
    }

    pub(super) fn enter_steady(&mut self) {
        self.phase = ControllerPhase::Steady;
        self.steady_windows = 0;
        self.probe = None;
        self.startup_previous = None;
    }

    fn reenter(&mut self, why: &str) {
        let ceiling = self.ceiling();
        self.limit = (self.limit / 2).min(ceiling).max(1);
        self.phase = ControllerPhase::Startup;
        self.probe = None;
        self.startup_previous = None;
        self.window = Window::default();
        self.steady_windows = 0;
        self.cut_holdoff = 0;
        self.reference_resident = self.stats.expected_resident();
        self.ramp.begin(self.ticks, self.limit);
        self.reason = format!(
            "{why}: starting again from {} ({})",
            self.limit,
            self.ceiling_reason()
        );
    }

    /// `L × factor`, rounded down, at least 1 and at most one less than L (a cut always cuts).
    pub(super) fn scaled(&self, factor: f64) -> u32 {
        let l = (f64::from(self.limit) * factor).floor() as u32;
        l.min(self.limit.saturating_sub(1)).max(1)
    }
}

/// Whether two sets of caps describe the same server set-up (the user's bound aside).
fn same_server(a: Caps, b: Caps) -> bool {
    a.max_running == b.max_running && a.kv_tokens == b.kv_tokens
}
