//! The preparation of one source: files (local or from the Hub) → rows → normalized,
//! deduplicated, sampled prompts, and a [`Manifest`] of all of it.
//!
//! Memory is bounded by the readers (one row or one Parquet batch) and the sample (`limit`
//! prompts), which also deduplicates (see [`sample`]); only `dedup = false` keeps a counter per
//! distinct prompt, to number repeats.
//!
//! Parquet batches are normalized straight from their Arrow arrays when their shape allows
//! (`normalize::columnar`); other batches, and text formats, go row by row as JSON objects.
//! Either way a row's turns borrow their text, its content hash and id are computed in reused
//! buffers, and a [`Prompt`] is built only for the rows the sample admits.

#[cfg(test)]
mod columnar_tests;
mod error;
mod manifest;
mod resolve;
mod sample;
mod spill;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::io;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

pub use error::{FieldNotInData, SourceError};
pub use manifest::{MAX_EXAMPLES, Manifest, RowExample};
pub use resolve::ResolvedFrom;

use crate::hub::{self, HubSettings};
use crate::normalize::{DropReason, Normalizer, TokenFilter, TokenizerError, Turn};
use crate::prompt::{
    DEDUP_KEY, Message, Prompt, content_hash_with, dedup_hash_with, prompt_id_into,
};
use crate::read::{
    Projection, Row, batch_rows, for_each_parquet_batch, for_each_row, format_of, parquet_columns,
};
use crate::spec::{Format, SourceSpec};
use manifest::etag_checksum;
use resolve::{PlaceholderResolver, Unresolved};
pub use sample::{DEFAULT_SAMPLE_MEMORY, SampleOptions};
use sample::{Prehashed, Sample};

/// Everything `prepare` needs beyond the spec: how to reach the Hub, and the prompts earlier
/// sources already kept (cross-source deduplication: the earlier source wins).
#[derive(Debug)]
pub struct PrepareOptions<'a> {
    pub hub: HubSettings,
    /// Deduplication keys ([`crate::prompt::dedup_hash`]) kept by earlier sources; this source
    /// skips them and adds the ones it keeps. `None`: no cross-source deduplication.
    pub seen_across: Option<&'a mut HashSet<u64>>,
    /// Normalize Parquet batches straight from their Arrow arrays where their shape allows
    /// (the default). `false` turns every row into a JSON object first, as text formats are
    /// read: slower, and the reference the columnar path is tested against.
    pub columnar: bool,
    /// How much of the sample is held in memory, and where the rest goes.
    pub sample: SampleOptions,
}

impl PrepareOptions<'_> {
    /// These Hub settings, no cross-source deduplication, the columnar path.
    pub fn new(hub: HubSettings) -> PrepareOptions<'static> {
        PrepareOptions {
            hub,
            seen_across: None,
            columnar: true,
            sample: SampleOptions::default(),
        }
    }

    /// Hub settings from the environment, no cross-source deduplication.
    pub fn from_env() -> PrepareOptions<'static> {
        PrepareOptions::new(HubSettings::from_env())
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

/// The checksum a manifest records for a local file: `xxh3-128:<hex>`.
pub fn file_checksum(path: &Path) -> io::Result<String> {
    Ok(format!("xxh3-128:{}", xxh3_of(path)?))
}

/// A fast content checksum of a local file (xxh3-128: a fixed spec, ~10× faster than sha256,
/// which would dominate preparation time on a large local Parquet file).
fn xxh3_of(path: &Path) -> io::Result<String> {
    let mut file = io::BufReader::with_capacity(1 << 20, fs_err::File::open(path)?);
    let mut hasher = Xxh3::new();
    io::copy(&mut file, &mut hasher)?;
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
    // Local files are checksummed while they are read (see `prepare_with`).
    Ok(resolve_files(spec, base_dir)?
        .into_iter()
        .map(|local| Input {
            checksum: None,
            name: local.clone(),
            local,
        })
        .collect())
}

/// The checksums of the local inputs (those without one yet), by manifest name.
fn local_checksums(inputs: &[Input]) -> Result<Vec<(String, String)>, SourceError> {
    inputs
        .iter()
        .filter(|input| input.checksum.is_none())
        .map(|input| {
            let checksum = file_checksum(&input.local).map_err(|source| SourceError::Read {
                path: input.local.clone(),
                source,
            })?;
            Ok((input.name.to_string_lossy().into_owned(), checksum))
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
    tokens: Option<&'a TokenFilter>,
    resolver: Option<PlaceholderResolver<'a>>,
    manifest: Manifest,
    seen_across: Option<&'a HashSet<u64>>,
    occurrences: HashMap<u64, u32, BuildHasherDefault<Prehashed>>,
    sample: Sample,
    /// Why the sample stopped taking prompts (its temporary files failed), if it did.
    spill_error: Option<io::Error>,
    /// Scratch space for a prompt's JSON rendering (its content hash) and its id.
    hash_buffer: Vec<u8>,
    id_buffer: String,
    /// What tells a config error from bad rows: see [`FieldPresence`].
    presence: FieldPresence,
}

/// Whether any row has the field the prompts are read from, and until one does, the fields the
/// first rows have (to show in the error).
#[derive(Debug, Default)]
struct FieldPresence {
    /// The fields a prompt comes from ([`Normalizer::body_fields`]).
    wanted: Vec<String>,
    seen: bool,
    /// Rows that were objects (a row that is not says nothing about fields).
    objects: u64,
    columns: BTreeSet<String>,
}

/// Rows whose field names are collected while none has the prompt's field.
const COLUMN_SAMPLE_ROWS: u64 = 100;

impl FieldPresence {
    /// `rows` rows (one, or a batch's) with the fields `keys`.
    fn row<'k>(&mut self, keys: impl IntoIterator<Item = &'k String> + Clone, rows: u64) {
        let before = self.objects;
        self.objects += rows;
        if self.seen {
            return;
        }
        if keys.clone().into_iter().any(|k| self.wanted.contains(k)) {
            self.seen = true;
        } else if before < COLUMN_SAMPLE_ROWS {
            self.columns.extend(keys.into_iter().cloned());
        }
    }
}

impl Collector<'_> {
    /// A row read as a JSON object (text formats, and Parquet batches of unknown shape).
    fn row(&mut self, normalizer: &Normalizer, file: &Path, (row, parsed): Row) {
        self.manifest.rows_read += 1;
        if self.resolver.as_ref().is_some_and(|r| r.fatal.is_some()) {
            // The source fails once the rows are read; the rest need no work.
            return;
        }
        let mut object = match parsed {
            Ok(Value::Object(object)) => object,
            Ok(_) => {
                self.manifest.drop_row(file, row, "not_an_object", || {
                    "row is not a JSON object".to_owned()
                });
                return;
            }
            Err(e) => {
                self.manifest
                    .drop_row(file, row, e.reason(), || e.to_string());
                return;
            }
        };
        self.presence.row(object.keys(), 1);
        if let Some(resolver) = &mut self.resolver
            && let Err(Unresolved(detail)) = resolver.resolve(&mut object)
        {
            self.manifest.drop_row(file, row, "unresolved", || detail);
            return;
        }
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
        let mut kept = Vec::new();
        let result = normalizer.normalize_into(object, &mut kept);
        self.accept(file, row, result.map(|tools| (&kept[..], tools)), || {
            source_key
        });
    }

    /// A Parquet record batch: normalized straight from its arrays when their shape is known
    /// (and `columnar`), else row by row as JSON objects.
    fn batch(
        &mut self,
        normalizer: &Normalizer,
        file: &Path,
        (batch, first_row): (&RecordBatch, u64),
        projection: &Projection,
        columnar: bool,
    ) {
        if self.resolver.as_ref().is_some_and(|r| r.fatal.is_some()) {
            return;
        }
        let Some(mut rows) = columnar.then(|| normalizer.columnar(batch, true)).flatten() else {
            batch_rows(batch, Some(projection), first_row, &mut |row| {
                self.row(normalizer, file, row);
            });
            return;
        };
        let schema = batch.schema();
        let names = schema.fields().iter().map(|f| f.name());
        self.presence.row(names, batch.num_rows() as u64);
        let mut kept = Vec::new();
        for (row, index) in (0..batch.num_rows()).zip(first_row..) {
            self.manifest.rows_read += 1;
            let result = rows.normalize_into(row, &mut kept);
            self.accept(file, index, result.map(|tools| (&kept[..], tools)), || {
                rows.source_key(row)
            });
        }
    }

    /// A normalized row (or why it has no prompt): deduplicated, then offered to the sample.
    /// The prompt is materialized only when the sample admits it (a small share of the rows of
    /// a large source); `source_key` is read only then.
    fn accept(
        &mut self,
        file: &Path,
        row: u64,
        normalized: Result<(&[Turn<'_>], Option<Value>), DropReason>,
        source_key: impl FnOnce() -> Option<String>,
    ) {
        let normalized = normalized.and_then(|(turns, tools)| match self.tokens {
            Some(tokens) => tokens.check(turns).map(|()| (turns, tools)),
            None => Ok((turns, tools)),
        });
        let (turns, tools) = match normalized {
            Ok(turns) => turns,
            Err(reason) => {
                self.manifest
                    .drop_row(file, row, &reason.key(), || reason.detail());
                return;
            }
        };
        // The id is taken over the content as it is (ids of stored answers stay valid); the
        // deduplication key over each turn stripped of surrounding whitespace
        // (`dedup_key` in the manifest). They differ only for turns with such whitespace.
        let hash = content_hash_with(
            turns.iter().map(Turn::hashed),
            tools.as_ref(),
            &mut self.hash_buffer,
        );
        let padded = turns
            .iter()
            .any(|t| t.content.trim().len() != t.content.len());
        let dedup = self.spec.dedup();
        let dedup_key = if dedup && padded {
            dedup_hash_with(
                turns.iter().map(Turn::hashed),
                tools.as_ref(),
                &mut self.hash_buffer,
            )
        } else {
            hash
        };
        if self
            .seen_across
            .is_some_and(|seen| seen.contains(&dedup_key))
        {
            self.manifest.duplicates_across += 1;
            return;
        }
        let occurrence = if dedup {
            // Copies of prompts the sample no longer holds share their key and are rejected
            // below (see `sample`); those it holds are counted with them.
            if self.sample.copy_of(dedup_key) {
                return;
            }
            0
        } else {
            let n = self.occurrences.entry(hash).or_default();
            *n += 1;
            *n - 1
        };
        // The sampling key follows the deduplication key, so that copies meet.
        prompt_id_into(&mut self.id_buffer, self.spec.name(), dedup_key, occurrence);
        let key = self.sample.key_of(&self.id_buffer);
        if !self.sample.admits(key) {
            self.manifest.sampled_out += 1;
            return;
        }
        if dedup_key != hash {
            prompt_id_into(&mut self.id_buffer, self.spec.name(), hash, occurrence);
        }
        let prompt = Prompt {
            id: self.id_buffer.clone(),
            source: self.spec.name().to_owned(),
            messages: turns.iter().map(Turn::to_message).collect(),
            tools,
            source_key: source_key(),
            row,
        };
        if self.spill_error.is_some() {
            return;
        }
        match self.sample.offer(prompt, key, dedup_key) {
            Ok(true) => self.manifest.sampled_out += 1,
            Ok(false) => {}
            Err(e) => self.spill_error = Some(e),
        }
    }
}

/// The token-length filter of `spec`, with the checksum of its tokenizer file.
fn token_filter(
    spec: &SourceSpec,
    base_dir: &Path,
) -> Result<Option<(TokenFilter, String)>, SourceError> {
    let Some(path) = spec.tokenizer_path(base_dir) else {
        return Ok(None);
    };
    let bound = |v: &Option<toml::Spanned<i64>>| {
        v.as_ref()
            .map(|v| usize::try_from(*v.get_ref()).unwrap_or(0))
    };
    let error = |error| SourceError::Tokenizer {
        source_name: spec.name().to_owned(),
        error,
    };
    let filter = TokenFilter::load(
        &path,
        bound(&spec.min_prompt_tokens),
        bound(&spec.max_prompt_tokens),
    )
    .map_err(error)?;
    let checksum = file_checksum(&path).map_err(|e| {
        error(TokenizerError {
            path: path.clone(),
            message: e.to_string(),
        })
    })?;
    Ok(Some((filter, checksum)))
}

/// Reads every row of every input into `collector`.
fn read_inputs(
    inputs: &[Input],
    spec: &SourceSpec,
    normalizer: &Normalizer,
    collector: &mut Collector<'_>,
    columnar: bool,
) -> Result<(), SourceError> {
    let projection = normalizer.projection();
    for input in inputs {
        let format = format_of(spec.format, &input.local);
        let file = input.name.as_path();
        let read = match format {
            Format::Parquet => {
                for_each_parquet_batch(&input.local, Some(&projection), &mut |batch, first| {
                    collector.batch(normalizer, file, (batch, first), &projection, columnar);
                })
            }
            _ => for_each_row(&input.local, format, None, &mut |row| {
                collector.row(normalizer, file, row);
            }),
        };
        read.map_err(|source| SourceError::Read {
            path: input.local.clone(),
            source,
        })?;
    }
    Ok(())
}

/// The error for a source none of whose rows has the field its prompts come from, with the
/// fields the data does have: those of the first rows read, or a Parquet file's schema (its
/// batches were read with only the wanted columns).
fn field_not_in_data(
    spec: &SourceSpec,
    normalizer: &Normalizer,
    inputs: &[Input],
    presence: FieldPresence,
    manifest: &Manifest,
) -> SourceError {
    let parquet = inputs
        .iter()
        .find(|input| format_of(spec.format, &input.local) == Format::Parquet);
    let columns = match parquet.map(|input| parquet_columns(&input.local)) {
        Some(Ok(columns)) => columns,
        _ => presence.columns.into_iter().collect(),
    };
    let (key, fields) = normalizer.body_fields();
    let span = match key {
        Some("messages-field") => spec.messages_field.as_ref().map(|f| f.span()),
        Some(_) => spec.prompt_field.as_ref().map(|f| f.span()),
        None => None,
    };
    SourceError::FieldNotInData(Box::new(FieldNotInData {
        source_name: spec.name().to_owned(),
        key,
        fields: fields.into_iter().map(str::to_owned).collect(),
        columns,
        rows: manifest.rows_read,
        span,
    }))
}

/// Why a source kept nothing: its rows, and what dropped them.
fn no_prompt_summary(manifest: &Manifest) -> String {
    if manifest.rows_read == 0 {
        let files: Vec<String> = manifest
            .files
            .iter()
            .map(|f| format!("`{}`", f.display()))
            .collect();
        return format!("its input has no rows ({})", files.join(", "));
    }
    let mut reasons: Vec<(&String, &u64)> = manifest.dropped.iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let reasons: Vec<String> = reasons
        .iter()
        .map(|(reason, count)| format!("{count} `{reason}`"))
        .collect();
    let example = manifest.examples.first().map_or_else(String::new, |e| {
        format!(
            "; first: {} row {}: {}",
            e.file.display(),
            e.row + 1,
            e.reason
        )
    });
    format!(
        "all {} rows were dropped ({}){example}",
        manifest.rows_read,
        reasons.join(", ")
    )
}

/// Prepares one source: every kept prompt is passed to `sink` in input order.
pub fn prepare_with(
    spec: &SourceSpec,
    base_dir: &Path,
    options: &mut PrepareOptions<'_>,
    sink: &mut dyn FnMut(&Prompt) -> io::Result<()>,
) -> Result<Manifest, SourceError> {
    // The tokenizer first: a bad one should not wait for a long download.
    let (tokens, tokenizer_checksum) = match token_filter(spec, base_dir)? {
        Some((filter, checksum)) => (Some(filter), Some(checksum)),
        None => (None, None),
    };
    let mut manifest = Manifest {
        source: spec.name().to_owned(),
        dedup_key: spec.dedup().then(|| DEDUP_KEY.to_owned()),
        fingerprint: spec.fingerprint_with_tokenizer(tokenizer_checksum.as_deref()),
        tokenizer: spec.tokenizer_path(base_dir),
        tokenizer_checksum,
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
    let mut collector = Collector {
        spec,
        tokens: tokens.as_ref(),
        resolver: PlaceholderResolver::new(spec, &options.hub),
        manifest,
        seen_across: options.seen_across.as_deref(),
        occurrences: HashMap::default(),
        sample: Sample::new(
            usize::try_from(spec.limit()).unwrap_or(usize::MAX),
            spec.seed(),
            spec.dedup(),
            options.sample.clone(),
        ),
        spill_error: None,
        hash_buffer: Vec::new(),
        id_buffer: String::new(),
        presence: FieldPresence {
            wanted: normalizer
                .body_fields()
                .1
                .into_iter()
                .map(str::to_owned)
                .collect(),
            ..FieldPresence::default()
        },
    };
    // A local file is read twice, for its checksum and for its rows: on two threads, the
    // checksum costs no wall time.
    let (read, checksums) = std::thread::scope(|scope| {
        let checksums = scope.spawn(|| local_checksums(&inputs));
        let read = read_inputs(&inputs, spec, &normalizer, &mut collector, options.columnar);
        let checksums = checksums
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (read, checksums)
    });
    read?;
    collector.manifest.checksums.extend(checksums?);
    let Collector {
        mut manifest,
        sample,
        resolver,
        presence,
        spill_error,
        ..
    } = collector;
    if let Some(e) = spill_error {
        return Err(SourceError::Sample(e));
    }
    if let Some(resolver) = resolver {
        if let Some(unfetched) = resolver.fatal {
            return Err(SourceError::Resolve {
                source_name: spec.name().to_owned(),
                dataset: unfetched.dataset,
                split: unfetched.split,
                marker: Box::new((
                    resolver.prompt_field.to_owned(),
                    resolver.placeholder.to_owned(),
                )),
                source: Box::new(unfetched.error),
            });
        }
        manifest.resolved_from = resolver.provenance;
    }
    if presence.objects > 0 && !presence.seen {
        return Err(field_not_in_data(
            spec,
            &normalizer,
            &inputs,
            presence,
            &manifest,
        ));
    }
    // The sink's own failure, told apart from the sample's files failing.
    let mut sink_error = None;
    let mut seen = options.seen_across.as_deref_mut();
    let mut with_tool_turns = 0;
    let finished = sample.finish(&mut |prompt, hash| {
        if prompt.messages.iter().any(Message::is_tool_turn) {
            with_tool_turns += 1;
        }
        if let Err(e) = sink(&prompt) {
            let message = e.to_string();
            sink_error = Some(e);
            return Err(io::Error::other(message));
        }
        if let Some(seen) = seen.as_deref_mut() {
            seen.insert(hash);
        }
        Ok(())
    });
    if let Some(e) = sink_error {
        return Err(SourceError::Sink(e));
    }
    let finished = finished.map_err(SourceError::Sample)?;
    manifest.cut_at_tool_turn = normalizer.cut_at_tool_turn();
    manifest.with_tool_turns = with_tool_turns;
    manifest.kept = finished.kept;
    manifest.duplicates_within += finished.duplicates;
    manifest.sampled_out += finished.sampled_out;
    if manifest.kept == 0 && manifest.duplicates_across == 0 {
        return Err(SourceError::NoPrompts {
            source_name: spec.name().to_owned(),
            summary: no_prompt_summary(&manifest),
        });
    }
    Ok(manifest)
}
