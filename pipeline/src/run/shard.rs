//! `--shard i/n`: a deterministic split of every source's prompts, so n hosts can run `gen` on
//! the same config in parallel, each on its own share; `gen merge` puts the shares together.
//! `--shard auto` takes the share from the scheduler instead (`crate::scale`).

use std::fmt;
use std::str::FromStr;

use xxhash_rust::xxh3::xxh3_64;

/// Share `index` (0-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Whether prompt `id` belongs to this share. Depends on the id only, so every host agrees.
    pub fn contains(self, id: &str) -> bool {
        xxh3_64(id.as_bytes()) % u64::from(self.count) == u64::from(self.index)
    }
}

impl FromStr for Shard {
    type Err = String;

    /// Parses `i/n` with 1 ≤ i ≤ n.
    fn from_str(text: &str) -> Result<Shard, String> {
        let bad = || format!("`{text}` is not a shard: write `i/n` with 1 ≤ i ≤ n, e.g. `2/8`");
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (i, n): (u32, u32) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if i == 0 || i > n {
            return Err(bad());
        }
        Ok(Shard {
            index: i - 1,
            count: n,
        })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index + 1, self.count)
    }
}

/// `--shard`: `i/n` by hand, or `auto` from the launcher's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardArg {
    Fixed(Shard),
    Auto,
}

impl FromStr for ShardArg {
    type Err = String;

    fn from_str(text: &str) -> Result<ShardArg, String> {
        if text.trim() == "auto" {
            return Ok(ShardArg::Auto);
        }
        text.parse().map(ShardArg::Fixed).map_err(|e| {
            format!("{e}, or `auto` (from SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX or RANK)")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_ids() {
        let shards: Vec<Shard> = (1..=3)
            .map(|i| format!("{i}/3").parse().expect("shard"))
            .collect();
        for n in 0..300 {
            let id = format!("src-{n:016x}");
            assert_eq!(shards.iter().filter(|s| s.contains(&id)).count(), 1, "{id}");
        }
        let sizes: Vec<usize> = shards
            .iter()
            .map(|s| {
                (0..300)
                    .filter(|n| s.contains(&format!("src-{n:016x}")))
                    .count()
            })
            .collect();
        assert!(sizes.iter().all(|s| (70..=130).contains(s)), "{sizes:?}");
        assert_eq!(shards[1].to_string(), "2/3");
        assert!("0/3".parse::<Shard>().is_err());
        assert!("4/3".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
        assert_eq!("auto".parse::<ShardArg>(), Ok(ShardArg::Auto));
        assert_eq!(
            "2/3".parse::<ShardArg>(),
            Ok(ShardArg::Fixed(Shard { index: 1, count: 3 }))
        );
    }
}
