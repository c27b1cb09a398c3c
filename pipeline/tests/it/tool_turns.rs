//! Tool turns end to end against the fake server: the dataset's calls and results are sent as
//! context at their positions, only the answers in words are generated, and a server that
//! refuses tool turns gets the conversations ended before their first one, said once and
//! counted.

use serde_json::{Value, json};

use crate::support::{Config, Project};
use gen_tests::fake_openai::{FakeOpenAi, Knobs};

/// Loads a JSONL export with `datasets` and reports its row count and Paris's messages.
const LOAD: &str = r#"
import json, sys
import datasets
ds = datasets.load_dataset("json", split="train", data_files=sys.argv[1])
paris = next(r for r in ds if r["source_key"] == "w")
print(json.dumps({"rows": ds.num_rows, "paris": paris["messages"]}))
"#;

/// `data/tools.jsonl`: a row in OpenAI's shape (`tools`, two user turns, key `w`) and one
/// in Glaive's ShareGPT shape (key `g`); `data/plain.jsonl`: one plain prompt.
fn write_rows(gen_: &Project) {
    let tools = json!([{"type": "function", "function": {"name": "weather", "parameters": {}}}]);
    let openai = json!({"id": "w", "tools": tools, "messages": [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
        {"role": "assistant", "content": "It is 18 C."},
        {"role": "user", "content": "thanks"}]});
    let glaive = json!({"id": "g", "conversations": [
        {"from": "human", "value": "convert 5 USD"},
        {"from": "function_call", "value": "{\"name\": \"convert\", \"arguments\": {\"amount\": 5}}"},
        {"from": "observation", "value": "4.6 EUR"},
        {"from": "gpt", "value": "4.6 EUR"}]});
    gen_.write("data/tools.jsonl", format!("{openai}\n{glaive}\n"));
    gen_.write("data/plain.jsonl", "{\"prompt\": \"plain\"}\n");
}

/// A config of two sources on `url`: `tools` ([`write_rows`]) and `plain`.
fn config(gen_: &Project, url: &str) -> String {
    write_rows(gen_);
    gen_.config(
        &Config::new(url)
            .source_with(
                "tools",
                "data/tools.jsonl",
                "turns = \"all\"\nid-field = \"id\"",
            )
            .source("plain", "data/plain.jsonl"),
    )
}

/// The request bodies, by their first message's text, then the shorter conversation first.
fn sent(server: &FakeOpenAi) -> Vec<Value> {
    let mut bodies: Vec<Value> = server.received().into_iter().map(|r| r.body).collect();
    bodies.sort_by_key(|b| {
        let messages = b["messages"].as_array().cloned().unwrap_or_default();
        (messages[0]["content"].to_string(), messages.len())
    });
    bodies
}

#[tokio::test]
async fn the_datasets_tool_turns_are_context_and_only_answers_are_generated() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    let config = config(&gen_, &server.url());
    let run = gen_.run(&["run", &config]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("gen: prepared `tools`: 2 prompts (2 with tool turns, kept)"),
        "{}",
        run.stderr
    );

    // Three answers: after Paris's tool result, after `thanks`, after Glaive's observation.
    // Never one in place of the dataset's call.
    let bodies = sent(&server);
    let without_plain: Vec<&Value> = bodies
        .iter()
        .filter(|b| b["messages"][0]["content"] != "plain")
        .collect();
    assert_eq!(without_plain.len(), 3, "{bodies:#?}");
    let glaive = without_plain[0];
    assert_eq!(
        glaive["messages"],
        json!([
            {"role": "user", "content": "convert 5 USD"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function",
                "function": {"name": "convert", "arguments": "{\"amount\":5}"}}]},
            {"role": "tool", "content": "4.6 EUR", "tool_call_id": "call_0"},
        ])
    );
    assert!(glaive.get("tools").is_none() && glaive.get("tool_choice").is_none());
    let (first, second) = (without_plain[1], without_plain[2]);
    let paris = json!([
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "content": "18 C", "tool_call_id": "c1"},
    ]);
    assert_eq!(first["messages"], paris);
    assert_eq!(first["tools"][0]["function"]["name"], "weather");
    assert_eq!(first["tool_choice"], "none");
    // The second turn: the tool result spliced at its position, the model's own answer (the
    // fake echoes the last user turn) in place of the dataset's.
    let mut history = paris.as_array().expect("list").clone();
    history.push(json!({"role": "assistant", "content": "echo: weather in Paris?"}));
    history.push(json!({"role": "user", "content": "thanks"}));
    assert_eq!(second["messages"], Value::Array(history));
    assert_eq!(second["tool_choice"], "none");

    // The record holds what was sent, the answers in `turns`; the export splices them back.
    let records = gen_.completions_of("tools");
    let record = records
        .iter()
        .find(|r| r["source_key"] == "w")
        .expect("Paris's record");
    assert_eq!(record["turns"].as_array().map(Vec::len), Some(2));
    assert_eq!(record["tools"][0]["function"]["name"], "weather");
    assert!(record.get("tool_turns_cut").is_none());

    let export = gen_.run(&["export", &config]).await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    let row = gen_
        .read_run("export-messages/data/train.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("row"))
        .find(|r| r["source_key"] == "w")
        .expect("Paris's row");
    let roles: Vec<&str> = row["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "user",
            "assistant"
        ]
    );
    assert_eq!(row["messages"][1]["tool_calls"][0]["id"], "c1");
    assert_eq!(row["messages"][2]["tool_call_id"], "c1");
    assert_eq!(row["messages"][3]["content"], "echo: weather in Paris?");
    assert_eq!(row["messages"][5]["content"], "echo: thanks");
    let tools: Value =
        serde_json::from_str(row["tools"].as_str().expect("JSON text")).expect("JSON");
    assert_eq!(tools[0]["function"]["name"], "weather");

    // The real `datasets` loads it: rows with and without tool fields in one file.
    if let Some(python) = gen_tests::python::with_datasets() {
        let loaded = gen_tests::python::run_json(
            &python,
            LOAD,
            &[gen_
                .run_path("export-messages/data/train.jsonl")
                .as_os_str()],
            &[],
            "loading the export with tool turns with datasets",
        );
        assert_eq!(loaded["rows"], 3, "{loaded}");
        assert_eq!(
            loaded["paris"][1]["tool_calls"][0]["function"]["name"],
            "weather"
        );
        assert_eq!(loaded["paris"][2]["tool_call_id"], "c1");
        assert_eq!(loaded["paris"][3]["content"], "echo: weather in Paris?");
    }

    let sharegpt = gen_
        .run(&["export", &config, "--schema", "sharegpt", "--output", "sg"])
        .await;
    assert_eq!(sharegpt.code, Some(0), "{}", sharegpt.stderr);
    let glaive_row = gen_
        .read("sg/data/train.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("row"))
        .find(|r| r["conversations"][0]["value"] == "convert 5 USD")
        .expect("Glaive's row");
    assert_eq!(
        glaive_row["conversations"],
        json!([
            {"from": "human", "value": "convert 5 USD"},
            {"from": "function_call", "value": "{\"arguments\":{\"amount\":5},\"name\":\"convert\"}"},
            {"from": "observation", "value": "4.6 EUR"},
            {"from": "gpt", "value": "echo: convert 5 USD"},
        ])
    );
}

/// llama-server without `--jinja` refuses tool turns: the first refusal is said once, and
/// every conversation with tool turns ends before its first one, as before they were kept —
/// nothing is rejected, the plain source is not touched, and status counts them.
#[tokio::test]
async fn a_server_that_refuses_tool_turns_gets_the_conversations_cut_before_them() {
    let knobs = Knobs {
        refuse_tools: true,
        ..Knobs::default()
    };
    let server = FakeOpenAi::start(knobs).await;
    let gen_ = Project::new();
    let config = config(&gen_, &server.url());
    let run = gen_.run(&["run", &config]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let said: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("refuses tool turns"))
        .collect();
    assert_eq!(said.len(), 1, "{}", run.stderr);
    // Whichever conversation found it out: `tools` (a 500, as llama-server without `--jinja`
    // answers) or a `tool` message (a 400 from the template).
    assert!(
        said[0].contains("tools param requires --jinja flag")
            || said[0].contains("Conversation roles must alternate"),
        "{}",
        said[0]
    );
    assert!(gen_.rejected_of("tools").is_empty());
    let records = gen_.completions_of("tools");
    assert_eq!(records.len(), 2);
    for record in &records {
        assert_eq!(record["tool_turns_cut"], true, "{record}");
        assert!(record.get("tools").is_none());
        let messages = record["messages"].as_array().expect("messages");
        assert!(messages.iter().all(|m| m["role"] == "user"), "{record}");
    }
    // One refused request with tool turns, then only requests without any.
    let with_tools = server
        .received()
        .iter()
        .filter(|r| r.body.get("tools").is_some() || r.body.to_string().contains("tool_call"))
        .count();
    assert!(with_tools >= 1, "at least the request that found it out");
    let status = gen_.run(&["status", &config, "--json"]).await;
    let status: Value = serde_json::from_str(&status.stdout).expect("status JSON");
    let tools = status["sources"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "tools"))
        .expect("the source's status");
    assert_eq!(tools["with_tool_turns"], 2, "{tools}");
    assert_eq!(tools["tool_turns_cut"], 2, "{tools}");
    let table = gen_.run(&["status", &config]).await;
    assert!(
        table.stdout.contains(
            "2 prompts with tool turns: 2 answered without them (the server refused them)"
        ),
        "{}",
        table.stdout
    );
}

/// Against the real llama-server (SmolLM2-135M), which `gen` launches: with `--jinja` the
/// tool turns are taken and rendered (the answer after the tool result reads a longer prompt
/// than the same question alone); with `--no-jinja` `tools` is refused with a 500, said once,
/// and the conversations are answered without their tool turns. Skipped with a printed reason
/// when llama-server is not installed, unless `GEN_REQUIRE_LLAMA` is set.
mod llama {
    use serde_json::Value;

    use super::write_rows;
    use crate::support::{Config, Project, llama_skip_reason};
    use gen_tests::llama;

    /// Runs the tool rows on a llama-server launched with `jinja` (`--jinja` or
    /// `--no-jinja`); the project, `gen run`'s stderr and the records by `source_key`.
    async fn run_with(jinja: &str) -> (Project, String, Vec<Value>) {
        let (bin, model) = llama::installed().expect("installed");
        let gen_ = Project::new();
        write_rows(&gen_);
        let args = [jinja, "-np", "1", "-c", "4096", "-t", "2", "--poll", "0"];
        let config = gen_.config(
            &Config::launching(&bin, &model, "{port}", &args)
                .server("health-timeout-secs = 120")
                .generation("max-tokens = 12\nconcurrency = 1")
                .source_with(
                    "tools",
                    "data/tools.jsonl",
                    "turns = \"all\"\nid-field = \"id\"",
                ),
        );
        let run = gen_.run(&["run", &config]).await;
        assert_eq!(run.code, Some(0), "{jinja}: {}", run.stderr);
        let mut records = gen_.completions_of("tools");
        records.sort_by_key(|r| r["source_key"].to_string());
        (gen_, run.stderr, records)
    }

    /// The prompt tokens the server counted for `record`'s first answer.
    fn first_prompt_tokens(record: &Value) -> u64 {
        let usage = match record["turns"].as_array() {
            Some(turns) => &turns[0]["usage"],
            None => &record["usage"],
        };
        usage["prompt_tokens"].as_u64().expect("prompt tokens")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tool_turns_reach_a_real_llama_server_and_one_without_jinja_gets_them_cut() {
        if let Some(reason) = llama_skip_reason() {
            eprintln!("skipped: {reason}");
            return;
        }
        let (kept, stderr, records) = run_with("--jinja").await;
        assert!(!stderr.contains("refuses tool turns"), "{stderr}");
        assert_eq!(records.len(), 2, "{records:#?}");
        let (glaive, paris) = (&records[0], &records[1]);
        assert_eq!(paris["source_key"], "w");
        assert!(paris.get("tool_turns_cut").is_none(), "{paris}");
        assert_eq!(paris["messages"][1]["tool_calls"][0]["id"], "c1");
        assert_eq!(paris["messages"][2]["role"], "tool");
        assert_eq!(paris["tools"][0]["function"]["name"], "weather");
        let turns = paris["turns"].as_array().expect("two answers");
        assert_eq!(turns.len(), 2);
        for turn in turns {
            assert!(turn["finish_reason"].is_string(), "{turn}");
            assert!(
                turn["usage"]["completion_tokens"].as_u64() > Some(0),
                "{turn}"
            );
        }
        assert_eq!(glaive["messages"][2]["tool_call_id"], "call_0");
        let status = kept.run(&["status", "cfg.toml"]).await;
        assert!(
            status
                .stdout
                .contains("2 prompts with tool turns: sent as they are, only the answers"),
            "{}",
            status.stdout
        );

        let (cut, stderr, records) = run_with("--no-jinja").await;
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("refuses tool turns"))
            .collect();
        assert_eq!(said.len(), 1, "{stderr}");
        assert!(
            said[0].contains("tools param requires --jinja flag"),
            "{}",
            said[0]
        );
        assert!(cut.rejected_of("tools").is_empty());
        assert_eq!(records.len(), 2, "{records:#?}");
        let cut_paris = &records[1];
        assert_eq!(cut_paris["tool_turns_cut"], true, "{cut_paris}");
        assert_eq!(
            cut_paris["messages"],
            serde_json::json!([{"role": "user", "content": "weather in Paris?"}])
        );
        // The server's own count: the tool exchange was in the prompt it rendered, then not.
        assert!(
            first_prompt_tokens(paris) > first_prompt_tokens(cut_paris),
            "{paris}\n{cut_paris}"
        );
        let status = cut.run(&["status", "cfg.toml", "--json"]).await;
        let status: Value = serde_json::from_str(&status.stdout).expect("status JSON");
        assert_eq!(status["sources"][0]["with_tool_turns"], 2, "{status}");
        assert_eq!(status["sources"][0]["tool_turns_cut"], 2, "{status}");
    }
}
