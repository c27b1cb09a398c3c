//! `--shard k/n`: a deterministic split of every source's prompts, so n hosts can run `gen` on
//! the same config in parallel, each on its own share; `gen merge` puts the shares together.
//! Shares count from 0, as Slurm array task ids, Kubernetes completion indexes and the job's
//! `shard-NNN` directories do.
//! `--shard auto` takes the share from the scheduler instead ([`super::launcher`]). A leaf:
//! `run.json` (`store::pin`) records the share, so the bottom layers may use it.

use std::fmt;
use std::str::FromStr;

use xxhash_rust::xxh3::xxh3_64;

/// Share `index` (0-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

    /// Parses `k/n` with 0 ≤ k < n.
    fn from_str(text: &str) -> Result<Shard, String> {
        let bad = || format!("`{text}` is not a shard: write `k/n` with 0 ≤ k < n, e.g. `2/8`");
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let (k, n): (u32, u32) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if k == n && n > 0 {
            return Err(format!(
                "`{text}` is not a shard: shards count from 0, as Slurm array task ids and the \
                 `shard-NNN` directories do; the {n} shards are `0/{n}` … `{}/{n}`",
                n - 1
            ));
        }
        if k > n || n == 0 {
            return Err(bad());
        }
        Ok(Shard { index: k, count: n })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
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
        let shards: Vec<Shard> = (0..3)
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
        assert_eq!(shards[1].to_string(), "1/3");
        assert_eq!(shards[1], Shard { index: 1, count: 3 });
        let last = "3/3".parse::<Shard>().expect_err("counts from 0");
        assert!(last.contains("`0/3` … `2/3`"), "{last}");
        assert!("4/3".parse::<Shard>().is_err());
        assert!("0/0".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
        assert_eq!("auto".parse::<ShardArg>(), Ok(ShardArg::Auto));
        assert_eq!(
            "2/3".parse::<ShardArg>(),
            Ok(ShardArg::Fixed(Shard { index: 2, count: 3 }))
        );
    }
}
