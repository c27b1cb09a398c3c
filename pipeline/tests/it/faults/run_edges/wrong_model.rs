//! A `model` the server does not list is refused before anything is sent, naming what the
//! server does serve; `run.json` records the model id as the server lists it.

use gen_tests::fake_openai::{FakeOpenAi, Knobs};

use crate::faults::{config, rows};
use crate::support::Project;

#[tokio::test]
async fn a_model_the_server_does_not_list_is_refused_naming_what_it_serves() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    project.write("data/alpha.jsonl", rows("alpha", 4));
    let config = |model: &str| {
        project.config(
            &config(&server.url())
                .server(model)
                .source("alpha", "data/alpha.jsonl"),
        );
    };

    // The server lists only `fake-model`.
    config("model = \"Qwen/Qwen3-8B\"");
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "inference server at `{}` does not serve `Qwen/Qwen3-8B`: `/v1/models` lists \
             `fake-model`",
            server.url()
        )),
        "{}",
        out.stderr
    );
    assert_eq!(server.chat_requests(), 0, "nothing was sent");
    assert!(!project.run_path("").join("run.json").exists());

    // Named as the server lists it: accepted and recorded.
    config("model = \"fake-model\"");
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let pin: serde_json::Value = serde_json::from_slice(
        &std::fs::read(project.run_path("").join("run.json")).expect("run.json"),
    )
    .expect("json");
    assert_eq!(pin["model"], "fake-model", "{pin:#}");
}
