//! `gen export` end to end: a real run against the fake OpenAI server, exported as JSONL and
//! as Parquet, then loaded with the real Python `datasets` package (`GEN_TEST_PYTHON`, set by
//! `scripts/test.sh`; the Python part skips with a printed reason when it is unset, unless
//! `GEN_REQUIRE_PYTHON_DATASETS=1`).

use crate::support;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use support::{Config, Project};

const COLUMNS: [&str; 12] = [
    "id",
    "source",
    "source_key",
    "messages",
    "reasoning_content",
    "finish_reason",
    "model",
    "prompt_tokens",
    "completion_tokens",
    "sample",
    "settings",
    "tools",
];

/// Loads `path` with `datasets.load_dataset(format, …)` and reports what it holds as JSON.
const LOAD: &str = r#"
import json, os, sys
import datasets
fmt, path = sys.argv[1], sys.argv[2]
# A folder loads every file in it, as NeMo Automodel's ChatDataset does with a Parquet folder.
where = {"data_dir": path} if os.path.isdir(path) else {"data_files": path}
ds = datasets.load_dataset(fmt, split="train", **where)
three = next(r for r in ds if any(m["content"] == "three" for m in r["messages"]))
print(json.dumps({"rows": ds.num_rows, "columns": ds.column_names, "three": three}))
"#;

/// The names in folder `path`, sorted.
fn ls(path: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("ls {}: {e}", path.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn load_with_datasets(python: &str, format: &str, path: &std::path::Path) -> serde_json::Value {
    gen_tests::python::run_json(
        python,
        LOAD,
        &[std::ffi::OsStr::new(format), path.as_os_str()],
        &[],
        &format!("loading the {format} export with datasets"),
    )
}

fn assert_loaded(loaded: &serde_json::Value, format: &str) {
    assert_eq!(loaded["rows"], 6, "{format}: {loaded}");
    assert_eq!(loaded["columns"], serde_json::json!(COLUMNS), "{format}");
    let three = &loaded["three"];
    assert_eq!(
        three["messages"],
        serde_json::json!([
            {"role": "system", "content": "be brief", "reasoning_content": null},
            {"role": "user", "content": "three", "reasoning_content": null},
            {"role": "assistant", "content": "echo: three", "reasoning_content": "thinking"},
        ]),
        "{format}: {three}"
    );
    assert_eq!(three["source"], "alpha", "{format}");
    assert_eq!(three["finish_reason"], "stop", "{format}");
    assert_eq!(three["reasoning_content"], "thinking", "{format}");
    assert_eq!(three["completion_tokens"], 2, "{format}");
    assert_eq!(three["sample"], 0, "{format}");
    let settings: serde_json::Value =
        serde_json::from_str(three["settings"].as_str().unwrap_or_default()).expect("JSON text");
    assert!(settings["max_tokens"].is_u64(), "{format}: {settings}");
}

#[tokio::test]
async fn an_export_loads_with_the_python_datasets_package_in_both_formats() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        concat!(
            "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n",
            "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"three\"}]}\n",
            "{\"prompt\": \"four\"}\n",
        ),
    );
    gen_.write(
        "data/b.jsonl",
        "{\"prompt\": \"five\"}\n{\"prompt\": \"six\"}\n",
    );
    let config = gen_.config(
        &Config::new(&server.url())
            .source("alpha", "data/a.jsonl")
            .source("beta", "data/b.jsonl"),
    );
    let run = gen_.run(&["run", &config]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);

    let jsonl = gen_.run(&["export", &config]).await;
    assert_eq!(jsonl.code, Some(0), "{}", jsonl.stderr);
    let folder = format!("{}/export-messages", gen_.run_dir());
    assert!(
        jsonl
            .stdout
            .starts_with("exported 6 rows (alpha 4, beta 2) as `messages` JSONL to `")
            && jsonl.stdout.contains(&format!("{folder}`\n"))
            && jsonl
                .stdout
                .ends_with(&format!("{folder} --repo-type dataset\n")),
        "{}",
        jsonl.stdout
    );
    let text = gen_.read_run("export-messages/data/train.jsonl");
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json row"))
        .collect();
    assert_eq!(rows.len(), 6);
    let mut keys: Vec<&str> = rows[0]
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut expected = COLUMNS.to_vec();
    expected.sort_unstable();
    assert_eq!(keys, expected);
    assert!(rows.iter().all(|r| r["model"] == "fake-model"));

    let parquet = gen_
        .run(&[
            "export",
            &gen_.run_dir(),
            "--format",
            "parquet",
            "--output",
            "out/train",
        ])
        .await;
    assert_eq!(parquet.code, Some(0), "{}", parquet.stderr);
    assert!(
        parquet.stdout.starts_with(
            "exported 6 rows (alpha 4, beta 2) as `messages` Parquet to `out/train`\n"
        ),
        "{}",
        parquet.stdout
    );
    assert_eq!(
        ls(&gen_.path("out")),
        ["train"],
        "no temporary folder is left"
    );
    assert_eq!(
        ls(&gen_.path("out/train")),
        ["README.md", "data", "provenance.json"]
    );
    assert_eq!(
        ls(&gen_.path("out/train/data")),
        ["train.parquet"],
        "the data file is alone in its folder"
    );
    let again = gen_
        .run(&["export", &gen_.run_dir(), "--output", "out/train"])
        .await;
    assert_eq!(again.code, Some(2), "{}", again.stderr);
    assert!(
        again.stderr.contains("`out/train` already exists"),
        "{}",
        again.stderr
    );

    let nothing = gen_.run(&["export", "no-such-dir"]).await;
    assert_eq!(nothing.code, Some(2), "{}", nothing.stderr);

    let Some(python) = gen_tests::python::with_datasets() else {
        return;
    };
    assert_loaded(
        &load_with_datasets(
            &python,
            "json",
            &gen_.run_path("export-messages/data/train.jsonl"),
        ),
        "jsonl",
    );
    assert_loaded(
        &load_with_datasets(&python, "parquet", &gen_.path("out/train/data")),
        "parquet",
    );
}

/// A config with `alpha` (4 prompts, each row with its own `id`, one cut by `max-tokens`) and
/// `beta`, whose preparation command fails.
fn alpha_and_a_failing_beta(gen_: &Project, url: &str) -> String {
    gen_.write(
        "data/a.jsonl",
        concat!(
            "{\"id\": \"row-1\", \"prompt\": \"one\"}\n",
            "{\"id\": \"row-2\", \"prompt\": \"two LONG\"}\n",
            "{\"id\": \"row-3\", \"prompt\": \"three\"}\n",
            "{\"id\": \"row-4\", \"prompt\": \"four\"}\n",
        ),
    );
    gen_.config(
        &Config::new(url)
            .source_with("alpha", "data/a.jsonl", "id-field = \"id\"")
            .source_table(
                "beta",
                "command = [\"sh\", \"-c\", \"echo broken >&2; exit 3\"]",
            ),
    )
}

#[tokio::test]
async fn a_run_with_a_failed_source_fails_status_export_and_verify_unless_allowed() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    let config = alpha_and_a_failing_beta(&gen_, &server.url());
    let run = gen_.run(&["run", &config]).await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    // The cut answer is stored, and the run says what the export will do with it.
    assert!(
        run.stderr.contains(
            "`alpha` done: 4 completions; 1 cut by `max-tokens` (stored; `gen export` leaves \
             them out unless `--keep-cut`)"
        ),
        "{}",
        run.stderr
    );

    // `gen status` says the run failed, and exits so; `--watch` on a finished run at once.
    let status = gen_.run(&["status", &config]).await;
    assert_eq!(status.code, Some(1), "{}{}", status.stdout, status.stderr);
    assert!(
        status.stdout.contains("with 1 failed source of 2")
            && status.stdout.contains("\nbeta ")
            && status.stdout.contains(" FAILED "),
        "{}",
        status.stdout
    );
    let watched = gen_.run(&["status", &config, "--watch"]).await;
    assert_eq!(watched.code, Some(1), "{}", watched.stderr);
    assert_eq!(watched.stdout, status.stdout);

    let export = gen_.run(&["export", &config]).await;
    assert_eq!(export.code, Some(1), "{}{}", export.stdout, export.stderr);
    assert!(
        export
            .stderr
            .contains("is not finished, so an export would miss prompts")
            && export.stderr.contains("`beta`: its preparation failed")
            && export.stderr.contains("--allow-incomplete"),
        "{}",
        export.stderr
    );
    assert!(!gen_.run_path("export-messages").exists());

    let verify = gen_.run(&["verify", &config]).await;
    assert_eq!(verify.code, Some(1), "{}", verify.stdout);
    assert!(
        verify
            .stdout
            .contains("incomplete: `beta`: its preparation failed")
            && verify
                .stdout
                .contains("verdict: incomplete: 1 source not finished"),
        "{}",
        verify.stdout
    );
    let allowed = gen_.run(&["verify", &config, "--allow-incomplete"]).await;
    assert_eq!(allowed.code, Some(0), "{}", allowed.stdout);

    // Each record carries its prompt's own key, so an export need not hold the prompts' keys
    // in memory (1M rows of a source with `id-field`).
    let mut stored: Vec<String> = gen_
        .completions_of("alpha")
        .iter()
        .map(|r| {
            r["source_key"]
                .as_str()
                .expect("a stored source_key")
                .to_owned()
        })
        .collect();
    stored.sort();
    assert_eq!(stored, ["row-1", "row-2", "row-3", "row-4"]);

    let export = gen_
        .run(&["export", &config, "--allow-incomplete", "--keep-cut"])
        .await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    assert!(
        export.stderr.contains("`beta`: its preparation failed"),
        "{}",
        export.stderr
    );
    let mut keys: Vec<(String, String)> = gen_
        .read_run("export-messages/data/train.jsonl")
        .lines()
        .map(|l| {
            let row: serde_json::Value = serde_json::from_str(l).expect("json row");
            let key = row["source_key"].as_str().expect("a source_key").to_owned();
            (
                key,
                row["messages"][0]["content"]
                    .as_str()
                    .expect("prompt")
                    .to_owned(),
            )
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            ("row-1".to_owned(), "one".to_owned()),
            ("row-2".to_owned(), "two LONG".to_owned()),
            ("row-3".to_owned(), "three".to_owned()),
            ("row-4".to_owned(), "four".to_owned()),
        ]
    );
}

#[tokio::test]
async fn a_rerun_keeps_the_truncation_count_of_a_source_it_did_not_generate_for() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    let config = alpha_and_a_failing_beta(&gen_, &server.url());
    let truncated = |gen_: &Project| -> serde_json::Value {
        let status: serde_json::Value =
            serde_json::from_str(&gen_.read_run("status.json")).expect("status");
        status["sources"][0]["truncated"].clone()
    };
    assert_eq!(gen_.run(&["run", &config]).await.code, Some(1));
    assert_eq!(truncated(&gen_), 1);
    // Every source again: alpha has nothing to send; then only the failed one.
    assert_eq!(gen_.run(&["run", &config]).await.code, Some(1));
    assert_eq!(truncated(&gen_), 1);
    assert_eq!(
        gen_.run(&["run", &config, "--only-failed"]).await.code,
        Some(1)
    );
    assert_eq!(truncated(&gen_), 1);
    // The cache next to the file is a shortcut, not the truth.
    std::fs::remove_file(gen_.source_path("alpha", "tally.json")).expect("rm tally");
    assert_eq!(gen_.run(&["run", &config]).await.code, Some(1));
    assert_eq!(truncated(&gen_), 1);
}

/// A finished run for the schema tests: `alpha` (single turns: one with a system prompt, one
/// cut by `max-tokens`, one the server refuses) and `chat` (a conversation regenerated turn by
/// turn, and a single turn).
async fn two_kinds_of_conversation(gen_: &Project, url: &str) -> String {
    gen_.write(
        "data/a.jsonl",
        concat!(
            "{\"id\": \"row-1\", \"prompt\": \"one\"}\n",
            "{\"id\": \"row-2\", \"messages\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": \"three\"}]}\n",
            "{\"id\": \"row-3\", \"prompt\": \"two LONG\"}\n",
            "{\"id\": \"row-4\", \"prompt\": \"REJECT me\"}\n",
        ),
    );
    gen_.write(
        "data/chat.jsonl",
        concat!(
            "{\"messages\": [{\"role\": \"user\", \"content\": \"q1\"}, {\"role\": \"assistant\", \"content\": \"dataset answer\"}, {\"role\": \"user\", \"content\": \"q2\"}]}\n",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"alone\"}]}\n",
        ),
    );
    let config = gen_.config(
        &Config::new(url)
            .source_with("alpha", "data/a.jsonl", "id-field = \"id\"")
            .source_with("chat", "data/chat.jsonl", "turns = \"all\""),
    );
    let run = gen_.run(&["run", &config]).await;
    // Exit 1 says a prompt was refused; it is settled, so the run is finished and exports.
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("1 prompt(s) refused"), "{}", run.stderr);
    config
}

/// Exports the run in `schema` and `format` (plus `extra` flags) to `out/NAME` and returns
/// the command's output.
async fn export_as(
    gen_: &Project,
    name: &str,
    schema: &str,
    format: &str,
    extra: &[&str],
) -> support::Output {
    let output = format!("out/{name}");
    let mut args = vec![
        "export", "cfg.toml", "--schema", schema, "--format", format, "--output", &output,
    ];
    args.extend_from_slice(extra);
    let out = gen_.run(&args).await;
    assert_eq!(out.code, Some(0), "{name}: {}", out.stderr);
    let data = ls(&gen_.path(&format!("{output}/data")));
    let file = if format == "jsonl" {
        "train.jsonl"
    } else {
        "train.parquet"
    };
    assert_eq!(data, [file], "{name}: the data file is alone in its folder");
    out
}

fn jsonl_rows(gen_: &Project, name: &str) -> Vec<serde_json::Value> {
    gen_.read(&format!("out/{name}/data/train.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).expect("json row"))
        .collect()
}

/// The keys of a JSON object, sorted.
fn keys(value: &serde_json::Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

fn turns(row: &serde_json::Value, column: &str) -> Vec<serde_json::Value> {
    row[column].as_array().expect("a list of turns").clone()
}

/// Each schema's rows follow the rules of the trainer's reader (checked here, in Rust, from
/// the reader's source, so they hold where the reader itself cannot be installed), carry every
/// turn of the `messages` export, and say what they could not carry.
#[tokio::test]
async fn every_schema_keeps_every_turn_under_its_trainers_rules() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    two_kinds_of_conversation(&gen_, &server.url()).await;

    export_as(&gen_, "messages", "messages", "jsonl", &["--keep-cut"]).await;
    let reference: std::collections::BTreeMap<String, Vec<serde_json::Value>> =
        jsonl_rows(&gen_, "messages")
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().expect("id").to_owned(),
                    turns(r, "messages"),
                )
            })
            .collect();
    assert_eq!(reference.len(), 5, "3 of alpha (one refused), 2 of chat");
    let roles = |id: &str| -> Vec<String> {
        reference[id]
            .iter()
            .map(|m| m["role"].as_str().expect("role").to_owned())
            .collect()
    };
    let conversation = reference
        .keys()
        .find(|id| reference[*id].len() > 3)
        .expect("the multi-turn conversation")
        .clone();
    assert_eq!(
        roles(&conversation),
        ["user", "assistant", "user", "assistant"],
        "{:?}",
        reference[&conversation]
    );

    // SpecForge (`specforge/data/preprocessing.py` wants `conversations`; its expander
    // `scripts/expand_reasoning_conversations.py` wants `status == "success"`, a non-empty
    // string `id`, user first after system, non-empty `reasoning_content` on every assistant
    // turn, and an assistant turn last).
    let out = export_as(&gen_, "specforge", "specforge", "jsonl", &["--keep-cut"]).await;
    assert!(
        out.stderr
            .contains("the `specforge` schema does not carry `source`"),
        "{}",
        out.stderr
    );
    let text = gen_.read("out/specforge/data/train.jsonl");
    assert!(
        text.starts_with("{\"id\":"),
        "columns in the schema's order: {text}"
    );
    for row in jsonl_rows(&gen_, "specforge") {
        assert_eq!(keys(&row), ["conversations", "id", "status"]);
        assert_eq!(row["status"], "success");
        let id = row["id"].as_str().expect("id");
        let conversation = turns(&row, "conversations");
        assert_eq!(
            conversation, reference[id],
            "{id}: every turn, as `messages`"
        );
        let first = conversation
            .iter()
            .find(|m| m["role"] != "system")
            .expect("a turn");
        assert_eq!(first["role"], "user", "{id}");
        assert_eq!(conversation.last().expect("a turn")["role"], "assistant");
        for answer in conversation.iter().filter(|m| m["role"] == "assistant") {
            assert!(
                answer["reasoning_content"]
                    .as_str()
                    .is_some_and(|r| !r.trim().is_empty()),
                "{id}: {answer}"
            );
        }
    }

    // SafeAILab EAGLE (`eagle/traineagle3/main.py`): `id`, `conversations` of `from`
    // (`human`/`gpt`, nothing else) and `value`; after a leading `gpt` turn is skipped, turns
    // must alternate human, gpt (an assert). The system prompt has its own column.
    let out = export_as(&gen_, "sharegpt", "sharegpt", "jsonl", &["--keep-cut"]).await;
    assert!(
        out.stderr
            .contains("the `sharegpt` schema does not carry reasoning (`reasoning_content`)"),
        "{}",
        out.stderr
    );
    for row in jsonl_rows(&gen_, "sharegpt") {
        assert_eq!(keys(&row), ["conversations", "id", "system"]);
        let id = row["id"].as_str().expect("id");
        let conversation = turns(&row, "conversations");
        for (index, turn) in conversation.iter().enumerate() {
            assert_eq!(keys(turn), ["from", "value"], "{id}");
            let expected = if index % 2 == 0 { "human" } else { "gpt" };
            assert_eq!(turn["from"], expected, "{id}: turn {index}");
        }
        let system = usize::from(!row["system"].is_null());
        assert_eq!(conversation.len() + system, reference[id].len(), "{id}");
        if system == 1 {
            assert_eq!(row["system"], reference[id][0]["content"]);
        }
    }

    // NVIDIA ModelOpt (`examples/speculative_decoding/eagle_utils.py`): `conversation_id`
    // (else `uuid`, else `id`), `conversations` of `role` and `content`.
    let out = export_as(&gen_, "modelopt", "modelopt", "jsonl", &["--keep-cut"]).await;
    assert!(
        out.stderr
            .contains("the `modelopt` schema does not carry reasoning"),
        "{}",
        out.stderr
    );
    for row in jsonl_rows(&gen_, "modelopt") {
        assert_eq!(keys(&row), ["conversation_id", "conversations"]);
        let id = row["conversation_id"].as_str().expect("conversation_id");
        let conversation = turns(&row, "conversations");
        let expected: Vec<serde_json::Value> = reference[id]
            .iter()
            .map(|m| serde_json::json!({"role": m["role"], "content": m["content"]}))
            .collect();
        assert_eq!(conversation, expected, "{id}");
    }

    // One row per answer: the history before it, reasoning only on the answer it trains.
    let out = export_as(
        &gen_,
        "per-turn",
        "specforge",
        "jsonl",
        &["--per-turn", "--keep-cut"],
    )
    .await;
    let answers: usize = reference
        .values()
        .map(|t| t.iter().filter(|m| m["role"] == "assistant").count())
        .sum();
    assert!(
        out.stdout.starts_with(&format!("exported {answers} rows ")),
        "{}",
        out.stdout
    );
    let rows = jsonl_rows(&gen_, "per-turn");
    assert_eq!(rows.len(), answers);
    for row in &rows {
        let conversation = turns(row, "conversations");
        let (last, history) = conversation.split_last().expect("turns");
        assert_eq!(last["role"], "assistant");
        assert!(last["reasoning_content"].is_string(), "{row}");
        assert!(
            history.iter().all(|m| m["reasoning_content"].is_null()),
            "{row}"
        );
        let id = row["id"].as_str().expect("id");
        let (parent, turn) = id.split_once("#turn").expect("ID#turnK");
        let turn: usize = turn.parse().expect("K");
        let assistant_index = reference[parent]
            .iter()
            .enumerate()
            .filter(|(_, m)| m["role"] == "assistant")
            .nth(turn)
            .expect("the K-th answer")
            .0;
        assert_eq!(conversation.len(), assistant_index + 1, "{id}");
    }

    let unknown = gen_
        .run(&["export", "cfg.toml", "--schema", "alpaca"])
        .await;
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);
    assert!(
        unknown
            .stderr
            .contains("[possible values: messages, specforge, speculators, sharegpt, modelopt]"),
        "{}",
        unknown.stderr
    );

    // Answers cut by `max-tokens` are left out unless `--keep-cut`, counted per reason (the
    // flag that asked for it before still runs).
    let out = export_as(&gen_, "uncut", "sharegpt", "jsonl", &[]).await;
    assert!(
        out.stdout
            .contains("\n  left out 1: cut: finish_reason = length (max-tokens)\n"),
        "{}",
        out.stdout
    );
    assert_eq!(jsonl_rows(&gen_, "uncut").len(), reference.len() - 1);
    let card = gen_.read("out/uncut/README.md");
    assert!(card.contains("answers cut short left out"), "{card}");
    export_as(&gen_, "old-flag", "sharegpt", "jsonl", &["--drop-cut"]).await;
    assert_eq!(jsonl_rows(&gen_, "old-flag").len(), reference.len() - 1);
}

/// `provenance.json` and the card say what `gen status --json` says about the run, and the
/// card's YAML header points the Hub at the data file.
#[tokio::test]
async fn the_provenance_file_and_card_agree_with_gen_status() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    let config = two_kinds_of_conversation(&gen_, &server.url()).await;
    export_as(&gen_, "p", "specforge", "parquet", &[]).await;
    let status = gen_.run(&["status", &config, "--json"]).await;
    let status: serde_json::Value = serde_json::from_str(&status.stdout).expect("status json");
    let provenance: serde_json::Value =
        serde_json::from_str(&gen_.read("out/p/provenance.json")).expect("provenance json");

    assert_eq!(provenance["gen_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(provenance["model"]["name"], "fake-model");
    assert_eq!(provenance["model"]["servers"][0]["model"], "fake-model");
    assert_eq!(
        provenance["model"]["servers"][0]["version"],
        gen_tests::fake_openai::VERSION
    );
    assert_eq!(
        provenance["model"]["servers"][0]["version"],
        status["servers"][0]["version"]
    );
    assert_eq!(provenance["sampling"]["max_tokens"], 16);
    assert_eq!(provenance["export"]["schema"], "specforge");
    assert_eq!(provenance["export"]["data_file"], "data/train.parquet");
    assert_eq!(provenance["export"]["rows"], 4);
    let sources = provenance["sources"].as_array().expect("sources");
    let names: Vec<&str> = sources
        .iter()
        .map(|s| s["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["alpha", "chat"]);
    for (source, seen) in sources
        .iter()
        .zip(status["sources"].as_array().expect("status"))
    {
        let generation = &source["generation"];
        for (ours, theirs) in [
            ("done", "done"),
            ("rejected", "rejected"),
            ("failed", "failed"),
            ("duplicates", "duplicates"),
            ("cut", "truncated"),
            ("prepared", "prepared"),
            ("output_tokens", "output_tokens"),
        ] {
            assert_eq!(generation[ours], seen[theirs], "{}: {ours}", source["name"]);
        }
        assert_eq!(source["system_prompt"], "keep", "{source}");
        assert!(
            source["checksums"].as_object().is_some_and(|c| c
                .values()
                .all(|v| v.as_str().is_some_and(|v| v.starts_with("xxh3-128:")))
                && !c.is_empty()),
            "{source}"
        );
    }
    let alpha = &sources[0];
    assert_eq!(alpha["generation"]["done"], 3);
    assert_eq!(alpha["generation"]["rejected"], 1);
    assert_eq!(alpha["generation"]["cut"], 1);
    assert_eq!(
        alpha["rejected_by_kind"],
        serde_json::json!({"rejected": 1})
    );
    assert_eq!(alpha["exported_rows"], 2);
    assert_eq!(
        alpha["dropped"],
        serde_json::json!({"cut: finish_reason = length (max-tokens)": 1})
    );
    assert_eq!(alpha["tokens"]["rows_with_usage"], 2);

    let card = gen_.read("out/p/README.md");
    let header = card
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .map(|(header, _)| header)
        .expect("a YAML header");
    for line in [
        "configs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train.parquet",
        "  - name: conversations\n    list:\n    - name: role\n      dtype: string\n    - name: content\n      dtype: string\n    - name: reasoning_content\n      dtype: string",
        "  splits:\n  - name: train\n    num_examples: 4",
        "# license: choose",
    ] {
        assert!(header.contains(line), "{line}\nin\n{header}");
    }
    assert!(
        card.contains("hf upload USER/NAME . --repo-type dataset"),
        "{card}"
    );
}

/// Loads each `conversations` JSONL of its arguments (after the model folder) with two
/// trainers' own code, in one Python (importing torch is the slow part), and reports per file:
///
/// * SpecForge's `build_eagle3_dataset` (`specforge/data/preprocessing.py`, its
///   `GeneralParser` in `specforge/data/parse.py`), tokenizing with the tiny local model (a
///   `ChatTemplate` for its chat template registered in SpecForge's `TEMPLATE_REGISTRY`): rows,
///   the assistant spans its loss mask trains, and every warning about a conversation it
///   truncated or a turn it dropped;
/// * speculators' reader (`load_raw_dataset`) and preprocessing
///   (`build_speculator_training_dataset`, `speculators/data_generation/preprocessing.py`),
///   which fans out one row per assistant turn: rows, and every warning or error it logs. Its
///   renders go to a real vLLM's `/v1/chat/completions/render` (the tiny model's chat
///   template; vLLM serves it with `--enable-scale-out`), the URL after the model folder.
const TRAINERS: &str = r#"
import json, logging, sys, warnings
import datasets
from transformers import AutoTokenizer
from specforge.data.preprocessing import build_eagle3_dataset
from specforge.data.template import TEMPLATE_REGISTRY, ChatTemplate
import speculators.data_generation.preprocessing as speculators
model, render_endpoint, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
tokenizer = AutoTokenizer.from_pretrained(model)
# scripts/vllm/tiny_model.py's chat template: <|role|>content<|end|> per message.
TEMPLATE_REGISTRY.register(name="gen-tiny-llama-think", override=True, template=ChatTemplate(
    assistant_header="<|assistant|>", user_header="<|user|>", end_of_turn_token="<|end|>",
    system_prompt=None))
logged = []
class Collect(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            logged.append(record.getMessage())
logging.getLogger().addHandler(Collect())
def spans(mask):
    flat = [int(x) for x in mask.flatten().tolist()]
    return sum(1 for i, v in enumerate(flat) if v == 1 and (i == 0 or flat[i - 1] == 0))
out = []
for path in paths:
    raw = datasets.load_dataset("json", data_files=path, split="train")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = build_eagle3_dataset(raw, tokenizer, chat_template="gen-tiny-llama-think",
                                  max_length=4096, num_proc=1)
    specforge = {"rows": ds.num_rows, "trained_answers": sum(spans(r["loss_mask"]) for r in ds),
                 "problems": [str(w.message) for w in caught
                              if "truncated" in str(w.message) or "Dropping" in str(w.message)]}
    logged.clear()
    raw, _ = speculators.load_raw_dataset(path)
    ds = speculators.build_speculator_training_dataset(
        raw, tokenizer, max_length=1024, num_proc=1, render_endpoint=render_endpoint)
    out.append({"specforge": specforge, "speculators": {
        "rows_in": raw.num_rows, "rows": ds.num_rows, "problems": list(logged)}})
print(json.dumps(out))
"#;

/// Loads each `FORMAT PATH` pair of its arguments (a file, or a folder: every file in it)
/// with `datasets` and reports, per pair, the rows, columns and each row's turns by id.
const LOAD_TURNS: &str = r#"
import json, os, sys
import datasets
out = []
for fmt, path in zip(sys.argv[1::2], sys.argv[2::2]):
    where = {"data_dir": path} if os.path.isdir(path) else {"data_files": path}
    ds = datasets.load_dataset(fmt, split="train", **where)
    ids = next(c for c in ("id", "conversation_id") if c in ds.column_names)
    turns = next(c for c in ("messages", "conversations") if c in ds.column_names)
    out.append({"rows": ds.num_rows, "columns": ds.column_names,
                "turns": {r[ids]: r[turns] for r in ds}})
print(json.dumps(out, sort_keys=True))
"#;

/// With the real vLLM that speculators renders with: slow, so `.config/nextest.toml` leaves
/// `vllm` modules out of the default profile.
mod vllm {
    use super::*;

    /// Every row of each schema loads in the trainers' own readers, with every assistant turn:
    /// SpecForge and speculators on the `specforge` export (whole conversations and `--per-turn`),
    /// and the Python `datasets` package on every schema's Parquet folder (how NeMo Automodel's
    /// `ChatDataset` and the Hub read a folder: every Parquet file in it). Needs
    /// `scripts/install-trainers.sh` (skips with the reason unless `GEN_REQUIRE_TRAINERS=1`) and
    /// starts the real vLLM that speculators renders with.
    #[tokio::test]
    async fn each_schema_loads_in_its_trainers_own_reader_without_losing_a_row() {
        let Some((python, model)) = gen_tests::python::with_trainers() else {
            return;
        };
        let server = FakeOpenAi::start(Knobs::default()).await;
        let gen_ = Project::new();
        two_kinds_of_conversation(&gen_, &server.url()).await;
        export_as(&gen_, "specforge", "specforge", "jsonl", &[]).await;
        export_as(&gen_, "per-turn", "specforge", "jsonl", &["--per-turn"]).await;
        let answers = |name: &str| -> usize {
            jsonl_rows(&gen_, name)
                .iter()
                .map(|r| {
                    turns(r, "conversations")
                        .iter()
                        .filter(|m| m["role"] == "assistant")
                        .count()
                })
                .sum()
        };
        let names = ["specforge", "per-turn"];
        let paths: Vec<std::path::PathBuf> = names
            .iter()
            .map(|name| gen_.path(&format!("out/{name}/data/train.jsonl")))
            .collect();
        let logs = tempfile::tempdir().expect("tempdir");
        let vllm = gen_tests::vllm::VllmServer::start(logs.path(), &["--enable-scale-out"])
            .await
            .expect("start vLLM for speculators' renders");
        let render = vllm.url();
        let mut args = vec![std::ffi::OsStr::new(&model), std::ffi::OsStr::new(&render)];
        args.extend(paths.iter().map(|p| p.as_os_str()));
        let loaded = gen_tests::python::run_json(
            &python,
            TRAINERS,
            &args,
            &[],
            "SpecForge and speculators loading the `specforge` exports",
        );
        for (name, loaded) in names
            .iter()
            .zip(loaded.as_array().expect("one result per file"))
        {
            let rows = jsonl_rows(&gen_, name).len();
            let specforge = &loaded["specforge"];
            assert_eq!(specforge["rows"], rows, "SpecForge, {name}: {specforge}");
            assert_eq!(
                specforge["trained_answers"],
                answers(name),
                "SpecForge, {name}: every assistant turn trained: {specforge}"
            );
            assert_eq!(
                specforge["problems"],
                serde_json::json!([]),
                "{name}: {specforge}"
            );
            let speculators = &loaded["speculators"];
            assert_eq!(
                speculators["rows_in"], rows,
                "speculators, {name}: {speculators}"
            );
            assert_eq!(
                speculators["rows"],
                answers(name),
                "speculators, {name}: one row per assistant turn: {speculators}"
            );
            assert_eq!(
                speculators["problems"],
                serde_json::json!([]),
                "{name}: {speculators}"
            );
        }

        // Each schema as JSONL and as a Parquet folder, loaded in one Python.
        let mut args = Vec::new();
        for schema in ["messages", "specforge", "sharegpt", "modelopt"] {
            for format in ["jsonl", "parquet"] {
                let name = format!("{schema}-{format}");
                // Every row, the answer cut by `max-tokens` too: none may be lost on loading.
                export_as(&gen_, &name, schema, format, &["--keep-cut"]).await;
                let (format, path) = match format {
                    "jsonl" => ("json", format!("out/{name}/data/train.jsonl")),
                    _ => ("parquet", format!("out/{name}/data")),
                };
                args.push(std::ffi::OsString::from(format));
                args.push(gen_.path(&path).into_os_string());
            }
        }
        let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsString::as_os_str).collect();
        let loaded = gen_tests::python::run_json(
            &python,
            LOAD_TURNS,
            &args,
            &[],
            "loading every schema with datasets",
        );
        let loaded = loaded.as_array().expect("one result per export");
        for pair in loaded.chunks(2) {
            let (jsonl, parquet) = (&pair[0], &pair[1]);
            assert_eq!(jsonl["rows"], 5, "{jsonl}");
            assert_eq!(
                parquet, jsonl,
                "Parquet and JSONL load the same rows and turns"
            );
        }
    }
}
