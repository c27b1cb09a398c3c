//! `gen prep`: the built-in preparation worker, run as its own process by `gen run`.
//!
//! It prepares one source into `prompts.jsonl.zst` (written to a temp name, then renamed) and
//! writes `manifest.json` atomically *last*: the manifest's presence is the proof that the
//! source's preparation completed, so a crash after it (during teardown) loses nothing.

use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::config::Plan;
use crate::store::{RunDir, atomic, frames::FrameWriter};

/// Prompts per zstd frame of the prompts file.
const FRAME_PROMPTS: usize = 1000;

/// `manifest.json`: the sources crate's counters plus what the pipeline needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrepManifest {
    pub layout: u32,
    /// Number of prompts in `prompts.jsonl.zst`.
    pub prompts: u64,
    #[serde(flatten)]
    pub counters: gen_sources::Manifest,
}

/// Prepares `source` of `plan` into the run directory.
pub fn prepare_source(plan: &Plan, run_dir: &RunDir, source: &str) -> anyhow::Result<PrepManifest> {
    let spec = plan.source(source).with_context(|| {
        format!(
            "config `{}` has no source `{source}`",
            plan.config_path.display()
        )
    })?;
    prepare_spec(spec, &plan.base_dir, run_dir)
}

/// Where a custom worker writes its rows, and the marker it creates when complete.
pub fn custom_output(run_dir: &RunDir, source: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = run_dir.source(source);
    (
        dir.root().join("worker-output.jsonl"),
        dir.root().join("worker-output.done"),
    )
}

/// Normalizes what a custom worker wrote (JSONL rows in any shape the source's settings
/// read) into the prompts file and manifest, exactly like the built-in preparation.
pub fn import_custom_output(
    plan: &Plan,
    run_dir: &RunDir,
    source: &str,
) -> anyhow::Result<PrepManifest> {
    let mut spec = plan
        .source(source)
        .with_context(|| {
            format!(
                "config `{}` has no source `{source}`",
                plan.config_path.display()
            )
        })?
        .clone();
    let (output, _) = custom_output(run_dir, source);
    spec.path = Some(toml::Spanned::new(
        0..0,
        output.to_string_lossy().into_owned(),
    ));
    spec.repo = None;
    prepare_spec(&spec, Path::new("/"), run_dir)
}

fn prepare_spec(
    spec: &gen_sources::SourceSpec,
    base_dir: &Path,
    run_dir: &RunDir,
) -> anyhow::Result<PrepManifest> {
    let source = spec.name();
    let dir = run_dir.source(source);
    fs_err::create_dir_all(dir.root())?;
    let final_path = dir.prompts();
    let tmp_path = final_path.with_extension("zst.tmp");
    fs_err::remove_file(&tmp_path).ok();
    let (mut writer, _) = FrameWriter::open(&tmp_path)?;
    let mut written = 0u64;
    let counters = gen_sources::prepare(spec, base_dir, &mut |prompt| {
        writer.push(prompt)?;
        written += 1;
        if writer.pending() >= FRAME_PROMPTS {
            writer.flush()?;
        }
        Ok(())
    })?;
    writer.flush()?;
    drop(writer);
    fs_err::rename(&tmp_path, &final_path)?;
    let manifest = PrepManifest {
        layout: crate::store::layout::LAYOUT_VERSION,
        prompts: written,
        counters,
    };
    atomic::write_json(&dir.manifest(), &manifest)?;
    println!(
        "prepared {written} prompts from {} rows ({} dropped, {} duplicates)",
        manifest.counters.rows_read,
        manifest.counters.dropped.values().sum::<u64>(),
        manifest.counters.duplicates_within
    );
    for example in &manifest.counters.examples {
        println!(
            "  skipped {}:{}: {}",
            example.file.display(),
            example.row + 1,
            example.reason
        );
    }
    Ok(manifest)
}

/// Reads a source's manifest: `Some` only when its preparation completed.
pub fn read_manifest(run_dir: &RunDir, source: &str) -> anyhow::Result<Option<PrepManifest>> {
    let dir = run_dir.source(source);
    let manifest: Option<PrepManifest> = atomic::read_json(&dir.manifest())?;
    Ok(manifest.filter(|_| dir.prompts().exists()))
}

/// Loads the prepared prompts of a source (for `gen merge` and `gen bench`; `gen run` streams
/// them, see [`crate::run::feed`]).
pub fn read_prompts(path: &Path) -> anyhow::Result<Vec<gen_sources::Prompt>> {
    let mut prompts = Vec::new();
    crate::run::feed::for_each_prompt(path, |prompt| prompts.push(prompt))?;
    Ok(prompts)
}
