//! Bottom-k sampling on a seeded hash of each prompt's id: deterministic, independent of file
//! order, and bounded to `limit` prompts in memory however large the source is.
//!
//! Deduplication rides on it. With deduplication on, a prompt's id (and so its key) depends on
//! its content only, so every copy of a prompt has the same key: once the sample has rejected or
//! evicted a prompt, every later copy is rejected too (the admission threshold only falls). Only
//! copies of prompts currently in the sample must be recognised, which takes a set of `limit`
//! hashes instead of one hash per distinct prompt of the source (30M rows for Nemotron). The
//! output is exactly that of deduplicating everything first.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::prompt::Prompt;

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
    heap: BinaryHeap<Candidate>,
    /// Content hashes of the prompts in `heap`.
    members: PrehashedSet,
    arrivals: u64,
}

impl Sample {
    pub(super) fn new(limit: usize, seed: u64) -> Sample {
        Sample {
            limit,
            seed,
            heap: BinaryHeap::new(),
            members: PrehashedSet::default(),
            arrivals: 0,
        }
    }

    /// The sampling key of a prompt id.
    pub(super) fn key_of(&self, id: &str) -> u64 {
        xxh3_64_with_seed(id.as_bytes(), self.seed)
    }

    /// Whether a prompt with this key would enter the sample; when not, building it is wasted
    /// work (most rows of a large source).
    pub(super) fn admits(&self, key: u64) -> bool {
        self.limit > 0
            && (self.heap.len() < self.limit || self.heap.peek().is_some_and(|top| key < top.key))
    }

    /// Whether a prompt with this content hash is in the sample now.
    pub(super) fn contains(&self, hash: u64) -> bool {
        self.members.contains(&hash)
    }

    /// Offers a prompt the sample [admits](Sample::admits) (with its key and content hash);
    /// returns whether one was pushed out.
    pub(super) fn offer(&mut self, prompt: Prompt, key: u64, hash: u64) -> bool {
        let candidate = Candidate {
            key,
            order: self.arrivals,
            hash,
            prompt: Box::new(prompt),
        };
        self.arrivals += 1;
        self.members.insert(hash);
        if self.heap.len() < self.limit {
            self.heap.push(candidate);
            return false;
        }
        // Full: the top (largest key) leaves. The newcomer's key is below it (`admits`), so
        // replacing the top in place is a push followed by a pop, with one sift instead of two.
        if let Some(mut top) = self.heap.peek_mut() {
            let evicted = std::mem::replace(&mut *top, candidate);
            self.members.remove(&evicted.hash);
        }
        true
    }

    /// The kept prompts in input order, with their content hashes.
    pub(super) fn into_kept(self) -> Vec<(Prompt, u64)> {
        let mut kept = self.heap.into_vec();
        kept.sort_by_key(|c| c.order);
        kept.into_iter().map(|c| (*c.prompt, c.hash)).collect()
    }
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

/// A set of content hashes.
pub(super) type PrehashedSet = HashSet<u64, BuildHasherDefault<Prehashed>>;
