//! Classifier rules 1–3 and the gen-sent pre-check: counters, kernel lines, userspace killers,
//! suspected OOM versus external kill, child OOMs, pid reuse.

mod common;

use common::{MIB, failed_with, fixture, real_memcg_oom};
use gen_diagnostics::{Class, Confidence, Exit, KernelLog, Observation, Subtype, classify};

fn sigkill(pid: u32) -> Observation {
    Observation::new(
        Exit::Signal {
            signal: 9,
            sent_by_gen: false,
        },
        pid,
    )
}

#[test]
fn real_memcg_oom_is_counter_backed_kernel_memcg() {
    let verdict = classify(&real_memcg_oom());
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::KernelMemcg))
    );
    assert_eq!(verdict.confidence, Confidence::High);
    assert_eq!(
        verdict.headline(),
        "oom (kernel memcg): killed at 64 MiB limit"
    );
    assert_eq!(verdict.next_action(), "raise memory-limit to 128M");
    assert!(
        verdict.evidence.iter().any(|e| e
            == "cgroup oom_kill 0 → 1 in `/process_api/af064145901fa865b0eaa13614ea01f0/diagoom`")
    );
    assert!(verdict.evidence.iter().any(|e| {
        e.starts_with("kernel: Memory cgroup out of memory: Killed process 9142 (python3)")
            && e.contains("at 355.150 s")
    }));
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| e == "peak RSS 64 MiB = 100% of the 64 MiB memory limit")
    );
    assert_eq!(
        verdict.advice[0],
        "raise memory-limit above 64 MiB (peak 64 MiB = 100% of the limit), e.g. memory-limit = \"128M\""
    );
}

#[test]
fn kernel_line_alone_when_counter_unreadable() {
    let mut observation = real_memcg_oom();
    observation.oom_kill_before = None;
    observation.oom_kill_after = None;
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::KernelMemcg))
    );
    assert_eq!(verdict.confidence, Confidence::High);
}

#[test]
fn counter_alone_when_kernel_log_unavailable() {
    let mut observation = real_memcg_oom();
    observation.kernel_log = KernelLog::Unavailable {
        reason: "dmesg_restrict=1".to_string(),
    };
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::CgroupCounter))
    );
    assert_eq!(
        verdict.headline(),
        "oom (cgroup counter): killed at 64 MiB limit"
    );
}

#[test]
fn dmesg_t_without_monotonic_stamps_matches_only_by_cgroup() {
    let mut observation = real_memcg_oom();
    observation.oom_kill_before = None;
    observation.oom_kill_after = None;
    observation.kernel_log = KernelLog::Text {
        text: fixture("kernel_dmesg_t_memcg_real.txt"),
    };
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::KernelMemcg))
    );
    assert_eq!(verdict.confidence, Confidence::Medium);
    // Without the cgroup, the log given still covers the worker's lifetime: a kill record of
    // its pid with a SIGKILL exit is an OOM; nothing dates it, so pid reuse is not ruled out.
    observation.cgroup_path = None;
    let verdict = classify(&observation);
    assert_eq!(verdict.subtype, Some(Subtype::KernelMemcg));
    assert_eq!(verdict.confidence, Confidence::Medium);
}

#[test]
fn suspected_oom_names_the_missing_evidence() {
    let mut observation = sigkill(500);
    observation.kernel_log = KernelLog::Unavailable {
        reason: "dmesg_restrict=1".to_string(),
    };
    observation.peak_rss_bytes = Some(94 * MIB);
    observation.memory_limit_bytes = Some(96 * MIB);
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::SuspectedFromRss))
    );
    assert_eq!(verdict.confidence, Confidence::Medium);
    assert!(
        verdict
            .evidence
            .contains(&"kernel log unavailable: dmesg_restrict=1".to_string())
    );
    assert!(
        verdict
            .evidence
            .contains(&"cgroup oom_kill counter unreadable".to_string())
    );
    assert_eq!(
        verdict.headline(),
        "oom (suspected): killed at 96 MiB limit"
    );
    assert_eq!(verdict.next_action(), "raise memory-limit to 192M");
}

#[test]
fn suspected_oom_against_host_memory_and_lost_records() {
    let mut observation = sigkill(501);
    observation.kernel_log = KernelLog::Text {
        text: "6,10,100,-;a\n6,20,200,-;b\n".to_string(),
    };
    observation.rss_samples = vec![gen_diagnostics::RssSample {
        at_ms: 1,
        bytes: 15 * 1024 * MIB,
    }];
    observation.host_memory_bytes = Some(16 * 1024 * MIB);
    observation.oom_kill_before = Some(0);
    observation.oom_kill_after = Some(0);
    let verdict = classify(&observation);
    assert_eq!(verdict.subtype, Some(Subtype::SuspectedFromRss));
    assert!(
        verdict
            .evidence
            .contains(&"kernel log lost 9 record(s) (seq 10 → 20)".to_string())
    );
    assert!(
        verdict
            .evidence
            .contains(&"peak RSS 15 GiB = 94% of the 16 GiB host memory".to_string())
    );
}

#[test]
fn exit_137_without_kernel_evidence_and_low_rss_is_external_kill() {
    let mut observation = Observation::new(Exit::Code(137), 502);
    observation.kernel_log = KernelLog::Text {
        text: fixture("kernel_kmsg_memcg_real.txt"),
    };
    observation.peak_rss_bytes = Some(10 * MIB);
    observation.memory_limit_bytes = Some(96 * MIB);
    observation.oom_kill_before = Some(3);
    observation.oom_kill_after = Some(3);
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Other, Some(Subtype::ExternalKill))
    );
    assert_eq!(verdict.confidence, Confidence::Medium);
    assert!(verdict.evidence[0].contains("137 = 128 + SIGKILL"));
    assert_eq!(
        verdict.next_action(),
        "find who killed it, then rerun with --only-failed"
    );
}

#[test]
fn high_rss_but_readable_log_and_flat_counter_is_not_oom() {
    let mut observation = sigkill(503);
    observation.kernel_log = KernelLog::Text {
        text: String::new(),
    };
    observation.peak_rss_bytes = Some(95 * MIB);
    observation.memory_limit_bytes = Some(96 * MIB);
    observation.oom_kill_before = Some(0);
    observation.oom_kill_after = Some(0);
    assert_eq!(classify(&observation).subtype, Some(Subtype::ExternalKill));
}

#[test]
fn sigterm_143_with_earlyoom_record_is_userspace_oom() {
    let mut observation = Observation::new(Exit::Code(143), 9001);
    observation.oom_killer_log = fixture("earlyoom_journal_reconstructed.txt");
    observation.kernel_log = KernelLog::Text {
        text: String::new(),
    };
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::UserspaceKiller))
    );
    assert!(verdict.evidence[0].starts_with("earlyoom: sending SIGTERM to process 9001"));
    // Without the record, SIGTERM from outside is an external kill.
    observation.oom_killer_log.clear();
    assert_eq!(classify(&observation).subtype, Some(Subtype::ExternalKill));
}

#[test]
fn systemd_oomd_kill_of_an_ancestor_cgroup() {
    let mut observation = sigkill(9100);
    observation.cgroup_path = Some(
        "/user.slice/user-1000.slice/user@1000.service/app.slice/gen-run.scope/wildchat"
            .to_string(),
    );
    observation.oom_killer_log = fixture("systemd_oomd_journal_reconstructed.txt");
    assert_eq!(
        classify(&observation).subtype,
        Some(Subtype::UserspaceKiller)
    );
}

#[test]
fn stale_line_is_quoted_when_sigkill_is_external() {
    let mut observation = sigkill(31337);
    observation.spawn_usec = Some(500_000_000);
    observation.exit_usec = Some(510_000_000);
    observation.kernel_log = KernelLog::Text {
        text: fixture("kernel_dmesg_stale_pid_reconstructed.txt"),
    };
    observation.oom_kill_before = Some(0);
    observation.oom_kill_after = Some(0);
    let verdict = classify(&observation);
    assert_eq!(verdict.subtype, Some(Subtype::ExternalKill));
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| e
                .starts_with("ignored kernel line for pid 31337: logged at 120.000 s, outside"))
    );
}

#[test]
fn child_oom_beats_the_traceback_it_caused() {
    // Real capture: a ProcessPoolExecutor child OOM-killed, the worker exited 1.
    let mut observation = failed_with(&fixture("py_broken_process_pool_real.txt"));
    observation.pid = 10344;
    observation.child_pids = vec![10345, 10346];
    observation.cgroup_path =
        Some("/process_api/af064145901fa865b0eaa13614ea01f0/diagpool".to_string());
    observation.spawn_usec = Some(388_493_874);
    observation.exit_usec = Some(389_106_131);
    observation.kernel_log = KernelLog::Text {
        text: fixture("kernel_kmsg_pool_child_real.txt"),
    };
    observation.oom_kill_after = Some(1);
    observation.memory_limit_bytes = Some(96 * MIB);
    observation.peak_rss_bytes = Some(100_663_296);
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::KernelMemcg))
    );
    assert!(
        verdict.evidence.contains(
            &"victim pid 10346 (python3) is a descendant of worker pid 10344".to_string()
        )
    );
    assert!(verdict.evidence.iter().any(|e| {
        e.starts_with("symptom of a child's death: concurrent.futures.process.BrokenProcessPool")
    }));
    assert!(
        verdict
            .advice
            .iter()
            .any(|a| a.contains("was a child (pid 10346"))
    );
    // Without the counter and child list, the cgroup still ties the victim to the worker.
    observation.child_pids.clear();
    observation.oom_kill_after = Some(0);
    assert_eq!(classify(&observation).class, Class::Oom);
}

#[test]
fn datasets_and_dataloader_symptoms_point_to_the_child_oom() {
    let mut observation = failed_with(&fixture("py_datasets_map_died_reconstructed.txt"));
    observation.pid = 8000;
    observation.child_pids = vec![8100];
    observation.spawn_usec = Some(5_990_000_000);
    observation.exit_usec = Some(6_001_000_000);
    observation.cgroup_path = Some("/gen/run-3/ultrachat".to_string());
    observation.kernel_log = KernelLog::Text {
        text: fixture("kernel_group_kill_journal_reconstructed.txt"),
    };
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::KernelMemcg))
    );
    // torch names the killed worker's pid; no child list needed.
    let mut observation = failed_with(&fixture("py_dataloader_killed_reconstructed.txt"));
    observation.pid = 8000;
    observation.spawn_usec = Some(5_990_000_000);
    observation.exit_usec = Some(6_001_000_000);
    observation.kernel_log = KernelLog::Text {
        text: fixture("kernel_group_kill_journal_reconstructed.txt"),
    };
    let verdict = classify(&observation);
    assert_eq!(verdict.class, Class::Oom);
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| e.contains("victim pid 8101 (pt_data_worker)"))
    );
}

#[test]
fn gen_sent_sigkill_after_timeout_is_never_oom() {
    let mut observation = real_memcg_oom();
    observation.exit = Exit::Signal {
        signal: 9,
        sent_by_gen: true,
    };
    observation.timed_out = true;
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Other, Some(Subtype::Timeout))
    );
    assert_eq!(verdict.headline(), "timeout: killed by gen");
    // The kernel, not gen, delivered the fatal SIGKILL during the grace period: rules apply.
    observation.exit = Exit::Signal {
        signal: 9,
        sent_by_gen: false,
    };
    let verdict = classify(&observation);
    assert_eq!(verdict.subtype, Some(Subtype::KernelMemcg));
    assert!(
        verdict
            .evidence
            .contains(&"note: gen's watchdog had fired before the worker died".to_string())
    );
    observation.exit = Exit::Signal {
        signal: 9,
        sent_by_gen: true,
    };
    observation.timed_out = false;
    assert_eq!(classify(&observation).subtype, Some(Subtype::Cancelled));
    observation.outputs_complete = true;
    assert_eq!(classify(&observation).class, Class::CleanupAfterCompletion);
}

#[test]
fn global_oom_advice_is_about_the_host() {
    let mut observation = sigkill(7001);
    observation.spawn_usec = Some(4_400_000_000);
    observation.exit_usec = Some(4_411_000_000);
    observation.host_memory_bytes = Some(32 * 1024 * MIB);
    observation.kernel_log = KernelLog::Text {
        text: fixture("kernel_global_syslog_reconstructed.txt"),
    };
    let verdict = classify(&observation);
    assert_eq!(verdict.subtype, Some(Subtype::KernelGlobal));
    assert_eq!(
        verdict.headline(),
        "oom (kernel global): killed at 32 GiB limit"
    );
    assert_eq!(
        verdict.next_action(),
        "free host memory or run fewer workers at once"
    );
}

#[test]
fn oom_with_complete_outputs_carries_the_flag() {
    let mut observation = real_memcg_oom();
    observation.outputs_complete = true;
    let verdict = classify(&observation);
    assert_eq!(verdict.class, Class::Oom);
    assert!(verdict.outputs_complete);
    assert!(
        verdict
            .advice
            .last()
            .is_some_and(|a| a.contains("can be kept"))
    );
}
