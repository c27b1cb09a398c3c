//! The sample on disk, for samples larger than memory (`limit` above what a preparation should
//! hold, up to "keep every row" of a 30M-row source).
//!
//! Candidates go to an anonymous temporary file in arrival order (a zstd stream of
//! `hash, length, prompt JSON`), and their sort entries `(key, seq, hash, copies)` — 32 bytes
//! each, no prompt text — to sorted runs of at most [`RUN_ENTRIES`] entries. [`Spill::finish`]
//! merges the runs in key order: copies of a prompt share its key (with deduplication on, its
//! key depends on its deduplication key only), so they meet in the merge, and the first `limit`
//! distinct prompts are the sample, exactly as the in-memory bottom-k keeps them; `copies`
//! carries the copies a prompt met while the sample held it in memory. Their
//! sequence numbers go into a bitset (one bit per candidate), and one pass over the candidates
//! file hands the kept prompts to the sink in arrival order.
//!
//! Memory: one run's buffer, a read buffer per run during the merge, the bitset. The temporary
//! files are anonymous (`O_TMPFILE`), so they vanish with the process however it ends.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::sample::Finished;
use crate::prompt::Prompt;

/// Sort entries per run: 12 MiB of buffer.
#[cfg(not(test))]
const RUN_ENTRIES: usize = 1 << 19;
/// Small in unit tests, so that merges of many runs are tested on small inputs.
#[cfg(test)]
const RUN_ENTRIES: usize = 7;
/// Bytes of an entry on disk.
const ENTRY_BYTES: usize = 32;
/// Read buffer per run during the merge.
const MERGE_BUFFER: usize = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    key: u64,
    seq: u64,
    hash: u64,
    /// Copies met before it was spilled (only the sample's prompts when it spilled have any).
    copies: u64,
}

pub(super) struct Spill {
    dir: PathBuf,
    candidates: zstd::Encoder<'static, BufWriter<File>>,
    entries: Vec<Entry>,
    runs: Vec<File>,
    seq: u64,
    line: Vec<u8>,
}

impl Spill {
    /// Starts spilling into anonymous files in `dir`.
    pub(super) fn new(dir: &Path) -> io::Result<Spill> {
        let file = tempfile::tempfile_in(dir).map_err(|e| with_dir(e, dir))?;
        // Level 1: the candidates are read once; disk, not ratio, is what is saved.
        let candidates = zstd::Encoder::new(BufWriter::new(file), 1)?;
        Ok(Spill {
            dir: dir.to_path_buf(),
            candidates,
            entries: Vec::with_capacity(RUN_ENTRIES),
            runs: Vec::new(),
            seq: 0,
            line: Vec::new(),
        })
    }

    /// Adds a candidate (its sampling key and content hash) that already met `copies` copies
    /// of itself (0 for a new one).
    pub(super) fn push(
        &mut self,
        prompt: &Prompt,
        key: u64,
        hash: u64,
        copies: u64,
    ) -> io::Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, prompt)?;
        let length = u32::try_from(self.line.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a prompt of 4 GiB or more"))?;
        self.candidates.write_all(&hash.to_le_bytes())?;
        self.candidates.write_all(&length.to_le_bytes())?;
        self.candidates.write_all(&self.line)?;
        self.entries.push(Entry {
            key,
            seq: self.seq,
            hash,
            copies,
        });
        self.seq += 1;
        if self.entries.len() == RUN_ENTRIES {
            self.write_run()?;
        }
        Ok(())
    }

    fn write_run(&mut self) -> io::Result<()> {
        self.entries.sort_unstable();
        let file = tempfile::tempfile_in(&self.dir).map_err(|e| with_dir(e, &self.dir))?;
        let mut out = BufWriter::new(file);
        for entry in &self.entries {
            out.write_all(&entry.key.to_le_bytes())?;
            out.write_all(&entry.seq.to_le_bytes())?;
            out.write_all(&entry.hash.to_le_bytes())?;
            out.write_all(&entry.copies.to_le_bytes())?;
        }
        let mut file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.seek(SeekFrom::Start(0))?;
        self.runs.push(file);
        self.entries.clear();
        Ok(())
    }

    /// Picks the sample — the `limit` distinct prompts with the smallest keys, one copy each
    /// (the first to arrive) when `dedup` — and hands it to `sink` in arrival order, each prompt
    /// with its content hash.
    pub(super) fn finish(
        mut self,
        limit: u64,
        dedup: bool,
        sink: &mut dyn FnMut(Prompt, u64) -> io::Result<()>,
    ) -> io::Result<Finished> {
        if !self.entries.is_empty() {
            self.write_run()?;
        }
        let words = usize::try_from(self.seq.div_ceil(64)).unwrap_or(usize::MAX);
        let mut chosen = vec![0u64; words];
        let mut counts = Finished::default();
        let mut group_key = None;
        // Content hashes of the current key's prompts, each with whether it was chosen (almost
        // always one).
        let mut group: Vec<(u64, bool)> = Vec::new();
        merge(std::mem::take(&mut self.runs), |entry| {
            if group_key != Some(entry.key) {
                group_key = Some(entry.key);
                group.clear();
            }
            let first = group.iter().find(|(hash, _)| dedup && *hash == entry.hash);
            match first {
                // A copy: a duplicate of a kept prompt, or left out with it.
                Some((_, true)) => counts.duplicates += 1 + entry.copies,
                Some((_, false)) => counts.sampled_out += 1 + entry.copies,
                None if counts.kept < limit => {
                    group.push((entry.hash, true));
                    chosen[(entry.seq / 64) as usize] |= 1 << (entry.seq % 64);
                    counts.kept += 1;
                    counts.duplicates += entry.copies;
                }
                None => {
                    group.push((entry.hash, false));
                    counts.sampled_out += 1 + entry.copies;
                }
            }
        })?;
        let mut file = self
            .candidates
            .finish()?
            .into_inner()
            .map_err(io::IntoInnerError::into_error)?;
        file.seek(SeekFrom::Start(0))?;
        let mut candidates = zstd::Decoder::new(file)?;
        let mut header = [0u8; 12];
        let mut line = Vec::new();
        for seq in 0..self.seq {
            candidates.read_exact(&mut header)?;
            let (hash, length) = header.split_at(8);
            let hash = u64::from_le_bytes(hash.try_into().expect("8 bytes"));
            let length = u32::from_le_bytes(length.try_into().expect("4 bytes")) as usize;
            line.resize(length, 0);
            candidates.read_exact(&mut line)?;
            if chosen[(seq / 64) as usize] & (1 << (seq % 64)) != 0 {
                let prompt: Prompt = serde_json::from_slice(&line)?;
                sink(prompt, hash)?;
            }
        }
        Ok(counts)
    }
}

/// Calls `each` for every entry of the sorted `runs`, in order.
fn merge(runs: Vec<File>, mut each: impl FnMut(Entry)) -> io::Result<()> {
    let mut readers: Vec<BufReader<File>> = runs
        .into_iter()
        .map(|run| BufReader::with_capacity(MERGE_BUFFER, run))
        .collect();
    let mut heads = BinaryHeap::with_capacity(readers.len());
    for (i, reader) in readers.iter_mut().enumerate() {
        if let Some(entry) = read_entry(reader)? {
            heads.push(Reverse((entry, i)));
        }
    }
    while let Some(Reverse((entry, i))) = heads.pop() {
        each(entry);
        if let Some(next) = read_entry(&mut readers[i])? {
            heads.push(Reverse((next, i)));
        }
    }
    Ok(())
}

fn read_entry(reader: &mut BufReader<File>) -> io::Result<Option<Entry>> {
    let mut bytes = [0u8; ENTRY_BYTES];
    match reader.read_exact(&mut bytes) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    Ok(Some(Entry {
        key: word(0),
        seq: word(1),
        hash: word(2),
        copies: word(3),
    }))
}

fn with_dir(error: io::Error, dir: &Path) -> io::Error {
    io::Error::new(
        error.kind(),
        format!(
            "failed to create a temporary file in `{}` for the sample: {error}",
            dir.display()
        ),
    )
}
