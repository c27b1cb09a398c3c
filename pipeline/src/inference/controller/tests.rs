//! Unit tests of the controller: the ceiling, each guard and its order, the start and its
//! ramp, creep, probes, `u` adaptation, resuming and re-entry, driven through the public API
//! tick by tick and window by window.

use super::*;

const MAX_TOKENS: u32 = 30_000;

fn caps(max_running: Option<u32>, kv_tokens: Option<u64>, user_max: Option<u32>) -> Caps {
    Caps {
        max_running,
        kv_tokens,
        user_max,
    }
}

/// A busy tick at limit `l`: 1000 tokens, server running `l`, nothing queued, 50% KV.
fn busy(l: u32, preemptions_total: u64) -> TickObservation {
    TickObservation {
        output_tokens: 1000,
        in_flight: l,
        server_running: Some(l),
        server_queued: Some(0),
        kv_usage: Some(0.5),
        preemptions_total: Some(preemptions_total),
        ..TickObservation::default()
    }
}

/// Feeds one whole window of `tick` (as built for the current limit); returns the decision.
fn window(c: &mut Controller, mut tick: impl FnMut(u32) -> TickObservation) -> Decision {
    let mut decision = c.decision();
    for _ in 0..Settings::default().window_ticks {
        decision = c.observe(&tick(c.limit()));
    }
    decision
}

/// A controller with default settings grown to steady at 300 (cap 200 + headroom 100).
fn grown() -> Controller {
    let mut c = Controller::new(
        Settings::default(),
        caps(Some(200), None, None),
        MAX_TOKENS,
        None,
    );
    for _ in 0..9 {
        window(&mut c, |l| busy(l, 0));
    }
    assert_eq!((c.limit(), c.phase()), (300, ControllerPhase::Steady));
    c
}

/// A controller resumed in steady state at `l` on a server with `caps` (planning `u` KV use),
/// after one app-limited window (which sets the preemption baseline and changes nothing).
fn resumed(l: u32, caps: Caps, max_tokens: u32, u: f64) -> Controller {
    let settings = Settings::default();
    let stats = LengthStats::prior(
        max_tokens,
        settings.prior_prompt_tokens,
        settings.prior_weight,
    );
    let reached = Reached {
        limit: l,
        kv_utilization: u,
        caps,
    };
    let mut c = Controller::resume(settings, caps, max_tokens, stats, reached);
    let d = window(&mut c, |l| TickObservation {
        in_flight: 0,
        ..busy(l, 0)
    });
    assert_eq!(
        (d.limit, d.phase),
        (l, ControllerPhase::Steady),
        "{}",
        d.reason
    );
    c
}

/// A controller in steady state at `l`, ceiling 300 (cap 200), metrics on.
fn steady(l: u32) -> Controller {
    resumed(l, caps(Some(200), None, None), MAX_TOKENS, 0.90)
}

#[test]
fn ceiling_takes_the_smallest_known_bound() {
    // Prior E_resident with max_tokens 30k: 1024 + 30000/3 = 11024 tokens.
    let table = [
        (caps(None, None, None), 4096),
        (caps(Some(128), None, None), 192),
        (caps(Some(4), None, None), 6),
        (caps(None, Some(400_000), None), 32),
        (caps(Some(256), Some(400_000), None), 32),
        (caps(Some(128), Some(5_000_000), None), 192),
        (caps(Some(128), None, Some(10)), 10),
        (caps(None, Some(1000), None), 1),
    ];
    for (caps, expected) in table {
        let c = Controller::new(Settings::default(), caps, MAX_TOKENS, None);
        assert_eq!(c.ceiling(), expected, "{caps:?}");
        assert!(c.limit() <= expected && c.limit() >= 1);
    }
}

#[test]
fn with_a_known_cap_the_start_is_the_cap_plus_headroom() {
    let mut c = Controller::new(
        Settings::default(),
        caps(Some(128), None, None),
        MAX_TOKENS,
        None,
    );
    assert_eq!((c.limit(), c.phase()), (192, ControllerPhase::Startup));
    // A few quiet seconds at the cap (no queue building up behind it) end the ramp.
    let mut seen = Vec::new();
    for _ in 0..8 {
        let d = c.observe(&busy(c.limit(), 0));
        seen.push((d.limit, d.phase));
    }
    assert_eq!(seen[0], (192, ControllerPhase::Startup));
    assert_eq!(seen[7], (192, ControllerPhase::Steady));
    assert_eq!(
        c.summary(),
        "holding at 192: KV 50% full, none waiting at the server"
    );
}

#[test]
fn blind_startup_grows_by_half_per_window_to_the_ceiling() {
    let mut c = Controller::new(
        Settings::default(),
        caps(None, None, Some(40)),
        MAX_TOKENS,
        None,
    );
    let mut seen = vec![(c.limit(), c.phase())];
    for _ in 0..5 {
        // Throughput grows with the limit: every step pays.
        let d = window(&mut c, |l| TickObservation {
            output_tokens: u64::from(l) * 100,
            ..busy(l, 0)
        });
        seen.push((d.limit, d.phase));
    }
    use ControllerPhase::{Startup, Steady};
    assert_eq!(
        seen,
        [
            (8, Startup),
            (12, Startup),
            (18, Startup),
            (27, Startup),
            (40, Startup),
            (40, Steady),
        ]
    );
    assert!(
        c.summary()
            .starts_with("ramped 8 → 12 → 18 → 27 → 40 in 5 min"),
        "{}",
        c.summary()
    );
}

/// A tick at limit `l` finishing `n` requests of 1000 prompt and 4000 output tokens.
fn finishing(l: u32, n: usize, kv_usage: f64) -> TickObservation {
    TickObservation {
        finishes: vec![
            Finish {
                prompt_tokens: 1000,
                output_tokens: 4000,
            };
            n
        ],
        kv_usage: Some(kv_usage),
        ..busy(l, 0)
    }
}

#[test]
fn kv_bound_start_follows_the_ceiling_up_as_completions_arrive() {
    // 400k KV tokens; the prior (outputs uniform up to 30k) says 11k tokens a request: 32.
    let mut c = Controller::new(
        Settings::default(),
        caps(Some(256), Some(400_000), None),
        MAX_TOKENS,
        None,
    );
    assert_eq!((c.limit(), c.phase()), (32, ControllerPhase::Startup));
    let mut limits = Vec::new();
    for _ in 0..40 {
        limits.push(c.observe(&finishing(c.limit(), 1, 0.5)).limit);
    }
    // Completions of 5k tokens (3.0k held on average) pull the KV ceiling up; the limit
    // follows it, one step every two ticks, never above it.
    assert!(limits.windows(2).all(|w| w[0] <= w[1]), "{limits:?}");
    assert!(limits[39] > 40, "{limits:?}");
    assert_eq!(c.limit(), c.ceiling());
    assert_eq!(c.phase(), ControllerPhase::Startup);
    let summary = c.summary();
    assert!(summary.starts_with("ramping: 32 → "), "{summary}");
    assert!(
        summary.ends_with(" in 40 s (KV 50% full, none waiting at the server)"),
        "{summary}"
    );
    // A generation of requests finished, but the ceiling still rises as the long-output prior
    // fades: the ramp goes on following it.
    for _ in 0..40 {
        c.observe(&finishing(c.limit(), 4, 0.5));
    }
    assert_eq!(
        c.phase(),
        ControllerPhase::Startup,
        "{}",
        c.decision().reason
    );
    assert_eq!(c.limit(), c.ceiling());
    assert!(c.limit() > limits[39], "{}", c.decision().reason);
}

#[test]
fn the_ramp_stops_at_the_first_sign_of_saturation() {
    let start = || {
        Controller::new(
            Settings::default(),
            caps(Some(256), Some(400_000), None),
            MAX_TOKENS,
            None,
        )
    };
    // A preemption.
    let mut c = start();
    c.observe(&busy(32, 0));
    let d = c.observe(&busy(32, 1));
    assert_eq!(
        (d.limit, d.phase),
        (32, ControllerPhase::Steady),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("1 preemptions, the KV cache is full"),
        "{}",
        d.reason
    );
    // KV 95% full.
    let mut c = start();
    let d = c.observe(&finishing(32, 30, 0.96));
    assert_eq!(
        (d.limit, d.phase),
        (32, ControllerPhase::Steady),
        "{}",
        d.reason
    );
    assert_eq!(
        c.summary(),
        "holding at 32: KV 96% full, none waiting at the server"
    );
}

/// vLLM does not say `max_num_seqs`: 5M KV tokens alone allow 408, but the simulated server
/// runs 128 and queues the rest. A fresh start is bounded (below); a run resumed from 408
/// reached on another server ramps from there.
fn unreported_cap_of_128() -> Controller {
    let settings = Settings::default();
    let stats = LengthStats::prior(
        MAX_TOKENS,
        settings.prior_prompt_tokens,
        settings.prior_weight,
    );
    let reached = Reached {
        limit: 408,
        kv_utilization: settings.kv_utilization,
        caps: Caps::default(),
    };
    let server = caps(None, Some(5_000_000), None);
    let c = Controller::resume(settings, server, MAX_TOKENS, stats, reached);
    assert_eq!((c.limit(), c.phase()), (408, ControllerPhase::Startup));
    c
}

/// A vLLM-shaped tick: the server runs at most `cap` of the `l` in flight and queues the
/// rest, its large KV pool 5% full.
fn vllm_capped(l: u32, cap: u32) -> TickObservation {
    TickObservation {
        server_running: Some(l.min(cap)),
        server_queued: Some(l.saturating_sub(cap)),
        kv_usage: Some(0.05),
        ..busy(l, 0)
    }
}

#[test]
fn without_a_reported_running_cap_the_start_is_bounded_and_ramps_to_what_runs() {
    // Issue 23: real vLLM 0.32 on CPU (16384 blocks of 128 KV tokens, `max_num_seqs` 128 and
    // exported nowhere), `max-tokens` 64. The KV cache alone allows 1,805 requests of the
    // prior's length: auto started there, 14× above what runs.
    let mut c = Controller::new(
        Settings::default(),
        caps(None, Some(16_384 * 128), None),
        64,
        None,
    );
    assert!(c.ceiling() > 1000, "{}", c.ceiling());
    assert_eq!(c.limit(), 128, "{}", c.decision().reason);
    assert!(
        c.decision()
            .reason
            .contains("the server does not say how many requests it runs at once"),
        "{}",
        c.decision().reason
    );
    let mut limits = vec![c.limit()];
    for _ in 0..12 {
        limits.push(c.observe(&vllm_capped(c.limit(), 128)).limit);
    }
    // vLLM's least default cap, then just past it by the queue headroom: a queue of 64 shows the
    // cap and keeps its batch full, and nothing more is sent (before issue 23: 64 → 80 → 100 →
    // 125 → 157 with a headroom of 7).
    assert_eq!(
        limits[..7],
        [128, 128, 192, 192, 192, 192, 192],
        "{limits:?}: {}",
        c.decision().reason
    );
    assert_eq!((c.limit(), c.phase()), (192, ControllerPhase::Steady));
    assert!(
        c.summary().starts_with("ramped 128 → 192 in 5 s"),
        "{}",
        c.summary()
    );
    assert_eq!(
        c.ceiling_reason(),
        "the server runs 128 at once, 64 more wait there"
    );
}

#[test]
fn without_a_reported_running_cap_the_ramp_stops_past_each_power_of_two() {
    // vLLM on most GPUs runs 256 by default, on H100 and up 1024; a cap set by hand may be
    // anything. Auto never holds more than the cap and its queue headroom for longer than the
    // queue takes to show, and passes a cap at a power of two by the headroom only.
    for (cap, most) in [(256, 384), (1024, 1536), (200, 384)] {
        let mut c = Controller::new(
            Settings::default(),
            caps(None, Some(16_384 * 128), None),
            64,
            None,
        );
        let mut limits = vec![c.limit()];
        for _ in 0..40 {
            limits.push(c.observe(&vllm_capped(c.limit(), cap)).limit);
        }
        let headroom = Settings::default().headroom(cap);
        assert_eq!(
            (c.limit(), c.phase()),
            (cap + headroom, ControllerPhase::Steady),
            "cap {cap}: {limits:?}: {}",
            c.decision().reason
        );
        assert_eq!(limits.iter().max(), Some(&most), "cap {cap}: {limits:?}");
    }
}

#[test]
fn a_kv_ceiling_below_a_power_of_two_does_not_stop_the_ramp_there() {
    // A step toward 135 (just past 128) cut to a KV ceiling below 128 probes nothing: once the
    // ceiling rises as short answers come back, the ramp goes on past 128.
    let start = |tokens: u64| {
        let mut c = Controller::new(
            Settings::default(),
            caps(None, Some(tokens), None),
            4096,
            None,
        );
        c.observe(&vllm_capped(c.limit(), 1024));
        c
    };
    let tokens = 100_000 * 120 / u64::from(start(100_000).ceiling());
    let mut c = start(tokens);
    for _ in 0..4 {
        c.observe(&vllm_capped(c.limit(), 1024));
    }
    assert!((100..128).contains(&c.limit()), "{}", c.decision().reason);
    for _ in 0..60 {
        let mut tick = vllm_capped(c.limit(), 1024);
        tick.finishes = vec![
            Finish {
                prompt_tokens: 20,
                output_tokens: 20,
            };
            8
        ];
        c.observe(&tick);
    }
    assert!(c.limit() > 200, "{}: {}", c.summary(), c.decision().reason);
}

#[test]
fn longer_requests_cut_nothing_while_the_cache_still_holds_the_limit() {
    // Issue 23, real vLLM 0.32 on CPU with answers of 64 to 512 tokens: auto had learnt the
    // running cap (128 + 7) with the cache 1% full; as the first long answers came back,
    // "requests hold 0.2k tokens now, 0.1k before" halved the limit to 67 and ramped again.
    let mut c = Controller::new(
        Settings::default(),
        caps(None, Some(16_384 * 128), None),
        64,
        None,
    );
    let finishes = |output_tokens: u32| {
        vec![
            Finish {
                prompt_tokens: 60,
                output_tokens,
            };
            8
        ]
    };
    for _ in 0..20 {
        let mut tick = vllm_capped(c.limit(), 128);
        tick.finishes = finishes(64);
        c.observe(&tick);
    }
    assert_eq!((c.limit(), c.phase()), (192, ControllerPhase::Steady));
    let before = c.stats().expected_resident();
    let mut limits = Vec::new();
    for _ in 0..30 {
        let mut tick = vllm_capped(c.limit(), 128);
        tick.kv_usage = Some(0.01);
        tick.finishes = finishes(2048);
        limits.push(c.observe(&tick).limit);
    }
    assert!(
        c.stats().expected_resident() > 2.0 * before,
        "{before} → {}",
        c.stats().expected_resident()
    );
    assert!(
        limits.iter().all(|l| *l >= 128),
        "{limits:?}: {}",
        c.decision().reason
    );

    // Where the cache binds, longer requests still cut at once: 40k KV tokens at 90% hold
    // about 55 requests of 0.6k, fewer than the limit.
    let mut c = Controller::new(
        Settings::default(),
        caps(Some(256), Some(40_000), None),
        64,
        None,
    );
    for _ in 0..20 {
        let mut tick = busy(c.limit(), 0);
        tick.kv_usage = Some(0.3);
        tick.finishes = finishes(64);
        c.observe(&tick);
    }
    let settled = c.limit();
    for _ in 0..30 {
        let mut tick = busy(c.limit(), 0);
        tick.finishes = finishes(512);
        c.observe(&tick);
    }
    assert!(
        c.limit() < settled,
        "{settled} → {}: {}",
        c.limit(),
        c.decision().reason
    );
}

#[test]
fn a_running_cap_learnt_at_a_dip_rises_when_the_server_runs_more() {
    // Issue 23: vLLM runs 128, but the three ticks with a queue caught it running 117
    // (requests finishing between two samples): auto settled at 117 + its headroom for the rest
    // of the job.
    let mut c = Controller::new(
        Settings::default(),
        caps(None, Some(5_000_000), None),
        MAX_TOKENS,
        None,
    );
    for _ in 0..12 {
        c.observe(&vllm_capped(c.limit(), 117));
    }
    assert_eq!((c.limit(), c.phase()), (176, ControllerPhase::Steady));
    // Later the server runs 128 of the 176 sent to it: it runs more than it seemed to.
    let mut limits = Vec::new();
    for _ in 0..4 {
        limits.push(c.observe(&vllm_capped(c.limit(), 128)).limit);
    }
    assert_eq!(limits, [192, 192, 192, 192], "{}", c.decision().reason);
    assert_eq!(
        c.ceiling_reason(),
        "the server runs 128 at once, 64 more wait there"
    );
}

#[test]
fn the_ramp_follows_a_kv_ceiling_while_it_still_rises() {
    // Issue 23: the ramp ended the first time the limit touched the KV ceiling (once a
    // generation had finished), while the ceiling was still rising as the long-output prior
    // washed out; after that the limit moved only at the end of each minute, by a quarter of
    // the gap, and a job of a few minutes never reached the knee.
    let mut c = Controller::new(
        Settings::default(),
        caps(Some(256), Some(400_000), None),
        MAX_TOKENS,
        None,
    );
    assert_eq!(c.limit(), 32);
    // Two answers a tick holding 3k tokens on average: the ceiling rises toward 120 (86 after
    // 100 s).
    let mut trace = Vec::new();
    for _ in 0..100 {
        let d = c.observe(&finishing(c.limit(), 2, 0.5));
        trace.push((d.limit, c.ceiling(), d.phase));
    }
    let (limit, ceiling, phase) = trace[99];
    assert!(ceiling >= 80, "{trace:?}");
    assert_eq!(
        (limit, phase),
        (ceiling, ControllerPhase::Startup),
        "{}",
        c.decision().reason
    );
    // Once the ceiling stops rising for a generation of answers, the ramp is done.
    for _ in 0..2000 {
        if c.observe(&finishing(c.limit(), 2, 0.5)).phase != ControllerPhase::Startup {
            break;
        }
    }
    assert_eq!(
        c.phase(),
        ControllerPhase::Steady,
        "{}",
        c.decision().reason
    );
    assert!(c.limit() >= 110, "{}", c.decision().reason);
    // The cache as full as planned ends it too.
    let mut c = Controller::new(
        Settings::default(),
        caps(Some(256), Some(400_000), None),
        MAX_TOKENS,
        None,
    );
    for _ in 0..100 {
        c.observe(&finishing(c.limit(), 2, 0.5));
    }
    let d = c.observe(&finishing(c.limit(), 2, 0.91));
    let d = match d.phase {
        ControllerPhase::Startup => c.observe(&finishing(c.limit(), 2, 0.91)),
        _ => d,
    };
    assert_eq!(d.phase, ControllerPhase::Steady, "{}", d.reason);
}

#[test]
fn the_ramp_fills_the_room_a_young_first_generation_leaves() {
    // Issue 23: a job's first requests start together and hold little yet; at the KV ceiling
    // (a steady-state estimate) the cache sat 50–70% full for half of a short job. While the
    // server shows headroom the ramp sends more (up to 1.5× the ceiling); once the cache is
    // as full as planned the limit is back at the ceiling and the excess drains.
    let mut c = Controller::new(
        Settings::default(),
        caps(Some(256), Some(250_000), None),
        8192,
        None,
    );
    assert_eq!(c.limit(), 59);
    let tick = |l: u32, kv: f64| TickObservation {
        kv_usage: Some(kv),
        ..busy(l, 0)
    };
    let mut limits = Vec::new();
    for _ in 0..4 {
        limits.push(c.observe(&tick(c.limit(), 0.3)).limit);
    }
    assert_eq!(limits, [59, 88, 88, 88], "{}", c.decision().reason);
    assert_eq!(c.phase(), ControllerPhase::Startup);
    assert!(
        c.decision()
            .reason
            .contains("room for about 88 requests as they are now"),
        "{}",
        c.decision().reason
    );
    let d = c.observe(&tick(c.limit(), 0.92));
    assert_eq!(d.limit, 59, "{}", d.reason);
    let d = c.observe(&tick(88, 0.92));
    assert_eq!(
        (d.limit, d.phase),
        (59, ControllerPhase::Steady),
        "{}",
        d.reason
    );
}

#[test]
fn the_end_of_a_job_goes_out_at_once_as_far_as_the_cache_holds_it() {
    // Issue 23's reasoning-length job (300 prompts, 250k KV, vLLM: no running cap) was fastest
    // with all of them sent at once; auto held the KV ceiling and sent its last requests a
    // generation late. Once what is left is within twice the limit it goes, as far as the
    // cache holds it at the requests' size now (59 running with the cache 10% full: 531).
    let start = |user_max| {
        let c = Controller::new(
            Settings::default(),
            caps(None, Some(250_000), user_max),
            8192,
            None,
        );
        assert_eq!(c.limit(), 59);
        c
    };
    let tick = |unsent, kv| TickObservation {
        unsent: Some(unsent),
        kv_usage: Some(kv),
        ..busy(59, 0)
    };
    let mut c = start(None);
    // More than twice the limit left (a long job): nothing changes.
    assert_eq!(c.observe(&tick(241, 0.1)).limit, 59);
    // The ramp steps to 88 (1.5× the ceiling); 100 left: 59 in flight + 100.
    let d = c.observe(&tick(100, 0.1));
    assert_eq!(d.limit, 159, "{}", d.reason);
    assert!(
        d.reason
            .contains("the job's last 100 prompts: 88 → 159 while the KV cache has room"),
        "{}",
        d.reason
    );
    // Everything sent: the limit stays (nothing more to send), however full the cache gets.
    let d = c.observe(&TickObservation {
        kv_usage: Some(0.9),
        ..busy(159, 0)
    });
    assert_eq!(d.limit, 159, "{}", d.reason);
    assert!(
        c.summary()
            .ends_with("; the job's last prompts sent at 159"),
        "{}",
        c.summary()
    );
    // A running cap the server does not say (vLLM on CPU: 128, with 2M KV tokens): the rest
    // goes just past the power of two the server runs, as the ramp goes (never above the cap
    // and the queue headroom), further only once it is seen running more.
    let mut c = Controller::new(
        Settings::default(),
        caps(None, Some(2_000_000), None),
        160,
        None,
    );
    let vllm = |in_flight, running, unsent| TickObservation {
        unsent: Some(unsent),
        kv_usage: Some(0.01),
        server_running: Some(running),
        ..busy(in_flight, 0)
    };
    assert_eq!(c.observe(&vllm(128, 128, 173)).limit, 128 + 64);
    assert_eq!(c.observe(&vllm(192, 128, 109)).limit, 128 + 64);
    assert_eq!(c.observe(&vllm(192, 129, 109)).limit, 192 + 109);
    // The cache bounds it: 50% full with 59 running holds 106 at the planned 90%.
    let mut c = start(None);
    c.observe(&tick(241, 0.5));
    assert_eq!(c.observe(&tick(100, 0.5)).limit, 106);
    // So does the user's bound, and a server that does not tell its queue gets nothing more.
    let mut c = start(Some(120));
    c.observe(&tick(241, 0.1));
    assert_eq!(c.observe(&tick(100, 0.1)).limit, 120);
    let mut c = start(None);
    c.observe(&tick(241, 0.1));
    let d = c.observe(&TickObservation {
        server_queued: None,
        ..tick(100, 0.1)
    });
    assert_eq!(d.limit, 59, "{}", d.reason);
}

#[test]
fn the_prior_takes_the_length_of_the_prompts_sent() {
    // Issue 23: the first step assumed 1.0k-token prompts although they were short. 22k KV
    // tokens, `max-tokens` 1024: the prior says 1024 + 1024/3 = 1.4k tokens a request (14);
    // prompts of 100 tokens make it 441 (44).
    let mut c = Controller::new(
        Settings::default(),
        caps(Some(256), Some(22_000), None),
        1024,
        None,
    );
    assert_eq!(c.limit(), 14);
    // (A server that does not tell its KV use: the ramp follows the estimate alone.)
    for _ in 0..8 {
        let l = c.limit();
        c.observe(&TickObservation {
            sent: 2,
            sent_prompt_tokens: 200,
            kv_usage: None,
            ..busy(l, 0)
        });
    }
    assert_eq!(c.ceiling(), 44);
    assert_eq!(c.limit(), 44, "{}", c.decision().reason);
    // Completions report real counts from then on; later sends change nothing.
    c.observe(&finishing(c.limit(), 1, 0.5));
    let resident = c.stats().expected_resident();
    c.observe(&TickObservation {
        sent: 10,
        sent_prompt_tokens: 100_000,
        ..busy(c.limit(), 0)
    });
    assert_eq!(c.stats().expected_resident(), resident);
}

#[test]
fn the_start_from_the_prompts_sent_is_no_ramp_step() {
    // The first tick starts again from the prompts' length (0.3k tokens: 59 → 74); the ramp's
    // first step still comes two ticks after the start, not two after that correction.
    let mut c = Controller::new(
        Settings::default(),
        caps(None, Some(250_000), None),
        8192,
        None,
    );
    assert_eq!(c.limit(), 59);
    let d = c.observe(&TickObservation {
        sent: 59,
        sent_prompt_tokens: 59 * 300,
        kv_usage: Some(0.1),
        ..busy(59, 0)
    });
    assert_eq!(d.limit, 74, "{}", d.reason);
    let d = c.observe(&TickObservation {
        kv_usage: Some(0.3),
        ..busy(74, 0)
    });
    assert_eq!(d.limit, 111, "{}", d.reason);
}

#[test]
fn a_queue_that_stays_makes_the_running_count_the_cap() {
    // vLLM does not say `max_num_seqs`: 5M KV tokens alone allow 408, but the server runs 128
    // and queues the rest.
    let mut c = unreported_cap_of_128();
    let queueing = |l: u32| TickObservation {
        server_running: Some(128),
        server_queued: Some(l - 128),
        ..busy(l, 0)
    };
    assert_eq!(c.observe(&queueing(408)).phase, ControllerPhase::Startup);
    assert_eq!(c.observe(&queueing(408)).phase, ControllerPhase::Startup);
    let d = c.observe(&queueing(408));
    // 128 + q_headroom(128) = 128 + 7.
    assert_eq!(
        (d.limit, d.phase),
        (192, ControllerPhase::Steady),
        "{}",
        d.reason
    );
    assert!(
        c.summary()
            .starts_with("ramped 408 → 192 in 3 s; holding at 192"),
        "{}",
        c.summary()
    );
}

#[test]
fn the_ramp_does_not_grow_while_the_server_queues() {
    // vLLM with 5M KV tokens and an unreported cap of 128: the start (408) already queues 280
    // there. The first short answers raise the KV ceiling to ~800, but a limit the server
    // queues behind says nothing: the ramp must not grow it (it went 408 → 789 with 280
    // waiting, then to 135), and it ends at the running count.
    let mut c = unreported_cap_of_128();
    let queueing = |l: u32| TickObservation {
        server_running: Some(128),
        server_queued: Some(l.saturating_sub(128)),
        kv_usage: Some(0.12),
        ..finishing(l, 20, 0.12)
    };
    let mut limits = vec![c.limit()];
    for _ in 0..3 {
        limits.push(c.observe(&queueing(c.limit())).limit);
    }
    assert_eq!(limits, [408, 408, 408, 192], "{}", c.decision().reason);
    assert!(
        c.summary()
            .starts_with("ramped 408 → 192 in 3 s; holding at 192"),
        "{}",
        c.summary()
    );
}

#[test]
fn the_ramp_does_not_grow_a_limit_the_job_does_not_fill() {
    let mut c = Controller::new(
        Settings::default(),
        caps(Some(256), Some(400_000), None),
        MAX_TOKENS,
        None,
    );
    for _ in 0..20 {
        c.observe(&TickObservation {
            in_flight: 10,
            ..finishing(c.limit(), 2, 0.1)
        });
    }
    assert_eq!(c.limit(), 32);
}

#[test]
fn a_resumed_run_starts_where_the_last_one_got_to() {
    let server = caps(Some(256), Some(400_000), None);
    let settings = Settings::default();
    let stats = LengthStats::prior(
        MAX_TOKENS,
        settings.prior_prompt_tokens,
        settings.prior_weight,
    );
    let mut learnt = stats.clone();
    for _ in 0..2000 {
        learnt.record(1000, 5000, settings.stats_decay);
    }
    // The same server: steady at the limit reached, with the KV use it had learnt.
    let reached = Reached {
        limit: 60,
        kv_utilization: 0.97,
        caps: server,
    };
    let c = Controller::resume(
        settings.clone(),
        server,
        MAX_TOKENS,
        learnt.clone(),
        reached,
    );
    assert_eq!((c.limit(), c.phase()), (60, ControllerPhase::Steady));
    assert!((c.kv_utilization() - 0.97).abs() < 1e-9);
    assert_eq!(
        c.summary(),
        "resumed at 60; holding at 60 (the KV cache fits about 109 requests of 3.5k tokens at 97% use)"
    );
    // A smaller KV cache now: checked against it, and ramping from there.
    let smaller = caps(Some(256), Some(100_000), None);
    let c = Controller::resume(settings.clone(), smaller, MAX_TOKENS, learnt, reached);
    assert_eq!((c.limit(), c.phase()), (27, ControllerPhase::Startup));
    // A file from before (no caps kept): ramps from the saved limit.
    let old = Reached {
        caps: Caps::default(),
        ..reached
    };
    let c = Controller::resume(settings, server, MAX_TOKENS, stats, old);
    assert_eq!((c.limit(), c.phase()), (35, ControllerPhase::Startup));
}

#[test]
fn guards_fire_in_order_with_their_factors() {
    struct Case {
        name: &'static str,
        tweak: fn(&mut TickObservation),
        limit: u32,
        phase: ControllerPhase,
    }
    // Each case applies `tweak` to the first tick of a window at L = 40.
    let cases = [
        Case {
            name: "4 retryable errors > max(3, 5% of 0)",
            tweak: |o| o.retryable_errors = 4,
            limit: 20,
            phase: ControllerPhase::Backoff,
        },
        Case {
            name: "3 retryable errors is not more than 3",
            tweak: |o| o.retryable_errors = 3,
            limit: 41, // no guard: steady creep
            phase: ControllerPhase::Steady,
        },
        Case {
            name: "5 errors in 100 finishes is not more than 5%",
            tweak: |o| {
                o.retryable_errors = 5;
                o.finishes = vec![
                    Finish {
                        prompt_tokens: 100,
                        output_tokens: 100
                    };
                    100
                ];
            },
            limit: 41,
            phase: ControllerPhase::Steady,
        },
        Case {
            name: "one 503",
            tweak: |o| o.overloaded = 1,
            limit: 28,
            phase: ControllerPhase::Backoff,
        },
        Case {
            name: "one stall",
            tweak: |o| o.stalls = 1,
            limit: 28,
            phase: ControllerPhase::Backoff,
        },
        Case {
            name: "errors beat 503s",
            tweak: |o| {
                o.retryable_errors = 10;
                o.overloaded = 5;
            },
            limit: 20,
            phase: ControllerPhase::Backoff,
        },
        Case {
            name: "503s beat preemptions",
            tweak: |o| {
                o.overloaded = 1;
                o.preemptions_total = Some(3);
            },
            limit: 28,
            phase: ControllerPhase::Backoff,
        },
        Case {
            name: "3 preemptions (> 2 tolerated, KV not full) lower u, no cut",
            tweak: |o| o.preemptions_total = Some(1),
            limit: 40,
            phase: ControllerPhase::Backoff,
        },
        Case {
            name: "queue grows while running stays low",
            tweak: |o| {
                o.server_queued = Some(120);
                o.server_running = Some(20);
            },
            // Averages over 60 ticks: 2 queued is not more than 2.
            limit: 41,
            phase: ControllerPhase::Steady,
        },
    ];
    for case in cases {
        let mut c = steady(40);
        let mut first = true;
        let d = window(&mut c, |l| {
            let mut o = busy(l, 0);
            if std::mem::take(&mut first) {
                (case.tweak)(&mut o);
            } else if case.name.contains("preempt") {
                o.preemptions_total = Some(3);
            }
            o
        });
        assert_eq!(
            (d.limit, d.phase),
            (case.limit, case.phase),
            "{}: {}",
            case.name,
            d.reason
        );
    }
}

#[test]
fn preemptions_within_the_tolerance_change_nothing() {
    let mut c = steady(40);
    let u = c.kv_utilization();
    // Two preemptions in a window without finishes: max(2, ⌈25% of 0⌉) = 2 are tolerated.
    let d = window(&mut c, |l| busy(l, 2));
    assert_eq!(
        (d.limit, d.phase),
        (41, ControllerPhase::Steady),
        "{}",
        d.reason
    );
    assert_eq!(c.kv_utilization(), u);
    // With 20 finishes in the window, 5 are tolerated.
    let mut first = true;
    let d = window(&mut c, |l| {
        let mut o = busy(l, 7);
        if std::mem::take(&mut first) {
            o.finishes = vec![
                Finish {
                    prompt_tokens: 100,
                    output_tokens: 100,
                };
                20
            ];
        }
        o
    });
    assert_eq!(
        (d.limit, d.phase),
        (42, ControllerPhase::Steady),
        "{}",
        d.reason
    );
    assert_eq!(c.kv_utilization(), u);
}

#[test]
fn preemptions_lower_u_and_only_severe_ones_cut() {
    // At the KV ceiling, planning 92% use: ⌊0.92 · 400k / 11024⌋ = 33.
    let mut c = resumed(33, caps(Some(256), Some(400_000), None), MAX_TOKENS, 0.92);
    assert_eq!(c.ceiling(), 33);
    let u = c.kv_utilization();
    let l = c.limit();

    // 3 preemptions (> 2 tolerated): u −0.01, L only within the lower ceiling.
    let d = window(&mut c, |l| busy(l, 3));
    assert!((c.kv_utilization() - (u - 0.01)).abs() < 1e-9);
    assert_eq!(
        (d.limit, d.phase),
        (c.ceiling().min(l), ControllerPhase::Backoff)
    );
    assert!(
        d.reason.contains("planning 91% KV use instead of 92%"),
        "{}",
        d.reason
    );

    // 9 more (> max(8, 3 × 0 finishes)): severe, L × 0.85 as well.
    let l = c.limit();
    let d = window(&mut c, |l| busy(l, 12));
    assert!((c.kv_utilization() - (u - 0.02)).abs() < 1e-9);
    assert_eq!(
        (d.limit, d.phase),
        ((f64::from(l) * 0.85) as u32, ControllerPhase::Backoff),
        "{}",
        d.reason
    );
}

#[test]
fn a_preemption_cut_waits_for_half_the_requests_to_finish_before_the_next() {
    let mut c = steady(100);
    // Severe windows: more preemptions than max(8, 3 × finishes); KV below the tick guard.
    let mut total = 0;
    let mut severe = |c: &mut Controller, finishes: usize, preemptions: u64| {
        let mut first = true;
        window(c, |l| {
            let mut o = busy(l, total);
            if std::mem::take(&mut first) {
                total += preemptions;
                o.preemptions_total = Some(total);
                o.finishes = vec![
                    Finish {
                        prompt_tokens: 100,
                        output_tokens: 100,
                    };
                    finishes
                ];
            }
            o
        })
    };
    assert_eq!(severe(&mut c, 0, 20).limit, 85);
    // Of the 100 requests admitted before the cut, 30 finished: no second cut, u still drops.
    let u = c.kv_utilization();
    let d = severe(&mut c, 30, 100);
    assert_eq!(d.limit, 85, "{}", d.reason);
    assert!(c.kv_utilization() < u);
    // 30 + 20 = 50 = 100/2 finished: the next severe window cuts again.
    let d = severe(&mut c, 20, 70);
    assert_eq!(d.limit, 72, "{}", d.reason);
}

#[test]
fn kv_full_with_severe_preemptions_cuts_at_the_tick_and_only_once() {
    let mut c = steady(100);
    let mut o = busy(100, 0);
    assert_eq!(c.observe(&o).limit, 100);
    o.kv_usage = Some(0.99);
    // 8 preemptions so far are not beyond the severe level max(8, 3 × 0 finishes).
    o.preemptions_total = Some(8);
    assert_eq!(c.observe(&o).limit, 100);
    o.preemptions_total = Some(9);
    let d = c.observe(&o);
    assert_eq!(
        (d.limit, d.phase),
        (85, ControllerPhase::Backoff),
        "{}",
        d.reason
    );
    // In-flight (100) is still above the new limit: later preemptions are the old limit's.
    o.preemptions_total = Some(30);
    assert_eq!(c.observe(&o).limit, 85);
    // The window ends: u drops for the preemptions, L is not cut a second time.
    let u = c.kv_utilization();
    let d = window(&mut c, |l| busy(l, 30));
    assert!(c.kv_utilization() < u);
    assert_eq!(d.limit, 85, "{}", d.reason);
}

#[test]
fn kv_not_full_waits_for_the_window() {
    let mut c = steady(100);
    c.observe(&busy(100, 0));
    let mut o = busy(100, 4);
    o.kv_usage = Some(0.95);
    assert_eq!(c.observe(&o).limit, 100);
}

#[test]
fn server_queue_with_room_sets_running_plus_headroom() {
    let mut c = steady(60);
    let d = window(&mut c, |l| TickObservation {
        server_running: Some(20),
        server_queued: Some(40),
        ..busy(l, 0)
    });
    // q_headroom(60) = max(2, ⌈30⌉) = 30: a queue of 40 is more than the headroom.
    assert_eq!(
        (d.limit, d.phase),
        (50, ControllerPhase::Backoff),
        "{}",
        d.reason
    );
}

#[test]
fn app_limited_learns_nothing() {
    let mut c = steady(40);
    let d = window(&mut c, |_| busy(10, 0));
    assert_eq!((d.limit, d.phase), (40, ControllerPhase::Steady));
    assert!(d.reason.starts_with("app-limited"), "{}", d.reason);
    // In startup too: no growth while the client cannot fill the limit.
    let mut c = Controller::new(Settings::default(), Caps::default(), MAX_TOKENS, None);
    let d = window(&mut c, |_| busy(3, 0));
    assert_eq!((d.limit, d.phase), (8, ControllerPhase::Startup));
}

#[test]
fn steady_creeps_by_a_fiftieth() {
    for (from, to) in [(40, 41), (100, 102), (150, 153), (208, 212), (300, 300)] {
        let mut c = steady(from);
        assert_eq!(window(&mut c, |l| busy(l, 0)).limit, to, "from {from}");
    }
}

#[test]
fn under_a_kv_ceiling_creep_closes_a_quarter_of_the_gap() {
    // KV 2.2M tokens / 11024 prior E_resident at u = 0.90: L_kv = 179, below the cap's 300.
    let mut c = resumed(
        100,
        caps(Some(200), Some(2_200_000), None),
        MAX_TOKENS,
        0.90,
    );
    assert_eq!(c.ceiling(), 179);
    // Quiet windows raised u to 0.91: L_kv = 181; (181 − 100) / 4 = 20.
    let d = window(&mut c, |l| busy(l, 0));
    assert_eq!(d.limit, 120, "{}", d.reason);
}

/// Runs steady windows at 1000 tokens/tick until a probe starts; returns (from, to).
fn until_probe(c: &mut Controller) -> (u32, u32) {
    for _ in 0..20 {
        let from = c.limit();
        let d = window(c, |l| busy(l, 0));
        if d.phase == ControllerPhase::Probing {
            return (from, d.limit);
        }
    }
    panic!("no probe in 20 windows");
}

#[test]
fn probes_alternate_and_are_kept_or_reverted_by_throughput() {
    // (tokens per tick in the probe window, expected limit after it)
    let up_cases = [(1030, true), (1019, false), (900, false)];
    for (tokens, keep) in up_cases {
        let mut c = steady(40);
        let (from, to) = until_probe(&mut c);
        assert_eq!(to, ((f64::from(from) * 1.1).ceil()) as u32);
        let d = window(&mut c, |l| TickObservation {
            output_tokens: tokens,
            ..busy(l, 0)
        });
        assert_eq!(
            d.limit,
            if keep { to } else { from },
            "up, {tokens}: {}",
            d.reason
        );
        assert_eq!(d.phase, ControllerPhase::Steady);
    }
    let down_cases = [(980, true), (971, true), (969, false), (1100, true)];
    for (tokens, keep) in down_cases {
        let mut c = steady(40);
        let (up_from, up_to) = until_probe(&mut c);
        window(&mut c, |l| busy(l, 0)); // flat: the up-probe is reverted
        assert_eq!(c.limit(), up_from);
        let (from, to) = until_probe(&mut c);
        assert!(to < from && up_to > up_from, "the second probe goes down");
        let d = window(&mut c, |l| TickObservation {
            output_tokens: tokens,
            ..busy(l, 0)
        });
        assert_eq!(
            d.limit,
            if keep { to } else { from },
            "down, {tokens}: {}",
            d.reason
        );
    }
}

#[test]
fn no_up_probe_at_the_ceiling() {
    let settings = Settings {
        initial_limit: 50,
        startup_growth: 1.0,
        ..Settings::default()
    };
    let mut c = Controller::new(settings, caps(None, None, Some(50)), MAX_TOKENS, None);
    let mut phases = Vec::new();
    for _ in 0..14 {
        let d = window(&mut c, |l| busy(l, 0));
        phases.push((d.limit, d.phase));
    }
    // The up turn is skipped; the down turn probes 45.
    assert!(
        phases.contains(&(45, ControllerPhase::Probing)),
        "{phases:?}"
    );
    assert!(phases.iter().all(|(l, _)| *l <= 50));
}

#[test]
fn quiet_windows_raise_u_up_to_the_maximum() {
    // `steady` spent one quiet window; two more make three: one step of 0.01.
    let mut c = steady(20);
    for _ in 0..2 {
        window(&mut c, |l| busy(l, 0));
    }
    assert!((c.kv_utilization() - 0.91).abs() < 1e-9);
    for _ in 0..100 {
        window(&mut c, |l| busy(l, 0));
    }
    assert!((c.kv_utilization() - 1.0).abs() < 1e-9);
    // Without a preemption metric, quiet says nothing.
    let mut c = steady(20);
    for _ in 0..20 {
        window(&mut c, |l| TickObservation {
            preemptions_total: None,
            ..busy(l, 0)
        });
    }
    assert!((c.kv_utilization() - 0.90).abs() < 1e-9);
}

#[test]
fn server_restart_resumes_with_the_same_caps_and_reenters_startup_with_others() {
    let mut c = grown();
    for _ in 0..12 {
        c.observe(&TickObservation {
            finishes: vec![Finish {
                prompt_tokens: 500,
                output_tokens: 4000,
            }],
            ..busy(100, 0)
        });
    }
    let stats = c.stats().clone();
    // The same set-up: back at the limit it had.
    let d = c.on_server_restart(caps(Some(200), None, None));
    assert_eq!(
        (d.limit, d.phase),
        (300, ControllerPhase::Steady),
        "{}",
        d.reason
    );
    assert_eq!(
        c.summary(),
        "resumed at 300; holding at 300: KV 50% full, none waiting at the server"
    );
    let d = c.on_server_restart(caps(Some(64), None, None));
    // min(300/2, 64 + 32)
    assert_eq!(
        (d.limit, d.phase),
        (96, ControllerPhase::Startup),
        "{}",
        d.reason
    );
    assert_eq!(c.stats(), &stats);
    assert_eq!(c.caps().max_running, Some(64));
    let d = c.on_server_restart(caps(Some(200), None, None));
    assert_eq!(
        (d.limit, d.phase),
        (48, ControllerPhase::Startup),
        "{}",
        d.reason
    );
    // Startup again: up to the cap in seconds.
    assert_eq!(window(&mut c, |l| busy(l, 0)).limit, 300);
    // A restart with a smaller server starts at its ceiling.
    let d = c.on_server_restart(caps(Some(4), None, None));
    assert_eq!((d.limit, d.phase), (6, ControllerPhase::Startup));
}

#[test]
fn preemption_counter_drop_is_a_restart() {
    let mut c = grown();
    c.observe(&busy(300, 500));
    let d = c.observe(&busy(300, 3));
    assert_eq!(
        (d.limit, d.phase),
        (150, ControllerPhase::Startup),
        "{}",
        d.reason
    );
    assert!(d.reason.contains("restarted"));
    // The new counter is the baseline: no preemption is counted from the drop, and the ramp
    // is back at the cap within seconds.
    let d = window(&mut c, |l| busy(l, 3));
    assert_eq!(
        (d.limit, d.phase),
        (300, ControllerPhase::Steady),
        "{}",
        d.reason
    );
}

/// Steady at 40 (cap 200, prior for `max_tokens` 4096: E_resident = 1024 + 4096/3 ≈ 2389),
/// then ticks each finishing 5 requests of `finish` until startup is re-entered.
fn reentry_after(finish: Finish) -> Decision {
    let mut c = resumed(40, caps(Some(200), None, None), 4096, 0.90);
    for _ in 0..400 {
        let d = c.observe(&TickObservation {
            finishes: vec![finish; 5],
            ..busy(c.limit(), 0)
        });
        if d.phase == ControllerPhase::Startup {
            return d;
        }
    }
    panic!("never re-entered startup");
}

#[test]
fn a_resident_shift_reenters_startup_cutting_only_for_longer_requests() {
    // (finish, lowest and highest limit after re-entry from about 40). Longer: outputs past the old
    // max_tokens (raised on resume), E_resident → 1000 + 10000/2, startup from half. Shorter:
    // a regression seen against llama-server, where the first short completions washing out
    // the prior halved the limit from 6 to 3 in the middle of a run; now nothing is cut.
    let cases = [((1000, 10_000), 1, 21), ((50, 100), 40, 50)];
    for ((prompt_tokens, output_tokens), low, high) in cases {
        let d = reentry_after(Finish {
            prompt_tokens,
            output_tokens,
        });
        assert!(d.reason.contains("tokens now"), "{}", d.reason);
        assert!((low..=high).contains(&d.limit), "{}: {}", d.limit, d.reason);
    }
}

#[test]
fn without_caps_or_metrics_startup_stops_where_throughput_stops() {
    let mut c = Controller::new(Settings::default(), Caps::default(), MAX_TOKENS, None);
    // Throughput saturates at 20 in flight.
    let tick = |l: u32| TickObservation {
        output_tokens: u64::from(l.min(20)) * 100,
        in_flight: l,
        ..TickObservation::default()
    };
    let mut limits = Vec::new();
    for _ in 0..6 {
        let d = window(&mut c, tick);
        limits.push((d.limit, d.phase));
    }
    // 8 → 12 → 18 → 27 (+11% over 18) → 41 (+0%: back to 27).
    assert_eq!(
        limits[..4],
        [
            (12, ControllerPhase::Startup),
            (18, ControllerPhase::Startup),
            (27, ControllerPhase::Startup),
            (41, ControllerPhase::Startup),
        ]
    );
    assert_eq!(limits[4], (27, ControllerPhase::Steady));
}

#[test]
fn limit_stays_within_one_and_the_ceiling_under_any_observations() {
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let caps_table = [
        caps(None, None, None),
        caps(Some(8), None, None),
        caps(Some(256), Some(400_000), Some(100)),
        caps(None, Some(50_000), None),
    ];
    for caps in caps_table {
        let mut c = Controller::new(Settings::default(), caps, MAX_TOKENS, None);
        let mut preemptions = 0;
        for _ in 0..5000 {
            preemptions += next(3);
            if next(500) == 0 {
                preemptions = 0;
            }
            let in_flight = c.limit() + next(5) as u32;
            let o = TickObservation {
                output_tokens: next(5000),
                finishes: (0..next(3))
                    .map(|_| Finish {
                        prompt_tokens: next(3000) as u32,
                        output_tokens: next(30_000) as u32,
                    })
                    .collect(),
                sent: next(4) as u32,
                sent_prompt_tokens: next(10_000),
                retryable_errors: (next(20) == 0) as u32 * 5,
                overloaded: (next(50) == 0) as u32,
                stalls: (next(200) == 0) as u32,
                server_running: Some(next(300) as u32),
                server_queued: Some(next(20) as u32),
                kv_usage: Some(next(101) as f64 / 100.0),
                preemptions_total: Some(preemptions),
                in_flight,
                // The end of a job goes past the ceiling on purpose (its own test below).
                unsent: None,
            };
            let d = c.observe(&o);
            assert!(d.limit >= 1 && d.limit <= c.ceiling(), "{caps:?}: {d:?}");
            assert!(!d.reason.is_empty());
            let u = c.kv_utilization();
            assert!((0.5 - 1e-9..=0.95 + 1e-9).contains(&u));
        }
    }
}

#[test]
fn no_internal_symbol_reaches_the_user() {
    let mut c = Controller::new(
        Settings::default(),
        caps(Some(256), Some(400_000), None),
        MAX_TOKENS,
        None,
    );
    for i in 0..2000u64 {
        let d = c.observe(&TickObservation {
            preemptions_total: Some(i / 7),
            ..finishing(c.limit(), (i % 3) as usize, 0.9)
        });
        for text in [d.reason, c.summary()] {
            for symbol in ["E_resident", "u=", "L_kv", "q_headroom"] {
                assert!(!text.contains(symbol), "{symbol} in {text:?}");
            }
        }
    }
}

#[test]
fn decision_serializes_for_status() {
    let c = steady(40);
    let text = serde_json::to_string(&c.decision()).expect("serializes");
    assert!(text.contains(r#""phase":"steady""#), "{text}");
}
