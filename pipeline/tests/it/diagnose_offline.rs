//! `gen diagnose` on logs captured anywhere, through the real binary: `--stderr` alone, the
//! optional evidence flags, and the errors for flags people get wrong.

use crate::support;

use support::{Config, Project};

fn fixture(relative: &str) -> String {
    let path = format!(
        "{}/../diagnostics/tests/fixtures/{relative}",
        env!("CARGO_MANIFEST_DIR")
    );
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    String::from_utf8_lossy(&bytes).into_owned()
}

async fn diagnose_json(gen_: &Project, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["diagnose"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = gen_.run(&all).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    serde_json::from_str(&out.stdout).expect("verdict json")
}

/// `gen diagnose --stderr FIXTURE ARGS... --json`, checked for class and subtype.
async fn diagnose_fixture(
    fixture_name: &str,
    args: &[&str],
    class: &str,
    subtype: &str,
) -> serde_json::Value {
    let gen_ = Project::new();
    gen_.write("stderr.log", fixture(fixture_name));
    let mut all = vec!["--stderr", "stderr.log"];
    all.extend_from_slice(args);
    let verdict = diagnose_json(&gen_, &all).await;
    assert_eq!(verdict["class"], class, "{verdict:#}");
    assert_eq!(verdict["subtype"], subtype, "{verdict:#}");
    verdict
}

#[tokio::test]
async fn a_slurm_job_log_alone_is_an_oom_reported_by_slurm() {
    let verdict = diagnose_fixture(
        "batch/slurm_batch_script_killed_then_oom_event.txt",
        &[],
        "oom",
        "scheduler_report",
    )
    .await;
    let evidence = verdict["evidence"].to_string();
    assert!(
        evidence.contains("Detected 1 oom-kill event(s)"),
        "{evidence}"
    );
    assert_eq!(verdict["limit_knob"], "the job's Slurm --mem");
}

#[tokio::test]
async fn a_time_limit_is_not_an_oom_even_with_sigkill() {
    diagnose_fixture(
        "not_oom/slurm_time_limit_python_logging.txt",
        &["--signal", "SIGKILL"],
        "other",
        "time_limit",
    )
    .await;
}

#[tokio::test]
async fn kernel_log_lifetime_and_output_flags_reach_the_classifier() {
    let gen_ = Project::new();
    gen_.write(
        "job.err",
        fixture("batch/own_bash_script_killed_memcg.stderr.txt"),
    );
    gen_.write(
        "dmesg-T.txt",
        fixture("kernel_formats/own_bash_job_dmesg_T.txt"),
    );
    let inside = diagnose_json(
        &gen_,
        &[
            "--stderr",
            "job.err",
            "--kernel-log",
            "dmesg-T.txt",
            "--started-at",
            "2026-12-01T15:46:10",
            "--exited-at",
            "Tue Dec  1 15:46:16 2026",
            "--largest-row",
            "200M",
        ],
    )
    .await;
    assert_eq!(inside["subtype"], "kernel_memcg", "{inside:#}");
    assert_eq!(inside["confidence"], "high", "{inside:#}");
    // The largest row sizes the advice: far above twice the 64 MiB limit.
    let next = inside["suggested_limit_bytes"]
        .as_u64()
        .expect("suggestion");
    assert!(next >= 1 << 30, "{inside:#}");

    // The same record, for a process that started after it: another process's.
    let later = diagnose_json(
        &gen_,
        &[
            "--stderr",
            "job.err",
            "--kernel-log",
            "dmesg-T.txt",
            "--started-at",
            "2026-12-01 16:30:00",
        ],
    )
    .await;
    assert_ne!(later["class"], "oom", "{later:#}");
    assert!(
        later["evidence"]
            .to_string()
            .contains("before the worker started"),
        "{later:#}"
    );

    // Output complete, then killed late by a watchdog: a cleanup crash.
    gen_.write(
        "hang.err",
        fixture("cleanup/own_hang_at_exit_timeout_kill.stderr.txt"),
    );
    let cleanup = diagnose_json(&gen_, &["--stderr", "hang.err", "--output-complete"]).await;
    assert_eq!(cleanup["class"], "cleanup_after_completion", "{cleanup:#}");
}

#[tokio::test]
async fn a_server_log_given_as_stderr_keeps_its_server_verdict() {
    diagnose_fixture(
        "not_oom/sglang_capture_gloo_connection_closed.txt",
        &[],
        "other",
        "cuda_graph_capture",
    )
    .await;
}

#[tokio::test]
async fn wrong_flags_are_usage_errors_that_say_what_to_give() {
    let gen_ = Project::new();
    gen_.write("stderr.txt", "Killed\n");
    let out = gen_
        .run(&[
            "diagnose",
            "--stderr",
            "stderr.txt",
            "--started-at",
            "yesterday",
        ])
        .await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("is not a time"), "{}", out.stderr);
    let out = gen_
        .run(&["diagnose", "--stderr", "stderr.txt", "--signal", "SIGFOO"])
        .await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("is not a signal"), "{}", out.stderr);
    let out = gen_.run(&["diagnose", "--stderr", "missing.txt"]).await;
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("missing.txt"), "{}", out.stderr);
}

#[tokio::test]
async fn help_documents_every_offline_flag_with_examples() {
    let gen_ = Project::new();
    let out = gen_.run(&["diagnose", "--help"]).await;
    assert_eq!(out.code, Some(0));
    for needle in [
        "--started-at",
        "--exited-at",
        "--log",
        "--cgroup",
        "--largest-row",
        "slurm",
        "kubectl describe",
        "earlyoom",
        "DataLoader",
        "--output-complete",
        "ulimit -v",
    ] {
        assert!(
            out.stdout.contains(needle),
            "help lacks {needle}:\n{}",
            out.stdout
        );
    }
}

#[tokio::test]
async fn a_source_without_a_config_names_the_default_or_asks_for_one() {
    let gen_ = Project::new();
    let out = gen_.run(&["diagnose", "wildchat"]).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "say which config `wildchat` belongs to: `gen diagnose wildchat --config CONFIG`"
        ),
        "{}",
        out.stderr
    );
    gen_.config(
        &Config::new("http://127.0.0.1:9")
            .named("datasets.toml")
            .generation("max-tokens = 8")
            .source("wildchat", "a.jsonl"),
    );
    let out = gen_.run(&["diagnose", "wildchat"]).await;
    assert!(
        out.stderr
            .contains("gen: `wildchat` of `datasets.toml` (run directory `")
            && out.stderr.contains("`--config` chooses another config"),
        "{}",
        out.stderr
    );
}
