//! Throughput and memory of `gen_sources::prepare_with` on a generated ShareGPT-schema Parquet
//! file (`{id, conversations: list<struct<from, value>>}`), next to a bare Parquet decode of the
//! same file (the floor). Not a test: run it in release mode.
//!
//! ```text
//! cargo run --release -p gen-sources --example prepare_bench -- generate FILE ROWS
//! cargo run --release -p gen-sources --example prepare_bench -- prepare FILE [LIMIT|all]
//! cargo run --release -p gen-sources --example prepare_bench -- decode FILE
//! ```
//!
//! Each mode prints one JSON line: rows, prompts kept, seconds and peak RSS (`VmHWM`). It runs on
//! jemalloc, like the `gen` binary, so the memory measured is what a preparation worker uses.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, ListArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, Schema};
use gen_sources::{HubSettings, PrepareOptions, SourceSpec, prepare_with};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

const WORDS: &[&str] = &[
    "the", "model", "data", "prompt", "rust", "python", "write", "explain", "function", "why",
    "how", "quantum", "history", "summary", "code", "error", "list", "example", "between", "and",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn text(&mut self, words: u64) -> String {
        let n = 1 + self.next() % words;
        (0..n)
            .map(|_| WORDS[(self.next() % WORDS.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn peak_rss_mb() -> f64 {
    let status = fs_err::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn generate(path: &Path, rows: usize) -> Result<(), Box<dyn std::error::Error>> {
    let fields = Fields::from(vec![
        Field::new("from", DataType::Utf8, true),
        Field::new("value", DataType::Utf8, true),
    ]);
    let item = Arc::new(Field::new("item", DataType::Struct(fields.clone()), true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("conversations", DataType::List(Arc::clone(&item)), true),
    ]));
    let file = fs_err::File::create(path)?;
    // As pyarrow writes for the Hub: snappy pages, bounded row groups.
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_max_row_group_row_count(Some(100_000))
        .build();
    let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(properties))?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let batch_rows = 10_000;
    for start in (0..rows).step_by(batch_rows) {
        let n = batch_rows.min(rows - start);
        let mut ids = Vec::with_capacity(n);
        let mut lengths = Vec::with_capacity(n);
        let (mut from, mut value) = (Vec::new(), Vec::new());
        for i in start..start + n {
            ids.push(format!("r{i}_0"));
            let turns = (rng.next() % 6) as usize;
            // 1 in 20 rows repeats an earlier question; 1 in 10 starts with a gpt turn.
            let leading_gpt = rng.next().is_multiple_of(10);
            let repeat = rng.next().is_multiple_of(20);
            for t in 0..turns {
                let human = (t % 2 == 0) != leading_gpt;
                from.push(if human { "human" } else { "gpt" });
                value.push(match (human, repeat && t == 0) {
                    (true, true) => format!("question {}", rng.next() % 1000),
                    (true, false) => format!("{i}: {}", rng.text(60)),
                    (false, _) => rng.text(250),
                });
            }
            lengths.push(turns);
        }
        let structs = StructArray::new(
            fields.clone(),
            vec![
                Arc::new(StringArray::from(from)) as ArrayRef,
                Arc::new(StringArray::from(value)) as ArrayRef,
            ],
            None,
        );
        let list = ListArray::new(
            Arc::clone(&item),
            OffsetBuffer::from_lengths(lengths),
            Arc::new(structs),
            None,
        );
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![Arc::new(StringArray::from(ids)), Arc::new(list)],
        )?;
        writer.write(&batch)?;
    }
    writer.close()?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage =
        "usage: prepare_bench (generate FILE ROWS | prepare FILE [LIMIT|all] | decode FILE)";
    let (mode, file) = match (args.get(1), args.get(2)) {
        (Some(mode), Some(file)) => (mode.as_str(), Path::new(file)),
        _ => return Err(usage.into()),
    };
    let started = Instant::now();
    let (rows, kept) = match mode {
        "generate" => {
            let rows: usize = args.get(3).ok_or(usage)?.parse()?;
            generate(file, rows)?;
            (rows as u64, 0)
        }
        "prepare" => {
            let limit = match args.get(3).map_or("10000", String::as_str) {
                // Every row: a limit no source reaches.
                "all" => "1000000000000",
                limit => limit,
            };
            let name = file.file_name().ok_or(usage)?.to_string_lossy();
            let spec: SourceSpec = toml::from_str(&format!(
                "name = \"bench\"\npath = \"{name}\"\nmessages-field = \"conversations\"\nturns = \"all\"\nlimit = {limit}"
            ))?;
            let mut options = PrepareOptions {
                hub: HubSettings::from_env(),
                seen_across: None,
                columnar: true,
                // A sample larger than memory spills next to the input, as `gen prep` spills
                // next to its output (not to `/tmp`, which may be RAM).
                sample: gen_sources::SampleOptions {
                    dir: file.parent().map(Path::to_path_buf),
                    ..Default::default()
                },
            };
            let dir = file.parent().unwrap_or(Path::new("."));
            let mut kept = 0u64;
            let manifest = prepare_with(&spec, dir, &mut options, &mut |_| {
                kept += 1;
                Ok(())
            })?;
            (manifest.rows_read, kept)
        }
        "decode" => {
            let reader =
                ParquetRecordBatchReaderBuilder::try_new(fs_err::File::open(file)?.into_parts().0)?
                    .with_batch_size(gen_sources::read::PARQUET_BATCH_SIZE)
                    .build()?;
            let mut rows = 0u64;
            for batch in reader {
                rows += batch?.num_rows() as u64;
            }
            (rows, 0)
        }
        _ => return Err(usage.into()),
    };
    println!(
        "{{\"mode\": \"{mode}\", \"rows\": {rows}, \"kept\": {kept}, \"seconds\": {:.2}, \"peak_rss_mb\": {:.1}}}",
        started.elapsed().as_secs_f64(),
        peak_rss_mb()
    );
    Ok(())
}
