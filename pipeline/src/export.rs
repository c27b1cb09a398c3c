//! `gen export`: a run's completions as a training-ready dataset (JSONL or Parquet).
//!
//! Reads every source's `completions.jsonl.zst` (whole frames only, so a run still writing is
//! safe to export), keeps the first record of each prompt id, and writes one row per
//! completion: `id`, `source`, `source_key`, `messages` (the prompt followed by the model's answer, with its
//! reasoning), `reasoning_content`, `finish_reason`, `model`, `prompt_tokens`,
//! `completion_tokens`. The file is written under a temporary name and renamed, so a reader
//! never sees half an export. The Parquet layout is in [`columnar`].
//!
//! A run that is not finished (a source not prepared or whose preparation failed, prompts
//! without a completion: [`crate::verify::audit`] decides) is not exported unless
//! `--allow-incomplete`: a file that looks like the dataset but lacks part of it is worse than
//! none. Each row keeps the dataset's own key for its prompt (`source_key`), read from the
//! source's `prompts.jsonl.zst`, so rows can be joined back to the original data.
//!
//! It must not change the run directory except for adding the export file itself.

mod columnar;

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::cli::{ExportArgs, ExportFormat};
use gen_sources::{Message, Role};

/// One row of the exported dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportRow {
    pub id: String,
    pub source: String,
    /// The dataset's own key for the row (`id`, `prompt_id`, …) when it has one.
    pub source_key: Option<String>,
    /// The prompt's messages with the model's answer(s) as `assistant` turns.
    pub messages: Vec<ExportMessage>,
    /// The reasoning of the last answer.
    pub reasoning_content: Option<String>,
    pub finish_reason: Option<String>,
    pub model: String,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
}

/// One chat turn of an exported row; `reasoning_content` is set on generated answers only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportMessage {
    pub role: String,
    pub content: String,
    pub reasoning_content: Option<String>,
}

/// The fields of a stored [`crate::store::records::CompletionRecord`] an export needs. Read
/// through its own type so fields added to the record later are simply ignored.
#[derive(Debug, Deserialize)]
struct StoredCompletion {
    id: String,
    source: String,
    model: String,
    messages: Vec<Message>,
    content: String,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    usage: Option<StoredUsage>,
    /// Every answered user turn of a multi-turn prompt (empty for a single turn).
    #[serde(default)]
    turns: Vec<StoredTurn>,
}

#[derive(Debug, Deserialize)]
struct StoredUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct StoredTurn {
    content: String,
    #[serde(default)]
    reasoning_content: Option<String>,
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn prompt_message(message: &Message) -> ExportMessage {
    ExportMessage {
        role: role_name(message.role).to_owned(),
        content: message.content.clone(),
        reasoning_content: None,
    }
}

fn answer(content: String, reasoning_content: Option<String>) -> ExportMessage {
    ExportMessage {
        role: "assistant".to_owned(),
        content,
        reasoning_content,
    }
}

impl From<StoredCompletion> for ExportRow {
    fn from(stored: StoredCompletion) -> ExportRow {
        let mut messages = Vec::with_capacity(stored.messages.len() + 1 + stored.turns.len());
        if stored.turns.is_empty() {
            messages.extend(stored.messages.iter().map(prompt_message));
            messages.push(answer(stored.content, stored.reasoning_content.clone()));
        } else {
            // A multi-turn regeneration answered each user turn in order: each answer follows
            // the user message it answers.
            let mut answers = stored.turns.into_iter();
            for message in &stored.messages {
                messages.push(prompt_message(message));
                if message.role == Role::User
                    && let Some(turn) = answers.next()
                {
                    messages.push(answer(turn.content, turn.reasoning_content));
                }
            }
        }
        let (prompt_tokens, completion_tokens) = stored
            .usage
            .map_or((None, None), |u| (u.prompt_tokens, u.completion_tokens));
        ExportRow {
            id: stored.id,
            source: stored.source,
            source_key: None,
            messages,
            reasoning_content: stored.reasoning_content,
            finish_reason: stored.finish_reason,
            model: stored.model,
            prompt_tokens,
            completion_tokens,
        }
    }
}

/// Where rows go: a JSONL file or a Parquet writer, both on the temporary file.
enum Sink {
    Jsonl(BufWriter<fs_err::File>),
    Parquet(Box<columnar::ParquetSink>),
}

impl Sink {
    fn push(&mut self, row: ExportRow) -> anyhow::Result<()> {
        match self {
            Sink::Jsonl(out) => {
                serde_json::to_writer(&mut *out, &row).context("cannot write a JSONL row")?;
                out.write_all(b"\n")?;
                Ok(())
            }
            Sink::Parquet(sink) => sink.push(row),
        }
    }

    fn finish(self) -> anyhow::Result<()> {
        match self {
            Sink::Jsonl(out) => {
                let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
                file.sync_all()?;
                Ok(())
            }
            Sink::Parquet(sink) => sink.finish(),
        }
    }
}

/// What an export wrote.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Rows per source directory, by name.
    pub rows: BTreeMap<String, u64>,
    /// Records skipped because their id was already exported.
    pub duplicates: u64,
    /// Stored records skipped because they are not answers (aborted, empty: an older `gen`
    /// stored those; `gen run` sets them aside and generates them again).
    pub not_answers: u64,
}

impl ExportSummary {
    pub fn total(&self) -> u64 {
        self.rows.values().sum()
    }
}

/// `gen export TARGET [--format jsonl|parquet] [--output FILE]`.
pub fn export(args: &ExportArgs) -> anyhow::Result<ExitCode> {
    let run_dir = crate::resolve_run_dir(&args.target).map_err(|failure| failure.error)?;
    let output = match &args.output {
        Some(path) => path.clone(),
        None => run_dir.root().join(match args.format {
            ExportFormat::Jsonl => "export.jsonl",
            ExportFormat::Parquet => "export.parquet",
        }),
    };
    let config = args
        .target
        .is_file()
        .then(|| args.target.display().to_string());
    let audit = crate::verify::audit(&run_dir, config.as_deref())?;
    if !audit.complete {
        let missing: Vec<String> = audit
            .missing()
            .map(|(name, what)| format!("\n  `{name}`: {what}"))
            .collect();
        if !args.allow_incomplete {
            anyhow::bail!(
                "the run at `{}` is not finished, so an export would miss prompts:{}\n\
                 finish it with `gen run {}`, or export what is there with \
                 `--allow-incomplete`",
                run_dir.root().display(),
                missing.concat(),
                audit.config
            );
        }
        eprintln!(
            "gen: exporting an unfinished run (--allow-incomplete):{}",
            missing.concat()
        );
    }
    let summary = export_run(run_dir.root(), args.format, &output)?;
    let per_source: Vec<String> = summary
        .rows
        .iter()
        .map(|(name, rows)| format!("{name} {rows}"))
        .collect();
    let mut duplicates = match summary.duplicates {
        0 => String::new(),
        n => format!("; {n} duplicate(s) skipped"),
    };
    if summary.not_answers > 0 {
        duplicates.push_str(&format!(
            "; {} stored record(s) that are not answers skipped (`gen run` generates them again)",
            summary.not_answers
        ));
    }
    println!(
        "exported {} completions ({}{duplicates}) to `{}`",
        summary.total(),
        per_source.join(", "),
        output.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Writes the completions of the run at `run_dir` to `output` in `format`.
pub fn export_run(
    run_dir: &Path,
    format: ExportFormat,
    output: &Path,
) -> anyhow::Result<ExportSummary> {
    let sources = source_dirs(run_dir)?;
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs_err::create_dir_all(parent)?;
    }
    let temp = temp_path(output);
    let result = write_all(&sources, format, &temp);
    let summary = match result {
        Ok(summary) if summary.total() > 0 => summary,
        Ok(_) => {
            fs_err::remove_file(&temp).ok();
            anyhow::bail!(
                "no completions to export in `{}`: run `gen run` first",
                run_dir.display()
            );
        }
        Err(e) => {
            fs_err::remove_file(&temp).ok();
            return Err(e);
        }
    };
    fs_err::rename(&temp, output)?;
    Ok(summary)
}

/// The source directories of a run, by name.
fn source_dirs(run_dir: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let sources = run_dir.join("sources");
    let entries = match fs_err::read_dir(&sources) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => anyhow::bail!(
            "no run found at `{}` (no `sources` directory): start one with `gen run CONFIG`",
            run_dir.display()
        ),
        Err(e) => return Err(e.into()),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            dirs.push((
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            ));
        }
    }
    dirs.sort();
    Ok(dirs)
}

fn temp_path(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map_or_else(|| "export".into(), |n| n.to_string_lossy().into_owned());
    output.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

fn write_all(
    sources: &[(String, PathBuf)],
    format: ExportFormat,
    temp: &Path,
) -> anyhow::Result<ExportSummary> {
    use fs_err::os::unix::fs::OpenOptionsExt as _;
    // Owner-only like every file holding prompts and outputs.
    let file = fs_err::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(temp)?;
    let mut sink = match format {
        ExportFormat::Jsonl => Sink::Jsonl(BufWriter::with_capacity(1 << 20, file)),
        ExportFormat::Parquet => Sink::Parquet(Box::new(columnar::ParquetSink::new(file)?)),
    };
    let mut summary = ExportSummary::default();
    let mut seen = crate::store::ids::SeenIds::default();
    for (name, dir) in sources {
        let path = dir.join("completions.jsonl.zst");
        let keys = source_keys(&dir.join("prompts.jsonl.zst"))?;
        let mut rows = 0u64;
        let mut failure: Option<anyhow::Error> = None;
        crate::store::frames::scan(&path, |line| {
            if crate::store::records::line_defect(line)?.is_some() {
                summary.not_answers += 1;
                return Ok(());
            }
            let stored: StoredCompletion = serde_json::from_slice(line)
                .map_err(|e| io::Error::other(format!("a record is not a completion: {e}")))?;
            if !seen.insert(&stored.id) {
                summary.duplicates += 1;
                return Ok(());
            }
            let mut row = ExportRow::from(stored);
            row.source_key = keys.get(&row.id).cloned();
            if let Err(e) = sink.push(row) {
                let message = e.to_string();
                failure = Some(e);
                return Err(io::Error::other(message));
            }
            rows += 1;
            Ok(())
        })
        .map_err(|e| match failure.take() {
            Some(failure) => failure,
            None => anyhow::Error::new(e),
        })
        .with_context(|| format!("cannot export `{}`", path.display()))?;
        if rows > 0 {
            summary.rows.insert(name.clone(), rows);
        }
    }
    sink.finish()?;
    Ok(summary)
}

/// The dataset's own key of each prompt in `prompts` that has one, by prompt id (a missing
/// file: none).
fn source_keys(prompts: &Path) -> anyhow::Result<HashMap<String, String>> {
    let mut keys = HashMap::new();
    if !prompts.exists() {
        return Ok(keys);
    }
    crate::store::prompts::for_each_prompt(prompts, |prompt| {
        if let Some(key) = prompt.source_key {
            keys.insert(prompt.id, key);
        }
    })
    .with_context(|| format!("cannot read `{}`", prompts.display()))?;
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frames::FrameWriter;

    fn stored(json: serde_json::Value) -> ExportRow {
        ExportRow::from(serde_json::from_value::<StoredCompletion>(json).expect("record"))
    }

    #[test]
    fn a_single_turn_gets_the_answer_appended_with_its_reasoning() {
        let row = stored(serde_json::json!({
            "id": "p1", "source": "alpha", "model": "m",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            "content": "hello", "reasoning_content": "greet back", "finish_reason": "stop",
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
            "attempts": 1, "latency_ms": 3, "created_unix_ms": 4
        }));
        let roles: Vec<&str> = row.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant"]);
        assert_eq!(
            row.messages[2],
            ExportMessage {
                role: "assistant".into(),
                content: "hello".into(),
                reasoning_content: Some("greet back".into()),
            }
        );
        assert_eq!(row.messages[1].reasoning_content, None);
        assert_eq!(
            (row.prompt_tokens, row.completion_tokens),
            (Some(7), Some(2))
        );
        assert_eq!(row.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn multi_turn_answers_follow_the_user_turns_they_answer() {
        let row = stored(serde_json::json!({
            "id": "p2", "source": "alpha", "model": "m",
            "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
            "content": "B", "finish_reason": "stop", "usage": null,
            "turns": [{"content": "A", "finish_reason": "stop"}, {"content": "B", "reasoning_content": "r"}],
        }));
        let flat: Vec<(&str, &str)> = row
            .messages
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_str()))
            .collect();
        assert_eq!(
            flat,
            [
                ("user", "a"),
                ("assistant", "A"),
                ("user", "b"),
                ("assistant", "B")
            ]
        );
        assert_eq!(row.messages[3].reasoning_content.as_deref(), Some("r"));
        assert_eq!(row.prompt_tokens, None);
    }

    #[test]
    fn duplicates_are_skipped_and_an_empty_run_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = dir.path();
        let alpha = run.join("sources/alpha");
        fs_err::create_dir_all(&alpha).expect("mkdir");
        fs_err::create_dir_all(run.join("sources/empty")).expect("mkdir");
        let (mut writer, _) =
            FrameWriter::open(&alpha.join("completions.jsonl.zst")).expect("open");
        for (id, content) in [("x", "first"), ("y", "other"), ("x", "second")] {
            writer
                .push(&serde_json::json!({
                    "id": id, "source": "alpha", "model": "m",
                    "messages": [{"role": "user", "content": "q"}], "content": content,
                    "finish_reason": "stop", "usage": null,
                }))
                .expect("push");
        }
        writer.flush().expect("flush");
        drop(writer);

        let output = run.join("out/export.jsonl");
        let summary = export_run(run, ExportFormat::Jsonl, &output).expect("export");
        assert_eq!(summary.rows, BTreeMap::from([("alpha".to_owned(), 2)]));
        assert_eq!(summary.duplicates, 1);
        let text = fs_err::read_to_string(&output).expect("read");
        let contents: Vec<String> = text
            .lines()
            .map(|l| {
                let row: serde_json::Value = serde_json::from_str(l).expect("json");
                row["messages"][1]["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned()
            })
            .collect();
        assert_eq!(contents, ["first", "other"]);
        let leftovers: Vec<_> = fs_err::read_dir(run.join("out"))
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(leftovers, [std::ffi::OsString::from("export.jsonl")]);

        let empty = tempfile::tempdir().expect("tempdir");
        fs_err::create_dir_all(empty.path().join("sources/alpha")).expect("mkdir");
        let error = export_run(
            empty.path(),
            ExportFormat::Parquet,
            &empty.path().join("e.parquet"),
        )
        .expect_err("nothing to export");
        assert!(
            error.to_string().starts_with("no completions to export"),
            "{error}"
        );
        assert!(!empty.path().join("e.parquet").exists());
        let missing =
            export_run(&run.join("nope"), ExportFormat::Jsonl, &output).expect_err("no run");
        assert!(
            missing.to_string().starts_with("no run found at"),
            "{missing}"
        );
    }
}
