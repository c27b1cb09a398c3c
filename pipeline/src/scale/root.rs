//! A run root: the directory a sharded job shares (`[run] dir` or `--run-dir` under
//! `--shard auto`), holding one ordinary run directory per shard and the job's shard count.
//!
//! ```text
//! RUN_ROOT/shards.json     {layout, shards, config}: written once by the first task
//! RUN_ROOT/shard-000/      shard 0's run directory (+ owner.json, claims/)
//! RUN_ROOT/shard-001/      ...
//! RUN_ROOT/prepared/       every source prepared once (`gen prepare`), taken by the shards
//! RUN_ROOT/merged/         every shard's outputs in one run directory, once all are done
//! RUN_ROOT/slurm/          `gen slurm`'s batch script, its submissions, the tasks' logs and
//!                          `tasks/K.json` (how shard K's last task ended)
//! ```
//!
//! Each shard's directory is complete on its own and has exactly one writer: a shard takes
//! the sources prepared once from `RUN_ROOT/prepared` into it (`super::prepared`), or
//! prepares them itself.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::status::state::{Phase, RunStatus};
use crate::store::private::private_dir;
use crate::store::{RunDir, atomic};

/// Layout version of `shards.json`.
const ROOT_LAYOUT: u32 = 1;

/// `RUN_ROOT/shards.json`: the job's shape, fixed by its first task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootFile {
    pub layout: u32,
    pub shards: u32,
    pub config: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error(
        "run root `{}` holds a job of {existing} shards, but this task counts {requested}; \
         use another run directory for a different split",
        root.display()
    )]
    CountChanged {
        root: PathBuf,
        existing: u32,
        requested: u32,
    },
    #[error("`{}` is a run directory of one run, not a run root of shards", root.display())]
    NotARoot { root: PathBuf },
    #[error("failed to read or write `{}`", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A sharded job's shared directory.
#[derive(Debug, Clone)]
pub struct RunRoot {
    root: PathBuf,
}

impl RunRoot {
    pub fn new(root: impl Into<PathBuf>) -> RunRoot {
        RunRoot { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn file(&self) -> PathBuf {
        self.root.join("shards.json")
    }

    pub fn merged(&self) -> PathBuf {
        self.root.join("merged")
    }

    /// Where `gen prepare` prepares every source once for all shards.
    pub fn prepared(&self) -> RunDir {
        RunDir::new(self.root.join("prepared"))
    }

    pub fn slurm_dir(&self) -> PathBuf {
        self.root.join("slurm")
    }

    /// Shard `index`'s run directory. Zero-padded to at least three digits so a listing
    /// sorts in shard order.
    pub fn shard(&self, index: u32, count: u32) -> RunDir {
        let width = count.saturating_sub(1).to_string().len().max(3);
        RunDir::new(self.root.join(format!("shard-{index:0width$}")))
    }

    /// Whether `dir` looks like a run root: it has `shards.json`.
    pub fn is_root(dir: &Path) -> bool {
        dir.join("shards.json").is_file()
    }

    /// Reads `shards.json`.
    pub fn read(&self) -> Result<Option<RootFile>, RootError> {
        atomic::read_json(&self.file()).map_err(|source| RootError::Io {
            path: self.file(),
            source,
        })
    }

    /// Records the job's shard count on the first call; later calls must agree. Refuses a
    /// directory that already holds a single (unsharded) run.
    pub fn open_or_create(&self, shards: u32, config: &Path) -> Result<RootFile, RootError> {
        let io_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| RootError::Io { path, source }
        };
        if let Some(existing) = self.read()? {
            return check_count(self, existing, shards);
        }
        if self.root.join("status.json").exists() || self.root.join("sources").exists() {
            return Err(RootError::NotARoot {
                root: self.root.clone(),
            });
        }
        private_dir(&self.root).map_err(io_error(&self.root))?;
        let file = RootFile {
            layout: ROOT_LAYOUT,
            shards,
            config: config.display().to_string(),
        };
        // Written whole under a private name, then linked into place: `link` fails when
        // another task's file is already there, so exactly one task's count is recorded and
        // no reader ever sees a half-written file.
        let tmp = self
            .root
            .join(format!("shards.json.{}.tmp", std::process::id()));
        atomic::write_json(&tmp, &file).map_err(io_error(&tmp))?;
        let linked = fs_err::hard_link(&tmp, self.file());
        fs_err::remove_file(&tmp).ok();
        match linked {
            Ok(()) => Ok(file),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let existing = self.read()?.ok_or_else(|| RootError::Io {
                    path: self.file(),
                    source: io::Error::other("vanished after another task wrote it"),
                })?;
                check_count(self, existing, shards)
            }
            Err(e) => Err(RootError::Io {
                path: self.file(),
                source: e,
            }),
        }
    }

    /// Every shard's directory and what its `status.json` says (`None`: not started).
    pub fn shards(&self) -> Result<Vec<(u32, RunDir, Option<RunStatus>)>, RootError> {
        let file = self.read()?.ok_or_else(|| RootError::NotARoot {
            root: self.root.clone(),
        })?;
        (0..file.shards)
            .map(|index| {
                let dir = self.shard(index, file.shards);
                let status = atomic::read_json::<RunStatus>(&dir.status()).map_err(|source| {
                    RootError::Io {
                        path: dir.status(),
                        source,
                    }
                })?;
                Ok((index, dir, status))
            })
            .collect()
    }
}

fn check_count(root: &RunRoot, existing: RootFile, requested: u32) -> Result<RootFile, RootError> {
    if existing.shards == requested {
        Ok(existing)
    } else {
        Err(RootError::CountChanged {
            root: root.root.clone(),
            existing: existing.shards,
            requested,
        })
    }
}

/// Whether a shard's run finished with every source done.
pub fn shard_done(status: Option<&RunStatus>) -> bool {
    status.is_some_and(|s| {
        s.finished && !s.sources.is_empty() && s.sources.iter().all(|s| s.phase == Phase::Done)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_task_fixes_the_count_and_a_different_one_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = RunRoot::new(tmp.path().join("job"));
        let config = Path::new("datasets.toml");
        assert_eq!(root.open_or_create(3, config).expect("create").shards, 3);
        assert_eq!(root.open_or_create(3, config).expect("again").shards, 3);
        let error = root.open_or_create(4, config).expect_err("changed");
        assert!(
            error
                .to_string()
                .contains("holds a job of 3 shards, but this task counts 4"),
            "{error}"
        );
        assert!(RunRoot::is_root(root.root()));
        let leftovers: Vec<_> = fs_err::read_dir(root.root())
            .expect("ls")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("shards.json")]);
    }

    #[test]
    fn a_single_runs_directory_is_not_a_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        fs_err::write(tmp.path().join("status.json"), "{}").expect("write");
        let error = RunRoot::new(tmp.path())
            .open_or_create(2, Path::new("c.toml"))
            .expect_err("not a root");
        assert!(matches!(error, RootError::NotARoot { .. }), "{error}");
    }

    #[test]
    fn shard_directories_sort_in_shard_order() {
        let root = RunRoot::new("/r");
        assert_eq!(root.shard(7, 8).root(), Path::new("/r/shard-007"));
        assert_eq!(root.shard(42, 1500).root(), Path::new("/r/shard-0042"));
    }
}
