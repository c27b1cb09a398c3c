//! Every classifier rule and false-positive trap, on observations built from fixtures.

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
    assert_eq!(verdict.next_action(), "raise memory_limit to 128M");
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
        "raise memory_limit above 64 MiB (peak 64 MiB = 100% of the limit), e.g. memory_limit = \"128M\""
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
    // Without the cgroup, pid + comm alone must not be trusted.
    observation.cgroup_path = None;
    let verdict = classify(&observation);
    assert_eq!(verdict.subtype, Some(Subtype::SuspectedFromRss));
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
    assert_eq!(verdict.next_action(), "raise memory_limit to 192M");
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
fn stale_kernel_line_for_a_reused_pid_does_not_relabel_a_traceback() {
    let mut observation = failed_with(&fixture("py_keyerror.txt"));
    observation.pid = 31337;
    observation.comm = Some("python3".to_string());
    observation.spawn_usec = Some(500_000_000);
    observation.exit_usec = Some(510_000_000);
    observation.kernel_log = KernelLog::Text {
        text: fixture("kernel_dmesg_stale_pid_reconstructed.txt"),
    };
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Traceback, Some(Subtype::Python))
    );
    assert_eq!(verdict.headline(), "traceback: KeyError: 'prompt'");
    // The same line inside the window would be an OOM of the worker.
    observation.spawn_usec = Some(110_000_000);
    observation.exit_usec = Some(121_000_000);
    assert_eq!(classify(&observation).class, Class::Oom);
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
fn resource_tracker_noise_is_ignored() {
    let verdict = classify(&failed_with(&fixture(
        "py_resource_tracker_noise_reconstructed.txt",
    )));
    assert_eq!(
        verdict.headline(),
        "traceback: ValueError: row 3: empty prompt"
    );
    assert_eq!(
        verdict.advice[0],
        "fix the exception: ValueError: row 3: empty prompt at prep.py:22 in normalize"
    );
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| e.starts_with("ignored (symptom of a killed parent"))
    );
}

#[test]
fn clean_exit_with_complete_output_is_never_mined() {
    let mut observation = Observation::new(Exit::Code(0), 600);
    observation.outputs_complete = true;
    observation.stderr_tail = fixture("py_chained_direct_cause.txt");
    observation.kernel_log = KernelLog::Text {
        text: fixture("kernel_kmsg_memcg_real.txt"),
    };
    let verdict = classify(&observation);
    assert_eq!(verdict.class, Class::Success);
    assert_eq!(verdict.error, None);
    assert_eq!(verdict.next_action(), "none");
    assert_eq!(verdict.advice, ["nothing to do: output was complete"]);
}

#[test]
fn exit_zero_without_complete_output_is_not_success() {
    let verdict = classify(&Observation::new(Exit::Code(0), 601));
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Other, Some(Subtype::ExitCode))
    );
}

#[test]
fn cleanup_crash_after_complete_output() {
    let mut observation = Observation::new(
        Exit::Signal {
            signal: 6,
            sent_by_gen: false,
        },
        602,
    );
    observation.outputs_complete = true;
    observation.stderr_tail = fixture("py_fatal_enter_buffered_busy_reconstructed.txt");
    let verdict = classify(&observation);
    assert_eq!(verdict.class, Class::CleanupAfterCompletion);
    assert!(verdict.outputs_complete);
    assert!(
        verdict
            .signature
            .as_deref()
            .is_some_and(|s| s.starts_with("Fatal Python error: _enter_buffered_busy"))
    );
    assert_eq!(verdict.headline(), "cleanup crash after complete output");
    assert_eq!(verdict.next_action(), "none: output kept");
}

#[test]
fn fatal_error_without_complete_output_is_an_abort_not_the_half_printed_traceback() {
    let mut observation = Observation::new(
        Exit::Signal {
            signal: 6,
            sent_by_gen: false,
        },
        603,
    );
    observation.stderr_tail = fixture("py_fatal_enter_buffered_busy_reconstructed.txt");
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Other, Some(Subtype::Abort))
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
fn symptom_without_kernel_evidence_stays_a_traceback_with_a_hint() {
    let verdict = classify(&failed_with(&fixture(
        "py_datasets_map_died_reconstructed.txt",
    )));
    assert_eq!(verdict.class, Class::Traceback);
    assert!(verdict.advice[0].starts_with("a child process died abruptly"));
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
fn tracebacks_and_panics() {
    // (stderr fixture, exit, subtype, headline)
    let table: &[(&str, Exit, Subtype, &str)] = &[
        (
            "py_chained_direct_cause.txt",
            Exit::Code(1),
            Subtype::Python,
            "traceback: RuntimeError: could not parse record 17 of shard…",
        ),
        (
            "py_exception_group.txt",
            Exit::Code(1),
            Subtype::Python,
            "traceback: ValueError: bad row 3",
        ),
        (
            "py_multiprocessing_remote.txt",
            Exit::Code(1),
            Subtype::Python,
            "traceback: KeyError: 'missing_key'",
        ),
        (
            "rust_panic_1_95_index.txt",
            Exit::Code(101),
            Subtype::Rust,
            "traceback: panic: index out of bounds: the len is 0 but the…",
        ),
        (
            "rust_alloc_failed.txt",
            Exit::Signal {
                signal: 6,
                sent_by_gen: false,
            },
            Subtype::Rust,
            "traceback: allocation failure: memory allocation of 7036874…",
        ),
        (
            "py_systemexit.txt",
            Exit::Code(1),
            Subtype::LastLine,
            "error: error: shard 3 has no rows",
        ),
    ];
    for (name, exit, subtype, headline) in table {
        let mut observation = failed_with(&fixture(name));
        observation.exit = *exit;
        let verdict = classify(&observation);
        assert_eq!(
            (verdict.class, verdict.subtype),
            (Class::Traceback, Some(*subtype)),
            "{name}"
        );
        assert_eq!(verdict.headline(), *headline, "{name}");
        assert!(verdict.headline().chars().count() <= 60, "{name}");
    }
    let verdict = classify(&failed_with(&fixture("py_chained_direct_cause.txt")));
    assert!(verdict.evidence.iter().any(|e| e.starts_with("root cause (first in the chain): json.decoder.JSONDecodeError")));
    let mut observation = failed_with(&fixture("rust_alloc_failed.txt"));
    observation.exit = Exit::Signal {
        signal: 6,
        sent_by_gen: false,
    };
    assert_eq!(
        classify(&observation).next_action(),
        "reduce memory use, then rerun with --only-failed"
    );
}

#[test]
fn other_signals_and_codes() {
    // (stderr fixture, exit, subtype)
    let segv = Exit::Signal {
        signal: 11,
        sent_by_gen: false,
    };
    let abrt = Exit::Signal {
        signal: 6,
        sent_by_gen: false,
    };
    let table: &[(&str, Exit, Subtype)] = &[
        ("py_faulthandler_segv.txt", segv, Subtype::Segfault),
        ("glibc_tcache_reconstructed.txt", abrt, Subtype::Abort),
        (
            "cpp_terminate_reconstructed.txt",
            Exit::Code(134),
            Subtype::Abort,
        ),
        ("py_fatal_gilstate_reconstructed.txt", abrt, Subtype::Abort),
        (
            "kernel_dmesg_stale_pid_reconstructed.txt",
            Exit::Signal {
                signal: 7,
                sent_by_gen: false,
            },
            Subtype::Signal,
        ),
    ];
    for (name, exit, subtype) in table {
        let mut observation = failed_with(&fixture(name));
        observation.exit = *exit;
        let verdict = classify(&observation);
        assert_eq!(
            (verdict.class, verdict.subtype),
            (Class::Other, Some(*subtype)),
            "{name}"
        );
    }
    let verdict = classify(&failed_with(""));
    assert_eq!(verdict.subtype, Some(Subtype::ExitCode));
    let mut observation = failed_with("");
    observation.exit = Exit::Signal {
        signal: 15,
        sent_by_gen: false,
    };
    assert_eq!(classify(&observation).subtype, Some(Subtype::ExternalKill));
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
