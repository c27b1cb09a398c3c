//! `gen export`: a run's completions as a training-ready dataset folder, in the schema of the
//! trainer that will read it (`schema`: `messages`, `specforge`, `sharegpt`, `modelopt`),
//! as JSONL or Parquet.
//!
//! Reads every source's `completions.jsonl.zst` (whole frames only, so a run still writing is
//! safe to export), keeps the first record of each prompt id, turns each into an
//! [`ExportRow`] (the prompt followed by the model's answers, with their reasoning), selects
//! (`select`: one row per answer with `--per-turn`, answers cut short left out unless
//! `--keep-cut`), maps it to the schema's cells (`schema`) and streams them to the file
//! (`table` for JSONL, `columnar` for Parquet). The folder is written under a temporary name
//! and renamed, so a reader never sees half an export:
//!
//! ```text
//! OUTPUT/README.md        dataset card with the Hub's YAML header (`card`)
//! OUTPUT/provenance.json  how the data was made (`provenance`)
//! OUTPUT/data/train.jsonl or train.parquet, alone in its folder (readers that load a
//!                         folder, like NeMo Automodel's, take every file in it)
//! ```
//!
//! A run that is not finished (a source not prepared or whose preparation failed, prompts
//! without a completion: [`crate::verify::audit`] decides) is not exported unless
//! `--allow-incomplete`: a file that looks like the dataset but lacks part of it is worse than
//! none. Each row keeps the dataset's own key for its prompt (`source_key`), read from the
//! source's `prompts.jsonl.zst`, so rows can be joined back to the original data.
//!
//! It must not change the run directory except for adding the export folder itself.

mod card;
mod columnar;
mod provenance;
mod schema;
mod select;
mod table;

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use serde::Deserialize;

use crate::CliError;
use crate::cli::{ExportArgs, ExportFormat, ExportSchema};
use crate::store::RunDir;
use crate::store::records::TokenIds;
use gen_sources::prompt::{ToolCall, answer_points};
use gen_sources::{Message, Role};
use table::{Cell, Column};

/// One conversation of the export, before a schema shapes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRow {
    pub id: String,
    pub source: String,
    /// The dataset's own key for the row (`id`, `prompt_id`, …) when it has one.
    pub source_key: Option<String>,
    /// The prompt's messages with the model's answer(s) as `assistant` turns.
    pub messages: Vec<ExportMessage>,
    /// The tool definitions sent with the messages.
    pub tools: Option<serde_json::Value>,
    /// The reasoning of the last answer.
    pub reasoning_content: Option<String>,
    pub finish_reason: Option<String>,
    pub model: String,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Which answer to its prompt this is, with `samples = k` (0 to k − 1).
    pub sample: u32,
    /// What the request asked for besides the messages (`max_tokens`, sampling, drawn values
    /// as drawn); `None` for records of older `gen`s (theirs are in `provenance.json`).
    pub settings: Option<serde_json::Map<String, serde_json::Value>>,
}

/// One chat turn of an exported row; `reasoning_content` and `answer` are set on generated
/// answers only, the tool fields on the dataset's tool turns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportMessage {
    pub role: String,
    pub content: String,
    pub reasoning_content: Option<String>,
    pub answer: Option<Answer>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

/// How a generated answer ended and what it cost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    pub finish_reason: Option<String>,
    /// What cut it short, as `gen run` recorded it (`None`: not cut, or an older record).
    pub cut_by: Option<crate::store::records::CutBy>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// The prompt's and the answer's token ids, when `token-ids = true` stored them.
    pub token_ids: Option<TokenIds>,
}

/// The fields of a stored [`crate::store::records::CompletionRecord`] an export needs. Read
/// through its own type so fields added to the record later are simply ignored.
#[derive(Debug, Deserialize)]
struct StoredCompletion {
    id: String,
    source: String,
    source_key: Option<String>,
    model: String,
    messages: Vec<Message>,
    tools: Option<serde_json::Value>,
    content: String,
    reasoning_content: Option<String>,
    finish_reason: Option<String>,
    cut_by: Option<crate::store::records::CutBy>,
    usage: Option<StoredUsage>,
    /// Every answered user turn of a multi-turn prompt (empty for a single turn).
    #[serde(default)]
    turns: Vec<StoredTurn>,
    token_ids: Option<TokenIds>,
    #[serde(default)]
    sample: u32,
    settings: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Clone, Deserialize)]
struct StoredUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct StoredTurn {
    content: String,
    reasoning_content: Option<String>,
    finish_reason: Option<String>,
    cut_by: Option<crate::store::records::CutBy>,
    usage: Option<StoredUsage>,
    token_ids: Option<TokenIds>,
}

fn tokens(usage: Option<&StoredUsage>) -> (Option<u64>, Option<u64>) {
    usage.map_or((None, None), |u| (u.prompt_tokens, u.completion_tokens))
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn prompt_message(message: &Message) -> ExportMessage {
    ExportMessage {
        role: role_name(message.role).to_owned(),
        content: message.content.clone(),
        tool_calls: message.tool_calls.clone(),
        tool_call_id: message.tool_call_id.clone(),
        name: message.name.clone(),
        ..ExportMessage::default()
    }
}

fn answer(turn: StoredTurn) -> ExportMessage {
    let (prompt_tokens, completion_tokens) = tokens(turn.usage.as_ref());
    ExportMessage {
        role: "assistant".to_owned(),
        content: turn.content,
        reasoning_content: turn.reasoning_content,
        answer: Some(Answer {
            finish_reason: turn.finish_reason,
            cut_by: turn.cut_by,
            prompt_tokens,
            completion_tokens,
            token_ids: turn.token_ids,
        }),
        ..ExportMessage::default()
    }
}

impl From<StoredCompletion> for ExportRow {
    fn from(stored: StoredCompletion) -> ExportRow {
        let mut messages = Vec::with_capacity(stored.messages.len() + 1 + stored.turns.len());
        if stored.turns.is_empty() {
            messages.extend(stored.messages.iter().map(prompt_message));
            messages.push(answer(StoredTurn {
                content: stored.content,
                reasoning_content: stored.reasoning_content.clone(),
                finish_reason: stored.finish_reason.clone(),
                cut_by: stored.cut_by,
                usage: stored.usage.clone(),
                token_ids: stored.token_ids,
            }));
        } else {
            // A multi-turn regeneration answered in order, each answer where `gen run` asked
            // for it: after a user turn, or after the tool results that follow it.
            let mut answers = stored.turns.into_iter();
            let mut points = answer_points(&stored.messages).peekable();
            for (index, message) in stored.messages.iter().enumerate() {
                messages.push(prompt_message(message));
                if points.next_if_eq(&index).is_some()
                    && let Some(turn) = answers.next()
                {
                    messages.push(answer(turn));
                }
            }
        }
        let (prompt_tokens, completion_tokens) = tokens(stored.usage.as_ref());
        ExportRow {
            id: stored.id,
            source: stored.source,
            source_key: stored.source_key,
            messages,
            tools: stored.tools,
            reasoning_content: stored.reasoning_content,
            finish_reason: stored.finish_reason,
            model: stored.model,
            prompt_tokens,
            completion_tokens,
            sample: stored.sample,
            settings: stored.settings,
        }
    }
}

/// Where rows go: a JSONL file or a Parquet writer, both in the temporary folder.
enum Sink {
    Jsonl(BufWriter<fs_err::File>, &'static [Column]),
    Parquet(Box<columnar::ParquetSink>),
}

impl Sink {
    fn push(&mut self, cells: Vec<Cell>) -> anyhow::Result<()> {
        match self {
            Sink::Jsonl(out, columns) => {
                let row = table::JsonRow {
                    columns,
                    cells: &cells,
                };
                serde_json::to_writer(&mut *out, &row).context("cannot write a JSONL row")?;
                out.write_all(b"\n")?;
                Ok(())
            }
            Sink::Parquet(sink) => sink.push(cells),
        }
    }

    fn finish(self) -> anyhow::Result<()> {
        match self {
            Sink::Jsonl(out, _) => {
                let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
                file.sync_all()?;
                Ok(())
            }
            Sink::Parquet(sink) => sink.finish(),
        }
    }
}

/// What to export, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportOptions {
    pub schema: ExportSchema,
    pub format: ExportFormat,
    /// One row per generated answer (`--per-turn`).
    pub per_turn: bool,
    /// Leave out rows whose answer was cut short (`--drop-cut`).
    pub drop_cut: bool,
}

impl ExportOptions {
    /// The data file's path inside the export folder.
    pub fn data_file(&self) -> &'static str {
        match self.format {
            ExportFormat::Jsonl => "data/train.jsonl",
            ExportFormat::Parquet => "data/train.parquet",
        }
    }
}

/// What an export wrote and left out, per source directory (by name).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ExportSummary {
    /// Rows written per source.
    pub rows: BTreeMap<String, u64>,
    /// Assistant turns in the rows written, per source.
    pub answers: BTreeMap<String, u64>,
    /// Rows left out per source and reason (cut short without `--keep-cut`, or a row the
    /// schema cannot carry).
    pub dropped: BTreeMap<String, BTreeMap<&'static str, u64>>,
    /// Token counts of the rows written, per source.
    pub tokens: BTreeMap<String, TokenStats>,
    /// Records skipped because their id was already exported.
    pub duplicates: u64,
    /// Stored records skipped because they are not answers (aborted, empty: an older `gen`
    /// stored those; `gen run` sets them aside and generates them again).
    pub not_answers: u64,
}

/// Token counts of exported rows, as the server reported them (rows without usage are not
/// counted).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TokenStats {
    pub rows_with_usage: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub completion_tokens_min: Option<u64>,
    pub completion_tokens_max: Option<u64>,
}

impl TokenStats {
    fn add(&mut self, prompt: Option<u64>, completion: Option<u64>) {
        let Some(completion) = completion else {
            return;
        };
        self.rows_with_usage += 1;
        self.prompt_tokens += prompt.unwrap_or(0);
        self.completion_tokens += completion;
        let min = self.completion_tokens_min.unwrap_or(u64::MAX);
        self.completion_tokens_min = Some(min.min(completion));
        // `None` orders below every `Some`.
        self.completion_tokens_max = self.completion_tokens_max.max(Some(completion));
    }
}

impl ExportSummary {
    pub fn total(&self) -> u64 {
        self.rows.values().sum()
    }

    /// Rows left out, per reason, over every source.
    pub fn dropped_by_reason(&self) -> BTreeMap<&'static str, u64> {
        let mut total = BTreeMap::new();
        for (&reason, &count) in self.dropped.values().flatten() {
            *total.entry(reason).or_insert(0) += count;
        }
        total
    }
}

/// `gen export TARGET [--schema S] [--format F] [--per-turn] [--keep-cut] [--output DIR]`.
pub fn export(args: &ExportArgs) -> Result<ExitCode, CliError> {
    let run_dir = RunDir::named_by(&args.target)?;
    let schema = match args.schema {
        ExportSchema::Speculators => speculators_rows(run_dir.root())?,
        schema => schema,
    };
    let options = ExportOptions {
        schema,
        format: args.format,
        per_turn: args.per_turn,
        drop_cut: !args.keep_cut,
    };
    let output = match &args.output {
        Some(path) => path.clone(),
        None => run_dir.root().join(format!(
            "export-{}{}",
            options.schema.name(),
            if options.per_turn { "-per-turn" } else { "" }
        )),
    };
    if output.exists() {
        return Err(CliError::usage(anyhow::anyhow!(
            "`{}` already exists: an export creates a new folder; remove it or choose \
                 another with `--output DIR`",
            output.display()
        )));
    }
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
            return Err(anyhow::anyhow!(
                "the run at `{}` is not finished, so an export would miss prompts:{}\n\
                 finish it with `gen run {}`, or export what is there with \
                 `--allow-incomplete`",
                run_dir.root().display(),
                missing.concat(),
                audit.config
            )
            .into());
        }
        eprintln!(
            "gen: exporting an unfinished run (--allow-incomplete):{}",
            missing.concat()
        );
    }
    for what in options.schema.not_carried() {
        eprintln!(
            "gen: the `{}` schema does not carry {what}",
            options.schema.name()
        );
    }
    let summary = export_run(run_dir.root(), options, &output)?;
    print!("{}", summary_text(&summary, options, &output));
    Ok(ExitCode::SUCCESS)
}

/// What `--schema speculators` writes: token rows when every stored answer carries its token
/// ids, else conversations (said on stderr, with why), for speculators to render. Mixing the
/// two in one file is not possible: speculators takes token rows only when every row is one.
fn speculators_rows(run_dir: &Path) -> anyhow::Result<ExportSchema> {
    /// Just the token ids of a stored record, the rest skipped unparsed.
    #[derive(Deserialize)]
    struct Ids {
        token_ids: Option<serde::de::IgnoredAny>,
        #[serde(default)]
        turns: Vec<TurnIds>,
    }
    #[derive(Deserialize)]
    struct TurnIds {
        token_ids: Option<serde::de::IgnoredAny>,
    }
    let (mut with, mut without) = (0u64, 0u64);
    // The sources with answers lacking ids, and how many.
    let mut lacking: Vec<(String, u64)> = Vec::new();
    for (name, dir) in source_dirs(run_dir)? {
        let path = dir.join("completions.jsonl.zst");
        if !path.exists() {
            continue;
        }
        let before = without;
        crate::store::frames::scan(&path, |line| {
            let ids: Ids = serde_json::from_slice(line)
                .map_err(|e| io::Error::other(format!("a record is not a completion: {e}")))?;
            let all = ids.token_ids.is_some() && ids.turns.iter().all(|t| t.token_ids.is_some());
            if all {
                with += 1
            } else {
                without += 1
            }
            Ok(())
        })
        .with_context(|| format!("cannot read `{}`", path.display()))?;
        if without > before {
            lacking.push((name, without - before));
        }
    }
    if without == 0 && with > 0 {
        eprintln!(
            "gen: every answer has its token ids: writing `input_ids` + `loss_mask` rows \
             (speculators' `prepare-data` takes them as they are, no `--render-endpoint`)"
        );
        return Ok(ExportSchema::SpeculatorsTokens);
    }
    eprintln!(
        "gen: {without} of {} stored answers have no token ids (`token-ids = true` stores \
         them): writing `conversations` for speculators to render (`speculators prepare-data \
         --render-endpoint http://VLLM:PORT`)",
        with + without
    );
    if with > 0 {
        // Some sources have ids: say which lack them, and the way to token rows for all.
        let named: Vec<String> = lacking
            .iter()
            .map(|(name, n)| format!("`{name}` ({n})"))
            .collect();
        let regenerate: String = lacking
            .iter()
            .map(|(name, _)| format!(" --regenerate {name}"))
            .collect();
        eprintln!(
            "gen: answers without ids: {}; with `token-ids = true` for them, `gen run \
             CONFIG{regenerate}` stores them again with ids, and the export is token rows",
            named.join(", ")
        );
    }
    Ok(ExportSchema::Speculators)
}

/// What `gen export` prints on success.
fn summary_text(summary: &ExportSummary, options: ExportOptions, output: &Path) -> String {
    let per_source: Vec<String> = summary
        .rows
        .iter()
        .map(|(name, rows)| format!("{name} {rows}"))
        .collect();
    let format = match options.format {
        ExportFormat::Jsonl => "JSONL",
        ExportFormat::Parquet => "Parquet",
    };
    let mut text = format!(
        "exported {} rows ({}) as `{}` {format} to `{}`\n",
        summary.total(),
        per_source.join(", "),
        options.schema.name(),
        output.display()
    );
    for (reason, count) in summary.dropped_by_reason() {
        text.push_str(&format!("  left out {count}: {reason}\n"));
    }
    if summary.duplicates > 0 {
        text.push_str(&format!(
            "  skipped {}: duplicate records of an exported prompt\n",
            summary.duplicates
        ));
    }
    if summary.not_answers > 0 {
        text.push_str(&format!(
            "  skipped {}: stored records that are not answers (`gen run` generates them again)\n",
            summary.not_answers
        ));
    }
    text.push_str(&format!(
        "upload with: hf upload USER/NAME {} --repo-type dataset\n",
        output.display()
    ));
    text
}

/// Writes the completions of the run at `run_dir` as the dataset folder `output` (which
/// must not exist).
pub fn export_run(
    run_dir: &Path,
    options: ExportOptions,
    output: &Path,
) -> anyhow::Result<ExportSummary> {
    let sources = source_dirs(run_dir)?;
    if output.exists() {
        anyhow::bail!("`{}` already exists", output.display());
    }
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs_err::create_dir_all(parent)?;
    }
    let temp = temp_path(output);
    let written = write_folder(run_dir, &sources, options, &temp);
    match written {
        Ok(summary) => {
            fs_err::rename(&temp, output)?;
            Ok(summary)
        }
        Err(e) => {
            fs_err::remove_dir_all(&temp).ok();
            Err(e)
        }
    }
}

fn write_folder(
    run_dir: &Path,
    sources: &[(String, PathBuf)],
    options: ExportOptions,
    temp: &Path,
) -> anyhow::Result<ExportSummary> {
    use std::os::unix::fs::PermissionsExt as _;
    fs_err::create_dir(temp)?;
    // Owner-only like every file holding prompts and outputs.
    fs_err::set_permissions(temp, std::fs::Permissions::from_mode(0o700))?;
    fs_err::create_dir(temp.join("data"))?;
    let summary = write_data(sources, options, &temp.join(options.data_file()))?;
    if summary.total() > 0 {
        provenance::write(run_dir, options, &summary, temp)?;
    }
    if summary.total() == 0 {
        let dropped: Vec<String> = summary
            .dropped_by_reason()
            .into_iter()
            .map(|(reason, count)| format!("\n  {count} left out: {reason}"))
            .collect();
        anyhow::bail!(
            "no completions to export in `{}`{}",
            run_dir.display(),
            if dropped.is_empty() {
                ": run `gen run` first".to_owned()
            } else {
                format!(":{}", dropped.concat())
            }
        );
    }
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

/// Streams every source's completions through the selection and the schema into `path`.
fn write_data(
    sources: &[(String, PathBuf)],
    options: ExportOptions,
    path: &Path,
) -> anyhow::Result<ExportSummary> {
    use fs_err::os::unix::fs::OpenOptionsExt as _;
    let file = fs_err::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    let columns = options.schema.columns();
    let mut sink = match options.format {
        ExportFormat::Jsonl => Sink::Jsonl(BufWriter::with_capacity(1 << 20, file), columns),
        ExportFormat::Parquet => {
            Sink::Parquet(Box::new(columnar::ParquetSink::new(file, columns)?))
        }
    };
    let mut summary = ExportSummary::default();
    let mut seen = crate::store::ids::SeenIds::default();
    for (name, dir) in sources {
        let path = dir.join("completions.jsonl.zst");
        // Records carry their prompt's key; only those of older `gen`s are looked up in the
        // prompts file, read into memory the first time one is met.
        let mut keys: Option<HashMap<String, String>> = None;
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
            if row.source_key.is_none() {
                let prompts = dir.join("prompts.jsonl.zst");
                let keys = match &mut keys {
                    Some(keys) => keys,
                    None => keys.insert(
                        source_keys(&prompts).map_err(|e| io::Error::other(format!("{e:#}")))?,
                    ),
                };
                row.source_key = keys.get(&row.id).cloned();
            }
            let answers = row.messages.iter().filter(|m| m.answer.is_some()).count();
            let token_rows = options.schema == ExportSchema::SpeculatorsTokens;
            // Token rows are one per answer, as speculators' regeneration writes them: each
            // answer's prompt tokens hold the conversation before it.
            let rows = if options.per_turn || (token_rows && answers > 1) {
                select::per_turn(row)
            } else {
                vec![row]
            };
            for row in rows {
                if let Err(e) = write_row(&mut sink, &mut summary, name, options, row) {
                    let message = e.to_string();
                    failure = Some(e);
                    return Err(io::Error::other(message));
                }
            }
            Ok(())
        })
        .map_err(|e| match failure.take() {
            Some(failure) => failure,
            None => anyhow::Error::new(e),
        })
        .with_context(|| format!("cannot export `{}`", path.display()))?;
    }
    sink.finish()?;
    Ok(summary)
}

/// Why a row with tool turns is left out of a Parquet export.
const TOOL_TURNS_IN_PARQUET: &str = "tool turns (calls and results): the Parquet form has no columns for them; the JSONL form \
     (`--format jsonl`) carries them";

/// Writes `row` unless it is left out, counting either way.
fn write_row(
    sink: &mut Sink,
    summary: &mut ExportSummary,
    source: &str,
    options: ExportOptions,
    row: ExportRow,
) -> anyhow::Result<()> {
    let mut left_out = |reason: &'static str| {
        *summary
            .dropped
            .entry(source.to_owned())
            .or_default()
            .entry(reason)
            .or_insert(0) += 1;
    };
    if options.drop_cut
        && let Some(cut) = select::cut(&row)
    {
        left_out(cut.label());
        return Ok(());
    }
    let answers = row
        .messages
        .iter()
        .filter(|m| m.role == "assistant" && m.tool_calls.is_empty())
        .count() as u64;
    if matches!(sink, Sink::Parquet(_))
        && row
            .messages
            .iter()
            .any(|m| m.role == "tool" || !m.tool_calls.is_empty())
    {
        left_out(TOOL_TURNS_IN_PARQUET);
        return Ok(());
    }
    let (prompt_tokens, completion_tokens) = (row.prompt_tokens, row.completion_tokens);
    match options.schema.cells(row) {
        Ok(cells) => {
            sink.push(cells)?;
            summary
                .tokens
                .entry(source.to_owned())
                .or_default()
                .add(prompt_tokens, completion_tokens);
            *summary.rows.entry(source.to_owned()).or_insert(0) += 1;
            *summary.answers.entry(source.to_owned()).or_insert(0) += answers;
        }
        Err(unfit) => left_out(unfit),
    }
    Ok(())
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

    const JSONL: ExportOptions = ExportOptions {
        schema: ExportSchema::Messages,
        format: ExportFormat::Jsonl,
        per_turn: false,
        drop_cut: false,
    };

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
                answer: Some(Answer {
                    finish_reason: Some("stop".into()),
                    cut_by: None,
                    prompt_tokens: Some(7),
                    completion_tokens: Some(2),
                    token_ids: None,
                }),
                ..ExportMessage::default()
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

        let output = run.join("out/export");
        let summary = export_run(run, JSONL, &output).expect("export");
        assert_eq!(summary.rows, BTreeMap::from([("alpha".to_owned(), 2)]));
        assert_eq!(summary.duplicates, 1);
        let text = fs_err::read_to_string(output.join("data/train.jsonl")).expect("read");
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
        assert_eq!(leftovers, [std::ffi::OsString::from("export")]);
        let again = export_run(run, JSONL, &output).expect_err("exists");
        assert!(again.to_string().ends_with("already exists"), "{again}");

        let empty = tempfile::tempdir().expect("tempdir");
        fs_err::create_dir_all(empty.path().join("sources/alpha")).expect("mkdir");
        let parquet = ExportOptions {
            format: ExportFormat::Parquet,
            ..JSONL
        };
        let error = export_run(empty.path(), parquet, &empty.path().join("e"))
            .expect_err("nothing to export");
        assert!(
            error.to_string().starts_with("no completions to export"),
            "{error}"
        );
        assert!(!empty.path().join("e").exists());
        let leftovers = fs_err::read_dir(empty.path()).expect("ls").count();
        assert_eq!(leftovers, 1, "only `sources` is left");
        let missing = export_run(&run.join("nope"), JSONL, &run.join("other")).expect_err("no run");
        assert!(
            missing.to_string().starts_with("no run found at"),
            "{missing}"
        );
    }

    /// `--schema speculators`: token rows (one per answer, a two-turn record's turns each a
    /// row with its own prompt ids) when every record has its ids, in JSONL and Parquet; a
    /// record without them makes the whole export conversations.
    #[test]
    fn speculators_writes_token_rows_only_when_every_answer_has_its_ids() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = dir.path();
        let alpha = run.join("sources/alpha");
        fs_err::create_dir_all(&alpha).expect("mkdir");
        let ids = |p: &[u32], c: &[u32]| serde_json::json!({"prompt": p, "completion": c});
        let (mut writer, _) =
            FrameWriter::open(&alpha.join("completions.jsonl.zst")).expect("open");
        writer
            .push(&serde_json::json!({
                "id": "one", "source": "alpha", "model": "m",
                "messages": [{"role": "user", "content": "q"}], "content": "a",
                "finish_reason": "stop", "usage": null, "token_ids": ids(&[1, 2], &[3, 4, 5]),
            }))
            .expect("push");
        writer
            .push(&serde_json::json!({
                "id": "two", "source": "alpha", "model": "m",
                "messages": [{"role": "user", "content": "q1"}, {"role": "user", "content": "q2"}],
                "content": "a2", "finish_reason": "stop", "usage": null,
                "token_ids": ids(&[1, 6, 7, 8], &[9]),
                "turns": [
                    {"content": "a1", "finish_reason": "stop", "usage": null, "token_ids": ids(&[1, 6], &[7])},
                    {"content": "a2", "finish_reason": "stop", "usage": null, "token_ids": ids(&[1, 6, 7, 8], &[9])},
                ],
            }))
            .expect("push");
        writer.flush().expect("flush");
        drop(writer);
        assert_eq!(
            speculators_rows(run).expect("scan"),
            ExportSchema::SpeculatorsTokens
        );
        let tokens = ExportOptions {
            schema: ExportSchema::SpeculatorsTokens,
            ..JSONL
        };
        let output = run.join("out/tokens");
        let summary = export_run(run, tokens, &output).expect("export");
        assert_eq!(summary.rows, BTreeMap::from([("alpha".to_owned(), 3)]));
        let text = fs_err::read_to_string(output.join("data/train.jsonl")).expect("read");
        let rows: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(
            rows,
            [
                serde_json::json!({"id": "one", "input_ids": [1, 2, 3, 4, 5], "loss_mask": [0, 0, 1, 1, 1]}),
                serde_json::json!({"id": "two#turn0", "input_ids": [1, 6, 7], "loss_mask": [0, 0, 1]}),
                serde_json::json!({"id": "two#turn1", "input_ids": [1, 6, 7, 8, 9], "loss_mask": [0, 0, 0, 0, 1]}),
            ]
        );
        let parquet = ExportOptions {
            format: ExportFormat::Parquet,
            ..tokens
        };
        export_run(run, parquet, &run.join("out/parquet")).expect("parquet");

        let (mut writer, _) =
            FrameWriter::open(&alpha.join("completions.jsonl.zst")).expect("open");
        writer
            .push(&serde_json::json!({
                "id": "old", "source": "alpha", "model": "m",
                "messages": [{"role": "user", "content": "q"}], "content": "a",
                "finish_reason": "stop", "usage": null,
            }))
            .expect("push");
        writer.flush().expect("flush");
        drop(writer);
        assert_eq!(
            speculators_rows(run).expect("scan"),
            ExportSchema::Speculators
        );
    }
}
