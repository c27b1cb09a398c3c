//! Compatibility with the real Python packages (`GEN_TEST_PYTHON`, a venv with `datasets` and
//! so `huggingface_hub`, set by `scripts/test.sh`): Python's `huggingface_hub` and gen reuse
//! each other's downloads from the shared Hub cache, and OpenCodeReasoning's `-` inputs resolve
//! to the question Python's `load_dataset` gives at the row's `split` and `index`, done the way
//! the dataset card says.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;

use gen_sources::{HubSettings, Role, SourceSpec};

use crate::support::datasets;
use crate::support::fake_hub::{FakeHub, FakeRepo};

use super::conformance::{datasets_toml, run, settings};

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

/// `hf_hub_download` of a dataset repository's `data/train.jsonl` at `main`, online or (with
/// `HF_HUB_OFFLINE=1`) from the cache only; prints `{"commit", "text"}`.
const DOWNLOAD: &str = r#"
import json, os, sys
from huggingface_hub import hf_hub_download
path = hf_hub_download(sys.argv[1], "data/train.jsonl", repo_type="dataset", revision="main")
with open(path) as f:
    text = f.read()
commit = os.path.basename(os.path.dirname(os.path.dirname(path)))
print(json.dumps({"commit": commit, "text": text}))
"#;

/// Runs [`DOWNLOAD`] for `repo` against `endpoint` with `cache` as `HF_HUB_CACHE`.
fn python_download(
    python: &str,
    repo: &str,
    endpoint: &str,
    cache: &Path,
    offline: bool,
) -> serde_json::Value {
    gen_tests::python::run_json(
        python,
        DOWNLOAD,
        &[OsStr::new(repo)],
        &[
            ("HF_ENDPOINT", OsStr::new(endpoint)),
            ("HF_HUB_CACHE", cache.as_os_str()),
            (
                "HF_HUB_OFFLINE",
                OsStr::new(if offline { "1" } else { "0" }),
            ),
        ],
        &format!("huggingface_hub hf_hub_download from {repo}"),
    )
}

fn jsonl_repo(id: &str, prompts: &[&str]) -> FakeRepo {
    let rows: String = prompts
        .iter()
        .map(|p| format!("{{\"prompt\": \"{p}\"}}\n"))
        .collect();
    FakeRepo::new(
        id,
        vec![
            ("data/train.jsonl", rows.into_bytes()),
            ("README.md", b"# r\n".to_vec()),
        ],
    )
}

fn jsonl_spec(repo: &str) -> SourceSpec {
    toml::from_str(&format!(
        "name = \"t\"\nrepo = \"{repo}\"\nfiles = [\"data/*.jsonl\"]\n"
    ))
    .expect("spec")
}

fn texts(prompts: &[gen_sources::Prompt]) -> Vec<&str> {
    let mut texts: Vec<&str> = prompts
        .iter()
        .map(|p| p.messages[0].content.as_str())
        .collect();
    texts.sort_unstable();
    texts
}

#[test]
fn python_huggingface_hub_and_gen_reuse_each_others_downloads() {
    let Some(python) = gen_tests::python::with_datasets() else {
        return;
    };
    let by_python = jsonl_repo("o/by-python", &["p1", "p2"]);
    let by_gen = jsonl_repo("o/by-gen", &["g1", "g2", "g3"]);
    let hub = FakeHub::start(vec![by_python.clone(), by_gen.clone()]);
    let cache = tempfile::tempdir().expect("tempdir");

    // Python downloads; gen, offline, reads Python's download.
    let python_got = python_download(&python, "o/by-python", &hub.endpoint, cache.path(), false);
    assert_eq!(python_got["commit"], by_python.sha.as_str());
    let offline = HubSettings::from_vars(|_| None)
        .with_endpoint("http://127.0.0.1:9")
        .with_cache_dir(cache.path())
        .with_offline(true);
    let (prompts, manifest) = run(&jsonl_spec("o/by-python"), offline);
    assert_eq!(texts(&prompts), ["p1", "p2"]);
    assert_eq!(manifest.commit.as_deref(), Some(by_python.sha.as_str()));

    // gen downloads; Python, offline, reads gen's download without asking the Hub.
    let (prompts, _) = run(&jsonl_spec("o/by-gen"), settings(&hub, cache.path()));
    assert_eq!(texts(&prompts), ["g1", "g2", "g3"]);
    let requests = hub.seen().len();
    let python_got = python_download(&python, "o/by-gen", &hub.endpoint, cache.path(), true);
    assert_eq!(hub.seen().len(), requests, "offline Python asked the Hub");
    assert_eq!(python_got["commit"], by_gen.sha.as_str());
    assert_eq!(
        python_got["text"],
        String::from_utf8_lossy(&by_gen.files["data/train.jsonl"]).as_ref()
    );
}

fn write_repo(repo: &FakeRepo, dir: &Path) {
    for (name, bytes) in &repo.files {
        let path = dir.join(name);
        fs_err::create_dir_all(path.parent().expect("a file has a parent")).expect("mkdir");
        fs_err::write(&path, bytes).expect("write fixture file");
    }
}

#[test]
fn opencodereasoning_takes_the_question_python_datasets_gives_at_that_index() {
    let Some(python) = gen_tests::python::with_datasets() else {
        return;
    };
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
    let (taco, apps) = (
        repo_dir(by_id("BAAI/TACO")),
        repo_dir(by_id("codeparrot/apps")),
    );
    let split_1 = repo_dir(&fixture.repo).join("split_1/train-00000-of-00001.parquet");
    let reference = gen_tests::python::run_json(
        &python,
        RESOLVE,
        &[taco.as_os_str(), apps.as_os_str(), split_1.as_os_str()],
        &[],
        "the reference resolution",
    );
    let reference: BTreeMap<String, String> =
        serde_json::from_value(reference).expect("{id: question}");
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
