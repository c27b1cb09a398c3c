//! `gen prep`: the built-in preparation worker, run as its own process by `gen run`.
//!
//! It prepares one source into `prompts.jsonl.zst` (written to a temp name, then renamed) and
//! writes `manifest.json` atomically *last*: the manifest's presence is the proof that the
//! source's preparation completed, so a crash after it (during teardown) loses nothing. A
//! custom worker's rows are imported through the same preparation ([`import_custom_output`]).

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context as _;
use gen_sources::hub::DownloadProgress;

use crate::config::{Plan, SourcePlan};
use crate::store::manifest::{FileStat, PrepManifest};
use crate::store::{RunDir, atomic, frames::FrameWriter, worker};

/// Prompts per zstd frame of the prompts file, at most.
const FRAME_PROMPTS: usize = 1000;
/// Uncompressed bytes per frame, at most (about): a frame is buffered whole, here and in every
/// reader, so a thousand 40 KB prompts must not make one.
const FRAME_BYTES: usize = 4 << 20;

/// Prepares `source` of `plan` into the run directory, leaving out the prompts whose content
/// hashes `exclude` lists (the earlier sources' prompts; counted as `duplicates_across`).
pub fn prepare_source(
    plan: &Plan,
    run_dir: &RunDir,
    source: &str,
    exclude: Option<&Path>,
) -> anyhow::Result<PrepManifest> {
    let source = named(plan, source)?;
    let mut exclude = exclude.map(worker::read_hashes).transpose()?;
    let manifest = prepare_spec(plan, source, &plan.base_dir, run_dir, exclude.as_mut())?;
    print_summary(&manifest);
    Ok(manifest)
}

/// Normalizes what a custom worker wrote (JSONL rows in any shape the source's settings
/// read) into the prompts file and manifest, exactly like the built-in preparation.
pub fn import_custom_output(
    plan: &Plan,
    run_dir: &RunDir,
    source: &str,
) -> anyhow::Result<PrepManifest> {
    let mut imported = named(plan, source)?.clone();
    let (output, _) = worker::custom_output(run_dir, source);
    imported.spec.path = Some(toml::Spanned::new(
        0..0,
        output.to_string_lossy().into_owned(),
    ));
    imported.spec.repo = None;
    prepare_spec(plan, &imported, Path::new("/"), run_dir, None)
}

fn named<'p>(plan: &'p Plan, source: &str) -> anyhow::Result<&'p SourcePlan> {
    plan.source(source).with_context(|| {
        format!(
            "config `{}` has no source `{source}`",
            plan.config_path.display()
        )
    })
}

fn prepare_spec(
    plan: &Plan,
    SourcePlan { spec, worker, .. }: &SourcePlan,
    base_dir: &Path,
    run_dir: &RunDir,
    exclude: Option<&mut std::collections::HashSet<u64>>,
) -> anyhow::Result<PrepManifest> {
    let source = spec.name();
    let memory_limit = worker.memory_limit;
    let dir = run_dir.source(source);
    fs_err::create_dir_all(dir.root())?;
    let final_path = dir.prompts();
    let tmp_path = final_path.with_extension("zst.tmp");
    fs_err::remove_file(&tmp_path).ok();
    let stats_before = local_stats(spec, base_dir);
    let sample = gen_sources::SampleOptions {
        memory: sample_memory(memory_limit),
        // Next to the output, on disk: `/tmp` is often RAM, charged to the worker's cgroup.
        dir: Some(dir.root().to_path_buf()),
    };
    let prepared = write_prompts(plan, spec, base_dir, &tmp_path, exclude, sample);
    let (written, digest, counters) = match prepared {
        Ok(prepared) => prepared,
        Err(e) => {
            // A partial prompts file only takes space (all of it, when the disk filled up).
            fs_err::remove_file(&tmp_path).ok();
            return Err(e);
        }
    };
    fs_err::rename(&tmp_path, &final_path)?;
    // What the file holds, so a run can tell it from a damaged or replaced one.
    let stat = FileStat::of(&final_path)?;
    let prompt_ids = crate::store::prompts::PromptIds {
        bytes: stat.len,
        prompts: written,
        digest: format!("{digest:032x}"),
        stat: Some(stat),
        samples: None,
    };
    // A file modified while it was read keeps no record: the next run hashes it again.
    let stats_after = local_stats(spec, base_dir);
    let input_stats = stats_before
        .into_iter()
        .filter(|(name, stat)| {
            stats_after.get(name) == Some(stat) && counters.checksums.contains_key(name)
        })
        .collect();
    let manifest = PrepManifest {
        layout: crate::store::layout::LAYOUT_VERSION,
        prompts: written,
        settings: Some(spec.settings()),
        input_stats,
        kept_for: None,
        prompt_ids: Some(prompt_ids),
        counters,
    };
    if let Err(e) = atomic::write_json(&dir.manifest(), &manifest) {
        // Without its manifest the source is not prepared, and its prompts only take space.
        fs_err::remove_file(&final_path).ok();
        return Err(e).with_context(|| format!("failed to write `{}`", dir.manifest().display()));
    }
    Ok(manifest)
}

/// What `gen prep` prepared, for its log (its stdout). Not for a custom worker's output, which
/// `gen run` imports itself: its terminal gets `gen:` lines from the run's reporter instead.
fn print_summary(manifest: &PrepManifest) {
    println!(
        "prepared {} prompts from {} rows ({} dropped, {} duplicates, {} in earlier sources)",
        manifest.prompts,
        manifest.counters.rows_read,
        manifest.counters.dropped.values().sum::<u64>(),
        manifest.counters.duplicates_within,
        manifest.counters.duplicates_across
    );
    if manifest.counters.with_tool_turns > 0 {
        println!(
            "prompts with tool turns (calls and results kept): {}",
            manifest.counters.with_tool_turns
        );
    }
    if manifest.counters.cut_at_tool_turn > 0 {
        println!(
            "conversations cut before a tool turn (a result without its call, or \
             `tool-turns = \"cut\"`): {}",
            manifest.counters.cut_at_tool_turn
        );
    }
    if let Some(warning) = manifest.warning() {
        println!("warning: {warning}");
    }
    for example in &manifest.counters.examples {
        println!(
            "  skipped {}:{}: {}",
            example.file.display(),
            example.row + 1,
            example.reason
        );
    }
}

/// Bytes of prompts the sample may hold in memory: the default, or a quarter of the worker's
/// memory limit when that is smaller (the rest is the readers', the output's and the process's).
fn sample_memory(memory_limit: Option<u64>) -> usize {
    let quarter = memory_limit.map_or(u64::MAX, |limit| limit / 4);
    usize::try_from(quarter)
        .unwrap_or(usize::MAX)
        .min(gen_sources::prepare::DEFAULT_SAMPLE_MEMORY)
}

/// Size and modification time of a local source's input files, by the name the manifest gives
/// them (empty for a Hub source, or when they cannot be listed).
fn local_stats(
    spec: &gen_sources::SourceSpec,
    base_dir: &Path,
) -> std::collections::BTreeMap<String, FileStat> {
    if spec.repo.is_some() {
        return std::collections::BTreeMap::new();
    }
    gen_sources::prepare::resolve_files(spec, base_dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|file| {
            let stat = FileStat::of(&file).ok()?;
            Some((file.to_string_lossy().into_owned(), stat))
        })
        .collect()
}

/// Writes the prompts of `spec` to `tmp_path`; returns how many, and the counters.
fn write_prompts(
    plan: &Plan,
    spec: &gen_sources::SourceSpec,
    base_dir: &Path,
    tmp_path: &Path,
    exclude: Option<&mut std::collections::HashSet<u64>>,
    sample: gen_sources::SampleOptions,
) -> anyhow::Result<(u64, u128, gen_sources::Manifest)> {
    // Named as the file it becomes: the temporary name is an implementation detail.
    let context = || {
        format!(
            "failed to write `{}`",
            tmp_path.with_extension("").display()
        )
    };
    let (mut writer, _) = FrameWriter::open(tmp_path).with_context(context)?;
    let (mut written, mut digest) = (0u64, 0u128);
    let hub = gen_sources::HubSettings::from_env().with_progress(download_log());
    let mut options = gen_sources::PrepareOptions {
        hub,
        seen_across: exclude,
        columnar: true,
        sample,
    };
    let counters = gen_sources::prepare_with(spec, base_dir, &mut options, &mut |prompt| {
        writer.push(prompt)?;
        written += 1;
        digest = digest.wrapping_add(crate::store::ids::key(&prompt.id));
        if writer.pending() >= FRAME_PROMPTS || writer.pending_bytes() >= FRAME_BYTES {
            writer.flush()?;
        }
        Ok(())
    });
    let counters = match counters {
        Err(e @ gen_sources::SourceError::Sink(_)) => return Err(e).with_context(context),
        // A setting the data does not fit: point at it.
        Err(e) => match e.span() {
            Some(span) => anyhow::bail!("{}: {e}", plan.locate(span)),
            None => return Err(e.into()),
        },
        Ok(counters) => counters,
    };
    writer.flush().with_context(context)?;
    Ok((written, digest, counters))
}

/// Download progress as lines in the worker's log: where a large download stands, and proof
/// of life for the supervisor's stall watchdog (a worker whose log does not grow for
/// `stall-secs` is presumed stuck) while a multi-GB file arrives. One line when a file starts,
/// one per [`DOWNLOAD_LOG_PERCENT`] of it, and one when it is complete.
fn download_log() -> gen_sources::hub::ProgressCallback {
    let logged = std::sync::Mutex::new(HashMap::new());
    std::sync::Arc::new(move |progress: &DownloadProgress| {
        let mut logged = logged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(line) = download_line(&mut logged, progress) {
            println!("{line}");
        }
    })
}

/// The log line for a progress event, if it is worth one: `logged` holds, per file, the last
/// step logged.
fn download_line(logged: &mut HashMap<String, u64>, p: &DownloadProgress) -> Option<String> {
    let percent = (p.downloaded.saturating_mul(100))
        .checked_div(p.total)
        .unwrap_or(100)
        .min(100);
    let step = percent / DOWNLOAD_LOG_PERCENT;
    let key = format!("{}/{}", p.repo, p.file);
    if logged.get(&key) == Some(&step) {
        return None;
    }
    logged.insert(key, step);
    Some(format!(
        "downloading {} {}: {} of {} ({percent}%)",
        p.repo,
        p.file,
        crate::doctor::human(p.downloaded),
        crate::doctor::human(p.total)
    ))
}

/// Percent of a file between two download lines in the worker's log.
const DOWNLOAD_LOG_PERCENT: u64 = 5;

#[cfg(test)]
mod tests {
    use super::*;

    fn event(file: &str, downloaded: u64, total: u64) -> DownloadProgress {
        DownloadProgress {
            repo: "o/r".to_owned(),
            file: file.to_owned(),
            downloaded,
            total,
        }
    }

    #[test]
    fn download_lines_come_once_per_five_percent_of_each_file() {
        let mut logged = HashMap::new();
        let total = 2 << 30;
        // Progress events as the hub client sends them: at the start, every 8 MiB, at the end.
        let mut lines = Vec::new();
        for (file, downloaded) in (0..=total)
            .step_by(8 << 20)
            .map(|d| ("a.parquet", d))
            .chain([("b.jsonl", 0), ("a.parquet", total), ("b.jsonl", 100)])
        {
            let size = if file == "b.jsonl" { 100 } else { total };
            lines.extend(download_line(&mut logged, &event(file, downloaded, size)));
        }
        assert_eq!(lines.len(), 21 + 2, "{lines:#?}");
        assert_eq!(lines[0], "downloading o/r a.parquet: 0 B of 2 GiB (0%)");
        assert_eq!(lines[1], "downloading o/r a.parquet: 104 MiB of 2 GiB (5%)");
        assert_eq!(
            lines[20],
            "downloading o/r a.parquet: 2 GiB of 2 GiB (100%)"
        );
        assert_eq!(lines[21], "downloading o/r b.jsonl: 0 B of 100 B (0%)");
        assert_eq!(lines[22], "downloading o/r b.jsonl: 100 B of 100 B (100%)");
    }

    #[test]
    fn a_file_of_unknown_size_is_logged_as_complete_once() {
        let mut logged = HashMap::new();
        let first = download_line(&mut logged, &event("x", 5, 0));
        assert_eq!(
            first.as_deref(),
            Some("downloading o/r x: 5 B of 0 B (100%)")
        );
        assert_eq!(download_line(&mut logged, &event("x", 9, 0)), None);
    }
}
