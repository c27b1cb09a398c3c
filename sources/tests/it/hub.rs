//! Hub behaviour: errors for 401/403/404 naming repo, file and cause; the token sent but never
//! shown; retries; the cache layout Python shares; offline mode.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use gen_sources::hub::{HubError, fetch};
use gen_sources::{PrepareOptions, SourceError, SourceSpec, prepare_with};

use super::conformance::{error_chain, run, settings};
use crate::support::fake_hub::{FakeHub, FakeRepo, sha256_hex};

const TOKEN: &str = "hf_supersecret_value";

fn jsonl_repo(id: &str) -> FakeRepo {
    FakeRepo::new(
        id,
        vec![
            (
                "data/train.jsonl",
                b"{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n".to_vec(),
            ),
            ("data/other.jsonl", b"{\"prompt\": \"three\"}\n".to_vec()),
        ],
    )
}

fn spec(repo: &str, extra: &str) -> SourceSpec {
    toml::from_str(&format!(
        "name = \"t\"\nrepo = \"{repo}\"\nfiles = [\"data/train*.jsonl\"]\n{extra}"
    ))
    .expect("spec")
}

fn failure(spec: &SourceSpec, hub: gen_sources::HubSettings) -> String {
    let mut options = PrepareOptions {
        hub,
        seen_across: None,
        columnar: true,
        sample: Default::default(),
    };
    let error = prepare_with(spec, Path::new("."), &mut options, &mut |_| Ok(()))
        .expect_err("preparation fails");
    let chain = error_chain(&error);
    assert!(!chain.contains(TOKEN), "the token leaked: {chain}");
    chain
}

#[test]
fn refusals_name_repo_revision_file_and_likely_cause() {
    let hub = FakeHub::start(vec![jsonl_repo("o/gated").gated(TOKEN)]);
    let cache = tempfile::tempdir().expect("tempdir");
    let base = || settings(&hub, cache.path());

    let chain = failure(&spec("o/gated", ""), base());
    assert!(
        chain.contains("dataset `o/gated` at revision `main`: the Hub answered HTTP 401"),
        "{chain}"
    );
    assert!(
        chain.contains("gated or private and no token was sent: set `HF_TOKEN`"),
        "{chain}"
    );

    let chain = failure(
        &spec("o/gated", ""),
        base().with_token(Some("hf_wrong".to_owned())),
    );
    assert!(
        chain.contains("HTTP 403 (GatedRepo): access refused: a gated dataset"),
        "{chain}"
    );
}

/// The Hub answers a missing repository, revision and file alike with 404 (a missing
/// repository even with 401 when no token is sent); its `X-Error-Code` names which one is
/// missing, and so does the error.
#[test]
fn a_404_names_what_is_missing_repository_revision_or_file() {
    let mut broken = jsonl_repo("o/broken");
    broken.unresolvable.push("data/train-2.jsonl".to_owned());
    let hub = FakeHub::start(vec![broken]);
    let cache = tempfile::tempdir().expect("tempdir");
    let base = || settings(&hub, cache.path());

    let chain = failure(&spec("o/typo", ""), base());
    assert!(
        chain.contains(
            "dataset `o/typo` at revision `main`: the Hub answered HTTP 401 (RepoNotFound): the dataset does not exist: check the `repo` spelling (a private or gated dataset looks the same when no `HF_TOKEN` was set)"
        ),
        "{chain}"
    );
    let chain = failure(
        &spec("o/typo", ""),
        base().with_token(Some(TOKEN.to_owned())),
    );
    assert!(
        chain.contains("HTTP 404 (RepoNotFound): the dataset does not exist"),
        "{chain}"
    );

    let chain = failure(&spec("o/broken", "revision = \"v9\""), base());
    assert!(
        chain.contains(
            "dataset `o/broken` at revision `v9`: the Hub answered HTTP 404 (RevisionNotFound): the dataset exists but has no revision `v9`: check `revision`"
        ),
        "{chain}"
    );

    let chain = failure(&spec("o/broken", ""), base());
    assert!(
        chain.contains("file `data/train-2.jsonl`: the Hub answered HTTP 404 (EntryNotFound): the file does not exist at this revision"),
        "{chain}"
    );

    let no_match: SourceSpec =
        toml::from_str("name = \"t\"\nrepo = \"o/broken\"\nfiles = [\"nope/*.parquet\"]")
            .expect("spec");
    let chain = failure(&no_match, base());
    assert!(
        chain.contains("no file matches `nope/*.parquet` (3 files at commit"),
        "{chain}"
    );
    assert!(
        chain.starts_with("source `t`: failed to get the files from the Hub"),
        "{chain}"
    );
}

#[test]
fn the_token_is_sent_as_a_bearer_header() {
    let hub = FakeHub::start(vec![jsonl_repo("o/gated").gated(TOKEN)]);
    let cache = tempfile::tempdir().expect("tempdir");
    let (prompts, _) = run(
        &spec("o/gated", ""),
        settings(&hub, cache.path()).with_token(Some(TOKEN.to_owned())),
    );
    assert_eq!(prompts.len(), 2);
    let seen = hub.seen();
    assert!(!seen.is_empty());
    let bearer = format!("Bearer {TOKEN}");
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some(bearer.as_str()))
    );
}

#[test]
fn transient_failures_are_retried_with_backoff() {
    let hub = FakeHub::start(vec![jsonl_repo("o/flaky")]);
    let cache = tempfile::tempdir().expect("tempdir");
    hub.fail_next(2);
    let retrying = settings(&hub, cache.path()).with_retries(3, Duration::from_millis(1));
    let (prompts, _) = run(&spec("o/flaky", ""), retrying);
    assert_eq!(prompts.len(), 2);

    hub.fail_next(5);
    let other = tempfile::tempdir().expect("tempdir");
    let impatient = settings(&hub, other.path()).with_retries(1, Duration::from_millis(1));
    let chain = failure(&spec("o/flaky", ""), impatient);
    assert!(
        chain.contains("dataset `o/flaky` at revision `main`: request failed after 2 attempts"),
        "{chain}"
    );
}

#[test]
fn downloads_land_in_the_cache_layout_python_uses() {
    let repo = jsonl_repo("owner/name");
    let hub = FakeHub::start(vec![repo.clone()]);
    let cache = tempfile::tempdir().expect("tempdir");
    let download = fetch(
        "owner/name",
        "main",
        &["data/*.jsonl".to_owned()],
        &settings(&hub, cache.path()),
    )
    .expect("fetch");
    assert_eq!(download.commit, repo.sha);
    let root = cache.path().join("datasets--owner--name");
    assert_eq!(
        fs_err::read_to_string(root.join("refs/main")).expect("ref"),
        repo.sha
    );
    assert!(
        !root.join("refs").join(&repo.sha).exists(),
        "no ref named after the commit"
    );
    for file in &download.files {
        let bytes = &repo.files[&file.path];
        let etag = sha256_hex(bytes);
        let snapshot = root.join("snapshots").join(&repo.sha).join(&file.path);
        assert_eq!(file.local, snapshot);
        let link = std::fs::read_link(&snapshot).expect("a symlink into blobs");
        assert!(link.is_relative(), "{link:?}");
        assert_eq!(
            link.file_name().and_then(|n| n.to_str()),
            Some(etag.as_str())
        );
        assert_eq!(
            &fs_err::read(root.join("blobs").join(&etag)).expect("blob"),
            bytes
        );
        assert_eq!(file.etag.as_deref(), Some(etag.as_str()));
    }
}

/// Writes a cache entry exactly as Python's `huggingface_hub` lays it out.
fn python_cache(cache: &Path, repo: &str, commit: &str, files: &[(&str, &[u8])]) {
    let root = cache.join(format!("datasets--{}", repo.replace('/', "--")));
    fs_err::create_dir_all(root.join("refs")).expect("refs");
    fs_err::write(root.join("refs/main"), commit).expect("ref");
    for (path, bytes) in files {
        let etag = sha256_hex(bytes);
        fs_err::create_dir_all(root.join("blobs")).expect("blobs");
        fs_err::write(root.join("blobs").join(&etag), bytes).expect("blob");
        let link = root.join("snapshots").join(commit).join(path);
        fs_err::create_dir_all(link.parent().expect("parent")).expect("snapshot dir");
        let depth = path.matches('/').count() + 2;
        let target = format!("{}blobs/{etag}", "../".repeat(depth));
        std::os::unix::fs::symlink(target, &link).expect("symlink");
    }
}

#[test]
fn offline_mode_reads_a_prefilled_cache_and_never_the_network() {
    let cache = tempfile::tempdir().expect("tempdir");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    python_cache(
        cache.path(),
        "o/cached",
        commit,
        &[
            ("data/train.jsonl", b"{\"prompt\": \"from cache\"}\n"),
            ("README.md", b"# r\n"),
        ],
    );
    // Port 9 (discard) is never contacted: offline mode must not try.
    let offline = gen_sources::HubSettings::from_vars(|_| None)
        .with_endpoint("http://127.0.0.1:9")
        .with_cache_dir(cache.path())
        .with_offline(true);
    let (prompts, manifest) = run(&spec("o/cached", ""), offline.clone());
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].messages[0].content, "from cache");
    assert_eq!(manifest.commit.as_deref(), Some(commit));
    let etag = sha256_hex(b"{\"prompt\": \"from cache\"}\n");
    assert_eq!(
        manifest.checksums["data/train.jsonl"],
        format!("sha256:{etag}")
    );

    let error = fetch("o/missing", "main", &["*".to_owned()], &offline).expect_err("not cached");
    assert!(matches!(error, HubError::NotCached { .. }));
    assert!(
        error.to_string().contains("`HF_HUB_OFFLINE` is set"),
        "{error}"
    );
}

#[test]
fn offline_mode_reuses_an_earlier_download() {
    let cache = tempfile::tempdir().expect("tempdir");
    let online = {
        let hub = FakeHub::start(vec![jsonl_repo("o/n")]);
        run(&spec("o/n", ""), settings(&hub, cache.path())).0
    };
    let offline = gen_sources::HubSettings::from_vars(|_| None)
        .with_endpoint("http://127.0.0.1:9")
        .with_cache_dir(cache.path())
        .with_offline(true);
    assert_eq!(run(&spec("o/n", ""), offline).0, online);
}

#[test]
fn corrupt_parquet_from_the_hub_names_the_file() {
    let repo = FakeRepo::new(
        "o/corrupt",
        vec![(
            "data/train-00000.parquet",
            b"PAR1 this is not parquet".to_vec(),
        )],
    );
    let hub = FakeHub::start(vec![repo]);
    let cache = tempfile::tempdir().expect("tempdir");
    let spec: SourceSpec =
        toml::from_str("name = \"t\"\nrepo = \"o/corrupt\"\nfiles = [\"data/*.parquet\"]")
            .expect("spec");
    let mut options = PrepareOptions {
        hub: settings(&hub, cache.path()),
        seen_across: None,
        columnar: true,
        sample: Default::default(),
    };
    let error =
        prepare_with(&spec, Path::new("."), &mut options, &mut |_| Ok(())).expect_err("corrupt");
    assert!(matches!(error, SourceError::Read { .. }));
    let chain = error_chain(&error);
    assert!(
        chain.contains("datasets--o--corrupt/snapshots/")
            && chain.contains("data/train-00000.parquet"),
        "{chain}"
    );
}

#[test]
fn an_earlier_source_wins_across_sources() {
    let hub = FakeHub::start(vec![jsonl_repo("o/first"), jsonl_repo("o/second")]);
    let cache = tempfile::tempdir().expect("tempdir");
    let mut seen = HashSet::new();
    let mut kept = Vec::new();
    let mut duplicates = Vec::new();
    for (repo, files) in [
        ("o/first", "data/train*.jsonl"),
        ("o/second", "data/*.jsonl"),
    ] {
        let spec: SourceSpec = toml::from_str(&format!(
            "name = \"t\"\nrepo = \"{repo}\"\nfiles = [\"{files}\"]"
        ))
        .expect("spec");
        let mut options = PrepareOptions {
            hub: settings(&hub, cache.path()),
            seen_across: Some(&mut seen),
            columnar: true,
            sample: Default::default(),
        };
        let mut count = 0;
        let manifest = prepare_with(&spec, Path::new("."), &mut options, &mut |_| {
            count += 1;
            Ok(())
        })
        .expect("prepare");
        kept.push(count);
        duplicates.push(manifest.duplicates_across);
    }
    assert_eq!(kept, [2, 1]);
    assert_eq!(duplicates, [0, 2]);
}

#[test]
fn large_files_follow_the_cdn_redirect_resume_in_chunks_and_report_progress() {
    use std::sync::{Arc, Mutex};

    use gen_sources::hub::{DownloadProgress, PROGRESS_STEP};

    // ~24 MB: three of hf-hub's 10 MB chunks.
    let rows: String = (0..120_000)
        .map(|i| format!("{{\"prompt\": \"question {i:06} {}\"}}\n", "x".repeat(170)))
        .collect();
    let size = rows.len() as u64;
    let mut repo = FakeRepo::new("o/large", vec![("data/train.jsonl", rows.into_bytes())]);
    repo.redirect = true;
    let hub = FakeHub::start(vec![repo]);
    // Requests: listing, metadata (302 + CDN), chunk 1 (302 + CDN), then chunk 2's 302 fails.
    hub.fail_request(6);
    let cache = tempfile::tempdir().expect("tempdir");
    let events: Arc<Mutex<Vec<DownloadProgress>>> = Arc::default();
    let sink = Arc::clone(&events);
    let progress = settings(&hub, cache.path())
        .with_retries(2, Duration::from_millis(1))
        .with_progress(Arc::new(move |event| {
            sink.lock().expect("not poisoned").push(event.clone());
        }));
    let (prompts, manifest) = run(&spec("o/large", "limit = 3"), progress);
    assert_eq!(prompts.len(), 3);
    assert_eq!(manifest.rows_read, 120_000);
    let events = events.lock().expect("not poisoned");
    assert_eq!(
        events.first().map(|e| (e.downloaded, e.total)),
        Some((0, size))
    );
    assert_eq!(events.last().map(|e| e.downloaded), Some(size));
    assert!(
        events.len() as u64 >= size / PROGRESS_STEP,
        "{} events",
        events.len()
    );
    assert!(
        events
            .iter()
            .all(|e| e.repo == "o/large" && e.file == "data/train.jsonl")
    );
    let ranges: Vec<String> = hub
        .seen()
        .into_iter()
        .filter(|s| s.path.starts_with("/cdn/"))
        .map(|s| s.range.unwrap_or_default())
        .collect();
    let count = |range: &str| ranges.iter().filter(|r| *r == range).count();
    // The failed second chunk was retried; the committed first chunk was not fetched again.
    assert_eq!(count("bytes=0-9999999"), 1, "{ranges:?}");
    assert_eq!(count("bytes=10000000-19999999"), 1, "{ranges:?}");
    assert_eq!(
        count("bytes=0-0"),
        2,
        "one metadata probe per attempt: {ranges:?}"
    );
}

#[test]
fn resolved_prompts_name_their_origin_and_an_unreachable_dataset_fails_the_source() {
    use crate::support::datasets;

    let specs = super::conformance::datasets_toml();
    let spec = specs
        .iter()
        .find(|s| s.name() == "opencodereasoning")
        .expect("datasets.toml has opencodereasoning");
    let fixture = datasets::opencodereasoning();
    let mut repos = datasets::resolve_repos();
    repos.push(fixture.repo.clone());
    let hub = FakeHub::start(repos.clone());
    let cache = tempfile::tempdir().expect("tempdir");
    let (_, manifest) = run(spec, settings(&hub, cache.path()));
    let origins: Vec<(&str, &str, &str, Vec<String>)> = manifest
        .resolved_from
        .iter()
        .map(|r| {
            (
                r.dataset.as_str(),
                r.split.as_str(),
                r.repo.as_str(),
                r.files
                    .iter()
                    .map(|f| f.to_string_lossy().into_owned())
                    .collect(),
            )
        })
        .collect();
    assert_eq!(
        origins,
        [
            (
                "taco",
                "train",
                "BAAI/TACO",
                vec![
                    "ALL/train-00000-of-00002.parquet".to_owned(),
                    "ALL/train-00001-of-00002.parquet".to_owned()
                ]
            ),
            (
                "apps",
                "test",
                "codeparrot/apps",
                vec!["test.jsonl".to_owned()]
            ),
            (
                "taco",
                "test",
                "BAAI/TACO",
                vec!["ALL/test-00000-of-00001.parquet".to_owned()]
            ),
            (
                "apps",
                "train",
                "codeparrot/apps",
                vec!["train.jsonl".to_owned()]
            ),
        ]
    );
    assert_eq!(manifest.resolved_from[0].commit, repos[0].sha);
    assert!(
        manifest.resolved_from[0].checksums["ALL/train-00000-of-00002.parquet"]
            .starts_with("sha256:")
    );

    // TACO gated (no token here), or not on the Hub at all: its rows would be lost, so the
    // source fails (the next run prepares it again) instead of a manifest without them.
    let gated = {
        let mut repos = repos.clone();
        repos[0] = repos[0].clone().gated(TOKEN);
        repos
    };
    let missing: Vec<FakeRepo> = repos
        .iter()
        .filter(|r| r.id != "BAAI/TACO")
        .cloned()
        .collect();
    for (case, repos, cause) in [
        ("gated", gated, "HTTP 401 (GatedRepo)"),
        ("missing", missing, "HTTP 401 (RepoNotFound)"),
    ] {
        let hub = FakeHub::start(repos);
        let cache = tempfile::tempdir().expect("tempdir");
        let chain = failure(spec, settings(&hub, cache.path()));
        assert!(
            chain.starts_with(
                "source `opencodereasoning`: cannot get `resolve.taco` (split `train`), where the prompts of its `-` rows are; run again once the Hub gives it, or leave those rows out on purpose with `exclude = { input = [\"-\"] }`"
            ),
            "{case}: {chain}"
        );
        assert!(
            chain.contains(&format!(
                "dataset `BAAI/TACO` at revision `main`: the Hub answered {cause}"
            )),
            "{case}: {chain}"
        );
    }
}
