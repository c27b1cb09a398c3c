//! Classifier pre-check (success), rules 4–6 (cleanup crash, traceback, other) and their traps:
//! clean exits are never mined, stale kernel lines and symptom noise do not relabel tracebacks.

mod common;

use common::{failed_with, fixture};
use gen_diagnostics::{Class, Exit, KernelLog, Observation, Subtype, classify};

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
    // Inside the window it is still not the worker's: the worker exited 1, and the OOM killer
    // kills with SIGKILL. Only a worker that died by SIGKILL was its victim.
    observation.spawn_usec = Some(110_000_000);
    observation.exit_usec = Some(121_000_000);
    let verdict = classify(&observation);
    assert_eq!(verdict.class, Class::Traceback);
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| e.contains("exited with exit code 1, but the OOM killer kills with SIGKILL")),
        "{:?}",
        verdict.evidence
    );
    observation.exit = Exit::Signal {
        signal: 9,
        sent_by_gen: false,
    };
    assert_eq!(classify(&observation).class, Class::Oom);
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
    assert_eq!(verdict.headline(), "exit 0 but outputs incomplete");
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
fn symptom_without_kernel_evidence_stays_a_traceback_with_a_hint() {
    let verdict = classify(&failed_with(&fixture(
        "py_datasets_map_died_reconstructed.txt",
    )));
    assert_eq!(verdict.class, Class::Traceback);
    assert!(verdict.advice[0].starts_with("a child process died abruptly"));
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
            "py_systemexit.txt",
            Exit::Code(1),
            Subtype::LastLine,
            "failed: error: shard 3 has no rows",
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
    // Rust's allocation-error handler aborts: memory refused, not a traceback (issue 24).
    let mut observation = failed_with(&fixture("rust_alloc_failed.txt"));
    observation.exit = Exit::Signal {
        signal: 6,
        sent_by_gen: false,
    };
    let verdict = classify(&observation);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::AllocationFailure))
    );
    assert_eq!(
        verdict.headline(),
        "oom (allocation refused): 65536 GiB asked at once"
    );
    assert_eq!(
        verdict.next_action(),
        "find where the impossible size comes from"
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
    assert_eq!(verdict.headline(), "exit code 1, nothing on stderr");
    let mut observation = failed_with("");
    observation.exit = Exit::Signal {
        signal: 15,
        sent_by_gen: false,
    };
    assert_eq!(classify(&observation).subtype, Some(Subtype::ExternalKill));
}
