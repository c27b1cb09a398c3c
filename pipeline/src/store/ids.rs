//! Compact sets of prompt ids: what a resumed run, `gen verify`, `gen merge` and `gen export`
//! hold per stored completion or rejection.
//!
//! An id is held as its xxh3-128 ([`key`]), 16 bytes, instead of a `String` in a SipHash
//! set (~120 bytes an id with the table): a million done ids cost 16 MB, not 120 MB. Ids
//! `gen` makes are `<source>-<16 hex digits>`, but a custom worker may write any string, so
//! the whole id is hashed rather than its hex parsed. Two different ids sharing a key would
//! make one prompt look done: for 30 million ids the odds of any such pair are about
//! n²/2¹²⁹ ≈ 10⁻²⁴ (a 64-bit key would give ~10⁻⁵, too close for a key that skips work).
//!
//! [`IdSet`] is a sorted, deduplicated `Vec` (built once, then only queried: binary search);
//! [`SeenIds`] is for the passes that ask "first time?" while they stream.

use std::collections::HashSet;

use xxhash_rust::xxh3::xxh3_128;

/// The key an id is held by.
pub fn key(id: &str) -> u128 {
    xxh3_128(id.as_bytes())
}

/// A set of ids built once and then queried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdSet {
    /// Sorted, no repeats.
    keys: Vec<u128>,
}

impl IdSet {
    /// The set of `keys` (any order, repeats allowed).
    pub fn from_keys(mut keys: Vec<u128>) -> IdSet {
        keys.sort_unstable();
        keys.dedup();
        keys.shrink_to_fit();
        IdSet { keys }
    }

    pub fn contains(&self, id: &str) -> bool {
        self.contains_key(key(id))
    }

    pub fn contains_key(&self, key: u128) -> bool {
        self.keys.binary_search(&key).is_ok()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys, in ascending order.
    pub fn keys(&self) -> impl Iterator<Item = u128> + '_ {
        self.keys.iter().copied()
    }

    /// How many of these ids `other` does not hold.
    pub fn count_not_in(&self, other: &IdSet) -> usize {
        self.keys().filter(|k| !other.contains_key(*k)).count()
    }

    /// The ids of both sets.
    pub fn union(&self, other: &IdSet) -> IdSet {
        let mut keys: Vec<u128> = self.union_keys(other).collect();
        keys.shrink_to_fit();
        IdSet { keys }
    }

    /// The keys of both sets in ascending order, each once (a linear merge: both are sorted),
    /// without building the union.
    pub fn union_keys<'a>(&'a self, other: &'a IdSet) -> impl Iterator<Item = u128> + 'a {
        let (mut a, mut b) = (self.keys().peekable(), other.keys().peekable());
        std::iter::from_fn(move || match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x < y => a.next(),
            (Some(x), Some(y)) if y < x => b.next(),
            (Some(_), Some(_)) => {
                b.next();
                a.next()
            }
            (Some(_), None) => a.next(),
            (None, _) => b.next(),
        })
    }

    /// A fingerprint of the whole set (the wrapping sum of its keys): equal sets give equal
    /// digests, and different ones collide only by chance (about 2⁻¹²⁸).
    pub fn digest(&self) -> u128 {
        digest(self.keys())
    }
}

/// The keys `sorted` (in ascending order) holds more than once.
pub fn repeated(sorted: &[u128]) -> IdSet {
    let twice = sorted.windows(2).filter(|pair| pair[0] == pair[1]);
    IdSet::from_keys(twice.map(|pair| pair[0]).collect())
}

/// [`IdSet::digest`] of distinct keys.
pub fn digest(keys: impl Iterator<Item = u128>) -> u128 {
    keys.fold(0, u128::wrapping_add)
}

impl<'a> FromIterator<&'a str> for IdSet {
    fn from_iter<I: IntoIterator<Item = &'a str>>(ids: I) -> IdSet {
        IdSet::from_keys(ids.into_iter().map(key).collect())
    }
}

impl FromIterator<String> for IdSet {
    fn from_iter<I: IntoIterator<Item = String>>(ids: I) -> IdSet {
        IdSet::from_keys(ids.into_iter().map(|id| key(&id)).collect())
    }
}

/// The ids seen so far in a streaming pass.
#[derive(Debug, Default)]
pub struct SeenIds {
    keys: HashSet<u128>,
}

impl SeenIds {
    /// Whether `id` is new (and records it).
    pub fn insert(&mut self, id: &str) -> bool {
        self.keys.insert(key(id))
    }

    /// The ids seen, as a set to query.
    pub fn into_set(self) -> IdSet {
        IdSet::from_keys(self.keys.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[&str]) -> IdSet {
        ids.iter().copied().collect()
    }

    #[test]
    fn holds_each_id_once_and_answers_membership_exactly() {
        let ids: Vec<String> = (0..1000).map(|i| format!("src-{i:016x}")).collect();
        let mut repeated: Vec<&str> = ids.iter().map(String::as_str).collect();
        repeated.extend(ids.iter().rev().take(300).map(String::as_str));
        let built: IdSet = repeated.into_iter().collect();
        assert_eq!(built.len(), 1000);
        assert!(ids.iter().all(|id| built.contains(id)));
        assert!(!built.contains("src-missing"));
        assert!(!built.contains(""));
        let keys: Vec<u128> = built.keys().collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
        assert!(IdSet::default().is_empty() && !IdSet::default().contains("a"));
    }

    #[test]
    fn the_key_is_the_whole_id_not_its_hex() {
        // Ids a custom worker writes need not follow `<source>-<hex>`.
        let s = set(&["a-0000000000000001", "b-0000000000000001", "x", "x-1", "é"]);
        assert_eq!(s.len(), 5);
        assert!(!s.contains("c-0000000000000001"));
        assert!(s.contains("é"));
    }

    #[test]
    fn union_and_difference_count_like_sets_of_strings() {
        let a = set(&["p", "q", "r", "s"]);
        let b = set(&["r", "s", "t"]);
        let both = a.union(&b);
        assert_eq!(both, set(&["p", "q", "r", "s", "t"]));
        assert_eq!(both, b.union(&a));
        assert_eq!(a.union(&IdSet::default()), a);
        assert_eq!(IdSet::default().union(&b), b);
        assert_eq!(a.count_not_in(&b), 2);
        assert_eq!(b.count_not_in(&a), 1);
        assert_eq!(both.digest(), set(&["t", "s", "r", "q", "p"]).digest());
        assert_eq!(digest(a.union_keys(&b)), both.digest());
        assert_eq!(a.union_keys(&b).count(), 5);
        assert_ne!(a.digest(), b.digest());
    }

    #[test]
    fn repeated_keys_are_each_named_once() {
        assert_eq!(
            repeated(&[1, 2, 2, 2, 3, 4, 4]),
            IdSet::from_keys(vec![2, 4])
        );
        assert!(repeated(&[1, 2, 3]).is_empty());
    }

    #[test]
    fn seen_ids_tell_the_first_time_from_a_repeat() {
        let mut seen = SeenIds::default();
        assert!(seen.insert("a") && seen.insert("b"));
        assert!(!seen.insert("a"));
        assert_eq!(seen.into_set(), set(&["b", "a"]));
    }
}
