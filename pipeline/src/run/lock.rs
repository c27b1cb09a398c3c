//! One `gen run` per run directory: an exclusive `flock` on `RUN_DIR/lock`, held for the
//! life of the run, with the holder's pid, host and start time written into the file so a
//! refused run can say who holds it.
//!
//! The kernel releases the lock when the holder exits, however it exits (`kill -9`
//! included), so a stale file never blocks a run: its contents are only read to name the
//! holder. `flock` does not work across NFS clients on every setup; the host name in the
//! message helps there. Where the file system cannot lock at all, [`LockError::Unsupported`]
//! lets the caller go on with a warning (see `run::orchestrator::lock_run_dir`).

use std::io::{self, Read as _, Seek as _, Write as _};
use std::os::fd::AsFd as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::store::RunDir;
use crate::sys;

/// What the lock file says about its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub pid: u32,
    pub host: String,
    /// Milliseconds since the Unix epoch.
    pub started: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "run directory `{}` is in use by another `gen run` (pid {pid} on host `{host}`, started {}); wait for it to end or stop it first",
        run_dir.display(),
        ago(*started)
    )]
    Held {
        run_dir: PathBuf,
        pid: u32,
        host: String,
        started: u64,
    },
    #[error(
        "run directory `{}` is in use by another `gen run` (its lock file `{}` does not name it yet)",
        run_dir.display(),
        path.display()
    )]
    HeldUnnamed { run_dir: PathBuf, path: PathBuf },
    /// The file system does not lock (`flock` fails with ENOSYS, EOPNOTSUPP or ENOLCK: some
    /// Lustre and NFS mounts).
    #[error("the file system of `{}` does not support `flock`", path.display())]
    Unsupported {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("failed to lock `{}`", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The held lock; dropping it releases it.
#[derive(Debug)]
pub struct RunLock {
    file: fs_err::File,
    holder: LockHolder,
}

impl RunLock {
    /// Takes the run directory's lock without waiting, creating the directory (0700) and the
    /// lock file (0600) when missing. Fails with [`LockError::Held`] when another process
    /// holds it.
    pub fn acquire(run_dir: &RunDir) -> Result<RunLock, LockError> {
        use fs_err::os::unix::fs::OpenOptionsExt as _;
        use std::os::unix::fs::DirBuilderExt as _;
        let path = run_dir.root().join("lock");
        let io_error = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(run_dir.root())
            .map_err(io_error)?;
        let mut file = fs_err::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io_error)?;
        if let Err(e) = sys::flock_exclusive(file.file().as_fd()) {
            if unsupported(&e) {
                return Err(LockError::Unsupported { path, source: e });
            }
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(io_error(e));
            }
            let mut text = String::new();
            file.read_to_string(&mut text).map_err(io_error)?;
            return Err(match serde_json::from_str::<LockHolder>(&text) {
                Ok(holder) => LockError::Held {
                    run_dir: run_dir.root().to_path_buf(),
                    pid: holder.pid,
                    host: holder.host,
                    started: holder.started,
                },
                // The holder took the lock and has not written its name yet.
                Err(_) => LockError::HeldUnnamed {
                    run_dir: run_dir.root().to_path_buf(),
                    path,
                },
            });
        }
        let holder = LockHolder {
            pid: std::process::id(),
            host: sys::host_name(),
            started: sys::unix_ms(),
        };
        let mut text = serde_json::to_vec(&holder).map_err(|e| io_error(io::Error::other(e)))?;
        text.push(b'\n');
        file.set_len(0).map_err(io_error)?;
        file.rewind().map_err(io_error)?;
        file.write_all(&text).map_err(io_error)?;
        file.sync_data().map_err(io_error)?;
        Ok(RunLock { file, holder })
    }

    /// Who holds the lock: this process.
    pub fn holder(&self) -> &LockHolder {
        &self.holder
    }

    /// The lock file, for messages.
    pub fn path(&self) -> &std::path::Path {
        self.file.path()
    }
}

/// Whether `flock` failed because the file system cannot lock at all.
fn unsupported(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::ENOLCK)
    )
}

/// `12s ago`, `5m ago`, `3h ago` — or the raw time when the clocks disagree.
fn ago(started_unix_ms: u64) -> String {
    let now = sys::unix_ms();
    let Some(secs) = now.checked_sub(started_unix_ms).map(|ms| ms / 1000) else {
        return format!("at unix time {}s", started_unix_ms / 1000);
    };
    match secs {
        0..120 => format!("{secs}s ago"),
        120..7200 => format!("{}m ago", secs / 60),
        _ => format!("{}h ago", secs / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_with_the_holders_pid_and_freed_on_drop() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run_dir = RunDir::new(tmp.path().join("run"));
        let first = RunLock::acquire(&run_dir).expect("first lock");
        assert_eq!(first.holder().pid, std::process::id());
        let error = RunLock::acquire(&run_dir).expect_err("second lock must fail");
        let message = error.to_string();
        assert!(
            matches!(&error, LockError::Held { pid, .. } if *pid == std::process::id()),
            "{error:?}"
        );
        assert!(
            message.contains(&format!("pid {} on host `", std::process::id())),
            "{message}"
        );
        drop(first);
        let again = RunLock::acquire(&run_dir).expect("free again after drop");
        drop(again);
    }

    #[test]
    fn a_file_system_without_flock_is_told_from_a_failure() {
        for errno in [libc::ENOSYS, libc::EOPNOTSUPP, libc::ENOLCK] {
            assert!(unsupported(&io::Error::from_raw_os_error(errno)), "{errno}");
        }
        assert!(!unsupported(&io::Error::from_raw_os_error(
            libc::EWOULDBLOCK
        )));
        assert!(!unsupported(&io::Error::from_raw_os_error(libc::EBADF)));
    }

    #[test]
    fn the_lock_file_is_private_and_names_the_holder() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().expect("tempdir");
        let run_dir = RunDir::new(tmp.path().join("run"));
        let lock = RunLock::acquire(&run_dir).expect("lock");
        let text = fs_err::read_to_string(lock.path()).expect("read");
        let holder: LockHolder = serde_json::from_str(&text).expect("json");
        assert_eq!(&holder, lock.holder());
        let mode = fs_err::metadata(lock.path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = fs_err::metadata(run_dir.root())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
    }
}
