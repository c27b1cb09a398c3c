//! A source whose input file or settings changed after it was prepared: every run compares
//! them with the manifest. With nothing generated yet the source is prepared again; with
//! answers, the run is refused naming each change, unless `--keep-preparation` says to go on
//! with the old prompts (remembered, so the next run does not ask again).

use gen_tests::fake_openai::{FakeOpenAi, Knobs};

use crate::faults::{alpha_project, config, rows};
use crate::support::Project;

#[tokio::test]
async fn a_changed_limit_or_input_file_after_generation_is_refused_until_kept() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    project.write("data/alpha.jsonl", rows("alpha", 10));
    let config = |limit: usize| {
        project.config(&config(&server.url()).source_with(
            "alpha",
            "data/alpha.jsonl",
            &format!("limit = {limit}"),
        ));
    };
    config(4);
    let first = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let requests = server.chat_requests();
    assert_eq!(requests, 4);

    // More prompts wanted: the old preparation has answers, so nothing is silently kept.
    config(6);
    let refused = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(
            "error: the inputs of a source changed since it was prepared, and answers were \
             generated from it:\n  `alpha`: `limit`: was 4, now 6\n"
        ),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("--keep-preparation"),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains("nothing to do"),
        "{}",
        refused.stderr
    );

    // The input file replaced (same rows, one changed): named too.
    let mut replaced = rows("alpha", 10);
    replaced = replaced.replacen("question 0:", "question zero:", 1);
    project.write("data/alpha.jsonl", replaced);
    let refused = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(
            "`alpha`: `limit`: was 4, now 6; `data/alpha.jsonl` changed since it was read (its \
             content differs)"
        ),
        "{}",
        refused.stderr
    );

    // Going on with the old prompts, said once and remembered.
    let kept = project
        .run(&["run", "cfg.toml", "--keep-preparation"])
        .await;
    assert_eq!(kept.code, Some(0), "{}", kept.stderr);
    assert!(
        kept.stderr.contains("--keep-preparation"),
        "{}",
        kept.stderr
    );
    let again = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(again.stderr.contains("nothing to do"), "{}", again.stderr);
    assert_eq!(
        server.chat_requests(),
        requests,
        "the kept preparation was done"
    );
}

#[tokio::test]
async fn a_replaced_input_with_nothing_generated_is_prepared_again() {
    // Every request refused (a wrong key): the source is prepared, nothing is generated.
    let refusing = FakeOpenAi::start(Knobs {
        fail_first: usize::MAX,
        fail_status: Some(401),
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&refusing.url(), rows("old", 3));
    let refused = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    assert!(project.source_path("alpha", "manifest.json").exists());

    // The file is replaced before anything was answered: the new rows are what is sent.
    project.write("data/alpha.jsonl", rows("new", 3));
    let server = FakeOpenAi::start(Knobs::default()).await;
    project.config(&config(&server.url()).source("alpha", "data/alpha.jsonl"));
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let sent: Vec<String> = server.received().into_iter().map(|r| r.prompt).collect();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert!(
        sent.iter().all(|p| p.starts_with("new question")),
        "{sent:?}"
    );
    assert!(
        out.stderr.contains(
            "`alpha`: changed since it was prepared: `data/alpha.jsonl` changed since it was read \
             (its content differs); nothing of it was generated yet: preparing it again"
        ),
        "{}",
        out.stderr
    );
}
