//! One scheduler task running `gen run --shard auto`: which shard it is, the run root's shard
//! count, ownership of the shard's run directory for the life of the run, the sources prepared
//! once taken into it, and — when it is
//! the last shard to finish — the merge of every shard into `RUN_ROOT/merged`.

use std::path::Path;

use super::launcher::{self, AutoShard};
use super::owner::{self, Claimant, Fence, Ownership};
use super::root::{self, RunRoot};
use crate::config::Plan;
use crate::scale::shard::Shard;
use crate::store::RunDir;

/// A task that owns its shard.
#[derive(Debug)]
pub struct ShardTask {
    pub root: RunRoot,
    pub auto: AutoShard,
    pub dir: RunDir,
    ownership: Ownership,
}

impl ShardTask {
    /// Finds this task's shard from the environment (`shards`: `--shards N` or
    /// `GEN_SHARDS`), records the count in the run root and takes the shard's run directory.
    pub fn begin(plan: &Plan, root: &Path, shards: Option<u32>) -> anyhow::Result<ShardTask> {
        let auto = launcher::detect(|name| std::env::var(name).ok(), shards)
            .map_err(|e| anyhow::anyhow!("{e}\n  hint: {}", e.hint()))?;
        crate::report::plain(&format!("gen: {auto}"));
        let root = RunRoot::new(root);
        root.open_or_create(auto.shard.count, &plan.config_path)?;
        let dir = root.shard(auto.shard.index, auto.shard.count);
        let claimant = Claimant {
            job: auto.job.clone(),
            array_task: match auto.launcher {
                launcher::Launcher::SlurmArray { task_id, .. } => Some(task_id),
                _ => None,
            },
        };
        let ownership = owner::acquire(&dir, &claimant, owner::Timing::from_env())?;
        super::prepared::adopt(plan, &root, &dir)?;
        Ok(ShardTask {
            root,
            auto,
            dir,
            ownership,
        })
    }

    pub fn shard(&self) -> Shard {
        self.auto.shard
    }

    pub fn fence(&self) -> Fence {
        self.ownership.fence()
    }

    /// Lets the shard go (unless another task took it over) and, when this shard is done and
    /// every other shard is too, merges them into `RUN_ROOT/merged`.
    pub fn finish(self, done: bool) -> anyhow::Result<()> {
        let lost = self.fence().check().is_err();
        self.ownership.release();
        if !done || lost {
            return Ok(());
        }
        merge_if_complete(&self.root)
    }
}

/// Merges every shard into `RUN_ROOT/merged` when all are done and it is not there yet.
///
/// Each task writes its own final status before it looks at the others, so of two tasks
/// finishing together at least one sees both done. Both may: each merges into a private
/// directory and renames it into place, and the second rename fails harmlessly.
pub fn merge_if_complete(root: &RunRoot) -> anyhow::Result<()> {
    let merged = root.merged();
    if merged.exists() {
        return Ok(());
    }
    let shards = root.shards()?;
    let waiting: Vec<u32> = shards
        .iter()
        .filter(|(_, _, status)| !root::shard_done(status.as_ref()))
        .map(|(index, _, _)| *index)
        .collect();
    if !waiting.is_empty() {
        crate::report::plain(&format!(
            "gen: {} of {} shards done; the last to finish merges them",
            shards.len() - waiting.len(),
            shards.len()
        ));
        return Ok(());
    }
    let dirs: Vec<RunDir> = shards.into_iter().map(|(_, dir, _)| dir).collect();
    let private = root.root().join(format!(
        ".merged.{}.{}",
        crate::sys::host_name(),
        std::process::id()
    ));
    if private.exists() {
        fs_err::remove_dir_all(&private)?;
    }
    let results = crate::merge::merge_dirs(&private, &dirs)?;
    let (table, clean) = crate::merge::report(&results, dirs.len(), &merged);
    match fs_err::rename(&private, &merged) {
        Ok(()) => {
            for line in table.lines() {
                crate::report::plain(&format!("gen: {line}"));
            }
            if !clean {
                crate::report::plain(&format!(
                    "gen: warning: the merge found gaps or duplicates; `gen verify {}` shows them",
                    merged.display()
                ));
            }
        }
        // Another task merged at the same moment.
        Err(_) if merged.exists() => {
            fs_err::remove_dir_all(&private).ok();
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// `--server-launch CMD`: replaces `[server] launch` (split like a shell would).
pub fn override_launch(plan: &mut Plan, command: &str) -> anyhow::Result<()> {
    let words = shlex::split(command)
        .filter(|w| !w.is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "`--server-launch {command}` is not a command line (unbalanced quotes?)"
            )
        })?;
    anyhow::ensure!(
        plan.server.urls.len() == 1,
        "`--server-launch` starts one server, but the config lists {} in `urls`",
        plan.server.urls.len()
    );
    plan.server.launch = Some(words);
    // The file's positions are not this launch's.
    plan.launch_spans.clear();
    Ok(())
}
