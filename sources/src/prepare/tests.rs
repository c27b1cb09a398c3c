//! Preparation end to end on local JSONL: counts, repeats, sampling, missing files.

use super::*;

fn write_source(rows: &[&str], extra: &str) -> (tempfile::TempDir, SourceSpec) {
    let dir = tempfile::tempdir().expect("tempdir");
    fs_err::write(dir.path().join("data.jsonl"), rows.join("\n")).expect("write");
    let spec =
        toml::from_str(&format!("name = \"t\"\npath = \"data.jsonl\"\n{extra}")).expect("spec");
    (dir, spec)
}

fn collect(spec: &SourceSpec, dir: &Path) -> (Vec<Prompt>, Manifest) {
    let mut out = Vec::new();
    let manifest = prepare(spec, dir, &mut |p| {
        out.push(p.clone());
        Ok(())
    })
    .expect("prepare");
    (out, manifest)
}

#[test]
fn counts_drops_and_duplicates() {
    let (dir, spec) = write_source(
        &[
            r#"{"prompt": "a"}"#,
            r#"{"prompt": "a"}"#,
            r#"oops"#,
            r#"{"prompt": ""}"#,
            r#"{"messages": [{"role": "user", "content": "b"}]}"#,
        ],
        "",
    );
    let (prompts, manifest) = collect(&spec, dir.path());
    let texts: Vec<_> = prompts
        .iter()
        .map(|p| p.messages[0].content.as_str())
        .collect();
    assert_eq!(texts, ["a", "b"]);
    assert_eq!(manifest.rows_read, 5);
    assert_eq!(manifest.kept, 2);
    assert_eq!(manifest.duplicates_within, 1);
    assert_eq!(manifest.dropped.get("bad_json"), Some(&1));
    assert_eq!(manifest.dropped.get("no_user_turn"), Some(&1));
    assert_eq!(manifest.examples[0].row, 2);
}

#[test]
fn repeats_get_distinct_ids_without_dedup() {
    let (dir, spec) = write_source(
        &[r#"{"prompt": "a"}"#, r#"{"prompt": "a"}"#],
        "dedup = false",
    );
    let (prompts, _) = collect(&spec, dir.path());
    assert_eq!(prompts.len(), 2);
    assert_eq!(prompts[1].id, format!("{}-1", prompts[0].id));
}

#[test]
fn sample_is_deterministic_bounded_and_seeded() {
    let rows: Vec<String> = (0..200)
        .map(|i| format!(r#"{{"prompt": "p{i}"}}"#))
        .collect();
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    let (dir, spec) = write_source(&rows, "limit = 10");
    let (first, manifest) = collect(&spec, dir.path());
    let (second, _) = collect(&spec, dir.path());
    assert_eq!(first.len(), 10);
    assert_eq!(manifest.sampled_out, 190);
    assert_eq!(first, second);
    assert!(
        first.windows(2).all(|w| w[0].row < w[1].row),
        "kept in input order"
    );
    let (dir2, reseeded) = write_source(&rows, "limit = 10\nseed = 7");
    let (third, _) = collect(&reseeded, dir2.path());
    assert_ne!(first, third);
}

#[test]
fn sampling_with_many_repeats_equals_deduplicating_first() {
    let rows: Vec<String> = (0..2000)
        .map(|i| format!(r#"{{"prompt": "p{}"}}"#, (i * 7919) % 300))
        .collect();
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    let (dir, spec) = write_source(&rows, "limit = 20");
    let (sampled, manifest) = collect(&spec, dir.path());
    let mut seen = HashSet::new();
    let unique: Vec<&str> = rows.iter().copied().filter(|r| seen.insert(*r)).collect();
    assert_eq!(unique.len(), 300);
    let (dir, spec) = write_source(&unique, "limit = 20");
    let (reference, _) = collect(&spec, dir.path());
    let ids = |prompts: &[Prompt]| prompts.iter().map(|p| p.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&sampled), ids(&reference));
    assert_eq!(
        manifest.rows_read,
        manifest.kept + manifest.duplicates_within + manifest.sampled_out
    );
}

#[test]
fn missing_files_name_the_pattern() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec: SourceSpec = toml::from_str("name = \"t\"\npath = \"nope/*.jsonl\"").expect("spec");
    let err = prepare(&spec, dir.path(), &mut |_| Ok(())).expect_err("no files");
    assert!(err.to_string().contains("nope/*.jsonl"), "{err}");
}
