//! A `model` the server does not list is refused before anything is sent, naming what the
//! server does serve; `run.json` records the model id as the server lists it; and the run it
//! stopped tells one story in `status`, `verify`, `export` and `diagnose`.

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

/// A run stopped by a wrong model while a source was being prepared tells one story:
/// `status.json` says why it stopped, `gen verify` and `gen export` that the preparation was
/// stopped with the run (not that it failed), `gen diagnose` why and that a plain `gen run`
/// prepares it, and every piece of advice names the config the user passed. (Before: verify and
/// export said "its preparation failed", diagnose "cancelled by gen … rerun with
/// --only-failed", which would not help, and the advice said `--config CONFIG`.)
#[tokio::test]
async fn a_run_stopped_by_a_wrong_model_tells_one_story_with_the_users_config() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    // A worker that would take a minute: the run stops while it prepares.
    project.config(
        &config(&server.url())
            .server("model = \"Qwen/Qwen3-8B\"")
            .named("jobs/week.toml")
            .python_source("slow", "import time; time.sleep(60)", ""),
    );
    let out = project.run(&["run", "jobs/week.toml"]).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert_eq!(server.chat_requests(), 0);
    let status = project.status().expect("status");
    assert!(
        status["stopped_by"]
            .as_str()
            .is_some_and(|s| s.contains("does not serve `Qwen/Qwen3-8B`")),
        "{status:#}"
    );

    let verify = project.run(&["verify", &project.run_dir()]).await;
    assert_eq!(verify.code, Some(1), "{}", verify.stdout);
    let export = project.run(&["export", &project.run_dir()]).await;
    assert_eq!(export.code, Some(1), "{}", export.stderr);
    for text in [&verify.stdout, &export.stderr] {
        assert!(
            text.contains("its preparation was stopped when the run stopped")
                && text.contains("`gen run jobs/week.toml`")
                && !text.contains("preparation failed")
                && !text.contains("CONFIG"),
            "{text}"
        );
    }
    assert!(
        verify.stdout.contains("it stopped: ") && verify.stdout.contains("does not serve"),
        "{}",
        verify.stdout
    );
    let diagnose = project
        .run(&["diagnose", "slow", "--config", "jobs/week.toml"])
        .await;
    assert_eq!(diagnose.code, Some(0), "{}", diagnose.stderr);
    assert!(
        diagnose.stdout.contains("the run stopped: ")
            && diagnose.stdout.contains("does not serve")
            && diagnose
                .stdout
                .contains("`gen run jobs/week.toml` prepares the source again")
            && !diagnose.stdout.contains("--only-failed"),
        "{}",
        diagnose.stdout
    );
}
