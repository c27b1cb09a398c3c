//! The columnar Parquet path against the generic JSON path: the same prompts, ids, source keys
//! and manifest, on awkward rows and under every setting that shapes a prompt.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Int64Array, LargeStringArray, ListArray, RecordBatch, StringArray,
    StructArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::ArrowWriter;

use super::*;
use crate::read::for_each_parquet_batch;

/// A turn: `None` is a null struct; inside, `None` is a null field.
type TestTurn = Option<(Option<&'static str>, Option<&'static str>)>;

/// `list<struct<keys.0: utf8, keys.1: utf8>>`; a `None` row is a null list.
fn turn_list(keys: (&str, &str), rows: &[Option<Vec<TestTurn>>]) -> (ArrayRef, DataType) {
    let fields = Fields::from(vec![
        Field::new(keys.0, DataType::Utf8, true),
        Field::new(keys.1, DataType::Utf8, true),
    ]);
    let flat: Vec<&TestTurn> = rows.iter().flatten().flatten().collect();
    let first: Vec<Option<&str>> = flat.iter().map(|t| t.and_then(|t| t.0)).collect();
    let second: Vec<Option<&str>> = flat.iter().map(|t| t.and_then(|t| t.1)).collect();
    let struct_nulls = NullBuffer::from(flat.iter().map(|t| t.is_some()).collect::<Vec<_>>());
    let structs = StructArray::new(
        fields.clone(),
        vec![
            Arc::new(StringArray::from(first)) as ArrayRef,
            Arc::new(StringArray::from(second)) as ArrayRef,
        ],
        Some(struct_nulls),
    );
    let item = Arc::new(Field::new("item", DataType::Struct(fields), true));
    let lengths = rows.iter().map(|r| r.as_ref().map_or(0, Vec::len));
    let list_nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<_>>());
    let list = ListArray::new(
        Arc::clone(&item),
        OffsetBuffer::from_lengths(lengths),
        Arc::new(structs),
        Some(list_nulls),
    );
    (Arc::new(list), DataType::List(item))
}

/// `list<struct<role: utf8, content: list<struct<type, text>>>>`: content parts, a shape the
/// columnar path leaves to the generic one.
fn parts_list(rows: &[(&'static str, &'static str)]) -> (ArrayRef, DataType) {
    let part_fields = Fields::from(vec![
        Field::new("type", DataType::Utf8, true),
        Field::new("text", DataType::Utf8, true),
    ]);
    let parts = StructArray::new(
        part_fields.clone(),
        vec![
            Arc::new(StringArray::from(vec!["text"; rows.len()])) as ArrayRef,
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            )) as ArrayRef,
        ],
        None,
    );
    let part_item = Arc::new(Field::new("item", DataType::Struct(part_fields), true));
    let content = ListArray::new(
        Arc::clone(&part_item),
        OffsetBuffer::from_lengths(vec![1; rows.len()]),
        Arc::new(parts),
        None,
    );
    let fields = Fields::from(vec![
        Field::new("role", DataType::Utf8, true),
        Field::new("content", DataType::List(part_item), true),
    ]);
    let turns = StructArray::new(
        fields.clone(),
        vec![
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )) as ArrayRef,
            Arc::new(content) as ArrayRef,
        ],
        None,
    );
    let item = Arc::new(Field::new("item", DataType::Struct(fields), true));
    let list = ListArray::new(
        Arc::clone(&item),
        OffsetBuffer::from_lengths(vec![1; rows.len()]),
        Arc::new(turns),
        None,
    );
    (Arc::new(list), DataType::List(item))
}

fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef, DataType)>) {
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(name, _, data_type)| Field::new(*name, data_type.clone(), true))
            .collect::<Vec<_>>(),
    ));
    let arrays = columns.into_iter().map(|(_, array, _)| array).collect();
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays).expect("consistent columns");
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(700))
        .build();
    let file = fs_err::File::create(path).expect("create").into_parts().0;
    let mut writer = ArrowWriter::try_new(file, schema, Some(properties)).expect("writer");
    writer.write(&batch).expect("write");
    writer.close().expect("close");
}

fn text(values: Vec<Option<&'static str>>) -> (ArrayRef, DataType) {
    (Arc::new(StringArray::from(values)), DataType::Utf8)
}

/// Every awkward row we know of, one per row.
fn awkward(path: &Path) {
    let h = |v: &'static str| Some((Some("human"), Some(v)));
    let g = |v: &'static str| Some((Some("gpt"), Some(v)));
    let sys = |v: &'static str| Some((Some("system"), Some(v)));
    let conversations: Vec<Option<Vec<TestTurn>>> = vec![
        Some(vec![h("q1"), g("a1"), h("q2 \"quoted\"\n\ttab \u{1} ctrl")]),
        None,
        Some(vec![]),
        Some(vec![g("leading"), h("after a leading answer"), g("a")]),
        Some(vec![h("  "), g("?"), h("")]),
        Some(vec![h("ok"), None]),
        Some(vec![Some((None, Some("null role")))]),
        Some(vec![Some((Some("wizard"), Some("unknown role")))]),
        Some(vec![
            Some((Some(" Human "), Some("spaced role"))),
            Some((Some("GPT"), None)),
        ]),
        Some(vec![Some((Some("user"), None)), h("null content before")]),
        Some(vec![
            sys("be nice"),
            h("hi"),
            sys("late system"),
            g("hello"),
            h("joke?"),
        ]),
        Some(vec![sys("   "), h("blank system")]),
        Some(vec![h("q1"), g("a1"), h("q2 \"quoted\"\n\ttab \u{1} ctrl")]),
        Some(vec![
            Some((Some("chatgpt"), Some("x"))),
            Some((Some("prompter"), Some("héllo ✓ 🦀"))),
            Some((Some("bard"), Some("y"))),
            Some((Some("model"), Some("z"))),
            h("third"),
        ]),
        Some(vec![h(
            "a much longer question that goes past forty characters",
        )]),
        Some(vec![
            h("ok"),
            Some((
                Some("tool"),
                Some("a result answering no call ends the conversation"),
            )),
        ]),
        // Glaive's shape: a call turn parsed into a call, its result, the answer (dropped).
        Some(vec![
            h("convert 5 USD"),
            Some((
                Some("function_call"),
                Some(r#"{"name": "convert", "arguments": {"amount": 5}}"#),
            )),
            Some((Some("observation"), Some("4.6 EUR"))),
            Some((Some("gpt"), Some("4.6 EUR it is"))),
        ]),
        Some(vec![h("[ISSUE] wrapped [/ISSUE]")]),
    ];
    let rows = conversations.len();
    let (turns, turns_type) = turn_list(("from", "value"), &conversations);
    let cycle = |values: &[Option<&'static str>]| -> Vec<Option<&'static str>> {
        values.iter().copied().cycle().take(rows).collect()
    };
    let (quality, quality_type) = text(cycle(&[Some("good"), None, Some("poor"), Some("1")]));
    let (lang, lang_type) = text(cycle(&[
        Some("en"),
        Some("EN"),
        None,
        Some("de"),
        Some("En"),
    ]));
    let (uuid, uuid_type) = text(cycle(&[Some("u-a"), None, Some("u-c")]));
    let (question, question_type) = text(cycle(&[
        Some("[ISSUE]\n fix the bug \n[/ISSUE]"),
        None,
        Some(""),
        Some("  [ISSUE]  [/ISSUE] "),
        Some("plain question"),
        Some("[ISSUE] unterminated"),
    ]));
    let ids: Vec<Option<i64>> = (0..rows)
        .map(|i| (i % 5 != 3).then_some(i as i64))
        .collect();
    let scores: Vec<Option<i64>> = (0..rows).map(|i| Some((i % 3) as i64)).collect();
    let flags: Vec<Option<bool>> = (0..rows)
        .map(|i| (i % 4 != 0).then_some(i % 2 == 0))
        .collect();
    let large: Vec<Option<&str>> = cycle(&[Some("large one"), None, Some("large two")]);
    write_parquet(
        path,
        vec![
            ("conversations", turns, turns_type),
            ("quality", quality, quality_type),
            ("lang", lang, lang_type),
            ("uuid", uuid, uuid_type),
            ("question", question, question_type),
            ("id", Arc::new(Int64Array::from(ids)), DataType::Int64),
            ("score", Arc::new(Int64Array::from(scores)), DataType::Int64),
            (
                "flag",
                Arc::new(BooleanArray::from(flags)),
                DataType::Boolean,
            ),
            (
                "large",
                Arc::new(LargeStringArray::from(large)),
                DataType::LargeUtf8,
            ),
        ],
    );
}

/// Alpaca rows (`instruction` + `input`) and a ShareGPT-style `messages` column.
fn alpaca(path: &Path) {
    let (instruction, instruction_type) = text(vec![
        Some("sum"),
        Some("x"),
        None,
        Some("sort"),
        Some("sum"),
    ]);
    let (input, input_type) = text(vec![
        Some("1 2"),
        Some(" "),
        Some("only input"),
        None,
        Some("1 2"),
    ]);
    write_parquet(
        path,
        vec![
            ("instruction", instruction, instruction_type),
            ("input", input, input_type),
        ],
    );
}

/// Many rows over several batches and row groups, with repeats, for sampling.
fn many(path: &Path) {
    const QUESTIONS: [&str; 7] = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta"];
    let rows: Vec<Option<Vec<TestTurn>>> = (0..2600)
        .map(|i| {
            let q = QUESTIONS[i % QUESTIONS.len()];
            match i % 11 {
                0 => None,
                1 => Some(vec![Some((Some("gpt"), Some("only an answer")))]),
                2..=4 => Some(vec![Some((Some("human"), Some(q)))]),
                _ => Some(vec![
                    Some((Some("human"), Some(q))),
                    Some((Some("gpt"), Some("answer"))),
                    Some((Some("human"), Some(["one", "two", "three", "four"][i % 4]))),
                ]),
            }
        })
        .collect();
    let (turns, turns_type) = turn_list(("role", "content"), &rows);
    write_parquet(path, vec![("messages", turns, turns_type)]);
}

/// Content parts: a shape only the generic path reads.
fn parts(path: &Path) {
    let (turns, turns_type) = parts_list(&[("user", "from parts"), ("user", "again")]);
    write_parquet(path, vec![("messages", turns, turns_type)]);
}

fn run(spec: &SourceSpec, dir: &Path, columnar: bool) -> (Vec<Prompt>, Manifest) {
    try_run(spec, dir, columnar).expect("prepare")
}

/// The prompts and manifest, or the error (settings no row fits fail the source).
fn try_run(
    spec: &SourceSpec,
    dir: &Path,
    columnar: bool,
) -> Result<(Vec<Prompt>, Manifest), String> {
    let mut options = PrepareOptions {
        columnar,
        ..PrepareOptions::new(HubSettings::from_vars(|_| None).with_offline(true))
    };
    let mut prompts = Vec::new();
    let manifest = prepare_with(spec, dir, &mut options, &mut |p| {
        prompts.push(p.clone());
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    Ok((prompts, manifest))
}

/// Whether every batch of `file` goes the columnar way under `spec`.
fn takes_columnar_path(spec: &SourceSpec, file: &Path) -> bool {
    let normalizer = Normalizer::new(spec);
    let projection = normalizer.projection();
    let mut every = true;
    for_each_parquet_batch(file, Some(&projection), &mut |batch, _| {
        every &= normalizer.columnar(batch, true).is_some();
    })
    .expect("read");
    every
}

#[test]
fn columnar_and_generic_paths_agree() {
    let dir = tempfile::tempdir().expect("tempdir");
    awkward(&dir.path().join("awkward.parquet"));
    alpaca(&dir.path().join("alpaca.parquet"));
    many(&dir.path().join("many.parquet"));
    parts(&dir.path().join("parts.parquet"));
    // (file, settings, columnar path expected)
    let cases: &[(&str, &str, bool)] = &[
        (
            "awkward",
            "messages-field = \"conversations\"\nturns = \"all\"\nid-field = \"id\"",
            true,
        ),
        (
            "awkward",
            "messages-field = \"conversations\"\nsystem-prompt = \"drop\"\nid-field = \"uuid\"",
            true,
        ),
        (
            "awkward",
            "messages-field = \"conversations\"\nturns = \"history\"\nmax-turns = 2\nmin-chars = 3\nmax-chars = 40",
            true,
        ),
        (
            "awkward",
            "messages-field = \"conversations\"\nturns = \"all\"\nsystem-prompt = \"replace\"\nsystem-prompt-text = \"Be brief.\"\nlimit = 3",
            true,
        ),
        (
            "awkward",
            "messages-field = \"conversations\"\ninclude = { quality = [\"good\", \"1\"] }\nexclude = { score = [\"0\"] }\nlanguages = [\"en\"]\nlanguage-field = \"lang\"",
            true,
        ),
        (
            "awkward",
            "messages-field = \"conversations\"\nexclude = { flag = [\"true\"], quality = [\"poor\"] }\nid-field = \"flag\"",
            true,
        ),
        (
            "awkward",
            "messages-field = \"conversations\"\nturns = \"all\"\ndedup = false",
            true,
        ),
        (
            "awkward",
            "messages-field = \"conversations\"\nrole-key = \"value\"\ncontent-key = \"from\"",
            true,
        ),
        (
            "awkward",
            "prompt-field = \"question\"\nstrip-tags = [\"ISSUE\"]\nprompt-template = \"Fix:\\n{prompt}\\n\"\nid-field = \"score\"",
            true,
        ),
        (
            "awkward",
            "prompt-field = \"question\"\nsystem-prompt = \"replace\"\nsystem-prompt-text = \"Agent.\"",
            true,
        ),
        ("awkward", "prompt-field = \"large\"", true),
        // No placeholder in the batch: nothing to resolve, the columnar path reads it.
        (
            "awkward",
            "prompt-field = \"question\"\nresolve = { x = { repo = \"o/never-fetched\", files = [\"{split}.jsonl\"] } }",
            true,
        ),
        // Rows to resolve (here without a `dataset` field: dropped as `unresolved`).
        (
            "awkward",
            "prompt-field = \"question\"\nresolve-placeholder = \"plain question\"\nresolve = { x = { repo = \"o/never-fetched\", files = [\"{split}.jsonl\"] } }",
            false,
        ),
        ("awkward", "messages-field = \"nope\"", true),
        ("awkward", "prompt-field = \"nope\"", true),
        // Defaults: `conversations` is found, role and content keys are tried in order.
        ("awkward", "", true),
        ("awkward", "prompt-field = \"score\"", false),
        ("alpaca", "", true),
        ("alpaca", "prompt-field = \"instruction\"", true),
        ("alpaca", "messages-field = \"input\"", false),
        (
            "many",
            "messages-field = \"messages\"\nturns = \"all\"\nlimit = 5",
            true,
        ),
        (
            "many",
            "turns = \"all\"\nlimit = 5\ndedup = false\nseed = 3",
            true,
        ),
        (
            "many",
            "messages-field = \"messages\"\nlimit = 100000",
            true,
        ),
        ("parts", "messages-field = \"messages\"", false),
        ("parts", "", false),
    ];
    for (file, settings, columnar) in cases {
        let path = dir.path().join(format!("{file}.parquet"));
        let spec: SourceSpec = toml::from_str(&format!(
            "name = \"t\"\npath = \"{file}.parquet\"\n{settings}"
        ))
        .expect("spec");
        assert_eq!(
            takes_columnar_path(&spec, &path),
            *columnar,
            "{file}: {settings}"
        );
        let fast = try_run(&spec, dir.path(), true);
        let generic = try_run(&spec, dir.path(), false);
        assert_eq!(fast, generic, "{file}: {settings}");
    }
}

#[test]
fn awkward_rows_are_counted_per_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    awkward(&dir.path().join("awkward.parquet"));
    let spec: SourceSpec = toml::from_str(
        "name = \"t\"\npath = \"awkward.parquet\"\nmessages-field = \"conversations\"\nturns = \"all\"",
    )
    .expect("spec");
    let (prompts, manifest) = run(&spec, dir.path(), true);
    let texts: Vec<Vec<&str>> = prompts
        .iter()
        .map(|p| p.messages.iter().map(|m| m.content.as_str()).collect())
        .collect();
    assert_eq!(
        texts,
        vec![
            vec!["q1", "q2 \"quoted\"\n\ttab \u{1} ctrl"],
            vec!["after a leading answer"],
            vec!["spaced role"],
            vec!["null content before"],
            vec!["be nice", "hi", "joke?"],
            vec!["blank system"],
            vec!["héllo ✓ 🦀", "third"],
            vec!["a much longer question that goes past forty characters"],
            vec!["ok"],
            vec!["convert 5 USD", "", "4.6 EUR"],
            vec!["[ISSUE] wrapped [/ISSUE]"],
        ]
    );
    let call = &prompts[9].messages[1].tool_calls;
    assert_eq!(call.len(), 1);
    assert_eq!(
        (
            call[0].function.name.as_str(),
            call[0].function.arguments.as_str()
        ),
        ("convert", r#"{"amount":5}"#)
    );
    assert_eq!(
        prompts[9].messages[2].tool_call_id.as_deref(),
        Some(call[0].id.as_str())
    );
    assert_eq!(manifest.cut_at_tool_turn, 1);
    assert_eq!(manifest.with_tool_turns, 1);
    let dropped: Vec<(&str, u64)> = manifest
        .dropped
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        dropped,
        [("no_user_turn", 3), ("unknown_role", 1), ("wrong_type", 2)]
    );
    assert_eq!(manifest.duplicates_within, 1);
    assert_eq!(manifest.rows_read, 18);
}

/// OpenAI's shape in Parquet — `list<struct<role, content, tool_calls: list<struct<id, type,
/// function: struct<name, arguments>>>, tool_call_id>>` and a `tools` JSON column — gives the
/// prompts the same row gives as JSON Lines: the projection keeps the tool fields and the
/// call's text, whichever path reads it.
#[test]
fn openai_tool_calls_in_parquet_read_as_in_json_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let utf8 = |values: Vec<Option<&str>>| Arc::new(StringArray::from(values)) as ArrayRef;
    let function_fields = Fields::from(vec![
        Field::new("name", DataType::Utf8, true),
        Field::new("arguments", DataType::Utf8, true),
    ]);
    let function = StructArray::new(
        function_fields.clone(),
        vec![
            utf8(vec![Some("weather")]),
            utf8(vec![Some("{\"city\":\"Paris\"}")]),
        ],
        None,
    );
    let call_fields = Fields::from(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("type", DataType::Utf8, true),
        Field::new("function", DataType::Struct(function_fields), true),
    ]);
    let calls = StructArray::new(
        call_fields.clone(),
        vec![
            utf8(vec![Some("c1")]),
            utf8(vec![Some("function")]),
            Arc::new(function) as ArrayRef,
        ],
        None,
    );
    let call_item = Arc::new(Field::new("item", DataType::Struct(call_fields), true));
    // Per turn: null (the user's), the call, none (the result's), none, null.
    let tool_calls = ListArray::new(
        Arc::clone(&call_item),
        OffsetBuffer::from_lengths([0, 1, 0, 0, 0]),
        Arc::new(calls),
        Some(NullBuffer::from(vec![false, true, true, true, false])),
    );
    let turn_fields = Fields::from(vec![
        Field::new("role", DataType::Utf8, true),
        Field::new("content", DataType::Utf8, true),
        Field::new("tool_calls", DataType::List(call_item), true),
        Field::new("tool_call_id", DataType::Utf8, true),
    ]);
    let turns = StructArray::new(
        turn_fields.clone(),
        vec![
            utf8(vec![
                Some("user"),
                Some("assistant"),
                Some("tool"),
                Some("assistant"),
                Some("user"),
            ]),
            utf8(vec![
                Some("weather?"),
                Some("Let me look."),
                Some("18 C"),
                Some("It is 18 C."),
                Some("thanks"),
            ]),
            Arc::new(tool_calls) as ArrayRef,
            utf8(vec![None, None, Some("c1"), None, None]),
        ],
        None,
    );
    let item = Arc::new(Field::new("item", DataType::Struct(turn_fields), true));
    let messages = ListArray::new(
        Arc::clone(&item),
        OffsetBuffer::from_lengths([5]),
        Arc::new(turns),
        None,
    );
    let tools = r#"[{"type":"function","function":{"name":"weather"}}]"#;
    write_parquet(
        &dir.path().join("openai.parquet"),
        vec![
            ("messages", Arc::new(messages), DataType::List(item)),
            ("tools", utf8(vec![Some(tools)]), DataType::Utf8),
        ],
    );
    let row = serde_json::json!({"tools": tools, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "c1",
            "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "content": "18 C", "tool_call_id": "c1"},
        {"role": "assistant", "content": "It is 18 C."},
        {"role": "user", "content": "thanks"}]});
    fs_err::write(dir.path().join("openai.jsonl"), format!("{row}\n")).expect("write");
    for settings in [
        "messages-field = \"messages\"\nturns = \"all\"",
        "turns = \"all\"",
    ] {
        let spec = |file: &str| -> SourceSpec {
            toml::from_str(&format!("name = \"t\"\npath = \"{file}\"\n{settings}")).expect("spec")
        };
        let (expected, _) = run(&spec("openai.jsonl"), dir.path(), false);
        assert_eq!(expected[0].messages.len(), 4, "{settings}");
        assert_eq!(expected[0].messages[1].content, "Let me look.");
        assert_eq!(expected[0].messages[1].tool_calls[0].id, "c1");
        assert!(expected[0].tools.is_some());
        for columnar in [true, false] {
            let (prompts, _) = run(&spec("openai.parquet"), dir.path(), columnar);
            let strip = |p: &[Prompt]| -> Vec<(Vec<Message>, Option<Value>, String)> {
                p.iter()
                    .map(|p| (p.messages.clone(), p.tools.clone(), p.id.clone()))
                    .collect()
            };
            assert_eq!(strip(&prompts), strip(&expected), "{settings}, {columnar}");
        }
    }
}
