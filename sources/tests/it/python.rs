//! Compatibility with the real Python `datasets` package (`GEN_TEST_PYTHON`, set by
//! `scripts/test.sh`): OpenCodeReasoning's `-` inputs resolve to the question Python's
//! `load_dataset` gives at the row's `split` and `index`, done the way the dataset card says.

use std::collections::BTreeMap;
use std::path::Path;

use gen_sources::Role;

use crate::support::datasets;
use crate::support::fake_hub::{FakeHub, FakeRepo};

use super::conformance::{datasets_toml, run, settings};

/// The Python with `datasets`, or `None` (printing why) when the test may skip.
fn python() -> Option<String> {
    match std::env::var("GEN_TEST_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ if std::env::var("GEN_REQUIRE_PYTHON_DATASETS").as_deref() == Ok("1") => {
            panic!("GEN_REQUIRE_PYTHON_DATASETS=1 but GEN_TEST_PYTHON is not set")
        }
        _ => {
            eprintln!(
                "skipping the Python `datasets` check: GEN_TEST_PYTHON is not set (scripts/test.sh sets it)"
            );
            None
        }
    }
}

/// The reference resolution, as OpenCodeReasoning's card describes it: load TACO (its `ALL`
/// config) and APPS, then `question` of `dataset[split][int(index)]` for every `-` row.
/// Prints `{id: question}`. APPS on the Hub is loaded by a script, which reads the same
/// `{split}.jsonl` files line by line; `datasets` 4+ runs no scripts, so the JSON loader stands
/// in for it.
const RESOLVE: &str = r#"
import json, sys
import datasets
taco_dir, apps_dir, split_1 = sys.argv[1:4]
taco = datasets.load_dataset(taco_dir, "ALL")
apps = datasets.load_dataset(
    "json", data_files={s: f"{apps_dir}/{s}.jsonl" for s in ("train", "test")}
)
sources = {"taco": taco, "apps": apps}
out = {}
for row in datasets.load_dataset("parquet", data_files=split_1, split="train"):
    dataset = sources.get(row["dataset"])
    if row["input"] != "-" or dataset is None or row["split"] not in dataset:
        continue
    rows = dataset[row["split"]]
    index = int(row["index"])
    if index < len(rows):
        out[row["id"]] = rows[index]["question"]
print(json.dumps(out))
"#;

fn write_repo(repo: &FakeRepo, dir: &Path) {
    for (name, bytes) in &repo.files {
        let path = dir.join(name);
        fs_err::create_dir_all(path.parent().expect("a file has a parent")).expect("mkdir");
        fs_err::write(&path, bytes).expect("write fixture file");
    }
}

#[test]
fn opencodereasoning_takes_the_question_python_datasets_gives_at_that_index() {
    let Some(python) = python() else { return };
    let fixture = datasets::opencodereasoning();
    let resolve = datasets::resolve_repos();
    let local = tempfile::tempdir().expect("tempdir");
    let repo_dir = |repo: &FakeRepo| local.path().join(repo.id.replace('/', "--"));
    for repo in std::iter::once(&fixture.repo).chain(&resolve) {
        write_repo(repo, &repo_dir(repo));
    }
    let by_id = |id: &str| {
        resolve
            .iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("{id} is a resolve fixture"))
    };
    let cache = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(&python)
        .args(["-c", RESOLVE])
        .arg(repo_dir(by_id("BAAI/TACO")))
        .arg(repo_dir(by_id("codeparrot/apps")))
        .arg(repo_dir(&fixture.repo).join("split_1/train-00000-of-00001.parquet"))
        .env("HF_HOME", cache.path())
        .env("HF_DATASETS_CACHE", cache.path().join("datasets"))
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
        .output()
        .unwrap_or_else(|e| panic!("run {python}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the reference resolution failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference: BTreeMap<String, String> =
        serde_json::from_str(stdout.lines().last().expect("python printed a line"))
            .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(
        reference.keys().collect::<Vec<_>>(),
        ["d1", "d2", "d3", "d6"],
        "the fixture's resolvable rows"
    );

    let spec = datasets_toml()
        .into_iter()
        .find(|s| s.name() == "opencodereasoning")
        .expect("datasets.toml has opencodereasoning");
    let mut repos = vec![fixture.repo.clone()];
    repos.extend(resolve.iter().cloned());
    let hub = FakeHub::start(repos);
    let hub_cache = tempfile::tempdir().expect("tempdir");
    let (prompts, manifest) = run(&spec, settings(&hub, hub_cache.path()));
    let question = |p: &gen_sources::Prompt| {
        assert_eq!(p.messages.len(), 1);
        assert_eq!(p.messages[0].role, Role::User);
        p.messages[0].content.clone()
    };
    for (id, expected) in &reference {
        match prompts.iter().find(|p| p.source_key.as_deref() == Some(id)) {
            Some(prompt) => assert_eq!(&question(prompt), expected, "row {id}"),
            // Kept under another row's id: the same question came first.
            None => assert!(
                prompts.iter().any(|p| &question(p) == expected),
                "row {id}: {expected:?} is not among the prompts"
            ),
        }
    }
    let resolved = prompts
        .iter()
        .filter(|p| p.source_key.as_deref().is_some_and(|k| k.starts_with('d')))
        .count();
    assert_eq!(resolved, 3, "d1, d2, d3 (d6 repeats c1)");
    assert_eq!(manifest.duplicates_within, 3);
}
