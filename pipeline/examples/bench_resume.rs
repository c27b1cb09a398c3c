//! Benchmarks of resuming a run: the done-set rebuild, and the project a no-op restart and
//! `gen verify` are timed on.
//!
//! `bench_resume write FILE N [--no-index]` writes N realistic completion records (prompt,
//! reasoning and answer in word-like text, about 1.9 KB of JSON each) through the real
//! `FrameWriter`, 64 records a frame as `gen run` flushes them, with an id index entry after
//! each frame as `gen run` writes them (`--no-index`: as `gen` wrote them before the index).
//! `bench_resume rebuild FILE [REPEATS]` times what `gen run` does per source on start —
//! `completed_ids`, then the torn-tail check of `FrameWriter::open` — and prints each run and
//! the medians.
//! `bench_resume project DIR N` writes `DIR/cfg.toml` and `DIR/data/bench.jsonl` (N prompts of
//! word-like text; the server URL is a closed port: nothing is ever sent);
//! `bench_resume finish SOURCE_DIR` stores a completion for every prepared prompt of a source
//! directory, as a finished run leaves it; `bench_resume forget-ids SOURCE_DIR` removes the
//! prompt ids a counting pass recorded in its manifest (as a run dir an older `gen` wrote).
//! `scripts/bench-resume.sh` runs them all.

use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, bail};
use gen_pipeline::inference::client::Usage;
use gen_pipeline::store::frames::{self, FrameWriter};
use gen_pipeline::store::records::CompletionRecord;
use gen_sources::{Message, Role};

/// Records per frame, as the orchestrator flushes them.
const FRAME_RECORDS: usize = 64;

/// splitmix64: a seeded, dependency-free source of pseudo-random words.
struct Words {
    state: u64,
    vocabulary: Vec<String>,
}

impl Words {
    fn new(seed: u64) -> Words {
        let mut words = Words {
            state: seed,
            vocabulary: Vec::new(),
        };
        const SYLLABLES: [&str; 24] = [
            "the", "con", "ing", "re", "ta", "ly", "tion", "pro", "ver", "al", "ex", "mo", "de",
            "si", "an", "ter", "com", "ment", "ab", "ne", "ous", "gra", "ph", "ca",
        ];
        // 4096 distinct words of 1–4 syllables; drawn Zipf-like below.
        while words.vocabulary.len() < 4096 {
            let n = 1 + words.next() % 4;
            let word: String = (0..n)
                .map(|_| SYLLABLES[(words.next() % 24) as usize])
                .collect();
            words.vocabulary.push(word);
        }
        words
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// About `bytes` of text: Zipf-like words, numbers, punctuation and line breaks.
    fn text(&mut self, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 16);
        while out.len() < bytes {
            let r = self.next();
            // Squaring a uniform draw favours the first words, as natural text does.
            let u = (r >> 11) as f64 / (1u64 << 53) as f64;
            let word = &self.vocabulary[(u * u * u * 4096.0) as usize];
            out.push_str(word);
            match r % 23 {
                0 => out.push_str(". "),
                1 => out.push_str(", "),
                2 => out.push('\n'),
                3 => out.push_str(&format!(" {} ", r % 10_000)),
                _ => out.push(' '),
            }
        }
        out
    }
}

fn write(path: &Path, count: u64, indexed: bool) -> anyhow::Result<()> {
    if path.exists() {
        bail!("`{}` exists; remove it first", path.display());
    }
    let (mut writer, _) = if indexed {
        FrameWriter::open_indexed(path)?
    } else {
        FrameWriter::open(path)?
    };
    let mut words = Words::new(42);
    let started = Instant::now();
    for i in 0..count {
        let prompt = words.prompt();
        let record = completion(
            &mut words,
            gen_sources::prompt::prompt_id("bench", i, 0),
            vec![Message::new(Role::User, prompt)],
            i,
        );
        writer.push(&record)?;
        if writer.pending() >= FRAME_RECORDS {
            writer.flush()?;
        }
    }
    writer.flush()?;
    let bytes = fs_err::metadata(path)?.len();
    eprintln!(
        "wrote {count} records, {:.1} MiB, in {:.1} s",
        bytes as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

impl Words {
    /// A user prompt of 150–450 bytes.
    fn prompt(&mut self) -> String {
        let extra = self.next() % 300;
        self.text(150 + extra as usize)
    }
}

/// A completion of ~1.9 KB of JSON with reasoning, as a thinking model's answer is stored.
fn completion(words: &mut Words, id: String, messages: Vec<Message>, i: u64) -> CompletionRecord {
    let lengths = [words.next() % 700, words.next() % 500];
    let reasoning = words.text(500 + lengths[0] as usize);
    let content = words.text(200 + lengths[1] as usize);
    CompletionRecord {
        id,
        source: "bench".into(),
        source_key: None,
        model: "Qwen/Qwen3-8B".into(),
        messages,
        tools: None,
        tool_turns_cut: false,
        content,
        reasoning_content: Some(reasoning),
        finish_reason: Some("stop".into()),
        cut_by: None,
        usage: Some(Usage {
            prompt_tokens: 120,
            completion_tokens: 380,
            total_tokens: 500,
        }),
        turns: Vec::new(),
        attempts: 1,
        latency_ms: 12_345,
        created_unix_ms: 1_760_000_000_000 + i,
        sample: 0,
        // What each record now stores of its request.
        settings: serde_json::json!({"temperature": 0.6, "top_p": 0.95, "max_tokens": 8192})
            .as_object()
            .cloned(),
        token_ids: None,
    }
}

/// A project of one source of `count` prompts whose server is never reached.
fn project(dir: &Path, count: u64) -> anyhow::Result<()> {
    fs_err::create_dir_all(dir.join("data"))?;
    fs_err::write(
        dir.join("cfg.toml"),
        format!(
            "[server]\nurl = \"http://127.0.0.1:1\"\nhealth-timeout-secs = 1\n\n\
             [generation]\nmax-tokens = 1024\n\n[[source]]\nname = \"bench\"\n\
             path = \"data/bench.jsonl\"\nlimit = {count}\n"
        ),
    )?;
    let mut out = std::io::BufWriter::new(fs_err::File::create(dir.join("data/bench.jsonl"))?);
    let mut words = Words::new(7);
    for i in 0..count {
        let row = serde_json::json!({"prompt": format!("{i}: {}", words.prompt())});
        writeln!(out, "{row}")?;
    }
    out.flush()?;
    Ok(())
}

/// Stores a completion for every prepared prompt of `source_dir`.
fn finish(source_dir: &Path) -> anyhow::Result<()> {
    let path = source_dir.join("completions.jsonl.zst");
    if path.exists() {
        bail!("`{}` exists; remove it first", path.display());
    }
    let (mut writer, _) = FrameWriter::open_indexed(&path)?;
    let mut words = Words::new(42);
    let mut count = 0u64;
    let mut failed = None;
    gen_pipeline::store::prompts::for_each_prompt(
        &source_dir.join("prompts.jsonl.zst"),
        |prompt| {
            if failed.is_some() {
                return;
            }
            let record = completion(&mut words, prompt.id, prompt.messages, count);
            count += 1;
            let stored = writer.push(&record).and_then(|()| {
                if writer.pending() >= FRAME_RECORDS {
                    writer.flush()?;
                }
                Ok(())
            });
            failed = stored.err();
        },
    )?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    writer.flush()?;
    eprintln!("stored {count} completions in `{}`", path.display());
    Ok(())
}

/// Removes `prompt_ids` from a source's manifest.
fn forget_ids(source_dir: &Path) -> anyhow::Result<()> {
    let path = source_dir.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_slice(&fs_err::read(&path)?)?;
    if let Some(fields) = manifest.as_object_mut() {
        fields.remove("prompt_ids");
    }
    fs_err::write(&path, serde_json::to_vec_pretty(&manifest)?)?;
    Ok(())
}

fn rebuild(path: &Path, repeats: usize) -> anyhow::Result<()> {
    let mut rebuilds = Vec::new();
    let mut repairs = Vec::new();
    for _ in 0..repeats {
        let started = Instant::now();
        let ids = gen_pipeline::store::done::load(path)
            .map(|stored| stored.ids)
            .with_context(|| format!("failed to read `{}`", path.display()))?;
        let rebuild = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let scan = frames::repair(path)?;
        let repair = started.elapsed().as_secs_f64();
        eprintln!(
            "rebuild: {} ids in {rebuild:.3} s; repair check: {} records in {repair:.3} s",
            ids.len(),
            scan.records
        );
        rebuilds.push(rebuild);
        repairs.push(repair);
    }
    println!(
        "median of {repeats}: rebuild {:.3} s, repair check {:.3} s",
        median(&mut rebuilds),
        median(&mut repairs)
    );
    Ok(())
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["write", path, count] => write(Path::new(path), count.parse()?, true),
        ["write", path, count, "--no-index"] => write(Path::new(path), count.parse()?, false),
        ["rebuild", path] => rebuild(Path::new(path), 5),
        ["rebuild", path, repeats] => rebuild(Path::new(path), repeats.parse()?),
        ["project", dir, count] => project(Path::new(dir), count.parse()?),
        ["finish", dir] => finish(Path::new(dir)),
        ["forget-ids", dir] => forget_ids(Path::new(dir)),
        _ => bail!(
            "usage: bench_resume write FILE N [--no-index] | rebuild FILE [REPEATS] | \
             project DIR N | finish SOURCE_DIR | forget-ids SOURCE_DIR"
        ),
    }
}
