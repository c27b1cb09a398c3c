//! Run files that are damaged or foreign: `gen run` repairs what it can (a prompts file or
//! manifest that does not read is set aside and the source prepared again, its answers kept;
//! repeated and foreign completion records are set aside), one damaged source never stops the
//! others, and `gen verify` says beforehand what `gen run` will do and is clean afterwards.
//!
//! - a damaged prompts file, of an unfinished and of a finished source;
//! - completion frames appended twice, and another source's frames;
//! - one source's manifest cut in half, next to a healthy source;
//! - `gen verify` of one shard's directory;
//! - output tokens in `status.json` after a rerun;
//! - every file of a run directory truncated, flipped or replaced by another run's copy
//!   ([`every_run_file_damaged_three_ways_is_repaired_and_run_and_verify_agree`]).

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use serde_json::Value;

use super::{alpha_project, assert_complete, config, files_starting, finished_run, rows};
use crate::support::{Project, completions};

/// XORs 8 bytes in the middle of `path` (its size stays).
fn flip(path: &Path) -> Range<usize> {
    let mut bytes = std::fs::read(path).expect("read");
    let at = bytes.len() / 2;
    let range = at..(at + 8).min(bytes.len());
    for b in &mut bytes[range.clone()] {
        *b ^= 0x5a;
    }
    std::fs::write(path, &bytes).expect("write");
    range
}

/// Cuts `path` to half its length.
fn truncate(path: &Path) -> usize {
    let bytes = std::fs::read(path).expect("read");
    let half = bytes.len() / 2;
    std::fs::write(path, &bytes[..half]).expect("write");
    half
}

fn problems(audit: &Value) -> String {
    audit["sources"]
        .as_array()
        .map(|s| s.iter().map(|s| s["problems"].to_string()).collect())
        .unwrap_or_default()
}

/// A damaged `prompts.jsonl.zst` is set aside and the source prepared again, its stored
/// answers kept: of an unfinished source every prompt is sent, of a finished one none. `gen
/// verify` says so beforehand, `gen export` refuses without advising to delete anything.
/// (Before: unfinished, "`alpha` failed" then "nothing to do", exit 0 with 0 of 200 sent;
/// finished, "nothing to do" while verify found 3 problems and export advised deleting the
/// source's directory, its answers with it.)
#[tokio::test]
async fn a_damaged_prompts_file_is_prepared_again_and_its_answers_kept() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = alpha_project(&server.url(), rows("alpha", 200));
    let out = project.run(&["prepare", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let prompts = project.source_path("alpha", "prompts.jsonl.zst");
    flip(&prompts);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(1), "{audit:#}");
    assert!(
        problems(&audit).contains("the next `gen run` sets it aside"),
        "{audit:#}"
    );
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("gen: WARNING: `alpha`: `prompts.jsonl.zst` does not read")
            && out
                .stderr
                .contains("preparing the source again (its 0 stored"),
        "{}",
        out.stderr
    );
    assert_eq!(server.chat_requests(), 200);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 200);

    // Finished: nothing is sent again, the answers stay.
    flip(&prompts);
    let export = project
        .run(&["export", "cfg.toml", "-o", "out.jsonl"])
        .await;
    assert_eq!(export.code, Some(1), "{}", export.stderr);
    assert!(
        export
            .stderr
            .contains("`gen run cfg.toml` prepares it again and keeps its 200 stored completions")
            && !export.stderr.contains("delete"),
        "{}",
        export.stderr
    );
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("(its 200 stored completions are kept)"),
        "{}",
        out.stderr
    );
    assert_eq!(server.chat_requests(), 200, "nothing sent again");
    assert_eq!(
        files_starting(&project, "alpha", "prompts.damaged-").len(),
        2
    );
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 200);
    let export = project
        .run(&["export", "cfg.toml", "-o", "out.jsonl"])
        .await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
}

/// Frames appended twice, and a frame of another source's records: `gen verify` reports the
/// duplicated and unknown ids with what `gen run` does; `gen run` keeps the first record of
/// each prompt, moves the repeats and the foreign records to named files, sends nothing, and
/// verify is clean again. (Before: "nothing to do", exit 0, never repaired: verify failed
/// forever.)
#[tokio::test]
async fn repeated_and_foreign_completion_records_are_set_aside() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    project.write("data/alpha.jsonl", rows("alpha", 200));
    project.write("data/beta.jsonl", rows("beta", 20));
    project.config(
        &config(&server.url())
            .source("alpha", "data/alpha.jsonl")
            .source("beta", "data/beta.jsonl"),
    );
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let alpha = project.source_path("alpha", "completions.jsonl.zst");
    let mut bytes = std::fs::read(&alpha).expect("read");
    let first = zstd::zstd_safe::find_frame_compressed_size(&bytes).expect("frame");
    let entry = zstd::zstd_safe::find_frame_compressed_size(&bytes[first..]).expect("entry");
    let repeated = zstd::stream::decode_all(&bytes[..first])
        .expect("decode")
        .iter()
        .filter(|b| **b == b'\n')
        .count();
    let again = bytes[..first + entry].to_vec();
    bytes.extend_from_slice(&again);
    bytes.extend(std::fs::read(project.source_path("beta", "completions.jsonl.zst")).expect("b"));
    std::fs::write(&alpha, &bytes).expect("write");

    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(1), "{audit:#}");
    let source = &audit["sources"][0];
    assert_eq!(
        (&source["duplicated"], &source["unknown"]),
        (&Value::from(repeated), &Value::from(20)),
        "{audit:#}"
    );
    let said = problems(&audit);
    assert!(
        said.contains("completions.repeated-<time>.jsonl")
            && said.contains("completions.foreign-<time>.jsonl"),
        "{said}"
    );
    let sent = server.chat_requests();
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(server.chat_requests(), sent, "nothing is sent again");
    assert!(
        out.stderr.contains(&format!(
            "gen: WARNING: `alpha`: {repeated} stored completions repeated a prompt stored before"
        )) && out.stderr.contains(
            "gen: WARNING: `alpha`: 20 stored completions are not of this source's prompts"
        ),
        "{}",
        out.stderr
    );
    let lines = |prefix: &str| {
        let files = files_starting(&project, "alpha", prefix);
        assert_eq!(files.len(), 1, "{prefix}: {files:?}");
        std::fs::read_to_string(&files[0])
            .expect("read")
            .lines()
            .count()
    };
    assert_eq!(lines("completions.repeated-"), repeated);
    assert_eq!(lines("completions.foreign-"), 20);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 220);
}

/// One source's `manifest.json` cut in half, next to a healthy source: the manifest is set
/// aside, the source prepared again, and both sources are generated; of a finished source the
/// answers are kept and nothing is sent. (Before: the whole run exited 1 with a bare JSON parse
/// error, the healthy source got no request, and `status.json` kept saying `finished: true`,
/// `stopped_by: null`.)
#[tokio::test]
async fn a_cut_manifest_is_prepared_again_and_the_other_sources_go_on() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    project.write("data/alpha.jsonl", rows("alpha", 30));
    project.write("data/beta.jsonl", rows("beta", 20));
    project.config(
        &config(&server.url())
            .source("alpha", "data/alpha.jsonl")
            .source("beta", "data/beta.jsonl"),
    );
    let out = project.run(&["prepare", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let manifest = project.source_path("alpha", "manifest.json");
    truncate(&manifest);
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(1), "{audit:#}");
    assert!(
        problems(&audit).contains("`manifest.json` does not decode"),
        "{audit:#}"
    );
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("gen: WARNING: `alpha`: `manifest.json` does not decode"),
        "{}",
        out.stderr
    );
    assert_eq!(server.chat_requests(), 50);
    let status = project.status().expect("status");
    assert_eq!(status["stopped_by"], Value::Null, "{status:#}");
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 50);

    truncate(&manifest);
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("(its 30 stored completions are kept)"),
        "{}",
        out.stderr
    );
    assert_eq!(server.chat_requests(), 50, "nothing sent again");
    assert_eq!(
        files_starting(&project, "alpha", "manifest.damaged-").len(),
        2
    );
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, 50);
}

/// A run stopped before its status was written (here: refused by a changed input) does not
/// leave the last run's `status.json` saying it finished with nothing to report.
#[tokio::test]
async fn a_run_refused_before_it_starts_says_so_in_status() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = finished_run(&server, 4).await;
    project.write("data/alpha.jsonl", rows("alpha", 5));
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    let status = project.status().expect("status");
    assert!(
        status["stopped_by"]
            .as_str()
            .is_some_and(|s| s.contains("the inputs of a source changed")),
        "{status:#}"
    );
}

/// `gen verify` of one finished shard's directory counts only that shard's prompts: the other
/// shards' are not lost. (Before: they were counted lost, and `gen run CONFIG` advised to send
/// them.)
#[tokio::test]
async fn verify_of_one_shard_counts_only_its_share() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = alpha_project(&server.url(), rows("alpha", 40));
    let out = project.run(&["run", "cfg.toml", "--shard", "0/2"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let sent = server.chat_requests() as u64;
    assert!(sent > 0 && sent < 40, "{sent}");
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, sent);
    let strict = project.run(&["verify", "cfg.toml"]).await;
    assert_eq!(strict.code, Some(0), "{}", strict.stdout);
}

/// Output tokens in `status.json` are what the stored records sum to, also after a rerun that
/// generated nothing (or only some) of a source. (Before: 0 for sources done in earlier runs,
/// while their export summed to hundreds.)
#[tokio::test]
async fn output_tokens_after_a_rerun_are_what_the_records_sum_to() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    project.write("data/alpha.jsonl", rows("alpha", 12));
    project.write("data/beta.jsonl", rows("beta", 8));
    project.config(
        &config(&server.url())
            .source("alpha", "data/alpha.jsonl")
            .source("beta", "data/beta.jsonl"),
    );
    let out = project.run(&["run", "cfg.toml", "--source", "alpha"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let sums = |project: &Project| -> HashMap<String, u64> {
        ["alpha", "beta"]
            .into_iter()
            .map(|name| {
                let path = project.source_path(name, "completions.jsonl.zst");
                let sum = if path.exists() {
                    completions(&path)
                        .iter()
                        .map(|r| r["usage"]["completion_tokens"].as_u64().unwrap_or(0))
                        .sum()
                } else {
                    0
                };
                (name.to_owned(), sum)
            })
            .collect()
    };
    for args in [&["run", "cfg.toml"][..], &["run", "cfg.toml"]] {
        let out = project.run(args).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let status = project.status().expect("status");
        let expected = sums(&project);
        for source in status["sources"].as_array().expect("sources") {
            let name = source["name"].as_str().expect("name");
            assert!(expected[name] > 0);
            assert_eq!(source["output_tokens"], expected[name], "{status:#}");
        }
    }
}

/// How a file of the run directory is damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// Cut to half its length.
    Truncate,
    /// 8 bytes in the middle XORed.
    Flip,
    /// Replaced by the same file of another run (other rows, same source names).
    Foreign,
    /// Of `completions.jsonl.zst` only: 4 bytes XORed inside its first id index entry.
    FlipEntry,
}

/// The files of a run directory the sweep damages, relative to it, and whether only a
/// finished run has them.
const FILES: [(&str, bool); 14] = [
    ("status.json", false),
    ("events.jsonl", false),
    ("run.json", false),
    ("controller.json", false),
    ("sources/alpha/manifest.json", false),
    ("sources/alpha/prompts.jsonl.zst", false),
    ("sources/alpha/completions.jsonl.zst", false),
    ("sources/alpha/completions.jsonl.zst.checked", false),
    ("sources/alpha/worker.json", false),
    ("sources/alpha/tally.json", false),
    ("sources/beta/manifest.json", false),
    ("sources/beta/prompts.jsonl.zst", false),
    ("sources/beta/rejected.jsonl", true),
    ("sources/gamma/earlier-prompts.hashes", true),
];

/// A run of three sources: `alpha` (150 prompts, three completion frames), `beta` (30 rows, 5
/// of them `alpha`'s: settled as duplicates in its `rejected.jsonl`) and `gamma` (40 rows, 10
/// of them `alpha`'s, `limit = 20`: prepared again without them, through
/// `earlier-prompts.hashes`), with the tuner on (`controller.json`). `finished`: run twice (the
/// second run writes `completions.jsonl.zst.checked`); else only `alpha` is run (twice), the
/// others prepared and nothing of them sent. `tag` makes another run's rows.
async fn sweep_run(server: &FakeOpenAi, tag: &str, finished: bool) -> Project {
    let project = Project::new();
    let alpha: Vec<String> = rows(&format!("{tag} alpha"), 150)
        .lines()
        .map(str::to_owned)
        .collect();
    let mut beta: String = rows(&format!("{tag} beta"), 25);
    let mut gamma: String = rows(&format!("{tag} gamma"), 30);
    for row in &alpha[..5] {
        beta.push_str(&format!("{row}\n"));
    }
    for row in &alpha[10..20] {
        gamma.push_str(&format!("{row}\n"));
    }
    project.write("data/alpha.jsonl", alpha.join("\n") + "\n");
    project.write("data/beta.jsonl", beta);
    project.write("data/gamma.jsonl", gamma);
    project.config(
        &crate::support::Config::new(&server.url())
            .generation("max-tokens = 16\nconcurrency = \"auto\"")
            .source("alpha", "data/alpha.jsonl")
            .source("beta", "data/beta.jsonl")
            .source_with("gamma", "data/gamma.jsonl", "limit = 20"),
    );
    let run: &[&str] = if finished {
        &["run", "cfg.toml"]
    } else {
        &["run", "cfg.toml", "--source", "alpha"]
    };
    for _ in 0..2 {
        let out = project.run(run).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    if !finished {
        let out = project.run(&["prepare", "cfg.toml"]).await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
    for (file, finished_only) in FILES {
        assert!(
            !finished && finished_only || project.run_path(file).exists(),
            "the run has no `{file}`"
        );
    }
    project
}

/// A stored record as the sweep follows it: its id and creation time (which a record
/// generated again does not keep).
type Stamped = (String, u64);

/// The data frames of a completions file: each one's byte range and its records.
fn data_frames(path: &Path) -> Vec<(Range<usize>, Vec<Stamped>)> {
    let bytes = std::fs::read(path).expect("read");
    let mut frames = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let size = zstd::zstd_safe::find_frame_compressed_size(&bytes[at..]).expect("frame");
        let text = zstd::stream::decode_all(&bytes[at..at + size]).expect("decode");
        if !text.is_empty() {
            let records = String::from_utf8(text)
                .expect("utf-8")
                .lines()
                .map(|l| {
                    let r: Value = serde_json::from_str(l).expect("json");
                    (
                        r["id"].as_str().expect("id").to_owned(),
                        r["created_unix_ms"].as_u64().expect("time"),
                    )
                })
                .collect();
            frames.push((at..at + size, records));
        }
        at += size;
    }
    frames
}

/// Damages `path` (`other`: the same file of another run); returns the byte range that no
/// longer holds what it held (`None`: the whole file).
fn damage(kind: Damage, path: &Path, other: &Path) -> Option<Range<usize>> {
    match kind {
        Damage::Truncate => {
            let half = truncate(path);
            Some(half..usize::MAX)
        }
        Damage::Flip => Some(flip(path)),
        Damage::Foreign => {
            std::fs::copy(other, path).expect("copy");
            None
        }
        Damage::FlipEntry => {
            let mut bytes = std::fs::read(path).expect("read");
            let first = zstd::zstd_safe::find_frame_compressed_size(&bytes).expect("frame");
            let entry =
                zstd::zstd_safe::find_frame_compressed_size(&bytes[first..]).expect("entry");
            let at = first + entry / 2;
            for b in &mut bytes[at..at + 4] {
                *b ^= 0x5a;
            }
            std::fs::write(path, &bytes).expect("write");
            Some(at..at + 4)
        }
    }
}

/// What one damaged file made `gen verify` and `gen run` do.
struct Outcome {
    file: &'static str,
    damage: Damage,
    /// `gen verify` before the rerun: exit code and the first problem or note.
    before: (Option<i32>, String),
    /// `gen run`: exit code, the first warning, requests sent.
    run: (Option<i32>, String, usize),
}

/// The run's first note, else the first problem of a source, else its first note, else its
/// first `missing`.
fn first_remark(audit: &Value) -> String {
    if let Some(note) = audit["notes"][0].as_str() {
        return format!("note: {note}");
    }
    let sources = audit["sources"].as_array().cloned().unwrap_or_default();
    for key in ["problems", "notes"] {
        if let Some(text) = sources
            .iter()
            .find_map(|s| s[key].as_array()?.first()?.as_str().map(str::to_owned))
        {
            return format!("{key}: {text}");
        }
    }
    sources
        .iter()
        .find_map(|s| s["missing"].as_str().map(|m| format!("missing: {m}")))
        .unwrap_or_default()
}

/// Every file of a finished run directory, one at a time, truncated, flipped and replaced by
/// another run's copy (and the completions' first id index entry flipped): `gen verify`
/// beforehand is clean exactly when `gen run` has nothing to repair or send; `gen run` exits 0,
/// keeps every intact record (none of them generated again: its creation time is unchanged),
/// sends exactly the prompts whose records were lost, and `gen verify` afterwards finds the run
/// complete and consistent; a second `gen run` has nothing to do. `--nocapture` prints the
/// table RELIABILITY.md shows.
#[tokio::test]
async fn every_file_of_a_finished_run_damaged_three_ways_is_repaired_and_run_and_verify_agree() {
    sweep(true).await;
}

/// The same for a run half done: `alpha` generated, `beta` and `gamma` prepared and waiting
/// (45 prompts to send besides what a damage lost). A damaged `run.json` is the one file
/// `gen run` cannot put right by itself: it refuses to resume, saying how, and `gen verify`
/// notes it.
#[tokio::test]
async fn every_file_of_an_unfinished_run_damaged_three_ways_is_repaired_and_run_and_verify_agree() {
    sweep(false).await;
}

async fn sweep(finished: bool) {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let pristine = sweep_run(&server, "ours", finished).await;
    let other = sweep_run(&server, "theirs", true).await;
    let completions_file = "sources/alpha/completions.jsonl.zst";
    let frames = data_frames(&pristine.run_path(completions_file));
    // alpha's 150, beta's 25 and its 5 duplicates of alpha, gamma's 20.
    let prompts: u64 = 150 + 30 + 20;
    // What the unfinished run has left to send: beta's 25 and gamma's 20.
    let waiting = if finished { 0 } else { 45 };
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for (file, finished_only) in FILES {
        if finished_only && !finished {
            continue;
        }
        let mut kinds = vec![Damage::Truncate, Damage::Flip, Damage::Foreign];
        if file == completions_file {
            kinds.push(Damage::FlipEntry);
        }
        for kind in kinds {
            let case = pristine.copy();
            let path = case.run_path(file);
            let hit = damage(kind, &path, &other.run_path(file));
            // The pristine records still intact in the damaged file.
            let intact: Vec<Stamped> = if file == completions_file {
                frames
                    .iter()
                    .filter(|(range, _)| {
                        hit.as_ref()
                            .is_some_and(|h| range.end <= h.start || h.end <= range.start)
                    })
                    .flat_map(|(_, records)| records.clone())
                    .collect()
            } else {
                frames.iter().flat_map(|(_, r)| r.clone()).collect()
            };
            let lost = 150 - intact.len();
            let (code, audit) = case.verify().await;
            let before = (code, first_remark(&audit));
            let sent_before = server.chat_requests();
            let mut out = case.run(&["run", "cfg.toml"]).await;
            let mut wrong = Vec::new();
            // The settings of the stored answers are unknown: refused, with the way out.
            let pin_unknown = !finished && file == "run.json" && kind != Damage::Foreign;
            let mut refused = String::new();
            if pin_unknown {
                if out.code != Some(1) || !out.stderr.contains("--allow-config-change") {
                    wrong.push(format!("gen run exit {:?}: {}", out.code, out.stderr));
                }
                refused = out
                    .stderr
                    .lines()
                    .find(|l| l.starts_with("error"))
                    .unwrap_or("")
                    .to_owned();
                out = case
                    .run(&["run", "cfg.toml", "--allow-config-change"])
                    .await;
            }
            let sent = server.chat_requests() - sent_before;
            let warning = out
                .stderr
                .lines()
                .find(|l| l.contains("WARNING") || l.starts_with("error"))
                .unwrap_or(&refused)
                .to_owned();
            let outcome = Outcome {
                file,
                damage: kind,
                before,
                run: (out.code, warning, sent),
            };
            if out.code != Some(0) {
                wrong.push(format!("gen run exit {:?}: {}", out.code, out.stderr));
            }
            if sent != lost + waiting {
                wrong.push(format!("sent {sent}, lost {lost} + {waiting} waiting"));
            }
            let clean_before = outcome.before.0 == Some(0);
            // A repair is said loudly; a finished source's duplicates settled again, as its
            // notice.
            let did_something = sent > waiting
                || !outcome.run.1.is_empty()
                || finished && out.stderr.contains("duplicates of earlier sources")
                || audit["totals"]["lost"].as_u64().is_some_and(|l| l > 0);
            if clean_before == did_something && !pin_unknown {
                wrong.push(format!(
                    "verify before exit {:?} ({}), gen run sent {sent} and said `{}`",
                    outcome.before.0, outcome.before.1, outcome.run.1
                ));
            }
            let (code, audit) = case.verify().await;
            let totals = &audit["totals"];
            let complete = audit["consistent"] == true
                && audit["complete"] == true
                && totals["prompts"] == prompts
                && totals["completed"].as_u64().unwrap_or(0)
                    + totals["rejected"].as_u64().unwrap_or(0)
                    == prompts;
            if code != Some(0) || !complete {
                wrong.push(format!(
                    "verify after exit {code:?}: {}",
                    first_remark(&audit)
                ));
            }
            let stored: HashMap<String, u64> = case
                .completions_of("alpha")
                .iter()
                .map(|r| {
                    (
                        r["id"].as_str().unwrap_or_default().to_owned(),
                        r["created_unix_ms"].as_u64().unwrap_or(0),
                    )
                })
                .collect();
            let regenerated = intact
                .iter()
                .filter(|(id, at)| stored.get(id) != Some(at))
                .count();
            if regenerated > 0 {
                wrong.push(format!(
                    "{regenerated} intact records lost or generated again"
                ));
            }
            let again = case.run(&["run", "cfg.toml"]).await;
            if again.code != Some(0) || again.stderr.contains("WARNING") {
                wrong.push(format!("second gen run: {:?} {}", again.code, again.stderr));
            }
            if !wrong.is_empty() {
                failures.push(format!("{file} {kind:?}: {}", wrong.join("; ")));
            }
            table.push(outcome);
        }
    }
    for o in &table {
        println!(
            "| `{}` | {:?} | {:?}: {} | {:?}, {} requests: {} |",
            o.file, o.damage, o.before.0, o.before.1, o.run.0, o.run.2, o.run.1
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
