//! A memory cgroup per preparation worker, so a runaway worker is OOM-killed alone instead of
//! taking the inference server down with it, and so its OOM kills are *counted* (the counter
//! delta is the authoritative OOM evidence).
//!
//! cgroup v1 (`memory.limit_in_bytes`, `memory.oom_control`'s `oom_kill`) and v2 (`memory.max`,
//! `memory.events`' `oom_kill`) are both handled, decided per controller. When no writable
//! memory controller exists, [`MemoryCgroup::create`] says why and the worker runs uncapped.

use std::io::Write as _;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// A leaf memory cgroup holding one worker.
#[derive(Debug)]
pub struct MemoryCgroup {
    path: PathBuf,
    version: Version,
    procs: std::fs::File,
    pub limit_bytes: u64,
}

fn own_cgroup_v1() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let line = text.lines().find(|l| {
        let mut parts = l.splitn(3, ':');
        parts.next();
        parts
            .next()
            .is_some_and(|c| c.split(',').any(|c| c == "memory"))
    })?;
    let relative = line.splitn(3, ':').nth(2)?;
    Some(Path::new("/sys/fs/cgroup/memory").join(relative.trim_start_matches('/')))
}

fn own_cgroup_v2() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let relative = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let base = Path::new("/sys/fs/cgroup").join(relative.trim_start_matches('/'));
    let controllers = std::fs::read_to_string(base.join("cgroup.subtree_control")).ok()?;
    controllers
        .split_whitespace()
        .any(|c| c == "memory")
        .then_some(base)
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

impl MemoryCgroup {
    /// Creates `gen-<pid>-<name>` under this process's memory cgroup with `limit_bytes`.
    /// `Err` says why no cap is possible here (the worker then runs uncapped).
    pub fn create(name: &str, limit_bytes: u64) -> Result<MemoryCgroup, String> {
        let leaf = format!("gen-{}-{name}", std::process::id());
        let (base, version) = match (own_cgroup_v1(), own_cgroup_v2()) {
            (Some(base), _) if base.join("memory.limit_in_bytes").exists() => (base, Version::V1),
            (_, Some(base)) => (base, Version::V2),
            _ => return Err("no writable memory cgroup controller (v1 or v2 with +memory)".into()),
        };
        let path = base.join(leaf);
        if path.exists() {
            std::fs::remove_dir(&path).ok();
        }
        std::fs::create_dir(&path)
            .map_err(|e| format!("cannot create `{}`: {e}", path.display()))?;
        let result = (|| {
            match version {
                Version::V1 => {
                    write(
                        &path.join("memory.limit_in_bytes"),
                        &limit_bytes.to_string(),
                    )?;
                    // With swap, the cap must cover memory + swap or the worker just swaps.
                    let memsw = path.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &limit_bytes.to_string())?;
                    }
                }
                Version::V2 => {
                    write(&path.join("memory.max"), &limit_bytes.to_string())?;
                    write(&path.join("memory.swap.max"), "0").ok();
                }
            }
            std::fs::OpenOptions::new()
                .write(true)
                .open(path.join("cgroup.procs"))
                .map_err(|e| format!("cannot open `{}`: {e}", path.join("cgroup.procs").display()))
        })();
        match result {
            Ok(procs) => Ok(MemoryCgroup {
                path,
                version,
                procs,
                limit_bytes,
            }),
            Err(e) => {
                std::fs::remove_dir(&path).ok();
                Err(e)
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open `cgroup.procs` for the child's pre-exec hook.
    pub fn procs_fd(&self) -> i32 {
        self.procs.as_raw_fd()
    }

    /// OOM kills inside this cgroup so far; `None` when unreadable.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        let text = std::fs::read_to_string(self.path.join(file)).ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|v| v.trim().parse().ok())
    }

    /// The high-water mark of memory use (`None` where the kernel has none).
    pub fn peak_bytes(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        std::fs::read_to_string(self.path.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Kills whatever is left inside and removes the cgroup (read counters first).
    pub fn remove(self) {
        for _ in 0..50 {
            let procs = std::fs::read_to_string(self.path.join("cgroup.procs")).unwrap_or_default();
            for pid in procs
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                crate::sys::kill_pid(pid, libc::SIGKILL).ok();
            }
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::yield_now();
        }
        tracing::warn!(path = %self.path.display(), "could not remove the worker's cgroup");
    }
}

/// `oom_kill` of `/proc/vmstat`: every OOM kill on the host (4.13+), a global hint.
pub fn vmstat_oom_kills() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
}
