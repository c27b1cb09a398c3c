//! `gen merge -o OUT SHARD_DIR...` (or `gen merge RUN_ROOT`): combines the run directories of `--shard i/n` runs into one,
//! and checks the result: a prompt completed in two shards is a duplicate (kept once, and
//! reported), a prompt completed or settled in none is a gap.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;

use crate::store::frames::{self, FrameWriter};
use crate::store::ids::{self, IdSet, SeenIds};
use crate::store::pin::RunPin;
use crate::store::records::{self as record, CompletionRecord};
use crate::store::{RunDir, atomic};

/// Per-source result of a merge.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MergedSource {
    pub prompts: u64,
    pub completed: u64,
    pub settled: u64,
    pub duplicates: u64,
    pub gaps: u64,
}

fn source_names(shards: &[RunDir]) -> anyhow::Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for shard in shards {
        let dir = shard.root().join("sources");
        let entries = fs_err::read_dir(&dir)
            .with_context(|| format!("`{}` is not a run directory", shard.root().display()))?;
        for entry in entries {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                names.insert(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    Ok(names)
}

/// Merges one source of every shard into `out`; each prompt is `samples` ids to account for.
fn merge_source(
    name: &str,
    shards: &[RunDir],
    out: &RunDir,
    samples: u32,
) -> anyhow::Result<MergedSource> {
    let target = out.source(name);
    fs_err::create_dir_all(target.root())?;
    let mut result = MergedSource::default();
    // Every shard prepared the same prompts; the first that has them provides the file.
    let mut prompt_keys = Vec::new();
    if let Some(first) = shards
        .iter()
        .map(|s| s.source(name))
        .find(|d| d.prompts().exists())
    {
        crate::store::prompts::for_each_prompt(&first.prompts(), |prompt| {
            for sample in 0..samples {
                let id = crate::config::settings::sample_id(&prompt.id, sample);
                prompt_keys.push(ids::key(&id));
            }
        })?;
        fs_err::copy(first.prompts(), target.prompts())?;
        if first.manifest().exists() {
            fs_err::copy(first.manifest(), target.manifest())?;
        }
    }
    let prompt_ids = IdSet::from_keys(prompt_keys);
    result.prompts = prompt_ids.len() as u64;
    let (mut writer, _) = FrameWriter::open_indexed(&target.completions())?;
    let mut seen = SeenIds::default();
    let mut settled = IdSet::default();
    let mut rejected_lines = Vec::new();
    for shard in shards {
        let dir = shard.source(name);
        let mut records: Vec<CompletionRecord> = Vec::new();
        frames::scan(&dir.completions(), |line| {
            records.push(serde_json::from_slice(line).map_err(std::io::Error::other)?);
            Ok(())
        })
        .with_context(|| format!("failed to read `{}`", dir.completions().display()))?;
        for record in records {
            // The merged file's entries vouch that its records are answers.
            if record.defect().is_some() {
                continue;
            }
            if seen.insert(&record.id) {
                writer.push(&record)?;
                if writer.pending() >= 1000 {
                    writer.flush()?;
                }
            } else {
                result.duplicates += 1;
            }
        }
        settled =
            settled.union(&record::settled_ids(&dir.rejected(), &record::Resend::default())?.ids);
        if let Ok(text) = fs_err::read(dir.rejected()) {
            rejected_lines.extend_from_slice(&text);
        }
    }
    writer.flush()?;
    if !rejected_lines.is_empty() {
        atomic::write(&target.rejected(), &rejected_lines)?;
    }
    let seen = seen.into_set();
    result.completed = seen.len() as u64;
    result.settled = settled.count_not_in(&seen) as u64;
    result.gaps = prompt_ids.count_not_in(&seen.union(&settled)) as u64;
    Ok(result)
}

/// Merges `shards` into the new directory `output`, source by source.
pub fn merge_dirs(
    output: &Path,
    shards: &[RunDir],
) -> anyhow::Result<BTreeMap<String, MergedSource>> {
    anyhow::ensure!(
        !shards.is_empty(),
        "name the shard run directories to merge"
    );
    let out = RunDir::new(output);
    anyhow::ensure!(
        !out.root().join("sources").exists(),
        "`{}` already holds a run: merge into a new directory",
        output.display()
    );
    // Every shard ran with the same settings: the first pin says them (samples per prompt,
    // for the merge and for `gen verify` of the merged directory), for all prompts.
    let pin = shards
        .iter()
        .find_map(|shard| RunPin::read(shard).ok().flatten());
    if let Some(pin) = &pin {
        fs_err::create_dir_all(out.root())?;
        let merged = RunPin {
            shard: None,
            ..pin.clone()
        };
        atomic::write_json(&out.pin(), &merged)?;
    }
    let mut results = BTreeMap::new();
    for name in source_names(shards)? {
        let samples = pin
            .as_ref()
            .map_or(1, |p| p.settings_of(&name).samples.get());
        let merged = merge_source(&name, shards, &out, samples)?;
        results.insert(name, merged);
    }
    Ok(results)
}

/// The merge's table, and whether it is clean (no gaps, no duplicates).
pub fn report(
    results: &BTreeMap<String, MergedSource>,
    shards: usize,
    output: &Path,
) -> (String, bool) {
    use std::fmt::Write as _;
    let mut text = String::new();
    let row = |text: &mut String, cells: [&str; 6]| {
        let [name, prompts, completed, settled, duplicates, gaps] = cells;
        writeln!(
            text,
            "{name:<18} {prompts:>9} {completed:>10} {settled:>8} {duplicates:>10} {gaps:>6}"
        )
        .ok();
    };
    row(
        &mut text,
        [
            "SOURCE",
            "PROMPTS",
            "COMPLETED",
            "SETTLED",
            "DUPLICATES",
            "GAPS",
        ],
    );
    for (name, r) in results {
        row(
            &mut text,
            [
                name,
                &r.prompts.to_string(),
                &r.completed.to_string(),
                &r.settled.to_string(),
                &r.duplicates.to_string(),
                &r.gaps.to_string(),
            ],
        );
    }
    let gaps: u64 = results.values().map(|r| r.gaps).sum();
    let duplicates: u64 = results.values().map(|r| r.duplicates).sum();
    writeln!(
        text,
        "merged {shards} shards into `{}`: {gaps} gaps, {duplicates} duplicates (kept once)",
        output.display()
    )
    .ok();
    (text, gaps == 0 && duplicates == 0)
}

/// `gen merge`: merges `shards` into `output` — or, given one run root of a sharded job,
/// its shards into `RUN_ROOT/merged` (or `output`). Prints a table; exit 1 when there are
/// gaps or duplicates.
pub fn merge(output: Option<&Path>, shards: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let (output, dirs) = match shards {
        [root] if crate::scale::root::RunRoot::is_root(root) => {
            let root = crate::scale::root::RunRoot::new(root);
            let dirs: Vec<RunDir> = root.shards()?.into_iter().map(|(_, dir, _)| dir).collect();
            (
                output.map_or_else(|| root.merged(), Path::to_path_buf),
                dirs,
            )
        }
        _ => {
            let output = output.ok_or_else(|| {
                anyhow::anyhow!(
                    "say where to merge with `-o OUT` (only a run root of `--shard auto` \
                     tasks has a default, `RUN_ROOT/merged`)"
                )
            })?;
            (
                output.to_path_buf(),
                shards.iter().map(RunDir::new).collect(),
            )
        }
    };
    let results = merge_dirs(&output, &dirs)?;
    let (table, clean) = report(&results, dirs.len(), &output);
    print!("{table}");
    Ok(ExitCode::from(if clean { 0 } else { 1 }))
}
