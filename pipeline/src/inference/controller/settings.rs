//! The controller's tunables. The defaults follow the controller's design (a ceiling from the
//! server's cap and KV room, guards per window, multiplicative cuts), retuned where the
//! simulation (`pipeline/tests/it/controller_sim.rs`, tables in `BENCHMARKS.md`) showed it
//! settling below the best fixed limit: the preemption tolerance, the `u` steps, the creep
//! toward a known ceiling, and a start at the ceiling with a ramp on a one-second tick
//! instead of ×1.5 per minute from 8. Change them only with those simulation tests.

use std::time::Duration;

/// Tunables of [`Controller`](super::Controller). `Settings::default()` is the documented
/// design; fields are public so tests and a future config table can override them.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How often the sampler calls [`Controller::observe`](super::Controller::observe).
    /// The controller never reads a clock: it counts ticks. Default 1 s, so the start of a
    /// job is decided in seconds.
    pub tick: Duration,
    /// Ticks per decision window. Default 60 (60 s).
    pub window_ticks: u32,
    /// Ticks at the start of a window left out of its throughput, while the batch settles
    /// after a change of limit. Default 5 (5 s).
    pub settle_ticks: u32,
    /// Limit at the very start when the server reports neither a running cap nor its KV
    /// capacity, clamped to the ceiling. Default 8. With either known, the start is the
    /// ceiling (see [`start_without_running_cap`](Self::start_without_running_cap)).
    pub initial_limit: u32,
    /// The most the start may be when the server tells its KV capacity but not how many
    /// requests it runs at once (vLLM exports nothing carrying `max_num_seqs`): a KV ceiling
    /// alone may allow thousands while the server runs 128. Default 128, the least vLLM's
    /// API server runs by default (`max_num_seqs`: 128 per CPU socket, 256 on most GPUs,
    /// 1024 on H100 and up): the ramp goes on a quarter a step while the server runs what it
    /// is sent, stopping just past each power of two (the defaults) until the server runs more
    /// than it, and a queue that stays shows the cap.
    pub start_without_running_cap: u32,
    /// Ceiling when neither the server's caps nor the user bound it. Default 4096.
    pub max_limit: u32,

    /// Fraction `u` of the KV cache the ceiling plans to fill: `L_kv = ⌊u·KV / E_resident⌋`.
    /// Default 0.90.
    pub kv_utilization: f64,
    /// Lowest `u` after preemptions. Default 0.5.
    pub kv_utilization_min: f64,
    /// Highest `u` after quiet windows. Default 1.0: past a full cache it is the preemption
    /// tolerance, not `u`, that decides how far L goes.
    pub kv_utilization_max: f64,
    /// `u` lost per window with more preemptions than it tolerates. Default 0.01.
    pub kv_utilization_down: f64,
    /// `u` gained after [`quiet_windows`](Self::quiet_windows) windows without preemption.
    /// Default 0.01.
    pub kv_utilization_up: f64,
    /// Windows without preemption before `u` rises. Default 2.
    pub quiet_windows: u32,

    /// Queue headroom `q_headroom = max(headroom_min, ⌈headroom_fraction·L⌉)`: requests kept
    /// waiting at the server so a finished one is replaced without a round trip. Default 2.
    pub headroom_min: u32,
    /// Default 0.5: a finished request's place is taken at the server's next step, not after
    /// `gen`'s next request reaches it (a real vLLM on CPU with a cap of 128: 192 in flight beat
    /// 128 by 14–19%, BENCHMARKS).
    pub headroom_fraction: f64,

    /// Startup growth per window, up to the ceiling, when the server reports no caps.
    /// Default 1.5.
    pub startup_growth: f64,
    /// Ramp (startup with known caps): ticks between two steps toward the ceiling. Default 2.
    pub ramp_ticks: u32,
    /// Ramp: growth per step, at most up to the ceiling. Default 2.
    pub ramp_growth: f64,
    /// Ramp: growth per step above `start_without_running_cap` while the running cap is
    /// unknown. A step can pass an unknown cap that is not a power of two by this much before
    /// the queue shows it, not by twice; one at a power of two by the queue headroom (vLLM on
    /// CPU: 128 → 135 with 128 running). Default 1.25.
    pub ramp_growth_without_running_cap: f64,
    /// Ramp: while the server shows headroom (KV below plan, nothing waiting) the ramp may go
    /// past the KV ceiling to what the cache holds at the requests' size now, at most this
    /// many times the ceiling: a job's first requests start together and hold little yet, but
    /// they grow, and what passes the cache is preempted. Default 1.5.
    pub ramp_room: f64,
    /// Ramp: KV usage at which it stops (the cache is as full as it should get). Default 0.95.
    pub ramp_kv_full: f64,
    /// Ramp: ticks in a row with a server queue beyond the headroom while fewer than the limit
    /// run, before the running count is taken as the server's real cap. Default 3.
    pub ramp_queue_ticks: u32,
    /// The end of a job: once what is left to send is at most this many times the limit, it
    /// goes now, as far as the KV cache holds it at the requests' size now (within the running
    /// cap, or just past the power of two the server runs while it says none, and the user's
    /// bound). The server admits it into the cache's room, its batch stays
    /// full as the last requests end, and a long one among them starts now instead of a
    /// generation later; what the requests outgrow is preempted, at a time when no later work
    /// pays for it. A job of many limits is untouched until its last two. Default 2 (1 left the
    /// reasoning-length job of 300 prompts at 0.95 of the best fixed level on virtual time and
    /// 0.94 over HTTP; BENCHMARKS).
    pub tail: f64,
    /// Steady creep per window: `max(1, L / creep_divisor, creep_gap·(L_kv − L))`.
    /// Default 50.
    pub creep_divisor: u32,
    /// Share of the distance to the KV ceiling `L_kv` that one window of creep closes, so L
    /// comes back within minutes of a preemption cut. Used only when `L_kv` is the ceiling.
    /// Default 0.25.
    pub creep_gap: f64,
    /// Steady windows between probes. Default 6.
    pub probe_every_windows: u32,
    /// Probe size, alternately up and down. Default 0.10 (±10%).
    pub probe_step: f64,
    /// An up-move (probe, startup step) is kept only with at least this throughput gain over
    /// the window before. Default 0.02.
    pub keep_up_gain: f64,
    /// A down-probe is reverted only with at least this throughput loss. Default 0.03.
    pub revert_down_loss: f64,

    /// Guard 1: more retryable 5xx in a window than `max(error_min, error_fraction·finishes)`
    /// multiplies L by this. Default 0.5.
    pub error_backoff: f64,
    /// Default 3.
    pub error_min: u32,
    /// Default 0.05.
    pub error_fraction: f64,
    /// Guard 2: any 503/429/stall multiplies L by this. Default 0.7.
    pub overload_backoff: f64,
    /// Guard 3 and the KV tick guard: severe preemption multiplies L by this. Default 0.85.
    pub preemption_backoff: f64,
    /// Tick guard: KV usage above this, with more preemptions in the window so far than the
    /// last window's severe level, cuts L at once. Default 0.98.
    pub kv_panic_usage: f64,
    /// Preemptions a window tolerates, as a fraction of its finishes: up to
    /// `max(preemption_tolerance_min, ⌈preemption_tolerance·finishes⌉)` the window neither
    /// lowers `u` nor counts as quiet. A preemption only costs the recompute of one request;
    /// near a full cache a few of them buy more throughput than they cost (simulation: the
    /// best fixed L preempts hundreds of times an hour). Default 0.25.
    pub preemption_tolerance: f64,
    /// Default 2.
    pub preemption_tolerance_min: u32,
    /// Preemptions beyond `max(preemption_severe_min, ⌈preemption_severe·finishes⌉)` in a
    /// window also cut L (×`preemption_backoff`); fewer only lower `u`, hence the ceiling.
    /// Thrashing (outputs suddenly longer) preempts far beyond that. Default 3.0.
    pub preemption_severe: f64,
    /// Default 8.
    pub preemption_severe_min: u32,

    /// Decay of the length statistics per completion. Default 0.999.
    pub stats_decay: f64,
    /// Weight of the prior (pseudo-observations with output ~ U(0, max_tokens)). Default 20.
    pub prior_weight: f64,
    /// Prompt length the prior assumes until the first prompts are sent (then their mean
    /// length is the prior's), in tokens. Default 1024.
    pub prior_prompt_tokens: f64,
    /// A change of `E_resident` by this factor (either way) since the last (re-)entry re-enters
    /// startup. Default 2.
    pub resident_shift: f64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            tick: Duration::from_secs(1),
            window_ticks: 60,
            settle_ticks: 5,
            initial_limit: 8,
            start_without_running_cap: 128,
            max_limit: 4096,
            kv_utilization: 0.90,
            kv_utilization_min: 0.5,
            kv_utilization_max: 1.0,
            kv_utilization_down: 0.01,
            kv_utilization_up: 0.01,
            quiet_windows: 2,
            headroom_min: 2,
            headroom_fraction: 0.5,
            startup_growth: 1.5,
            ramp_ticks: 2,
            ramp_growth: 2.0,
            ramp_growth_without_running_cap: 1.25,
            ramp_room: 1.5,
            ramp_kv_full: 0.95,
            ramp_queue_ticks: 3,
            tail: 2.0,
            creep_divisor: 50,
            creep_gap: 0.25,
            probe_every_windows: 6,
            probe_step: 0.10,
            keep_up_gain: 0.02,
            revert_down_loss: 0.03,
            error_backoff: 0.5,
            error_min: 3,
            error_fraction: 0.05,
            overload_backoff: 0.7,
            preemption_backoff: 0.85,
            kv_panic_usage: 0.98,
            preemption_tolerance: 0.25,
            preemption_tolerance_min: 2,
            preemption_severe: 3.0,
            preemption_severe_min: 8,
            stats_decay: 0.999,
            prior_weight: 10.0,
            prior_prompt_tokens: 1024.0,
            resident_shift: 2.0,
        }
    }
}

impl Settings {
    /// Duration of one decision window (`tick × window_ticks`).
    pub fn window(&self) -> Duration {
        self.tick * self.window_ticks
    }

    /// `q_headroom` for a limit `l`: `max(headroom_min, ⌈headroom_fraction·l⌉)`.
    pub fn headroom(&self, l: u32) -> u32 {
        let fraction = (self.headroom_fraction * f64::from(l)).ceil() as u32;
        self.headroom_min.max(fraction)
    }
}
