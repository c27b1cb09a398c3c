//! The malformed-input corpus: each case is one source of a single `gen run`, with the outcome
//! it must have — rows counted as dropped with a reason in `manifest.json`, or the source
//! failed with a message naming the file, or (a source that yields no prompt at all) failed
//! with what dropped its rows. Never a panic, never exit code 101.

use std::fmt::Write as _;

use serde_json::Value;

use crate::support::{Config, Project, phase_of, sources};
use gen_tests::fake_openai::{FakeOpenAi, Knobs};

/// What a malformed input must lead to.
#[derive(Debug)]
enum Expect {
    /// Prepared: `rows_read`, `kept`, and exactly these `dropped` counters (plus duplicates).
    Rows {
        read: u64,
        kept: u64,
        dropped: &'static [(&'static str, u64)],
        duplicates: u64,
    },
    /// The source failed; its `prep.log` names the file and says this.
    Fails(&'static str),
    /// The source failed without a bad file: it yields no prompt, and its `prep.log` says
    /// this.
    Empty(&'static str),
}

use Expect::{Empty, Fails, Rows};

const fn rows(read: u64, kept: u64, dropped: &'static [(&'static str, u64)]) -> Expect {
    Rows {
        read,
        kept,
        dropped,
        duplicates: 0,
    }
}

struct Case {
    name: &'static str,
    file: &'static str,
    bytes: Vec<u8>,
    /// Extra `[[source]]` lines.
    extra: &'static str,
    expect: Expect,
}

fn case(name: &'static str, file: &'static str, bytes: impl Into<Vec<u8>>, expect: Expect) -> Case {
    Case {
        name,
        file,
        bytes: bytes.into(),
        extra: "",
        expect,
    }
}

const OK: &str = "{\"prompt\": \"a fine row\"}\n";

fn with_ok(bad: &str) -> Vec<u8> {
    format!("{OK}{bad}").into_bytes()
}

fn zstd_of(text: &str) -> Vec<u8> {
    zstd::encode_all(text.as_bytes(), 3).expect("zstd")
}

fn cases() -> Vec<Case> {
    let many: String = (0..3000)
        .map(|i| format!("{{\"prompt\": \"row {i}\"}}\n"))
        .collect();
    let big = zstd_of(&many);
    let huge = format!("{{\"prompt\": \"{}\"}}\n", "x".repeat(4 << 20));
    let deep = format!(
        "{{\"prompt\": {}{}}}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let mut gz = Vec::new();
    gz.extend_from_slice(&[0x1f, 0x8b, 0x08, 0x00]);
    gz.extend_from_slice(b"not really gzip at all");
    let mut utf8 = OK.as_bytes().to_vec();
    utf8.extend_from_slice(b"{\"prompt\": \"caf\xe9 \xff\xfe\"}\n");
    let mut nul = OK.as_bytes().to_vec();
    nul.extend_from_slice(b"{\"prompt\": \"a\x00b\"}\n");
    vec![
        case(
            "bad_json",
            "x.jsonl",
            with_ok("not json\n"),
            rows(2, 1, &[("bad_json", 1)]),
        ),
        case(
            "truncated_line",
            "x.jsonl",
            with_ok("{\"prompt\": \"cut"),
            rows(2, 1, &[("bad_json", 1)]),
        ),
        case(
            "array_row",
            "x.jsonl",
            with_ok("[1, 2]\n"),
            rows(2, 1, &[("not_an_object", 1)]),
        ),
        case(
            "number_row",
            "x.jsonl",
            with_ok("42\n"),
            rows(2, 1, &[("not_an_object", 1)]),
        ),
        case(
            "string_row",
            "x.jsonl",
            with_ok("\"hello\"\n"),
            rows(2, 1, &[("not_an_object", 1)]),
        ),
        case(
            "null_row",
            "x.jsonl",
            with_ok("null\n"),
            rows(2, 1, &[("not_an_object", 1)]),
        ),
        case(
            "prompt_number",
            "x.jsonl",
            with_ok("{\"prompt\": 5}\n"),
            rows(2, 1, &[("wrong_type", 1)]),
        ),
        case(
            "prompt_null",
            "x.jsonl",
            with_ok("{\"prompt\": null}\n"),
            rows(2, 1, &[("no_user_turn", 1)]),
        ),
        case(
            "prompt_list",
            "x.jsonl",
            with_ok("{\"prompt\": [1, 2]}\n"),
            rows(2, 1, &[("wrong_type", 1)]),
        ),
        case(
            "messages_string",
            "x.jsonl",
            with_ok("{\"messages\": \"hi\"}\n"),
            rows(2, 1, &[("wrong_type", 1)]),
        ),
        // A tool's result that answers no call ends the conversation; the row is kept with the
        // user turn before it.
        case(
            "tool_turn",
            "x.jsonl",
            with_ok(concat!(
                "{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}, ",
                "{\"role\": \"tool\", \"content\": \"18\"}]}\n"
            )),
            rows(2, 2, &[]),
        ),
        case(
            "role_missing",
            "x.jsonl",
            with_ok("{\"messages\": [{\"content\": \"x\"}]}\n"),
            rows(2, 1, &[("missing_field", 1)]),
        ),
        case(
            "unknown_role",
            "x.jsonl",
            with_ok("{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}\n"),
            rows(2, 1, &[("unknown_role", 1)]),
        ),
        case(
            "only_empty_turns",
            "x.jsonl",
            with_ok(
                "{\"messages\": [{\"role\": \"user\", \"content\": \"\"}, {\"role\": \"assistant\", \"content\": \"\"}]}\n",
            ),
            rows(2, 1, &[("no_user_turn", 1)]),
        ),
        case(
            "only_assistant",
            "x.jsonl",
            with_ok("{\"messages\": [{\"role\": \"assistant\", \"content\": \"hi\"}]}\n"),
            rows(2, 1, &[("no_user_turn", 1)]),
        ),
        case(
            "empty_conversation",
            "x.jsonl",
            with_ok("{\"messages\": []}\n"),
            rows(2, 1, &[("no_user_turn", 1)]),
        ),
        case(
            "whitespace_prompt",
            "x.jsonl",
            with_ok("{\"prompt\": \"   \"}\n"),
            rows(2, 1, &[("no_user_turn", 1)]),
        ),
        case(
            "unknown_fields",
            "x.jsonl",
            with_ok("{\"foo\": 1}\n"),
            rows(2, 1, &[("missing_field", 1)]),
        ),
        case(
            "empty_object",
            "x.jsonl",
            with_ok("{}\n"),
            rows(2, 1, &[("missing_field", 1)]),
        ),
        case(
            "invalid_utf8",
            "x.jsonl",
            utf8,
            rows(2, 1, &[("invalid_utf8", 1)]),
        ),
        case(
            "lone_surrogate",
            "x.jsonl",
            with_ok("{\"prompt\": \"\\ud800\"}\n"),
            rows(2, 1, &[("bad_json", 1)]),
        ),
        case(
            "raw_nul_byte",
            "x.jsonl",
            nul,
            rows(2, 1, &[("bad_json", 1)]),
        ),
        case(
            "byte_order_mark",
            "x.jsonl",
            format!("\u{feff}{OK}{OK}"),
            rows(2, 1, &[("bad_json", 1)]),
        ),
        case(
            "crlf_lines",
            "x.jsonl",
            "{\"prompt\": \"one\"}\r\n{\"prompt\": \"two\"}\r\n",
            rows(2, 2, &[]),
        ),
        case("huge_row", "x.jsonl", huge.clone(), rows(1, 1, &[])),
        Case {
            extra: "max-chars = 1000",
            ..case(
                "huge_row_over_max_chars",
                "x.jsonl",
                huge,
                Empty("has no prompt: all 1 rows were dropped (1 `too_long`)"),
            )
        },
        case(
            "deep_nesting",
            "x.jsonl",
            with_ok(&deep),
            rows(2, 1, &[("bad_json", 1)]),
        ),
        case(
            "empty_file",
            "x.jsonl",
            "",
            Empty("has no prompt: its input has no rows"),
        ),
        case(
            "blank_lines_only",
            "x.jsonl",
            "\n\n   \n\n",
            Empty("has no prompt: its input has no rows"),
        ),
        case(
            "mostly_dropped",
            "x.jsonl",
            with_ok("{\"prompt\": 5}\n{\"prompt\": 6}\n"),
            rows(3, 1, &[("wrong_type", 2)]),
        ),
        case(
            "repeated_rows",
            "x.jsonl",
            format!("{OK}{OK}{OK}"),
            Rows {
                read: 3,
                kept: 1,
                dropped: &[],
                duplicates: 2,
            },
        ),
        Case {
            extra: "prompt-field = \"question\"",
            ..case(
                "wrong_schema",
                "x.jsonl",
                "{\"text\": \"what?\"}\n{\"text\": \"why?\"}\n",
                Empty(
                    "`prompt-field = \"question\"` names a field no row has (2 rows read); the data's fields are `text`: set `prompt-field`",
                ),
            )
        },
        case(
            "json_array_empty",
            "x.json",
            "[]",
            Empty("has no prompt: its input has no rows"),
        ),
        case(
            "json_array_mixed",
            "x.json",
            "[1, {\"prompt\": \"a\"}, \"s\"]",
            rows(3, 1, &[("not_an_object", 2)]),
        ),
        case(
            "json_array_truncated",
            "x.json",
            "[{\"prompt\": \"a\"}, {\"prompt\": ",
            Fails("invalid JSON array after 1 rows"),
        ),
        case(
            "json_array_not_array",
            "x.json",
            "{\"prompt\": \"x\"}",
            Fails("invalid JSON array after 0 rows"),
        ),
        case(
            "json_array_garbage",
            "x.json",
            "<html>502 Bad Gateway</html>",
            Fails("invalid JSON array after 0 rows"),
        ),
        case(
            "zstd_corrupt",
            "x.jsonl.zst",
            b"\x28\xb5\x2f\xfd this is not zstd".to_vec(),
            Fails("Data corruption detected"),
        ),
        case(
            "zstd_truncated",
            "x.jsonl.zst",
            big[..big.len() / 2].to_vec(),
            Fails("incomplete frame"),
        ),
        case(
            "gzip_corrupt",
            "x.jsonl.gz",
            gz,
            Fails("corrupt deflate stream"),
        ),
        case(
            "parquet_garbage",
            "x.parquet",
            "definitely not parquet",
            Fails("Invalid Parquet file. Corrupt footer"),
        ),
        case(
            "parquet_empty",
            "x.parquet",
            "",
            Fails("Parquet file too small. Size is 0"),
        ),
        case(
            "parquet_magic_only",
            "x.parquet",
            "PAR1PAR1",
            Fails("Parquet file too small. Size is 8"),
        ),
        case(
            "path_is_a_directory",
            "x.jsonl/inner.txt",
            "",
            Fails("Is a directory"),
        ),
    ]
}

#[tokio::test]
async fn every_malformed_input_has_its_expected_outcome_and_nothing_panics() {
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = Project::new();
    let cases = cases();
    assert!(cases.len() >= 30);
    let mut config = Config::new(&server.url())
        .run("max-parallel-prep = 6")
        .generation("max-tokens = 8");
    for case in &cases {
        let file = format!("data/{}/{}", case.name, case.file);
        project.write(&file, &case.bytes);
        // The directory case points at the directory, not the file inside it.
        let path = file.trim_end_matches("/inner.txt");
        config = config.source_with(case.name, path, case.extra);
    }
    project.config(&config);
    let out = project.run(&["run", "cfg.toml"]).await;
    assert_eq!(out.code, Some(1), "some sources fail: {}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    let status = project.status().expect("status.json");

    let mut report = String::new();
    let mut mismatches = Vec::new();
    for case in &cases {
        let dir = project.run_path(&format!("sources/{}", case.name));
        let log = std::fs::read_to_string(dir.join("prep.log")).unwrap_or_default();
        let worker: Value = std::fs::read(dir.join("worker.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let exit = worker["report"]["exit"].to_string();
        let phase = phase_of(&status, case.name);
        let manifest: Option<Value> = std::fs::read(dir.join("manifest.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        assert!(!log.contains("panicked"), "{}: {log}", case.name);
        assert!(!exit.contains("101"), "{}: {exit}", case.name);
        let actual = match &manifest {
            Some(m) => format!(
                "rows {} kept {} dropped {} duplicates {} in earlier sources {}",
                m["rows_read"],
                m["kept"],
                m["dropped"],
                m["duplicates_within"],
                m["duplicates_across"]
            ),
            None => format!(
                "failed ({phase}): {}",
                log.lines()
                    .find(|l| l.contains("caused by"))
                    .unwrap_or("")
                    .trim()
            ),
        };
        writeln!(report, "{:<26} {actual}", case.name).expect("fmt");
        let ok = match (&case.expect, &manifest) {
            (
                Rows {
                    read,
                    kept,
                    dropped,
                    duplicates,
                },
                Some(m),
            ) => {
                let expected: serde_json::Map<String, Value> = dropped
                    .iter()
                    .map(|(k, n)| ((*k).to_owned(), Value::from(*n)))
                    .collect();
                // The cases share a run and many reuse the same good row: a case whose prompts
                // an earlier case already has is prepared again without them (counted in
                // `duplicates_across`, each repeat of them too) instead of keeping them.
                let count = |key: &str| m[key].as_u64().unwrap_or(0);
                let across = count("duplicates_across");
                let kept_as_expected = if across == 0 {
                    count("kept") == *kept && count("duplicates_within") == *duplicates
                } else {
                    count("kept") + count("duplicates_within") + across == kept + duplicates
                };
                m["rows_read"] == *read
                    && kept_as_expected
                    && m["dropped"] == Value::Object(expected)
                    && phase == "done"
            }
            (Fails(text), None) => {
                let file = format!("data/{}/{}", case.name, case.file);
                let file = file.trim_end_matches("/inner.txt");
                phase == "failed"
                    && log.contains(&format!("error: failed to read `{file}`"))
                    && log.contains(text)
            }
            (Empty(text), None) => phase == "failed" && log.contains(text),
            _ => false,
        };
        if !ok {
            mismatches.push(format!(
                "{}: expected {:?}, got {actual} (phase {phase:?}, status {})\n{log}",
                case.name,
                case.expect,
                sources(&status)
                    .iter()
                    .find(|s| s["name"] == case.name)
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ));
        }
    }
    eprintln!("{report}");
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    let log =
        std::fs::read_to_string(project.source_path("tool_turn", "prep.log")).expect("prep.log");
    assert!(
        log.contains(
            "conversations cut before a tool turn (a result without its call, or \
             `tool-turns = \"cut\"`): 1"
        ),
        "{log}"
    );
    assert!(
        out.stderr
            .contains("gen: prepared `tool_turn`: 2 prompts (1 cut before a tool turn)"),
        "{}",
        out.stderr
    );

    // A field no row has is a setting the data does not fit: the error points at it.
    let log =
        std::fs::read_to_string(project.source_path("wrong_schema", "prep.log")).expect("prep.log");
    let at = config
        .text()
        .lines()
        .position(|l| l == "prompt-field = \"question\"")
        .expect("the case's line")
        + 1;
    assert!(
        log.contains(&format!(
            "cfg.toml:{at}:16: source `wrong_schema`: `prompt-field"
        )),
        "{log}"
    );
    let failed = status["sources"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "wrong_schema"))
        .expect("wrong_schema in status.json");
    // The verdict's headline (60 characters) holds where; prep.log holds all of it.
    let said = format!("{} {}", failed["note"], failed["verdict"]);
    assert!(said.contains(&format!("cfg.toml:{at}:16")), "{failed:#}");
    // More than half the rows dropped for one reason: prepared, with a warning in status.
    let source = status["sources"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "mostly_dropped"))
        .expect("mostly_dropped in status.json");
    assert_eq!(
        source["warnings"][0],
        "2 of 3 rows (66%) dropped as `wrong_type` (reasons and examples in manifest.json)",
        "{source:#}"
    );
    let shown = project.run(&["status", &project.run_dir()]).await;
    assert!(
        shown
            .stdout
            .contains("  warning: 2 of 3 rows (66%) dropped as `wrong_type`"),
        "{}",
        shown.stdout
    );

    // The audit agrees: failed sources are pending, nothing is inconsistent.
    let (code, audit) = project.verify().await;
    assert_eq!(code, Some(0), "{audit:#}");
}
