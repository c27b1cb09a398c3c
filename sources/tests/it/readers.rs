//! The Parquet reader on files written by the Arrow writer: nested turns, timestamps, column
//! projection, and corrupt or truncated files.

use gen_sources::read::{Projection, TurnsProjection, for_each_parquet_row};
use serde_json::{Value, json};

use crate::support::parquet::{Col, parquet};

fn only(columns: &[&str]) -> Projection {
    Projection {
        columns: columns.iter().map(|s| (*s).to_owned()).collect(),
        turns: None,
    }
}

fn rows(bytes: &[u8], projection: Option<Projection>) -> std::io::Result<Vec<Value>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f.parquet");
    fs_err::write(&path, bytes).expect("write");
    let mut out = Vec::new();
    for_each_parquet_row(&path, projection.as_ref(), &mut |(i, row)| {
        assert_eq!(i as usize, out.len());
        out.push(row.expect("parquet rows are objects"));
    })?;
    Ok(out)
}

fn wildchat_like() -> Vec<u8> {
    parquet(vec![
        (
            "conversation_hash",
            Col::Str(vec![Some("h1"), None, Some("h3")]),
        ),
        (
            "timestamp",
            Col::Time(vec![1_680_998_573_000_000, 1_681_000_000_123_456, 0]),
        ),
        (
            "conversation",
            Col::Turns {
                keys: &["content", "role"],
                rows: vec![
                    Some(vec![vec!["hi", "user"], vec!["hello", "assistant"]]),
                    None,
                    Some(vec![]),
                ],
            },
        ),
        ("turn", Col::Int(vec![Some(1), None, Some(0)])),
        ("toxic", Col::Bool(vec![false, true, false])),
    ])
}

#[test]
fn nested_turns_and_timestamps_read_like_json() {
    let rows = rows(&wildchat_like(), None).expect("valid parquet");
    assert_eq!(
        rows,
        vec![
            json!({"conversation_hash": "h1", "timestamp": "2023-04-09T00:02:53Z",
                   "conversation": [{"content": "hi", "role": "user"}, {"content": "hello", "role": "assistant"}],
                   "turn": 1, "toxic": false}),
            json!({"conversation_hash": null, "timestamp": "2023-04-09T00:26:40.123456Z",
                   "conversation": null, "turn": null, "toxic": true}),
            json!({"conversation_hash": "h3", "timestamp": "1970-01-01T00:00:00Z",
                   "conversation": [], "turn": 0, "toxic": false}),
        ]
    );
}

#[test]
fn only_requested_columns_are_decoded() {
    let rows = rows(
        &wildchat_like(),
        Some(only(&["conversation_hash", "not_there"])),
    )
    .expect("valid parquet");
    assert_eq!(rows[0], json!({"conversation_hash": "h1"}));
    assert_eq!(rows.len(), 3);
}

#[test]
fn turn_lists_keep_only_role_and_content_and_skip_answers() {
    let file = parquet(vec![(
        "conversation",
        Col::Turns {
            keys: &["content", "role", "language"],
            rows: vec![Some(vec![
                vec!["hi", "user", "English"],
                vec!["a long answer", "assistant", "English"],
                vec!["?", "wizard", "English"],
            ])],
        },
    )]);
    let turns = |skip| {
        Some(Projection {
            columns: ["conversation".to_owned()].into(),
            turns: Some(TurnsProjection {
                field: "conversation".to_owned(),
                role_keys: vec!["role".to_owned(), "from".to_owned()],
                content_keys: vec!["content".to_owned(), "value".to_owned()],
                skip_assistant_content: skip,
            }),
        })
    };
    assert_eq!(
        rows(&file, turns(true)).expect("valid")[0],
        json!({"conversation": [{"role": "user", "content": "hi"}, {"role": "assistant"},
                                {"role": "wizard", "content": "?"}]})
    );
    assert_eq!(
        rows(&file, turns(false)).expect("valid")[0]["conversation"][1],
        json!({"role": "assistant", "content": "a long answer"})
    );
}

#[test]
fn turn_lists_decode_only_the_role_and_content_leaves() {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;

    let file = parquet(vec![
        (
            "before",
            Col::Turns {
                keys: &["x", "content", "role"],
                rows: vec![Some(vec![vec!["1", "2", "3"]])],
            },
        ),
        ("hash", Col::Str(vec![Some("h")])),
        (
            "conversation",
            Col::Turns {
                keys: &["country", "content", "language", "role", "toxic"],
                rows: vec![Some(vec![
                    vec!["FR", "bonjour", "French", "user", "false"],
                    vec!["FR", "salut", "French", "assistant", "false"],
                ])],
            },
        ),
        ("after", Col::Str(vec![Some("a")])),
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f.parquet");
    fs_err::write(&path, file).expect("write");
    let projection = Projection {
        columns: ["conversation".to_owned(), "after".to_owned()].into(),
        turns: Some(TurnsProjection {
            field: "conversation".to_owned(),
            role_keys: vec!["role".to_owned()],
            content_keys: vec!["content".to_owned()],
            skip_assistant_content: true,
        }),
    };
    let mut seen = 0;
    gen_sources::read::for_each_parquet_batch(&path, Some(&projection), &mut |batch, _| {
        seen += batch.num_rows();
        let names: Vec<&str> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["conversation", "after"]);
        let list = batch.column(0).as_list::<i32>();
        let turns = list.values().as_struct();
        assert_eq!(turns.column_names(), ["content", "role"]);
        let content = turns.column(0).as_string::<i32>();
        let role = turns.column(1).as_string::<i32>();
        assert_eq!(
            (0..turns.len())
                .map(|i| (role.value(i), content.value(i)))
                .collect::<Vec<_>>(),
            [("user", "bonjour"), ("assistant", "salut")]
        );
        assert_eq!(batch.column(1).as_string::<i32>().value(0), "a");
    })
    .expect("valid parquet");
    assert_eq!(seen, 1);
}

#[test]
fn corrupt_and_truncated_parquet_are_errors() {
    let bytes = wildchat_like();
    assert!(rows(b"not a parquet file at all", None).is_err());
    assert!(rows(&bytes[..bytes.len() / 2], None).is_err());
    let mut damaged = bytes.clone();
    // Clobber the data pages but keep the footer: decoding must fail, not panic.
    for byte in &mut damaged[8..bytes.len() / 2] {
        *byte = 0xff;
    }
    assert!(rows(&damaged, None).is_err());
}

#[test]
fn local_globs_mix_formats_and_compressions() {
    use std::io::Write;

    use gen_sources::{HubSettings, PrepareOptions, SourceSpec, prepare_with};

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    fs_err::create_dir_all(&data).expect("mkdir");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(br#"[{"prompt": "from a gzipped array"}, {"prompt": ""}]"#)
        .expect("gzip");
    fs_err::write(data.join("a.json.gz"), gz.finish().expect("gzip")).expect("write");
    let zst =
        zstd::encode_all(&b"{\"prompt\": \"from zstd lines\"}\nnot json\n"[..], 3).expect("zstd");
    fs_err::write(data.join("b.jsonl.zst"), zst).expect("write");
    fs_err::write(
        data.join("c.parquet"),
        parquet(vec![("question", Col::Str(vec![Some("from parquet")]))]),
    )
    .expect("write");
    let spec: SourceSpec = toml::from_str("name = \"local\"\npath = \"data/*\"").expect("spec");
    let mut options = PrepareOptions {
        hub: HubSettings::from_vars(|_| None).with_offline(true),
        seen_across: None,
        columnar: true,
        sample: Default::default(),
    };
    let mut texts = Vec::new();
    let manifest = prepare_with(&spec, dir.path(), &mut options, &mut |p| {
        texts.push(p.messages[0].content.clone());
        Ok(())
    })
    .expect("prepare");
    assert_eq!(
        texts,
        ["from a gzipped array", "from zstd lines", "from parquet"]
    );
    assert_eq!(manifest.rows_read, 5);
    assert_eq!(manifest.dropped.get("bad_json"), Some(&1));
    assert_eq!(manifest.dropped.get("no_user_turn"), Some(&1));
    assert_eq!(manifest.examples[0].file, data.join("a.json.gz"));
    assert_eq!(manifest.checksums.len(), 3);
    assert!(
        manifest
            .checksums
            .values()
            .all(|c| c.starts_with("xxh3-128:"))
    );
    assert_eq!(manifest.commit, None);
}

/// Prepares the local file `name` holding `bytes`, with the columnar path on or off.
fn prepare_file(
    bytes: &[u8],
    name: &str,
    columnar: bool,
) -> Result<(Vec<gen_sources::Prompt>, gen_sources::Manifest), gen_sources::SourceError> {
    use gen_sources::{HubSettings, PrepareOptions, SourceSpec, prepare_with};

    let dir = tempfile::tempdir().expect("tempdir");
    fs_err::write(dir.path().join(name), bytes).expect("write");
    let spec: SourceSpec =
        toml::from_str(&format!("name = \"local\"\npath = \"{name}\"")).expect("spec");
    let mut options = PrepareOptions {
        hub: HubSettings::from_vars(|_| None).with_offline(true),
        seen_across: None,
        columnar,
        sample: Default::default(),
    };
    let mut prompts = Vec::new();
    let manifest = prepare_with(&spec, dir.path(), &mut options, &mut |p| {
        prompts.push(p.clone());
        Ok(())
    })?;
    Ok((prompts, manifest))
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

fn questions() -> Vec<u8> {
    parquet(vec![(
        "question",
        Col::Str(vec![
            Some("one"),
            Some("two"),
            None,
            Some("three"),
            Some(""),
        ]),
    )])
}

#[test]
fn compressed_parquet_gives_the_prompts_of_the_plain_file() {
    let plain = questions();
    let (expected, expected_manifest) =
        prepare_file(&plain, "q.parquet", true).expect("plain parquet");
    let texts: Vec<&str> = expected
        .iter()
        .map(|p| p.messages[0].content.as_str())
        .collect();
    assert_eq!(texts, ["one", "two", "three"]);
    let compressed = [
        (
            "q.parquet.zst",
            zstd::encode_all(&plain[..], 3).expect("zstd"),
        ),
        ("q.parquet.gz", gzip(&plain)),
    ];
    for (name, bytes) in compressed {
        for columnar in [true, false] {
            let (prompts, manifest) = prepare_file(&bytes, name, columnar).expect(name);
            assert_eq!(prompts, expected, "{name}, columnar: {columnar}");
            assert_eq!(manifest.rows_read, expected_manifest.rows_read, "{name}");
            assert_eq!(manifest.dropped, expected_manifest.dropped, "{name}");
        }
    }
}

#[test]
fn truncated_compressed_parquet_names_the_file() {
    let plain = questions();
    let zst = zstd::encode_all(&plain[..], 3).expect("zstd");
    let gz = gzip(&plain);
    for (name, bytes) in [
        ("q.parquet.zst", &zst[..zst.len() / 2]),
        ("q.parquet.gz", &gz[..gz.len() / 2]),
    ] {
        let error = prepare_file(bytes, name, true).expect_err("truncated");
        let gen_sources::SourceError::Read { path, source } = &error else {
            panic!("{name}: not a read error: {error}");
        };
        assert!(path.ends_with(name), "{}", path.display());
        assert!(
            error.to_string().starts_with("failed to read `") && error.to_string().contains(name),
            "{error}"
        );
        assert_eq!(
            source.to_string(),
            "the compressed data is truncated or corrupt (download or copy the file again)",
            "{name}"
        );
    }
}

/// A Parquet file of UTF8-annotated string columns holding the given bytes (invalid UTF-8
/// included: the low-level writer does not check them), one row group.
pub fn utf8_parquet(columns: &[(&str, &[&[u8]])], dictionary: bool) -> Vec<u8> {
    use parquet::data_type::{ByteArray, ByteArrayType};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    let fields: String = columns
        .iter()
        .map(|(name, _)| format!("optional binary {name} (UTF8); "))
        .collect();
    let schema = parse_message_type(&format!("message schema {{ {fields}}}")).expect("schema");
    let properties = WriterProperties::builder()
        .set_dictionary_enabled(dictionary)
        .build();
    let mut bytes = Vec::new();
    let mut writer =
        SerializedFileWriter::new(&mut bytes, std::sync::Arc::new(schema), properties.into())
            .expect("writer");
    let mut group = writer.next_row_group().expect("row group");
    for (name, values) in columns {
        let strings: Vec<ByteArray> = values.iter().map(|v| ByteArray::from(v.to_vec())).collect();
        let mut column = group.next_column().expect("column").expect(name);
        column
            .typed::<ByteArrayType>()
            .write_batch(&strings, Some(&vec![1; values.len()]), None)
            .expect("strings");
        column.close().expect("close");
    }
    group.close().expect("close");
    writer.close().expect("close");
    bytes
}

/// A Parquet file whose `question` column holds `values`, next to an `id` column.
fn raw_strings(values: &[&[u8]], dictionary: bool) -> Vec<u8> {
    let ids: Vec<String> = (0..values.len()).map(|i| i.to_string()).collect();
    let ids: Vec<&[u8]> = ids.iter().map(String::as_bytes).collect();
    utf8_parquet(&[("id", ids.as_slice()), ("question", values)], dictionary)
}

#[test]
fn invalid_utf8_in_a_parquet_string_column_names_the_column_and_row() {
    let mut values: Vec<&[u8]> = vec![b"fine"; 1500];
    values[1200] = b"caf\xe9";
    for (dictionary, row) in [(false, 1200), (true, 0)] {
        let file = raw_strings(&values, dictionary);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("q.parquet");
        fs_err::write(&path, &file).expect("write");
        let mut delivered = 0u64;
        let error = gen_sources::read::for_each_parquet_row(&path, None, &mut |(i, row)| {
            assert_eq!(i, delivered);
            assert_eq!(row.expect("object")["question"], "fine");
            delivered += 1;
        })
        .expect_err("invalid UTF-8");
        let located = error
            .get_ref()
            .and_then(|e| e.downcast_ref::<gen_sources::read::InvalidUtf8Column>())
            .unwrap_or_else(|| panic!("not located: {error}"));
        // In a dictionary-encoded chunk the bad value is in the dictionary: the reader fails on
        // the chunk's first row, and so does the whole first batch.
        let unread_from = if dictionary { 0 } else { 1024 };
        assert_eq!(
            (
                located.column.as_str(),
                located.row,
                located.unread_from,
                delivered
            ),
            ("question", row, unread_from, unread_from),
            "dictionary: {dictionary}"
        );
        let error = prepare_file(&file, "q.parquet", true).expect_err("invalid UTF-8");
        assert_eq!(
            std::error::Error::source(&error).map(ToString::to_string),
            Some(format!(
                "column `question` holds invalid UTF-8 (reading stopped at row {row}); the \
                 Parquet reader cannot skip a value, so rows {unread_from} onwards are not \
                 read: rewrite the file with that column decoded as UTF-8 (pyarrow: read it as \
                 binary, decode with `errors=\"replace\"`), or leave the file out of the source"
            ))
        );
        assert!(error.to_string().ends_with("q.parquet`"), "{error}");
    }
}

/// A CSV file as spreadsheets and `pandas.to_csv` write them: a byte-order mark, CRLF line
/// ends, a quoted prompt with a comma, doubled quotes and a line break, an empty cell.
#[test]
fn a_csv_source_is_prepared_like_any_other() {
    let mut csv = b"\xef\xbb\xbfid,question,answer\r\n".to_vec();
    csv.extend_from_slice(b"1,\"Hello, \"\"world\"\"\nsecond line\",hi\r\n");
    csv.extend_from_slice(b"2,,empty question\r\n");
    csv.extend_from_slice(b"3,one field too many,x,y\r\n");
    csv.extend_from_slice(b"4,caf\xe9,latin-1\r\n");
    csv.extend_from_slice(b"5,plain,last\r\n");
    let (prompts, manifest) = prepare_file(&csv, "q.csv", true).expect("csv");
    let texts: Vec<&str> = prompts
        .iter()
        .map(|p| p.messages[0].content.as_str())
        .collect();
    assert_eq!(texts, ["Hello, \"world\"\nsecond line", "plain"]);
    assert_eq!(manifest.rows_read, 5);
    let dropped: Vec<(&str, u64)> = manifest
        .dropped
        .iter()
        .map(|(reason, n)| (reason.as_str(), *n))
        .collect();
    assert_eq!(
        dropped,
        [("field_count", 1), ("invalid_utf8", 1), ("no_user_turn", 1)]
    );
    let examples: Vec<(u64, &str)> = manifest
        .examples
        .iter()
        .map(|e| (e.row, e.reason.as_str()))
        .collect();
    assert_eq!(examples.len(), 3, "{examples:?}");
    let gzipped = prepare_file(&gzip(&csv), "q.csv.gz", true).expect("csv.gz");
    assert_eq!(gzipped.0, prompts);
}
