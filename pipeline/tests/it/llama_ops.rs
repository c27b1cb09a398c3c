//! Operations end to end against a real llama-server (SmolLM2-135M): of three sources, one
//! custom worker raises a Python traceback while the other two finish; `gen status` shows the
//! verdict and the next action; once the worker is fixed, `gen run --only-failed` regenerates
//! that source alone. "Alone" is checked on the other sources' files (byte-identical) and on the
//! server's own `/metrics` (it predicted exactly the fixed source's completion tokens).
//!
//! Skipped with a printed reason when llama-server is not installed, unless
//! `GEN_REQUIRE_LLAMA=1` (set by `scripts/test.sh`). `kill -9` of `gen run` followed by
//! `gen status` saying "not running" is covered in `run.rs`
//! (`after_gen_run_is_killed_status_says_it_is_not_running`).

use crate::support;

use gen_tests::llama::LlamaServer;
use support::{Config, Project, llama_project};

/// The custom worker as first written: it fails on its second row, a Python traceback.
const BROKEN_WORKER: &str = r#"import json, os

def rows():
    yield {"prompt": "Name a red fruit."}
    raise ValueError("fruits.csv row 2 has no prompt column")

with open(os.environ["GEN_OUTPUT"], "w") as out:
    for row in rows():
        out.write(json.dumps(row) + "\n")
open(os.environ["GEN_DONE"], "w").close()
"#;

/// The same worker after the user fixed it.
const FIXED_WORKER: &str = r#"import json, os

def rows():
    for colour in ("red", "yellow", "green"):
        yield {"prompt": f"Name a {colour} fruit."}

with open(os.environ["GEN_OUTPUT"], "w") as out:
    for row in rows():
        out.write(json.dumps(row) + "\n")
open(os.environ["GEN_DONE"], "w").close()
"#;

fn completions_file(gen_: &Project, name: &str) -> std::path::PathBuf {
    gen_.source_path(name, "completions.jsonl.zst")
}

/// The output tokens recorded in a source's completions file.
fn completion_tokens(gen_: &Project, name: &str) -> u64 {
    gen_.completions_of(name)
        .iter()
        .map(|r| r["usage"]["completion_tokens"].as_u64().expect("usage"))
        .sum()
}

async fn predicted(server: &LlamaServer) -> f64 {
    server
        .metric("llamacpp:tokens_predicted_total")
        .await
        .expect("metric")
}

#[tokio::test]
async fn a_traceback_fails_one_source_and_only_failed_regenerates_just_that_source() {
    let Some((gen_, server)) = llama_project(2).await else {
        return;
    };
    gen_.write(
        "data/colours.jsonl",
        "{\"prompt\": \"Name a colour.\"}\n{\"prompt\": \"Name a dark colour.\"}\n{\"prompt\": \"Name a light colour.\"}\n",
    );
    gen_.write(
        "data/animals.jsonl",
        "{\"prompt\": \"Name a farm animal.\"}\n{\"prompt\": \"Name a sea animal.\"}\n{\"prompt\": \"Name a bird.\"}\n",
    );
    gen_.write("prep.py", BROKEN_WORKER);
    let worker = gen_.path("prep.py");
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 8\nconcurrency = 2")
            .source("colours", "data/colours.jsonl")
            .source_table(
                "fruits",
                &format!("command = [\"python3\", \"{}\"]", worker.display()),
            )
            .source("animals", "data/animals.jsonl"),
    );

    let first = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(first.code, Some(1), "one source failed:\n{}", first.stderr);
    // The counter check below only proves something if it adds up on a full run too.
    let after_first = predicted(&server).await;
    let finished: u64 = ["colours", "animals"]
        .iter()
        .map(|name| completion_tokens(&gen_, name))
        .sum();
    assert!(finished > 0);
    assert_eq!(
        after_first, finished as f64,
        "gen sends nothing but prompts"
    );

    let table = gen_.run(&["status", "cfg.toml"]).await;
    // A run that finished with a failed source: `gen status` says so with its exit code.
    assert_eq!(table.code, Some(1), "{}", table.stderr);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(
        lines.iter().all(|l| l.chars().count() <= 80),
        "{}",
        table.stdout
    );
    let row = |name: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{}", table.stdout))
    };
    for name in ["colours", "animals"] {
        assert!(lines[row(name)].contains(" done "), "{}", table.stdout);
    }
    let fruits = row("fruits");
    assert!(lines[fruits].contains(" FAILED "), "{}", table.stdout);
    assert_eq!(
        lines[fruits + 1..fruits + 3],
        [
            "  ! traceback: ValueError: fruits.csv row 2 has no prompt column",
            "    next: fix the error, then rerun with --only-failed"
        ],
        "{}",
        table.stdout
    );

    let colours_before = std::fs::read(completions_file(&gen_, "colours")).expect("read");
    let animals_before = std::fs::read(completions_file(&gen_, "animals")).expect("read");
    gen_.write("prep.py", FIXED_WORKER);
    let second = gen_.run(&["run", "cfg.toml", "--only-failed"]).await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    assert!(
        second.stderr.contains("preparing `fruits`")
            && !second.stderr.contains("preparing `colours`")
            && !second.stderr.contains("preparing `animals`"),
        "{}",
        second.stderr
    );

    assert_eq!(
        std::fs::read(completions_file(&gen_, "colours")).expect("read"),
        colours_before
    );
    assert_eq!(
        std::fs::read(completions_file(&gen_, "animals")).expect("read"),
        animals_before
    );
    let fruit_records = gen_.completions_of("fruits");
    assert_eq!(fruit_records.len(), 3);
    // The server predicted exactly the fruits' answers: re-sending any other source's prompt
    // would add its tokens here.
    let fruit_tokens = completion_tokens(&gen_, "fruits");
    assert!(fruit_tokens > 0);
    assert_eq!(predicted(&server).await - after_first, fruit_tokens as f64);

    let status = gen_.run(&["status", "cfg.toml", "--json"]).await;
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("status json");
    for source in status["sources"].as_array().expect("sources") {
        assert_eq!(source["phase"], "done", "{source}");
    }
}
