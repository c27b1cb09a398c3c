//! JSON round trips of `Observation` and `Verdict`, including the documented example.

mod common;

use common::real_memcg_oom;
use gen_diagnostics::{Exit, KernelLog, Observation, Verdict, classify};

/// The ```json block of the `observation` module docs, exactly as documented.
fn documented_example() -> String {
    let source = include_str!("../src/observation.rs");
    let lines: Vec<&str> = source
        .lines()
        .map(|l| l.strip_prefix("//!").unwrap_or(l))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .skip_while(|l| *l != "```json")
        .skip(1)
        .take_while(|l| *l != "```")
        .collect();
    assert!(
        !lines.is_empty(),
        "the json example is missing from the module docs"
    );
    lines.join("\n")
}

#[test]
fn documented_example_parses_and_classifies() {
    let observation: Observation =
        serde_json::from_str(&documented_example()).expect("documented example parses");
    assert_eq!(
        observation.exit,
        Exit::Signal {
            signal: 9,
            sent_by_gen: false
        }
    );
    assert_eq!(observation.child_pids, vec![9150]);
    assert_eq!(observation.rss_samples[0].bytes, 50_331_648);
    assert!(
        matches!(&observation.kernel_log, KernelLog::Text { text } if text.contains("Killed process 9142"))
    );
    let verdict = classify(&observation);
    assert_eq!(
        verdict.headline(),
        "oom (kernel memcg): killed at 64 MiB limit"
    );
}

#[test]
fn observation_round_trips() {
    let mut observation = real_memcg_oom();
    observation.stderr_tail =
        "Traceback (most recent call last):\n\u{1b}[35mKeyError\u{1b}[0m: 'x'\r\n".to_string();
    let json = serde_json::to_string(&observation).expect("serialize");
    let back: Observation = serde_json::from_str(&json).expect("deserialize");
    assert_eq!(back, observation);
}

#[test]
fn exit_is_flat_and_tagged_by_key() {
    assert_eq!(
        serde_json::to_string(&Exit::Code(1)).expect("json"),
        r#"{"code":1}"#
    );
    assert_eq!(
        serde_json::to_string(&Exit::Signal {
            signal: 9,
            sent_by_gen: false
        })
        .expect("json"),
        r#"{"signal":9,"sent_by_gen":false}"#
    );
    let exit: Exit =
        serde_json::from_str(r#"{"signal": 15}"#).expect("sent_by_gen defaults to false");
    assert_eq!(
        exit,
        Exit::Signal {
            signal: 15,
            sent_by_gen: false
        }
    );
    for bad in [
        r#"{}"#,
        r#"{"code": 1, "signal": 9}"#,
        r#"{"code": 1, "sent_by_gen": true}"#,
        r#"{"cod": 1}"#,
    ] {
        assert!(serde_json::from_str::<Exit>(bad).is_err(), "{bad}");
    }
}

#[test]
fn minimal_observation_uses_defaults() {
    let observation: Observation =
        serde_json::from_str(r#"{"exit": {"code": 1}, "pid": 7}"#).expect("minimal");
    assert_eq!(observation, Observation::new(Exit::Code(1), 7));
    let unavailable = r#"{"exit": {"code": 1}, "pid": 7, "kernel_log": {"kind": "unavailable", "reason": "dmesg_restrict=1"}}"#;
    let observation: Observation = serde_json::from_str(unavailable).expect("unavailable");
    assert_eq!(
        observation.kernel_log,
        KernelLog::Unavailable {
            reason: "dmesg_restrict=1".to_string()
        }
    );
    assert!(
        serde_json::from_str::<Observation>(r#"{"exit": {"code": 1}, "pid": 7, "typo": 1}"#)
            .is_err()
    );
}

#[test]
fn verdict_round_trips_with_snake_case_names() {
    let verdict = classify(&real_memcg_oom());
    let json = serde_json::to_value(&verdict).expect("serialize");
    assert_eq!(json["class"], "oom");
    assert_eq!(json["subtype"], "kernel_memcg");
    assert_eq!(json["confidence"], "high");
    assert_eq!(
        json["exit"],
        serde_json::json!({"signal": 9, "sent_by_gen": false})
    );
    let back: Verdict = serde_json::from_value(json).expect("deserialize");
    assert_eq!(back, verdict);
}
