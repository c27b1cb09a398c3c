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

/// Turns that differ only in surrounding whitespace are duplicates (the manifest names the
/// key), in memory and spilled to disk; the kept prompt's id is still taken over its content
/// as it is, so it is the id an earlier `gen` gave it. (Before: not duplicates; a ShareGPT file
/// with such copies kept 880 of 5,037 of them.)
#[test]
fn turns_that_differ_only_in_surrounding_whitespace_are_duplicates() {
    let conversation = |user: &str, answer: &str| {
        serde_json::json!({"messages": [
            {"role": "user", "content": user},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "and then?"},
        ]})
        .to_string()
    };
    let rows = [
        conversation("  Why is the sky blue?\n", "Rayleigh scattering."),
        conversation("Why is the sky blue?", " Rayleigh scattering.  "),
        conversation("Why is the  sky blue?", "Rayleigh scattering."),
        conversation("What is rain?", "Water."),
    ];
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    let (dir, spec) = write_source(&rows, "messages-field = \"messages\"\nturns = \"history\"");
    for memory in [usize::MAX, 1] {
        let (prompts, manifest) = collect_with(&spec, dir.path(), memory);
        assert_eq!(manifest.duplicates_within, 1, "memory {memory}");
        assert_eq!(manifest.kept, 3, "memory {memory}");
        assert_eq!(
            manifest.dedup_key.as_deref(),
            Some(crate::prompt::DEDUP_KEY)
        );
        // The first of the two is kept, under the id of its content as it is.
        let kept = &prompts[0];
        assert_eq!(kept.messages[0].content, "  Why is the sky blue?\n");
        let exact = crate::prompt::content_hash(&kept.messages, kept.tools.as_ref());
        assert_eq!(kept.id, crate::prompt::prompt_id("t", exact, 0));
    }
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

fn write_tokenizer(dir: &Path, corpus: &[&str]) {
    crate::normalize::write_test_tokenizer(&dir.join("tokenizer.json"), corpus);
}

#[test]
fn prompts_outside_the_token_bounds_are_dropped() {
    let rows = [
        r#"{"prompt": "one two"}"#,
        r#"{"prompt": "one two three"}"#,
        r#"{"prompt": "What is Rust?"}"#,
        r#"{"prompt": "a b c d e f g"}"#,
        r#"{"prompt": "unseen words count too"}"#,
        r#"{"messages": [{"role": "system", "content": "be brief ."}, {"role": "user", "content": "hi there"}]}"#,
        r#"{"prompt": "x y z w v u t s"}"#,
        r#"{"prompt": "one two three"}"#,
    ];
    let settings = "tokenizer = \"tokenizer.json\"\nmin-prompt-tokens = 3\nmax-prompt-tokens = 6";
    let (dir, spec) = write_source(&rows, settings);
    write_tokenizer(
        dir.path(),
        &["one two three What is Rust ? a b c be brief . hi there"],
    );
    let (prompts, manifest) = collect(&spec, dir.path());
    let texts: Vec<&str> = prompts
        .iter()
        .map(|p| p.messages.last().expect("a user turn").content.as_str())
        .collect();
    // "be brief ." (3) + "hi there" (2): the system turn is part of the prompt as sent.
    assert_eq!(
        texts,
        [
            "one two three",
            "What is Rust?",
            "unseen words count too",
            "hi there"
        ]
    );
    let dropped: Vec<(&str, u64)> = manifest
        .dropped
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(dropped, [("too_few_tokens", 1), ("too_many_tokens", 2)]);
    assert_eq!(manifest.duplicates_within, 1);
    assert_eq!(manifest.kept, 4);
    assert_eq!(manifest.rows_read, 8);
    assert_eq!(
        manifest.examples[0].reason,
        "prompt has 2 tokens, fewer than `min-prompt-tokens` (3)"
    );
    assert_eq!(manifest.tokenizer, Some(dir.path().join("tokenizer.json")));
    assert!(
        manifest
            .tokenizer_checksum
            .as_deref()
            .is_some_and(|c| c.starts_with("xxh3-128:"))
    );

    // Without the system turn the same row has 2 tokens.
    let (dir, spec) = write_source(&rows, &format!("{settings}\nsystem-prompt = \"drop\""));
    write_tokenizer(dir.path(), &["one two three"]);
    let (_, manifest) = collect(&spec, dir.path());
    assert_eq!(manifest.dropped.get("too_few_tokens"), Some(&2));
}

#[test]
fn the_tokenizer_file_is_part_of_the_fingerprint() {
    let settings = "tokenizer = \"tokenizer.json\"\nmax-prompt-tokens = 6";
    let (dir, spec) = write_source(&[r#"{"prompt": "a"}"#], settings);
    write_tokenizer(dir.path(), &["a b c"]);
    let (_, first) = collect(&spec, dir.path());
    let (_, again) = collect(&spec, dir.path());
    write_tokenizer(dir.path(), &["a b c d"]);
    let (_, changed) = collect(&spec, dir.path());
    assert_eq!(first.fingerprint, again.fingerprint);
    assert_ne!(first.fingerprint, changed.fingerprint);
    assert_ne!(first.fingerprint, spec.fingerprint());
}

#[test]
fn a_missing_or_invalid_tokenizer_names_the_file() {
    let settings = "tokenizer = \"tokenizer.json\"\nmin-prompt-tokens = 1";
    let (dir, spec) = write_source(&[r#"{"prompt": "a"}"#], settings);
    let path = dir.path().join("tokenizer.json");
    let err = prepare(&spec, dir.path(), &mut |_| Ok(())).expect_err("missing");
    assert_eq!(
        err.to_string(),
        format!(
            "source `t`: cannot load tokenizer `{}`: no such file",
            path.display()
        )
    );
    fs_err::write(&path, "{\"not\": \"a tokenizer\"}").expect("write");
    let err = prepare(&spec, dir.path(), &mut |_| Ok(())).expect_err("invalid");
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "source `t`: cannot load tokenizer `{}`: ",
            path.display()
        )),
        "{message}"
    );
}

#[test]
fn invalid_utf8_rows_are_counted_and_shown_with_file_and_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines: [&[u8]; 3] = [
        br#"{"prompt": "a"}"#,
        b"{\"prompt\": \"caf\xe9\"}",
        br#"{"prompt": "b"}"#,
    ];
    fs_err::write(dir.path().join("data.jsonl"), lines.join(&b'\n')).expect("write");
    let spec: SourceSpec = toml::from_str("name = \"t\"\npath = \"data.jsonl\"").expect("spec");
    let (prompts, manifest) = collect(&spec, dir.path());
    assert_eq!(prompts.len(), 2);
    assert_eq!(manifest.rows_read, 3);
    assert_eq!(
        manifest.dropped,
        [("invalid_utf8".to_owned(), 1)].into_iter().collect()
    );
    assert_eq!(
        manifest.examples,
        [RowExample {
            file: dir.path().join("data.jsonl"),
            row: 1,
            reason: "invalid UTF-8 at byte 15 of the row".to_owned(),
        }]
    );
}

#[test]
fn a_malformed_json_array_element_is_one_dropped_row_shown_with_file_and_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs_err::write(
        dir.path().join("data.json"),
        br#"[{"prompt": "a"}, {"prompt": tru}, {"prompt": "b"}]"#,
    )
    .expect("write");
    let spec: SourceSpec = toml::from_str("name = \"t\"\npath = \"data.json\"").expect("spec");
    let (prompts, manifest) = collect(&spec, dir.path());
    let texts: Vec<_> = prompts
        .iter()
        .map(|p| (p.row, p.messages[0].content.as_str()))
        .collect();
    assert_eq!(texts, [(0, "a"), (2, "b")]);
    assert_eq!(manifest.rows_read, 3);
    assert_eq!(
        manifest.dropped,
        [("bad_json".to_owned(), 1)].into_iter().collect()
    );
    assert_eq!(manifest.examples[0].file, dir.path().join("data.json"));
    assert_eq!(manifest.examples[0].row, 1);
    assert!(
        manifest.examples[0]
            .reason
            .ends_with("of the element at byte 18"),
        "{:?}",
        manifest.examples[0]
    );
}

/// `rows` prompts with repeats: row `i` holds prompt `i % distinct`.
fn repeated_rows(rows: usize, distinct: usize) -> Vec<String> {
    (0..rows)
        .map(|i| format!(r#"{{"prompt": "question {}"}}"#, i % distinct))
        .collect()
}

fn collect_with(spec: &SourceSpec, dir: &Path, memory: usize) -> (Vec<Prompt>, Manifest) {
    let spill = tempfile::tempdir().expect("spill dir");
    let mut options = PrepareOptions {
        sample: SampleOptions {
            memory,
            dir: Some(spill.path().to_path_buf()),
        },
        ..PrepareOptions::new(HubSettings::from_vars(|_| None).with_offline(true))
    };
    let mut out = Vec::new();
    let manifest = prepare_with(spec, dir, &mut options, &mut |p| {
        out.push(p.clone());
        Ok(())
    })
    .expect("prepare");
    let left: Vec<_> = fs_err::read_dir(spill.path()).expect("read_dir").collect();
    assert!(left.is_empty(), "temporary files left behind: {left:?}");
    (out, manifest)
}

#[test]
fn a_sample_larger_than_memory_goes_to_disk_and_keeps_the_same_prompts() {
    // Every row kept, sampled, with and without repeats; spilled from the first prompt, in
    // the middle, and never.
    let cases = [
        (300, 300, "limit = 1000"),
        (300, 120, "limit = 1000"),
        (300, 120, "limit = 50"),
        (300, 300, "limit = 50\nseed = 3"),
        (300, 120, "limit = 1000\ndedup = false"),
        (300, 120, "limit = 40\ndedup = false"),
    ];
    for (rows, distinct, extra) in cases {
        let rows = repeated_rows(rows, distinct);
        let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
        let (dir, spec) = write_source(&rows, extra);
        let (in_memory, expected) = collect_with(&spec, dir.path(), usize::MAX);
        for memory in [1, 4 << 10] {
            let (spilled, manifest) = collect_with(&spec, dir.path(), memory);
            assert_eq!(spilled, in_memory, "{extra}, memory {memory}");
            assert_eq!(manifest.kept, expected.kept, "{extra}, memory {memory}");
            assert_eq!(manifest.rows_read, expected.rows_read);
            // The same counts in memory and on disk (before, copies of a prompt evicted from
            // a sample in memory counted as sampled out, on disk as duplicates).
            assert_eq!(
                (manifest.duplicates_within, manifest.sampled_out),
                (expected.duplicates_within, expected.sampled_out),
                "{extra}, memory {memory}"
            );
        }
        // A duplicate is a copy of a kept prompt: its rows beyond the first.
        if !extra.contains("dedup = false") {
            let copies: u64 = in_memory
                .iter()
                .map(|p| {
                    let text = format!(r#"{{"prompt": "{}"}}"#, p.messages[0].content);
                    rows.iter().filter(|r| **r == text).count() as u64 - 1
                })
                .sum();
            assert_eq!(expected.duplicates_within, copies, "{extra}");
        }
    }
}

#[test]
fn a_spill_directory_that_cannot_be_written_fails_the_source_with_its_path() {
    let rows = repeated_rows(50, 50);
    let rows: Vec<&str> = rows.iter().map(String::as_str).collect();
    let (dir, spec) = write_source(&rows, "");
    let missing = dir.path().join("no-such-dir");
    let mut options = PrepareOptions {
        sample: SampleOptions {
            memory: 1,
            dir: Some(missing.clone()),
        },
        ..PrepareOptions::new(HubSettings::from_vars(|_| None).with_offline(true))
    };
    let error = prepare_with(&spec, dir.path(), &mut options, &mut |_| Ok(()))
        .expect_err("no spill directory");
    let chain = format!(
        "{error}: {}",
        std::error::Error::source(&error).expect("cause")
    );
    assert!(
        chain.contains("failed to keep the sample on disk"),
        "{chain}"
    );
    assert!(chain.contains(&missing.display().to_string()), "{chain}");
}
