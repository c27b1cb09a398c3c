//! `--shard auto`: which shard this process is, read from the variables the launcher sets —
//! a Slurm job array, a Kubernetes Indexed Job, or a `RANK`/`WORLD_SIZE` launcher (torchrun,
//! a PyTorchJob) — and which variables said so.
//!
//! Shard numbers here are 0-based, as every launcher counts: shard `k` of `n` lives in
//! `RUN_ROOT/shard-k` and is Slurm array task `k` in the scripts `gen slurm` writes (task
//! `k − GEN_SHARD_OFFSET` of the array holding it, when a large job is split into several).

use std::fmt;

use crate::scale::shard::Shard;

/// The environment variable that gives the number of shards where the launcher does not
/// (Kubernetes sets `JOB_COMPLETION_INDEX` but not the Job's `completions`).
pub const SHARDS_ENV: &str = "GEN_SHARDS";

/// Added to a Slurm array task id to give its shard (with `--shards N`): `gen slurm` splits a
/// job larger than the cluster's `MaxArraySize` into arrays `0-(M-1)`, the second from shard M.
pub const SHARD_OFFSET_ENV: &str = "GEN_SHARD_OFFSET";

/// Which launcher named the shard, and the values it was computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launcher {
    SlurmArray {
        job_id: String,
        task_id: u32,
        min: u32,
        count: u32,
        /// [`SHARD_OFFSET_ENV`]: shard = offset + task id (0 when unset).
        offset: u32,
    },
    KubernetesIndexedJob {
        index: u32,
        pod: Option<String>,
    },
    Rank {
        rank: u32,
        world_size: u32,
    },
}

/// This process's shard and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoShard {
    pub shard: Shard,
    pub launcher: Launcher,
    /// The scheduler's name for this task, for the ownership record (`1234_7`, a pod name).
    pub job: Option<String>,
}

impl fmt::Display for AutoShard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (index, count) = (self.shard.index, self.shard.count);
        write!(f, "shard {index} of {count} (0-based), from ")?;
        match &self.launcher {
            Launcher::SlurmArray {
                job_id,
                task_id,
                min,
                count,
                offset,
            } => {
                write!(
                    f,
                    "Slurm array job {job_id}: SLURM_ARRAY_TASK_ID={task_id}, \
                     SLURM_ARRAY_TASK_MIN={min}, SLURM_ARRAY_TASK_COUNT={count}"
                )?;
                if *offset > 0 {
                    write!(f, ", {SHARD_OFFSET_ENV}={offset}")?;
                }
                Ok(())
            }
            Launcher::KubernetesIndexedJob { index, .. } => {
                write!(f, "a Kubernetes Indexed Job: JOB_COMPLETION_INDEX={index}")
            }
            Launcher::Rank { rank, world_size } => {
                write!(f, "RANK={rank}, WORLD_SIZE={world_size}")
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AutoShardError {
    #[error(
        "`--shard auto` found no launcher variables: none of SLURM_ARRAY_TASK_ID (a Slurm job \
         array), JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) or RANK and WORLD_SIZE is set"
    )]
    NoLauncher { in_slurm_job: Option<String> },
    #[error("`{name}` is `{value}`, not a whole number")]
    NotANumber { name: &'static str, value: String },
    #[error(
        "the Slurm array is not one range from SLURM_ARRAY_TASK_MIN={min} to \
         SLURM_ARRAY_TASK_MAX={max} ({count} tasks), so its task ids are not shard numbers"
    )]
    SparseArray { min: u32, max: u32, count: u32 },
    #[error("{what} is {index}, but there are only {count} shards (0 to {})", count.saturating_sub(1))]
    OutOfRange {
        what: String,
        index: u32,
        count: u32,
    },
    #[error(
        "a Kubernetes Indexed Job does not say how many shards there are \
         (JOB_COMPLETION_INDEX={index})"
    )]
    NoCount { index: u32 },
    #[error("there must be at least one shard (`{what}` is 0)")]
    ZeroShards { what: String },
    #[error("`--shards {given}` disagrees with {what}={actual}")]
    CountDisagrees {
        given: u32,
        what: &'static str,
        actual: u32,
    },
}

impl AutoShardError {
    /// What to do about it.
    pub fn hint(&self) -> String {
        match self {
            AutoShardError::NoLauncher {
                in_slurm_job: Some(job),
            } => format!(
                "Slurm job {job} is not a job array: submit it with `sbatch --array=0-N` (or \
                 `gen slurm CONFIG --shards N --submit`), or give the shard by hand with \
                 `--shard I/N`"
            ),
            AutoShardError::NoLauncher { in_slurm_job: None } => {
                "run it as a Slurm array task (`gen slurm`), a Kubernetes Indexed Job \
                 (`gen k8s`) or under a launcher that sets RANK and WORLD_SIZE, or give the \
                 shard by hand with `--shard I/N`"
                    .to_owned()
            }
            AutoShardError::SparseArray { .. } => format!(
                "pass the job's total with `--shards N` (or {SHARDS_ENV}=N): array task ids are \
                 then the 0-based shard numbers, as in the arrays `gen slurm` submits \
                 (`--array=0-7`, and `--array=3,6` for a rerun of two)"
            ),
            AutoShardError::NoCount { .. } => format!(
                "pass `--shards N` or set {SHARDS_ENV}=N in the pod (the Job's `completions`); \
                 `gen k8s` writes it"
            ),
            _ => "check the job's array or index settings and `--shards`".to_owned(),
        }
    }
}

/// Reads the launcher's variables through `var` (the process environment in `gen`, a map in
/// tests). `shards` is `--shards N` or [`SHARDS_ENV`].
///
/// A Slurm array wins over the others (a torchrun inside a Slurm task also sets `RANK`), then
/// a Kubernetes Indexed Job, then `RANK`/`WORLD_SIZE`. With a Slurm array and no `shards`, the
/// shard is `SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN` of `SLURM_ARRAY_TASK_COUNT`, which
/// holds only for a contiguous array; with `shards`, the task id is the shard number, so a
/// rerun of some tasks (`--array=3,7`) lands on the right shards.
pub fn detect(
    var: impl Fn(&str) -> Option<String>,
    shards: Option<u32>,
) -> Result<AutoShard, AutoShardError> {
    if shards == Some(0) {
        return Err(AutoShardError::ZeroShards {
            what: "--shards".to_owned(),
        });
    }
    let env = LauncherEnv { var, shards };
    if let Some(task_id) = env.number("SLURM_ARRAY_TASK_ID")? {
        return env.slurm_array(task_id);
    }
    if let Some(index) = env.number("JOB_COMPLETION_INDEX")? {
        return env.indexed_job(index);
    }
    if let (Some(rank), Some(world_size)) = (env.number("RANK")?, env.number("WORLD_SIZE")?) {
        return env.rank(rank, world_size);
    }
    Err(AutoShardError::NoLauncher {
        in_slurm_job: (env.var)("SLURM_JOB_ID"),
    })
}

/// The launcher's variables (read through `var`) and `--shards`, which [`detect`] reads.
struct LauncherEnv<V> {
    var: V,
    shards: Option<u32>,
}

impl<V: Fn(&str) -> Option<String>> LauncherEnv<V> {
    /// Variable `name` as a whole number; `None` when unset or blank.
    fn number(&self, name: &'static str) -> Result<Option<u32>, AutoShardError> {
        match (self.var)(name) {
            None => Ok(None),
            Some(value) if value.trim().is_empty() => Ok(None),
            Some(value) => value
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| AutoShardError::NotANumber { name, value }),
        }
    }

    /// Array task `task_id` of a Slurm job array.
    fn slurm_array(&self, task_id: u32) -> Result<AutoShard, AutoShardError> {
        let min = self.number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
        let max = self.number("SLURM_ARRAY_TASK_MAX")?;
        let count = self.number("SLURM_ARRAY_TASK_COUNT")?;
        let job_id = (self.var)("SLURM_ARRAY_JOB_ID")
            .or_else(|| (self.var)("SLURM_JOB_ID"))
            .unwrap_or_default();
        let job = Some(format!("{job_id}_{task_id}"));
        let mut offset = 0;
        let shard = match self.shards {
            Some(n) => {
                offset = self.number(SHARD_OFFSET_ENV)?.unwrap_or(0);
                let what = if offset > 0 {
                    format!("{SHARD_OFFSET_ENV} + SLURM_ARRAY_TASK_ID")
                } else {
                    "SLURM_ARRAY_TASK_ID".to_owned()
                };
                shard(offset.saturating_add(task_id), n, what)?
            }
            None => {
                let count = count.unwrap_or(1);
                if let Some(max) = max
                    && max.checked_sub(min).map(|d| d + 1) != Some(count)
                {
                    return Err(AutoShardError::SparseArray { min, max, count });
                }
                let index = task_id.saturating_sub(min);
                shard(
                    index,
                    count,
                    "SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN".to_owned(),
                )?
            }
        };
        Ok(AutoShard {
            shard,
            launcher: Launcher::SlurmArray {
                job_id,
                task_id,
                min,
                count: count.unwrap_or(0),
                offset,
            },
            job,
        })
    }

    /// Pod `index` of a Kubernetes Indexed Job, which does not say how many shards there are.
    fn indexed_job(&self, index: u32) -> Result<AutoShard, AutoShardError> {
        let count = self.shards.ok_or(AutoShardError::NoCount { index })?;
        let pod = (self.var)("HOSTNAME");
        Ok(AutoShard {
            shard: shard(index, count, "JOB_COMPLETION_INDEX".to_owned())?,
            launcher: Launcher::KubernetesIndexedJob {
                index,
                pod: pod.clone(),
            },
            job: pod,
        })
    }

    /// Rank `rank` of `world_size` (torchrun, a PyTorchJob).
    fn rank(&self, rank: u32, world_size: u32) -> Result<AutoShard, AutoShardError> {
        if let Some(given) = self.shards
            && given != world_size
        {
            return Err(AutoShardError::CountDisagrees {
                given,
                what: "WORLD_SIZE",
                actual: world_size,
            });
        }
        Ok(AutoShard {
            shard: shard(rank, world_size, "RANK".to_owned())?,
            launcher: Launcher::Rank { rank, world_size },
            job: (self.var)("SLURM_JOB_ID").or_else(|| (self.var)("HOSTNAME")),
        })
    }
}

/// Shard `index` of `count`; `what` names where `index` came from.
fn shard(index: u32, count: u32, what: String) -> Result<Shard, AutoShardError> {
    if count == 0 {
        return Err(AutoShardError::ZeroShards { what });
    }
    if index >= count {
        return Err(AutoShardError::OutOfRange { what, index, count });
    }
    Ok(Shard { index, count })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    /// The variables Slurm 22.05 set in task 1 of `sbatch --array=0-2` on the test cluster.
    const SLURM_TASK_1: &[(&str, &str)] = &[
        ("SLURM_ARRAY_JOB_ID", "1"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
        ("SLURM_ARRAY_TASK_ID", "1"),
        ("SLURM_ARRAY_TASK_MAX", "2"),
        ("SLURM_ARRAY_TASK_MIN", "0"),
        ("SLURM_ARRAY_TASK_STEP", "1"),
        ("SLURM_JOB_ID", "3"),
    ];

    #[test]
    fn a_slurm_array_task_is_its_shard_and_says_so() {
        let auto = detect(env(SLURM_TASK_1), None).expect("shard");
        assert_eq!(auto.shard, Shard { index: 1, count: 3 });
        assert_eq!(auto.job.as_deref(), Some("1_1"));
        assert_eq!(
            auto.to_string(),
            "shard 1 of 3 (0-based), from Slurm array job 1: SLURM_ARRAY_TASK_ID=1, \
             SLURM_ARRAY_TASK_MIN=0, SLURM_ARRAY_TASK_COUNT=3"
        );
    }

    #[test]
    fn a_one_based_array_counts_from_its_minimum() {
        let auto = detect(
            env(&[
                ("SLURM_ARRAY_TASK_ID", "8"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
                ("SLURM_ARRAY_TASK_MAX", "8"),
                ("SLURM_ARRAY_TASK_COUNT", "8"),
            ]),
            None,
        )
        .expect("shard");
        assert_eq!(auto.shard, Shard { index: 7, count: 8 });
    }

    #[test]
    fn a_rerun_of_some_tasks_needs_the_total_and_then_uses_task_ids() {
        let rerun = [
            ("SLURM_ARRAY_JOB_ID", "40"),
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_ARRAY_TASK_MIN", "3"),
            ("SLURM_ARRAY_TASK_MAX", "7"),
            ("SLURM_ARRAY_TASK_COUNT", "2"),
        ];
        let error = detect(env(&rerun), None).expect_err("sparse");
        assert!(
            matches!(error, AutoShardError::SparseArray { .. }),
            "{error}"
        );
        assert!(error.hint().contains("--shards N"), "{}", error.hint());
        let auto = detect(env(&rerun), Some(8)).expect("shard");
        assert_eq!(auto.shard, Shard { index: 7, count: 8 });
        let error = detect(env(&rerun), Some(4)).expect_err("out of range");
        assert_eq!(
            error.to_string(),
            "SLURM_ARRAY_TASK_ID is 7, but there are only 4 shards (0 to 3)"
        );
    }

    /// The second of two arrays split at `MaxArraySize` 1000: task 7 is shard 1007.
    #[test]
    fn a_split_arrays_task_adds_the_offset() {
        let second = [
            ("SLURM_ARRAY_JOB_ID", "41"),
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("GEN_SHARD_OFFSET", "1000"),
        ];
        let auto = detect(env(&second), Some(1500)).expect("shard");
        assert_eq!(
            auto.shard,
            Shard {
                index: 1007,
                count: 1500
            }
        );
        assert_eq!(auto.job.as_deref(), Some("41_7"));
        assert!(
            auto.to_string().ends_with(", GEN_SHARD_OFFSET=1000"),
            "{auto}"
        );
        let error = detect(env(&second), Some(1005)).expect_err("out of range");
        assert_eq!(
            error.to_string(),
            "GEN_SHARD_OFFSET + SLURM_ARRAY_TASK_ID is 1007, but there are only 1005 shards \
             (0 to 1004)"
        );
    }

    #[test]
    fn a_kubernetes_indexed_job_needs_the_count() {
        let pod = [
            ("JOB_COMPLETION_INDEX", "2"),
            ("HOSTNAME", "gen-datasets-2-x7k2p"),
        ];
        let error = detect(env(&pod), None).expect_err("no count");
        assert!(matches!(error, AutoShardError::NoCount { index: 2 }));
        assert!(error.hint().contains("GEN_SHARDS"));
        let auto = detect(env(&pod), Some(4)).expect("shard");
        assert_eq!(auto.shard, Shard { index: 2, count: 4 });
        assert_eq!(auto.job.as_deref(), Some("gen-datasets-2-x7k2p"));
        assert!(auto.to_string().contains("JOB_COMPLETION_INDEX=2"));
    }

    #[test]
    fn rank_and_world_size_work_and_must_agree_with_shards() {
        let torchrun = [("RANK", "3"), ("WORLD_SIZE", "4"), ("LOCAL_RANK", "0")];
        let auto = detect(env(&torchrun), None).expect("shard");
        assert_eq!(auto.shard, Shard { index: 3, count: 4 });
        assert!(matches!(
            detect(env(&torchrun), Some(8)),
            Err(AutoShardError::CountDisagrees { given: 8, .. })
        ));
        assert!(matches!(
            detect(env(&[("RANK", "4"), ("WORLD_SIZE", "4")]), None),
            Err(AutoShardError::OutOfRange { .. })
        ));
    }

    #[test]
    fn a_slurm_array_wins_over_rank() {
        let mut both = SLURM_TASK_1.to_vec();
        both.extend([("RANK", "0"), ("WORLD_SIZE", "1")]);
        let auto = detect(env(&both), None).expect("shard");
        assert!(matches!(auto.launcher, Launcher::SlurmArray { .. }));
    }

    #[test]
    fn nothing_set_is_refused_with_what_to_do() {
        let error = detect(env(&[]), None).expect_err("none");
        assert!(error.to_string().contains("SLURM_ARRAY_TASK_ID"), "{error}");
        assert!(error.hint().contains("--shard I/N"), "{}", error.hint());
        let error = detect(env(&[("SLURM_JOB_ID", "77")]), None).expect_err("not an array");
        assert!(error.hint().contains("Slurm job 77 is not a job array"));
        let error = detect(env(&[("SLURM_ARRAY_TASK_ID", "x")]), None).expect_err("garbage");
        assert_eq!(
            error.to_string(),
            "`SLURM_ARRAY_TASK_ID` is `x`, not a whole number"
        );
        assert!(matches!(
            detect(env(&[("JOB_COMPLETION_INDEX", "0")]), Some(0)),
            Err(AutoShardError::ZeroShards { .. })
        ));
    }
}
