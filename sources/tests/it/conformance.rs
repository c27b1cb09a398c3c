//! The conformance test: every `[[source]]` of the real `datasets.toml`, unchanged, against
//! fixtures in its dataset's real layout and schema, served by the fake hub.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gen_sources::{HubSettings, Manifest, PrepareOptions, Prompt, Role, SourceSpec, prepare_with};
use serde::Deserialize;

use crate::support::datasets::{self, Expected};
use crate::support::fake_hub::{FakeHub, sha256_hex};

#[derive(Deserialize)]
struct DatasetsFile {
    source: Vec<SourceSpec>,
}

pub fn datasets_toml() -> Vec<SourceSpec> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../datasets.toml");
    let text = fs_err::read_to_string(&path).expect("datasets.toml is readable");
    toml::from_str::<DatasetsFile>(&text)
        .expect("datasets.toml parses")
        .source
}

/// The settings `gen prep` would take from an environment with `HF_ENDPOINT` pointing at the
/// fake hub and `HF_HUB_CACHE` at `cache` (and nothing else: no token, online).
pub fn settings(hub: &FakeHub, cache: &Path) -> HubSettings {
    let cache = cache.to_string_lossy().into_owned();
    HubSettings::from_vars(|name| match name {
        "HF_ENDPOINT" => Some(hub.endpoint.clone()),
        "HF_HUB_CACHE" => Some(cache.clone()),
        _ => None,
    })
    .with_retries(0, Duration::from_millis(1))
}

pub fn run(spec: &SourceSpec, hub: HubSettings) -> (Vec<Prompt>, Manifest) {
    run_with(spec, PrepareOptions::new(hub))
}

/// Runs with `columnar` off: every Parquet row through the generic JSON path.
pub fn run_generic(spec: &SourceSpec, hub: HubSettings) -> (Vec<Prompt>, Manifest) {
    run_with(
        spec,
        PrepareOptions {
            columnar: false,
            ..PrepareOptions::new(hub)
        },
    )
}

fn run_with(spec: &SourceSpec, mut options: PrepareOptions<'_>) -> (Vec<Prompt>, Manifest) {
    let mut prompts = Vec::new();
    let manifest = prepare_with(spec, Path::new("."), &mut options, &mut |p| {
        prompts.push(p.clone());
        Ok(())
    })
    .unwrap_or_else(|e| panic!("source `{}`: {}", spec.name(), error_chain(&e)));
    (prompts, manifest)
}

pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!("\n  caused by: {cause}"));
        source = cause.source();
    }
    text
}

fn role(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn check(expected: &Expected, prompts: &[Prompt], manifest: &Manifest) {
    let name = expected.source;
    let got: Vec<Vec<(&str, String)>> = prompts
        .iter()
        .map(|p| {
            p.messages
                .iter()
                .map(|m| (role(m.role), m.content.clone()))
                .collect()
        })
        .collect();
    assert_eq!(got, expected.prompts, "source `{name}`: prompts");
    if let Some(keys) = &expected.keys {
        let got: Vec<&str> = prompts
            .iter()
            .filter_map(|p| p.source_key.as_deref())
            .collect();
        assert_eq!(&got, keys, "source `{name}`: source keys");
    }
    assert!(
        prompts
            .iter()
            .all(|p| p.source == name && p.id.starts_with(&format!("{name}-")))
    );
    let dropped: Vec<(&str, u64)> = manifest
        .dropped
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        dropped, expected.dropped,
        "source `{name}`: dropped {:?}",
        manifest.examples
    );
    assert_eq!(
        manifest.duplicates_within, expected.duplicates,
        "source `{name}`: duplicates"
    );
    assert_eq!(
        manifest.rows_read, expected.rows_read,
        "source `{name}`: rows read"
    );
    assert_eq!(manifest.kept, prompts.len() as u64);
}

#[test]
fn every_source_of_datasets_toml_extracts_its_fixture_exactly() {
    let fixtures = datasets::all();
    let specs = datasets_toml();
    let names: Vec<&str> = specs.iter().map(SourceSpec::name).collect();
    let expected_names: Vec<&str> = fixtures.iter().map(|f| f.expected.source).collect();
    assert_eq!(
        names, expected_names,
        "datasets.toml lists the ten sources in order"
    );
    let mut repos: Vec<_> = fixtures.iter().map(|f| f.repo.clone()).collect();
    repos.extend(datasets::resolve_repos());
    let hub = FakeHub::start(repos);
    let cache = tempfile::tempdir().expect("tempdir");
    for (spec, fixture) in specs.iter().zip(&fixtures) {
        let problems: Vec<String> = spec.check().into_iter().map(|p| p.message).collect();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(spec.limit(), 10_000);
        let (prompts, manifest) = run(spec, settings(&hub, cache.path()));
        check(&fixture.expected, &prompts, &manifest);
        assert_eq!(manifest.repo.as_deref(), Some(fixture.repo.id.as_str()));
        assert_eq!(manifest.revision.as_deref(), Some("main"));
        assert_eq!(manifest.commit.as_deref(), Some(fixture.repo.sha.as_str()));
        for file in &manifest.files {
            let name = file.to_string_lossy().into_owned();
            let bytes = &fixture.repo.files[&name];
            assert_eq!(
                manifest.checksums[&name],
                format!("sha256:{}", sha256_hex(bytes))
            );
        }
        // Ids are stable: a second run (from the cache now) gives the same prompts.
        let (again, _) = run(spec, settings(&hub, cache.path()));
        assert_eq!(again, prompts, "source `{}` is deterministic", spec.name());
        // The columnar Parquet path and the generic JSON path agree exactly.
        let (generic, generic_manifest) = run_generic(spec, settings(&hub, cache.path()));
        assert_eq!(generic, prompts, "source `{}`: both paths", spec.name());
        assert_eq!(
            generic_manifest,
            manifest,
            "source `{}`: both paths",
            spec.name()
        );
    }
    let seen = hub.seen();
    let downloads: Vec<_> = seen
        .iter()
        .filter(|s| s.path.contains("/resolve/"))
        .collect();
    assert!(
        downloads.iter().all(|s| s.range.is_some()),
        "hf-hub always asks for ranges"
    );
    let downloads = downloads.len();
    let files: usize = specs
        .iter()
        .map(|s| {
            let manifest = run(s, settings(&hub, cache.path())).1;
            let resolved: usize = manifest.resolved_from.iter().map(|r| r.files.len()).sum();
            manifest.files.len() + resolved
        })
        .sum();
    // Every file was downloaded by the first run only (one metadata request + one chunk each).
    assert_eq!(
        downloads,
        files * 2,
        "cached files are not downloaded again"
    );
}
