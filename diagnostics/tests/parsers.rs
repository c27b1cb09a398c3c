//! Table tests of the parsers over captured and reconstructed fixtures.

mod common;

use common::fixture;
use gen_diagnostics::oom::{self, OomScope};
use gen_diagnostics::verdict::Language;
use gen_diagnostics::{kmsg, native, panic, traceback};

/// (fixture, victim pid, comm, scope, task_memcg, has a monotonic stamp)
type KillRow = (
    &'static str,
    u32,
    &'static str,
    OomScope,
    Option<&'static str>,
    bool,
);

#[test]
fn kernel_oom_lines_in_every_format() {
    // (fixture, victim pid, comm, scope, task_memcg, has monotonic stamp)
    let table: &[KillRow] = &[
        (
            "kernel_kmsg_memcg_real.txt",
            9142,
            "python3",
            OomScope::Memcg,
            Some("/process_api/af064145901fa865b0eaa13614ea01f0/diagoom"),
            true,
        ),
        (
            "kernel_dmesg_memcg_real.txt",
            9142,
            "python3",
            OomScope::Memcg,
            Some("/process_api/af064145901fa865b0eaa13614ea01f0/diagoom"),
            true,
        ),
        (
            "kernel_dmesg_t_memcg_real.txt",
            9142,
            "python3",
            OomScope::Memcg,
            Some("/process_api/af064145901fa865b0eaa13614ea01f0/diagoom"),
            false,
        ),
        (
            "kernel_kmsg_pool_child_real.txt",
            10346,
            "python3",
            OomScope::Memcg,
            Some("/process_api/af064145901fa865b0eaa13614ea01f0/diagpool"),
            true,
        ),
        (
            "kernel_2_6_dmesg_reconstructed.txt",
            4242,
            "python",
            OomScope::Global,
            None,
            true,
        ),
        (
            "kernel_4_x_task_in_reconstructed.txt",
            5150,
            "python3",
            OomScope::Memcg,
            Some("/gen/run-1/wildchat"),
            true,
        ),
        (
            "kernel_4_19_split_summary_kmsg_reconstructed.txt",
            6001,
            "tokenize (pool)",
            OomScope::Memcg,
            Some("/gen/run-1/sharegpt"),
            true,
        ),
        (
            "kernel_global_syslog_reconstructed.txt",
            7001,
            "python3",
            OomScope::Global,
            Some("/gen/run-2/lmsys"),
            true,
        ),
        (
            "kernel_group_kill_journal_reconstructed.txt",
            8100,
            "python3",
            OomScope::Memcg,
            Some("/gen/run-3/ultrachat"),
            true,
        ),
    ];
    for &(name, pid, comm, scope, task_memcg, stamped) in table {
        let parsed = kmsg::parse(&fixture(name));
        let events = oom::find(&parsed.records);
        let kill = events
            .kills
            .first()
            .unwrap_or_else(|| panic!("{name}: no kill found"));
        assert_eq!(kill.pid, pid, "{name}");
        assert_eq!(kill.comm, comm, "{name}");
        assert_eq!(kill.scope, scope, "{name}");
        assert_eq!(kill.task_memcg.as_deref(), task_memcg, "{name}");
        assert_eq!(kill.usec.is_some(), stamped, "{name}");
        assert!(kill.line.contains("Killed process"), "{name}");
    }
}

#[test]
fn real_kmsg_capture_has_exact_stamp_and_no_gaps() {
    let parsed = kmsg::parse(&fixture("kernel_kmsg_memcg_real.txt"));
    assert!(parsed.seq_gaps.is_empty());
    let kill = &oom::find(&parsed.records).kills[0];
    assert_eq!(kill.usec, Some(355_150_418));
    assert_eq!(kill.anon_rss_kb, Some(65_280));
    assert_eq!(kill.oom_memcg, kill.task_memcg);
    assert!(
        kill.summary
            .as_deref()
            .is_some_and(|s| s.starts_with("oom-kill:constraint=CONSTRAINT_MEMCG"))
    );
}

#[test]
fn group_kill_names_the_group_for_later_members() {
    let parsed = kmsg::parse(&fixture("kernel_group_kill_journal_reconstructed.txt"));
    let events = oom::find(&parsed.records);
    assert_eq!(events.kills.len(), 2);
    assert_eq!(events.kills[1].pid, 8101);
    assert_eq!(events.kills[1].group_cgroup.as_deref(), Some("/gen/run-3"));
}

#[test]
fn userspace_killers() {
    let parsed = kmsg::parse(&fixture("earlyoom_journal_reconstructed.txt"));
    let events = oom::find(&parsed.records);
    assert_eq!(events.userspace.len(), 1);
    assert_eq!(events.userspace[0].killer, "earlyoom");
    assert_eq!(events.userspace[0].pid, Some(9001));
    let parsed = kmsg::parse(&fixture("systemd_oomd_journal_reconstructed.txt"));
    let events = oom::find(&parsed.records);
    assert_eq!(events.userspace[0].killer, "systemd-oomd");
    assert_eq!(
        events.userspace[0].cgroup.as_deref(),
        Some("/user.slice/user-1000.slice/user@1000.service/app.slice/gen-run.scope")
    );
}

#[test]
fn python_tracebacks() {
    // (fixture, type, message starts with, location "file:line in f", root cause type)
    let table: &[(&str, &str, &str, &str, Option<&str>)] = &[
        (
            "py_keyerror.txt",
            "KeyError",
            "'prompt'",
            "<string>:1 in <module>",
            None,
        ),
        (
            "py_chained_direct_cause.txt",
            "RuntimeError",
            "could not parse record 17 of shard-0003",
            "chained.py:8 in main",
            Some("json.decoder.JSONDecodeError"),
        ),
        (
            "py_chained_during_handling.txt",
            "ZeroDivisionError",
            "division by zero",
            "during.py:5 in f",
            Some("KeyError"),
        ),
        (
            "py_multiprocessing_remote.txt",
            "KeyError",
            "'missing_key'",
            "mp.py:3 in work",
            None,
        ),
        (
            "py_main_class_multiline.txt",
            "ShardError",
            "shard 3 is corrupt:\n  footer magic mismatch\n  expected PAR1",
            "mainclass.py:3 in <module>",
            None,
        ),
        (
            "py_memoryerror.txt",
            "MemoryError",
            "",
            "<string>:2 in <module>",
            None,
        ),
        (
            "py_tqdm_cr.txt",
            "KeyError",
            "'prompt'",
            "tqdm.py:7 in <module>",
            None,
        ),
        (
            "py_3_13_ansi_real.txt",
            "KeyError",
            "'prompt'",
            "tqdm.py:7 in <module>",
            None,
        ),
        (
            "py_3_13_ansi_reconstructed.txt",
            "KeyError",
            "'prompt'",
            "prep.py:12 in load",
            None,
        ),
        (
            "py_resource_tracker_noise_reconstructed.txt",
            "ValueError",
            "row 3: empty prompt",
            "prep.py:22 in normalize",
            None,
        ),
        (
            "py_broken_process_pool_real.txt",
            "concurrent.futures.process.BrokenProcessPool",
            "A process in the process pool",
            "_base.py:401 in __get_result",
            None,
        ),
        (
            "py_exception_group.txt",
            "ExceptionGroup",
            "2 shards failed (2 sub-exceptions)",
            "group.py:2 in main",
            None,
        ),
    ];
    for &(name, kind, message, location, root) in table {
        let report =
            traceback::parse(&fixture(name)).unwrap_or_else(|| panic!("{name}: no traceback"));
        assert_eq!(report.language, Language::Python, "{name}");
        assert_eq!(report.exception.exception_type, kind, "{name}");
        assert!(
            report.exception.message.starts_with(message),
            "{name}: {:?}",
            report.exception.message
        );
        let at = report.exception.location.as_ref().map(|l| l.to_string());
        assert_eq!(at.as_deref(), Some(location), "{name}");
        assert_eq!(
            report
                .root_cause
                .as_ref()
                .map(|r| r.exception_type.as_str()),
            root,
            "{name}"
        );
    }
}

#[test]
fn exception_group_expands_to_leaves() {
    let report = traceback::parse(&fixture("py_exception_group.txt")).expect("group");
    let leaves: Vec<String> = report.group_leaves.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        leaves,
        [
            "ValueError: bad row 3",
            "TypeError: expected str, got NoneType"
        ]
    );
    assert_eq!(report.primary().exception_type, "ValueError");
}

#[test]
fn memory_error_is_flagged() {
    assert!(
        traceback::parse(&fixture("py_memoryerror.txt"))
            .expect("tb")
            .memory_related
    );
    assert!(
        !traceback::parse(&fixture("py_keyerror.txt"))
            .expect("tb")
            .memory_related
    );
}

#[test]
fn no_traceback_in_systemexit_or_fatal_errors() {
    assert!(traceback::parse(&fixture("py_systemexit.txt")).is_none());
    assert_eq!(
        native::last_meaningful_line(&fixture("py_systemexit.txt")).as_deref(),
        Some("error: shard 3 has no rows")
    );
}

#[test]
fn rust_panics_of_every_era() {
    // (fixture, message, file, line, memory related)
    let table: &[(&str, &str, &str, u32, bool)] = &[
        (
            "rust_panic_1_95_index.txt",
            "index out of bounds: the len is 0 but the index is 4",
            "p.rs",
            6,
            false,
        ),
        (
            "rust_panic_1_95_thread.txt",
            "called `Result::unwrap()` on an `Err` value: \"missing field `prompt` at line 12\"",
            "p.rs",
            5,
            false,
        ),
        (
            "rust_panic_1_80_reconstructed.txt",
            "missing field `conversation` in row 17",
            "src/sources/wildchat.rs",
            88,
            false,
        ),
        (
            "rust_panic_1_72_reconstructed.txt",
            "called `Result::unwrap()` on an `Err` value: Os { code: 2, kind: NotFound, message: \"No such file or directory\" }",
            "src/main.rs",
            14,
            false,
        ),
    ];
    for &(name, message, file, line, memory) in table {
        let report = panic::parse(&fixture(name)).unwrap_or_else(|| panic!("{name}: no panic"));
        assert_eq!(report.exception.message, message, "{name}");
        let location = report.exception.location.as_ref().expect("location");
        assert_eq!(
            (location.file.as_str(), location.line),
            (file, line),
            "{name}"
        );
        assert_eq!(report.memory_related, memory, "{name}");
    }
    let thread = panic::parse(&fixture("rust_panic_1_95_thread.txt")).expect("panic");
    let function = thread.exception.location.and_then(|l| l.function);
    assert_eq!(function.as_deref(), Some("thread 'prep-worker'"));
    let alloc = panic::parse(&fixture("rust_alloc_failed.txt")).expect("alloc");
    assert!(alloc.memory_related);
    assert_eq!(
        alloc.exception.message,
        "memory allocation of 70368744177664 bytes failed"
    );
}

#[test]
fn native_signatures() {
    use native::NativeKind::*;
    // (fixture, kind, at shutdown, line starts with)
    let table: &[(&str, native::NativeKind, bool, &str)] = &[
        (
            "py_fatal_enter_buffered_busy_reconstructed.txt",
            FatalPython,
            true,
            "Fatal Python error: _enter_buffered_busy",
        ),
        (
            "py_fatal_gilstate_reconstructed.txt",
            FatalPython,
            true,
            "Fatal Python error: PyGILState_Release",
        ),
        (
            "py_faulthandler_segv.txt",
            Segfault,
            false,
            "Fatal Python error: Segmentation fault",
        ),
        (
            "glibc_tcache_reconstructed.txt",
            Glibc,
            false,
            "free(): double free detected in tcache 2",
        ),
        (
            "cpp_terminate_reconstructed.txt",
            CppTerminate,
            false,
            "terminate called without an active exception",
        ),
    ];
    for &(name, kind, shutdown, line) in table {
        let signature =
            native::find_signature(&fixture(name)).unwrap_or_else(|| panic!("{name}: none"));
        assert_eq!(signature.kind, kind, "{name}");
        assert_eq!(signature.at_shutdown, shutdown, "{name}");
        assert!(
            signature.line.starts_with(line),
            "{name}: {}",
            signature.line
        );
    }
    assert!(native::find_signature(&fixture("py_keyerror.txt")).is_none());
}

#[test]
fn symptom_lines() {
    use native::SymptomKind::*;
    let table: &[(&str, native::SymptomKind)] = &[
        (
            "py_resource_tracker_noise_reconstructed.txt",
            ResourceTracker,
        ),
        (
            "py_datasets_map_died_reconstructed.txt",
            DatasetsMapWorkerDied,
        ),
        (
            "py_dataloader_killed_reconstructed.txt",
            DataLoaderWorkerKilled,
        ),
        ("py_broken_process_pool_real.txt", BrokenProcessPool),
    ];
    for &(name, kind) in table {
        let found = native::symptoms(&fixture(name));
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        assert_eq!(found[0].kind, kind, "{name}");
    }
    assert_eq!(
        native::symptoms(&fixture("py_dataloader_killed_reconstructed.txt"))[0].pids,
        vec![8101]
    );
}
