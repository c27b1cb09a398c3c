//! Every `datasets.toml` key that diagnosis advice names is one `gen check` accepts.
//!
//! Renders every advice string the diagnostics crate can produce — each fixture of its corpus
//! as a worker's stderr, kernel log and server log, under every kind of ending, plus the
//! observations only the supervisor makes (counters, RSS at the limit, gen's own kills) — and
//! feeds each config key the text names to the config parser. A new `Subtype` fails to compile
//! here until it is covered.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gen_diagnostics::{Class, Exit, KernelLog, Observation, RssSample, Subtype, Verdict};
use gen_pipeline::config::{ConfigError, Plan};

use crate::support::Config;

const MIB: u64 = 1024 * 1024;

fn fixtures() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../diagnostics/tests/fixtures");
    let mut found = Vec::new();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("fixtures dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "txt") {
                let bytes = std::fs::read(&path).expect("fixture");
                found.push((path, String::from_utf8_lossy(&bytes).into_owned()));
            }
        }
    }
    found.sort();
    found
}

fn signal(signal: i32, sent_by_gen: bool) -> Exit {
    Exit::Signal {
        signal,
        sent_by_gen,
    }
}

/// Every verdict the corpus and the supervisor's observations lead to.
fn all_verdicts() -> Vec<Verdict> {
    let exits = [
        Exit::Unknown,
        Exit::Code(0),
        Exit::Code(1),
        signal(6, false),
        signal(7, false),
        signal(9, false),
        signal(15, false),
        signal(9, true),
    ];
    let mut verdicts = Vec::new();
    for (_, text) in fixtures() {
        verdicts.push(gen_diagnostics::classify_server_log(&text));
        for exit in exits {
            for complete in [false, true] {
                let mut as_stderr = Observation::new(exit, 0);
                as_stderr.stderr_tail = text.clone();
                as_stderr.outputs_complete = complete;
                as_stderr.timed_out = exit == signal(9, true) && !complete;
                as_stderr.largest_row_bytes = Some(200 * MIB);
                verdicts.push(gen_diagnostics::classify(&as_stderr));
            }
        }
        for exit in [Exit::Unknown, Exit::Code(1), signal(9, false)] {
            let mut as_kernel_log = Observation::new(exit, 0);
            as_kernel_log.kernel_log = KernelLog::Text { text: text.clone() };
            as_kernel_log.memory_limit_bytes = Some(64 * MIB);
            as_kernel_log.peak_rss_bytes = Some(64 * MIB);
            verdicts.push(gen_diagnostics::classify(&as_kernel_log));
        }
    }
    // What only the supervisor observes: gen's own stop, counters, RSS at the limit, an
    // unreadable kernel log.
    verdicts.push(gen_diagnostics::classify(&Observation::new(
        signal(15, true),
        7,
    )));
    let mut counter = Observation::new(signal(9, false), 7);
    counter.oom_kill_before = Some(0);
    counter.oom_kill_after = Some(1);
    counter.memory_limit_bytes = Some(512 * MIB);
    verdicts.push(gen_diagnostics::classify(&counter));
    let mut at_limit = Observation::new(signal(9, false), 7);
    at_limit.kernel_log = KernelLog::Unavailable {
        reason: "dmesg_restrict=1".into(),
    };
    at_limit.rss_samples = vec![RssSample {
        at_ms: 1,
        bytes: 95 * MIB,
    }];
    at_limit.memory_limit_bytes = Some(96 * MIB);
    at_limit.largest_row_bytes = Some(200 * MIB);
    verdicts.push(gen_diagnostics::classify(&at_limit));
    verdicts
}

/// Forces this test to be updated when a subtype is added.
fn subtype_index(subtype: Subtype) -> usize {
    match subtype {
        Subtype::KernelMemcg => 0,
        Subtype::KernelGlobal => 1,
        Subtype::Kernel => 2,
        Subtype::CgroupCounter => 3,
        Subtype::SuspectedFromRss => 4,
        Subtype::SuspectedSigkill => 5,
        Subtype::SchedulerReport => 6,
        Subtype::UserspaceKiller => 7,
        Subtype::Python => 8,
        Subtype::Rust => 9,
        Subtype::LastLine => 10,
        Subtype::Signal => 11,
        Subtype::Abort => 12,
        Subtype::Segfault => 13,
        Subtype::Timeout => 14,
        Subtype::TimeLimit => 15,
        Subtype::Cancelled => 16,
        Subtype::ExternalKill => 17,
        Subtype::ExitCode => 18,
        Subtype::CudaGraphCapture => 19,
        Subtype::KvCache => 20,
        Subtype::GpuMemoryInUse => 21,
        Subtype::GpuAllocation => 22,
        Subtype::ModelLoad => 23,
        Subtype::PortInUse => 24,
        Subtype::AllocationFailure => 25,
    }
}
const SUBTYPES: usize = 26;

/// The config keys a piece of advice names: left-hand sides of `key = value`, backticked
/// words, and the word after "raise", "lower", "set" or "increase", when it is written like a
/// key (lowercase words joined by `-` or `_`; flags and dotted paths are other programs').
fn named_keys(text: &str) -> Vec<(String, Option<String>)> {
    let looks_like_key = |word: &str| {
        let word = word.trim_matches(|c: char| matches!(c, ',' | '.' | ':' | ';' | '(' | ')'));
        !word.is_empty()
            && word.starts_with(|c: char| c.is_ascii_lowercase())
            && word
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
            && (word.contains('-') || word.contains('_'))
    };
    let clean = |word: &str| {
        word.trim_matches(|c: char| matches!(c, ',' | '.' | ':' | ';' | '(' | ')' | '`'))
            .to_string()
    };
    let mut keys = Vec::new();
    let words: Vec<&str> = text.split_whitespace().collect();
    for (i, word) in words.iter().enumerate() {
        let next = words.get(i + 1).copied();
        let lower = word.to_ascii_lowercase();
        if next == Some("=") && looks_like_key(word.trim_start_matches('`')) {
            let value = words
                .get(i + 2)
                .map(|v| v.trim_end_matches([',', '`']).to_string());
            keys.push((clean(word), value));
        } else if word.starts_with('`') && looks_like_key(word.trim_matches('`')) {
            keys.push((clean(word), None));
        } else if ["raise", "lower", "set", "increase"].contains(&lower.as_str())
            && let Some(next) = next
            && looks_like_key(next)
        {
            keys.push((clean(next), None));
        }
    }
    keys
}

/// Whether `gen check` accepts `key` in some table of `datasets.toml`.
fn accepted(key: &str, value: Option<&str>) -> Result<(), String> {
    let value = value.unwrap_or("\"1\"");
    let base = Config::new("http://127.0.0.1:8080").generation("max-tokens = 64");
    let line = format!("{key} = {value}");
    let variants = [
        base.clone().source_with("a", "a.jsonl", &line),
        base.clone().server(&line).source("a", "a.jsonl"),
        base.clone()
            .generation(&format!("max-tokens = 64\n{line}"))
            .source("a", "a.jsonl"),
        base.clone().run(&line).source("a", "a.jsonl"),
    ]
    .map(|config| config.text());
    let mut reasons = Vec::new();
    for text in variants {
        match Plan::from_text(Path::new("datasets.toml"), &text) {
            Ok(_) => return Ok(()),
            Err(ConfigError::Invalid { problems, .. }) => {
                let unknown: Vec<String> = problems
                    .iter()
                    .map(|p| p.message.clone())
                    .filter(|m| m.contains("unknown"))
                    .collect();
                if unknown.is_empty() {
                    return Ok(());
                }
                reasons.extend(unknown);
            }
            Err(other) => reasons.push(other.to_string()),
        }
    }
    Err(reasons.join("; "))
}

#[test]
fn every_config_key_named_in_advice_is_accepted_by_the_config() {
    let verdicts = all_verdicts();
    let mut seen = BTreeSet::new();
    let mut texts = BTreeSet::new();
    for verdict in &verdicts {
        if let Some(subtype) = verdict.subtype {
            seen.insert(subtype_index(subtype));
        }
        texts.extend(verdict.advice.iter().cloned());
        texts.insert(verdict.next_action());
        texts.insert(verdict.headline());
    }
    let missing: Vec<usize> = (0..SUBTYPES).filter(|i| !seen.contains(i)).collect();
    assert!(missing.is_empty(), "subtypes never produced: {missing:?}");
    assert!(verdicts.iter().any(|v| v.class == Class::Success));

    let mut keys = BTreeSet::new();
    let mut rejected = Vec::new();
    for text in &texts {
        for (key, value) in named_keys(text) {
            if let Err(why) = accepted(&key, value.as_deref()) {
                rejected.push(format!("`{key}` in \"{text}\": {why}"));
            }
            keys.insert(key);
        }
    }
    assert!(
        rejected.is_empty(),
        "advice names keys `gen check` rejects:\n{}",
        rejected.join("\n")
    );
    // The memory advice is really checked, not skipped.
    assert!(keys.contains("memory-limit"), "{keys:?}");
}

#[test]
fn the_check_catches_a_key_the_config_does_not_have() {
    let keys = named_keys("raise memory_limit to 128M, e.g. memory_limit = \"128M\"");
    assert_eq!(
        keys,
        vec![
            ("memory_limit".to_string(), None),
            ("memory_limit".to_string(), Some("\"128M\"".to_string())),
        ]
    );
    assert!(accepted("memory_limit", Some("\"128M\"")).is_err());
    assert!(accepted("memory-limit", Some("\"128M\"")).is_ok());
    // Flags of other programs and dotted paths are not config keys.
    assert!(named_keys("lower --mem-fraction-static (0.90 → 0.83)").is_empty());
    assert!(named_keys("raise the container's resources.limits.memory to 2G").is_empty());
}
