//! Bottom-k sampling on a seeded hash of each prompt's id: deterministic, independent of file
//! order, and bounded in memory however large the source and `limit` are: up to
//! [`SampleOptions::memory`] bytes of prompts are held in a heap; past that the sample goes on
//! on disk ([`super::spill`]) and picks the same prompts.
//!
//! Deduplication rides on it. With deduplication on, a prompt's sampling key depends on its
//! deduplication key only (see `Collector::accept`), so every copy of a prompt has the same
//! key: once the sample has rejected or evicted a prompt, every later copy is rejected too (the
//! admission threshold only falls). Only copies of prompts currently in the sample must be
//! recognised, which takes a map of `limit` hashes instead of one hash per distinct prompt of
//! the source (30M rows for Nemotron). The output is exactly that of deduplicating everything
//! first.
//!
//! The counts are too, in memory or on disk: a copy of a prompt the sample keeps is a
//! duplicate, any other row of a prompt it leaves out is sampled out. Copies of a prompt the
//! sample holds are counted with it (its `copies`), and move to sampled out if it is evicted.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::path::PathBuf;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::spill::Spill;
use crate::prompt::Prompt;

/// Bytes of prompts a sample holds in memory before it goes on on disk, by default.
pub const DEFAULT_SAMPLE_MEMORY: usize = 32 << 20;

/// Where and when a sample spills to disk.
#[derive(Debug, Clone)]
pub struct SampleOptions {
    /// Bytes of prompts held in memory, at most (an estimate: text plus per-turn overhead).
    pub memory: usize,
    /// Where its temporary files go (anonymous: nothing is left behind). The default is the
    /// system's temporary directory; `gen prep` uses the source's own run directory, since
    /// `/tmp` is often RAM (tmpfs), which would count against the worker's memory limit.
    pub dir: Option<PathBuf>,
}

impl Default for SampleOptions {
    fn default() -> SampleOptions {
        SampleOptions {
            memory: DEFAULT_SAMPLE_MEMORY,
            dir: None,
        }
    }
}

struct Candidate {
    key: u64,
    order: u64,
    hash: u64,
    /// Boxed: the heap moves candidates on every offer; a small one moves fast.
    prompt: Box<Prompt>,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.key, self.order).cmp(&(other.key, other.order))
    }
}

pub(super) struct Sample {
    limit: usize,
    seed: u64,
    dedup: bool,
    heap: BinaryHeap<Candidate>,
    /// Deduplication keys of the prompts in `heap`, with the copies of each met since.
    members: PrehashedMap,
    /// Copies of prompts evicted from `heap` (sampled out with them).
    evicted_copies: u64,
    arrivals: u64,
    /// Estimated bytes of the prompts in `heap`.
    held: usize,
    options: SampleOptions,
    /// Once the heap outgrew `options.memory`: every candidate since, and the heap's.
    spill: Option<Spill>,
    /// In a spill, keys from here up cannot enter: the heap's largest key when it was full.
    threshold: u64,
}

/// What [`Sample::finish`] decided beyond the prompts it passed on.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Finished {
    pub(super) kept: u64,
    /// Copies of the kept prompts.
    pub(super) duplicates: u64,
    /// Rows left out when the sample was picked (on disk) or with a prompt evicted, beyond
    /// those [`Sample::offer`] reported.
    pub(super) sampled_out: u64,
}

impl Sample {
    pub(super) fn new(limit: usize, seed: u64, dedup: bool, options: SampleOptions) -> Sample {
        Sample {
            limit,
            seed,
            dedup,
            heap: BinaryHeap::new(),
            members: PrehashedMap::default(),
            evicted_copies: 0,
            arrivals: 0,
            held: 0,
            options,
            spill: None,
            threshold: u64::MAX,
        }
    }

    /// The sampling key of a prompt id.
    pub(super) fn key_of(&self, id: &str) -> u64 {
        xxh3_64_with_seed(id.as_bytes(), self.seed)
    }

    /// Whether a prompt with this key would enter the sample; when not, building it is wasted
    /// work (most rows of a large source).
    pub(super) fn admits(&self, key: u64) -> bool {
        if self.limit == 0 {
            return false;
        }
        if self.spill.is_some() {
            // The heap's largest key may still be picked: its copies are let in.
            return key <= self.threshold;
        }
        self.heap.len() < self.limit || self.heap.peek().is_some_and(|top| key < top.key)
    }

    /// Whether a prompt with this deduplication key is in the sample now, counting this row as
    /// its copy (on disk, copies are found when the sample is picked instead).
    pub(super) fn copy_of(&mut self, hash: u64) -> bool {
        match self.members.get_mut(&hash) {
            Some(copies) => {
                *copies += 1;
                true
            }
            None => false,
        }
    }

    /// Offers a prompt the sample [admits](Sample::admits) (with its key and content hash);
    /// returns whether one was pushed out.
    pub(super) fn offer(&mut self, prompt: Prompt, key: u64, hash: u64) -> io::Result<bool> {
        if let Some(spill) = &mut self.spill {
            spill.push(&prompt, key, hash, 0)?;
            return Ok(false);
        }
        self.held += held_bytes(&prompt);
        let candidate = Candidate {
            key,
            order: self.arrivals,
            hash,
            prompt: Box::new(prompt),
        };
        self.arrivals += 1;
        self.members.insert(hash, 0);
        if self.heap.len() < self.limit {
            self.heap.push(candidate);
            if self.held > self.options.memory {
                self.start_spill()?;
            }
            return Ok(false);
        }
        // Full: the top (largest key) leaves. The newcomer's key is below it (`admits`), so
        // replacing the top in place is a push followed by a pop, with one sift instead of two.
        if let Some(mut top) = self.heap.peek_mut() {
            let evicted = std::mem::replace(&mut *top, candidate);
            self.held = self.held.saturating_sub(held_bytes(&evicted.prompt));
            self.evicted_copies += self.members.remove(&evicted.hash).unwrap_or(0);
        }
        if self.held > self.options.memory {
            self.start_spill()?;
        }
        Ok(true)
    }

    /// Moves the heap to disk, in arrival order; every later candidate follows it there.
    fn start_spill(&mut self) -> io::Result<()> {
        let dir = self.options.dir.clone().unwrap_or_else(std::env::temp_dir);
        let mut spill = Spill::new(&dir)?;
        if self.heap.len() == self.limit {
            self.threshold = self.heap.peek().map_or(u64::MAX, |top| top.key);
        }
        let mut held = std::mem::take(&mut self.heap).into_vec();
        held.sort_by_key(|c| c.order);
        for candidate in held {
            let copies = self.members.get(&candidate.hash).copied().unwrap_or(0);
            spill.push(&candidate.prompt, candidate.key, candidate.hash, copies)?;
        }
        self.members = PrehashedMap::default();
        self.held = 0;
        self.spill = Some(spill);
        Ok(())
    }

    /// Hands the kept prompts to `sink` in input order, with their content hashes.
    pub(super) fn finish(
        self,
        sink: &mut dyn FnMut(Prompt, u64) -> io::Result<()>,
    ) -> io::Result<Finished> {
        let Some(spill) = self.spill else {
            let mut kept = self.heap.into_vec();
            kept.sort_by_key(|c| c.order);
            let count = kept.len() as u64;
            let duplicates = kept
                .iter()
                .map(|c| self.members.get(&c.hash).copied().unwrap_or(0))
                .sum();
            for candidate in kept {
                sink(*candidate.prompt, candidate.hash)?;
            }
            return Ok(Finished {
                kept: count,
                duplicates,
                sampled_out: self.evicted_copies,
            });
        };
        let mut finished = spill.finish(self.limit as u64, self.dedup, sink)?;
        finished.sampled_out += self.evicted_copies;
        Ok(finished)
    }
}

/// What a prompt in the heap costs, roughly: its text and the allocations around it.
fn held_bytes(prompt: &Prompt) -> usize {
    const PROMPT_OVERHEAD: usize = 160;
    const MESSAGE_OVERHEAD: usize = 48;
    PROMPT_OVERHEAD
        + prompt.id.len()
        + prompt.source.len()
        + prompt.source_key.as_ref().map_or(0, String::len)
        + prompt
            .messages
            .iter()
            .map(|m| MESSAGE_OVERHEAD + m.content.len())
            .sum::<usize>()
}

/// A hasher for keys that already are uniform 64-bit hashes (xxh3 content hashes): hashing them
/// again with SipHash was a visible share of preparation time.
#[derive(Default)]
pub(super) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// Content hashes, each with a count.
type PrehashedMap = HashMap<u64, u64, BuildHasherDefault<Prehashed>>;
