//! `gen export` end to end: a real run against the fake OpenAI server, exported as JSONL and
//! as Parquet, then loaded with the real Python `datasets` package (`GEN_TEST_PYTHON`, set by
//! `scripts/test.sh`; the Python part skips with a printed reason when it is unset, unless
//! `GEN_REQUIRE_PYTHON_DATASETS=1`).

use crate::support;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use support::{Config, Gen};

const COLUMNS: [&str; 9] = [
    "id",
    "source",
    "source_key",
    "messages",
    "reasoning_content",
    "finish_reason",
    "model",
    "prompt_tokens",
    "completion_tokens",
];

/// Loads `path` with `datasets.load_dataset(format, …)` and reports what it holds as JSON.
const LOAD: &str = r#"
import json, sys
import datasets
fmt, path = sys.argv[1], sys.argv[2]
ds = datasets.load_dataset(fmt, data_files=path, split="train")
three = next(r for r in ds if any(m["content"] == "three" for m in r["messages"]))
print(json.dumps({"rows": ds.num_rows, "columns": ds.column_names, "three": three}))
"#;

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
}

#[tokio::test]
async fn an_export_loads_with_the_python_datasets_package_in_both_formats() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Gen::new();
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
    assert!(
        jsonl
            .stdout
            .starts_with("exported 6 completions (alpha 4, beta 2) to `")
            && jsonl
                .stdout
                .trim_end()
                .ends_with(&format!("{}/export.jsonl`", gen_.run_dir())),
        "{}",
        jsonl.stdout
    );
    let text = gen_.read_run("export.jsonl");
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
            "out/train.parquet",
        ])
        .await;
    assert_eq!(parquet.code, Some(0), "{}", parquet.stderr);
    assert_eq!(
        parquet.stdout,
        "exported 6 completions (alpha 4, beta 2) to `out/train.parquet`\n"
    );
    let leftovers: Vec<String> = std::fs::read_dir(gen_.path("out"))
        .expect("ls out")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(leftovers, ["train.parquet"], "no temporary file is left");

    let nothing = gen_.run(&["export", "no-such-dir"]).await;
    assert_eq!(nothing.code, Some(2), "{}", nothing.stderr);

    let Some(python) = gen_tests::python::with_datasets() else {
        return;
    };
    assert_loaded(
        &load_with_datasets(&python, "json", &gen_.run_path("export.jsonl")),
        "jsonl",
    );
    assert_loaded(
        &load_with_datasets(&python, "parquet", &gen_.path("out/train.parquet")),
        "parquet",
    );
}

/// A config with `alpha` (4 prompts, each row with its own `id`, one cut by `max-tokens`) and
/// `beta`, whose preparation command fails.
fn alpha_and_a_failing_beta(gen_: &Gen, url: &str) -> String {
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
    let gen_ = Gen::new();
    let config = alpha_and_a_failing_beta(&gen_, &server.url());
    let run = gen_.run(&["run", &config]).await;
    assert_eq!(run.code, Some(1), "{}", run.stderr);

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
    assert!(!gen_.run_path("export.jsonl").exists());

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

    let export = gen_.run(&["export", &config, "--allow-incomplete"]).await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    assert!(
        export.stderr.contains("`beta`: its preparation failed"),
        "{}",
        export.stderr
    );
    let mut keys: Vec<(String, String)> = gen_
        .read_run("export.jsonl")
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
    let gen_ = Gen::new();
    let config = alpha_and_a_failing_beta(&gen_, &server.url());
    let truncated = |gen_: &Gen| -> serde_json::Value {
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
