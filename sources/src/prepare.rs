//! The preparation of one source: files (local or from the Hub) → rows → normalized,
//! deduplicated, sampled prompts, and a [`Manifest`] of all of it.
//!
//! Memory is bounded by the readers (one row or one Parquet batch) and the sample (`limit`
//! prompts), which also deduplicates (see [`sample`]); only `dedup = false` keeps a counter per
//! distinct prompt, to number repeats.

mod error;
mod manifest;
mod sample;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

pub use error::SourceError;
pub use manifest::{MAX_EXAMPLES, Manifest, RowExample};

use crate::hub::{self, HubSettings};
use crate::normalize::Normalizer;
use crate::prompt::{Prompt, content_hash, prompt_id};
use crate::read::{Row, for_each_row, format_of};
use crate::spec::SourceSpec;
use manifest::etag_checksum;
use sample::{Prehashed, Sample};

/// Everything `prepare` needs beyond the spec: how to reach the Hub, and the prompts earlier
/// sources already kept (cross-source deduplication: the earlier source wins).
#[derive(Debug)]
pub struct PrepareOptions<'a> {
    pub hub: HubSettings,
    /// Content hashes ([`content_hash`]) kept by earlier sources; this source skips them and
    /// adds the ones it keeps. `None`: no cross-source deduplication.
    pub seen_across: Option<&'a mut HashSet<u64>>,
}

impl PrepareOptions<'_> {
    /// Hub settings from the environment, no cross-source deduplication.
    pub fn from_env() -> PrepareOptions<'static> {
        PrepareOptions {
            hub: HubSettings::from_env(),
            seen_across: None,
        }
    }
}

/// A file to read: where it is, how the manifest names it, and its checksum when known.
struct Input {
    local: PathBuf,
    name: PathBuf,
    checksum: Option<String>,
}

/// The files a local source reads, in a stable order.
pub fn resolve_files(spec: &SourceSpec, base_dir: &Path) -> Result<Vec<PathBuf>, SourceError> {
    let pattern = spec
        .path
        .as_ref()
        .map(|p| p.get_ref().as_str())
        .unwrap_or("");
    let full = base_dir.join(pattern);
    let full = full.to_string_lossy();
    let bad = |message: String| SourceError::BadPattern {
        source_name: spec.name().to_owned(),
        pattern: pattern.to_owned(),
        message,
    };
    let mut files = Vec::new();
    for entry in glob::glob(&full).map_err(|e| bad(e.to_string()))? {
        files.push(entry.map_err(|e| bad(e.to_string()))?);
    }
    files.sort();
    if files.is_empty() {
        return Err(SourceError::NoFiles {
            source_name: spec.name().to_owned(),
            pattern: full.into_owned(),
        });
    }
    Ok(files)
}

/// A fast content checksum of a local file (xxh3-128: a fixed spec, ~10× faster than sha256,
/// which would dominate preparation time on a large local Parquet file).
fn xxh3_of(path: &Path) -> io::Result<String> {
    let mut file = fs_err::File::open(path)?;
    let mut hasher = Xxh3::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(format!("{:032x}", hasher.digest128()))
}

/// The inputs of a source, fetching Hub files first; fills the manifest's provenance.
fn inputs(
    spec: &SourceSpec,
    base_dir: &Path,
    hub_settings: &HubSettings,
    manifest: &mut Manifest,
) -> Result<Vec<Input>, SourceError> {
    if let Some(repo) = &spec.repo {
        let download = hub::fetch(
            repo.get_ref(),
            spec.revision(),
            &spec.file_patterns(),
            hub_settings,
        )
        .map_err(|source| SourceError::Hub {
            source_name: spec.name().to_owned(),
            source: Box::new(source),
        })?;
        manifest.repo = Some(download.repo);
        manifest.revision = Some(download.revision);
        manifest.commit = Some(download.commit);
        return Ok(download
            .files
            .into_iter()
            .map(|file| Input {
                checksum: file.etag.as_deref().map(etag_checksum),
                name: PathBuf::from(file.path),
                local: file.local,
            })
            .collect());
    }
    if spec.path.is_none() {
        return Err(SourceError::NoInput {
            source_name: spec.name().to_owned(),
        });
    }
    resolve_files(spec, base_dir)?
        .into_iter()
        .map(|local| {
            let checksum = xxh3_of(&local).map_err(|source| SourceError::Read {
                path: local.clone(),
                source,
            })?;
            Ok(Input {
                checksum: Some(format!("xxh3-128:{checksum}")),
                name: local.clone(),
                local,
            })
        })
        .collect()
}

/// Prepares one source with settings from the environment: every kept prompt is passed to
/// `sink` in input order.
pub fn prepare(
    spec: &SourceSpec,
    base_dir: &Path,
    sink: &mut dyn FnMut(&Prompt) -> io::Result<()>,
) -> Result<Manifest, SourceError> {
    prepare_with(spec, base_dir, &mut PrepareOptions::from_env(), sink)
}

/// The per-row state of one preparation.
struct Collector<'a> {
    spec: &'a SourceSpec,
    normalizer: Normalizer,
    manifest: Manifest,
    seen_across: Option<&'a HashSet<u64>>,
    occurrences: HashMap<u64, u32, BuildHasherDefault<Prehashed>>,
    sample: Sample,
}

impl Collector<'_> {
    fn row(&mut self, file: &Path, (row, parsed): Row) {
        self.manifest.rows_read += 1;
        let object = match parsed {
            Ok(Value::Object(object)) => object,
            Ok(_) => {
                self.manifest.drop_row(
                    file,
                    row,
                    "not_an_object",
                    "row is not a JSON object".to_owned(),
                );
                return;
            }
            Err(e) => {
                self.manifest.drop_row(file, row, e.reason(), e.to_string());
                return;
            }
        };
        let source_key = self
            .spec
            .id_field
            .as_ref()
            .and_then(|f| object.get(f))
            .filter(|v| !v.is_null())
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
        let messages = match self.normalizer.normalize_owned(object) {
            Ok(messages) => messages,
            Err(reason) => {
                self.manifest
                    .drop_row(file, row, &reason.key(), reason.detail());
                return;
            }
        };
        let hash = content_hash(&messages);
        if self.seen_across.is_some_and(|seen| seen.contains(&hash)) {
            self.manifest.duplicates_across += 1;
            return;
        }
        let occurrence = if self.spec.dedup() {
            // Copies of prompts the sample no longer holds share their key and are rejected
            // below (see `sample`).
            if self.sample.contains(hash) {
                self.manifest.duplicates_within += 1;
                return;
            }
            0
        } else {
            let n = self.occurrences.entry(hash).or_default();
            *n += 1;
            *n - 1
        };
        let id = prompt_id(self.spec.name(), hash, occurrence);
        let key = self.sample.key_of(&id);
        if !self.sample.admits(key) {
            self.manifest.sampled_out += 1;
            return;
        }
        let prompt = Prompt {
            id,
            source: self.spec.name().to_owned(),
            messages,
            source_key,
            row,
        };
        if self.sample.offer(prompt, key, hash) {
            self.manifest.sampled_out += 1;
        }
    }
}

/// Prepares one source: every kept prompt is passed to `sink` in input order.
pub fn prepare_with(
    spec: &SourceSpec,
    base_dir: &Path,
    options: &mut PrepareOptions<'_>,
    sink: &mut dyn FnMut(&Prompt) -> io::Result<()>,
) -> Result<Manifest, SourceError> {
    let mut manifest = Manifest {
        source: spec.name().to_owned(),
        fingerprint: spec.fingerprint(),
        ..Manifest::default()
    };
    let inputs = inputs(spec, base_dir, &options.hub, &mut manifest)?;
    for input in &inputs {
        manifest.files.push(input.name.clone());
        if let Some(checksum) = &input.checksum {
            manifest
                .checksums
                .insert(input.name.to_string_lossy().into_owned(), checksum.clone());
        }
    }
    let normalizer = Normalizer::new(spec);
    let projection = normalizer.projection();
    let mut collector = Collector {
        spec,
        normalizer,
        manifest,
        seen_across: options.seen_across.as_deref(),
        occurrences: HashMap::default(),
        sample: Sample::new(
            usize::try_from(spec.limit()).unwrap_or(usize::MAX),
            spec.seed(),
        ),
    };
    for input in &inputs {
        let format = format_of(spec.format, &input.local);
        for_each_row(&input.local, format, Some(&projection), &mut |row| {
            collector.row(&input.name, row);
        })
        .map_err(|source| SourceError::Read {
            path: input.local.clone(),
            source,
        })?;
    }
    let Collector {
        mut manifest,
        sample,
        ..
    } = collector;
    let kept = sample.into_kept();
    for (prompt, _) in &kept {
        sink(prompt).map_err(SourceError::Sink)?;
    }
    if let Some(seen) = options.seen_across.as_deref_mut() {
        seen.extend(kept.iter().map(|(_, hash)| *hash));
    }
    manifest.kept = kept.len() as u64;
    Ok(manifest)
}
