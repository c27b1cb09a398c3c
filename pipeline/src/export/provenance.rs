//! `provenance.json`: how an export was made, machine-readable, written next to its data and
//! its card (`card`). Everything comes from the run directory: `run.json` (model as the server
//! listed it, `max_tokens`, sampling parameters), `status.json` (the servers, and each
//! source's counts exactly as `gen status --json` shows them), each source's `manifest.json`
//! (repository, revision, commit, checksums, system prompt policy, preparation counts) and
//! `rejected.jsonl` (rejections by kind), plus what the export itself wrote and left out.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{ExportOptions, ExportSummary, TokenStats};
use crate::cli::ExportFormat;
use crate::status::RunStatus;
use crate::status::state::ServerStatus;
use crate::store::pin::RunPin;
use crate::store::{RunDir, atomic};

#[derive(Debug, Serialize)]
pub(super) struct Provenance {
    pub(super) gen_version: &'static str,
    /// The run directory's name; `run_dir` is where it was.
    pub(super) run_id: String,
    pub(super) run_dir: String,
    /// The config the last `gen run` used, and when it started.
    pub(super) config: Option<String>,
    pub(super) run_started_unix_ms: Option<u64>,
    pub(super) exported_unix_ms: u64,
    pub(super) export: ExportFacts,
    pub(super) model: ModelFacts,
    /// `max_tokens` and every parameter sent in each request (temperature, top_p,
    /// chat_template_kwargs, …), from `run.json`.
    pub(super) sampling: Option<Value>,
    pub(super) sources: Vec<SourceFacts>,
}

#[derive(Debug, Serialize)]
pub(super) struct ExportFacts {
    pub(super) schema: &'static str,
    pub(super) format: &'static str,
    pub(super) data_file: &'static str,
    pub(super) per_turn: bool,
    pub(super) drop_cut: bool,
    pub(super) rows: u64,
    pub(super) dropped: BTreeMap<&'static str, u64>,
    pub(super) duplicates_skipped: u64,
    pub(super) not_answers_skipped: u64,
    pub(super) not_carried: Vec<&'static str>,
}

#[derive(Debug, Serialize)]
pub(super) struct ModelFacts {
    /// The model id as the server listed it at `/v1/models` (`run.json`).
    pub(super) name: Option<String>,
    pub(super) servers: Vec<ServerFacts>,
}

#[derive(Debug, Serialize)]
pub(super) struct ServerFacts {
    pub(super) url: String,
    pub(super) model: String,
    pub(super) answered_by: Option<String>,
    /// The server's version as it reported it; `null` when the run did not record one.
    pub(super) version: Option<String>,
}

#[derive(Debug, Serialize)]
pub(super) struct SourceFacts {
    pub(super) name: String,
    pub(super) repo: Option<String>,
    pub(super) revision: Option<String>,
    pub(super) commit: Option<String>,
    pub(super) files: Vec<String>,
    pub(super) checksums: BTreeMap<String, String>,
    /// `system-prompt` (keep, drop, replace, …) and its `system-prompt-text`.
    pub(super) system_prompt: Value,
    pub(super) system_prompt_text: Value,
    /// What each request of the source asked for (`run.json`): `max_tokens`, samples per
    /// prompt, every parameter sent and the weighted lists drawn from (`[source.generation]`).
    pub(super) settings: Option<Value>,
    pub(super) preparation: Option<Value>,
    /// The source's counts in `status.json`, as `gen status --json` shows them.
    pub(super) generation: Option<GenerationFacts>,
    pub(super) rejected_by_kind: BTreeMap<String, u64>,
    pub(super) exported_rows: u64,
    pub(super) exported_assistant_turns: u64,
    pub(super) dropped: BTreeMap<&'static str, u64>,
    pub(super) tokens: TokenStats,
}

#[derive(Debug, Serialize)]
pub(super) struct GenerationFacts {
    pub(super) phase: String,
    pub(super) prepared: Option<u64>,
    pub(super) done: u64,
    pub(super) rejected: u64,
    pub(super) failed: u64,
    pub(super) duplicates: u64,
    /// Completions cut by `max-tokens` (`truncated` in `status.json`).
    pub(super) cut: u64,
    pub(super) output_tokens: u64,
}

/// Writes `provenance.json` and `README.md` into the export folder `folder`.
pub(super) fn write(
    run_dir: &Path,
    options: ExportOptions,
    summary: &ExportSummary,
    folder: &Path,
) -> anyhow::Result<()> {
    let provenance = gather(run_dir, options, summary)?;
    let json = serde_json::to_string_pretty(&provenance)? + "\n";
    fs_err::write(folder.join("provenance.json"), json)?;
    fs_err::write(
        folder.join("README.md"),
        super::card::render(&provenance, options),
    )?;
    Ok(())
}

fn gather(
    run_dir: &Path,
    options: ExportOptions,
    summary: &ExportSummary,
) -> anyhow::Result<Provenance> {
    let dir = RunDir::new(run_dir);
    let pin = RunPin::read(&dir).ok().flatten();
    let status: Option<RunStatus> = atomic::read_json(&dir.status()).ok().flatten();
    let names = source_names(run_dir, status.as_ref(), summary)?;
    let mut sources = Vec::with_capacity(names.len());
    for name in names {
        let settings = pin
            .as_ref()
            .and_then(|p| serde_json::to_value(p.settings_of(&name)).ok());
        sources.push(source_facts(
            &dir,
            &name,
            status.as_ref(),
            summary,
            settings,
        )?);
    }
    let run_id = run_dir
        .canonicalize()
        .unwrap_or_else(|_| run_dir.to_path_buf());
    Ok(Provenance {
        gen_version: env!("CARGO_PKG_VERSION"),
        run_id: run_id
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        run_dir: run_id.display().to_string(),
        config: status.as_ref().map(|s| s.config.clone()),
        run_started_unix_ms: status.as_ref().map(|s| s.started_unix_ms),
        exported_unix_ms: crate::sys::unix_ms(),
        export: ExportFacts {
            schema: options.schema.name(),
            format: match options.format {
                ExportFormat::Jsonl => "jsonl",
                ExportFormat::Parquet => "parquet",
            },
            data_file: options.data_file(),
            per_turn: options.per_turn,
            drop_cut: options.drop_cut,
            rows: summary.total(),
            dropped: summary.dropped_by_reason(),
            duplicates_skipped: summary.duplicates,
            not_answers_skipped: summary.not_answers,
            not_carried: options.schema.not_carried(),
        },
        model: ModelFacts {
            name: pin.as_ref().map(|p| p.model.clone()),
            servers: status
                .as_ref()
                .map(|s| s.servers.iter().map(server_facts).collect())
                .unwrap_or_default(),
        },
        sampling: pin.map(|p| {
            let mut sampling = Map::new();
            sampling.insert("max_tokens".into(), p.max_tokens.into());
            sampling.extend(p.params);
            Value::Object(sampling)
        }),
        sources,
    })
}

fn server_facts(server: &ServerStatus) -> ServerFacts {
    ServerFacts {
        url: server.url.clone(),
        model: server.model.clone(),
        answered_by: server.answered_by.clone(),
        version: server.version.clone(),
    }
}

/// Every source the run or the export knows, in status order, then by name.
fn source_names(
    run_dir: &Path,
    status: Option<&RunStatus>,
    summary: &ExportSummary,
) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = status
        .map(|s| s.sources.iter().map(|s| s.name.clone()).collect())
        .unwrap_or_default();
    let mut others: Vec<String> = super::source_dirs(run_dir)?
        .into_iter()
        .map(|(name, _)| name)
        .chain(summary.rows.keys().cloned())
        .filter(|name| !names.contains(name))
        .collect();
    others.sort();
    others.dedup();
    names.extend(others);
    Ok(names)
}

fn source_facts(
    dir: &RunDir,
    name: &str,
    status: Option<&RunStatus>,
    summary: &ExportSummary,
    settings: Option<Value>,
) -> anyhow::Result<SourceFacts> {
    let manifest = crate::store::manifest::read_manifest(dir, name)
        .ok()
        .flatten();
    let counters = manifest.as_ref().map(|m| &m.counters);
    let setting = |key: &str| {
        manifest
            .as_ref()
            .and_then(|m| m.settings.as_ref())
            .and_then(|s| s.get(key))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let generation = status
        .and_then(|s| s.sources.iter().find(|s| s.name == name))
        .map(|s| GenerationFacts {
            phase: s.phase.label().to_owned(),
            prepared: s.prepared,
            done: s.done,
            rejected: s.rejected,
            failed: s.failed,
            duplicates: s.duplicates,
            cut: s.truncated,
            output_tokens: s.output_tokens,
        });
    Ok(SourceFacts {
        name: name.to_owned(),
        repo: counters.and_then(|c| c.repo.clone()),
        revision: counters.and_then(|c| c.revision.clone()),
        commit: counters.and_then(|c| c.commit.clone()),
        files: counters
            .map(|c| c.files.iter().map(|f| f.display().to_string()).collect())
            .unwrap_or_default(),
        checksums: counters.map(|c| c.checksums.clone()).unwrap_or_default(),
        system_prompt: setting("system_prompt"),
        system_prompt_text: setting("system_prompt_text"),
        settings,
        preparation: counters.map(|c| {
            serde_json::json!({
                "rows_read": c.rows_read,
                "kept": c.kept,
                "dropped": c.dropped,
                "duplicates_within": c.duplicates_within,
                "duplicates_across": c.duplicates_across,
                "sampled_out": c.sampled_out,
            })
        }),
        generation,
        rejected_by_kind: rejected_by_kind(&dir.source(name).rejected())?,
        exported_rows: summary.rows.get(name).copied().unwrap_or(0),
        exported_assistant_turns: summary.answers.get(name).copied().unwrap_or(0),
        dropped: summary.dropped.get(name).cloned().unwrap_or_default(),
        tokens: summary.tokens.get(name).cloned().unwrap_or_default(),
    })
}

/// Rejections in `rejected.jsonl` by kind (`rejected`, `exhausted`, `truncated`,
/// `duplicate`), the last record of a prompt counting; lines that are not records are
/// skipped (`gen run` sets them aside).
fn rejected_by_kind(path: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let Some(text) = crate::store::atomic::if_exists(fs_err::read_to_string(path))? else {
        return Ok(BTreeMap::new());
    };
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        let Ok(record) = serde_json::from_str::<crate::store::records::RejectedRecord>(line) else {
            continue;
        };
        let kind = serde_json::to_value(record.kind)?
            .as_str()
            .unwrap_or_default()
            .to_owned();
        last.insert(record.id, kind);
    }
    let mut counts = BTreeMap::new();
    for kind in last.into_values() {
        *counts.entry(kind).or_insert(0) += 1;
    }
    Ok(counts)
}
