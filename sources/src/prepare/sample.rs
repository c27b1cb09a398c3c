//! Bottom-k sampling on a seeded hash of each prompt's id: deterministic, independent of file
//! order, and bounded to `limit` prompts in memory however large the source is.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::prompt::Prompt;

struct Candidate {
    key: u64,
    order: u64,
    hash: u64,
    prompt: Prompt,
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
    arrivals: u64,
}

impl Sample {
    pub(super) fn new(limit: usize, seed: u64) -> Sample {
        Sample {
            limit,
            seed,
            heap: BinaryHeap::new(),
            arrivals: 0,
        }
    }

    /// Offers a prompt (with its content hash); returns whether one was pushed out.
    pub(super) fn offer(&mut self, prompt: Prompt, hash: u64) -> bool {
        let key = xxh3_64_with_seed(prompt.id.as_bytes(), self.seed);
        self.heap.push(Candidate {
            key,
            order: self.arrivals,
            hash,
            prompt,
        });
        self.arrivals += 1;
        if self.heap.len() > self.limit {
            self.heap.pop();
            return true;
        }
        false
    }

    /// The kept prompts in input order, with their content hashes.
    pub(super) fn into_kept(self) -> Vec<(Prompt, u64)> {
        let mut kept = self.heap.into_vec();
        kept.sort_by_key(|c| c.order);
        kept.into_iter().map(|c| (c.prompt, c.hash)).collect()
    }
}
