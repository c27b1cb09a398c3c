//! What this machine has, read once for the preflight: RAM (`/proc/meminfo`), the memory
//! cgroup limit of this process (v1 `memory.limit_in_bytes`, v2 `memory.max`, the smallest
//! along the hierarchy), CPUs, free disk where the run directory lives, GPU memory from
//! `nvidia-smi`, and what earlier runs measured (peak RSS of each source's worker, prompts
//! prepared). Every reading may be missing; the preflight says so instead of guessing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;

use crate::sys::meminfo_field;

/// A cgroup v1 limit at or above this is "no limit" (the kernel reports `PAGE_COUNTER_MAX`
/// rounded to pages, e.g. 9223372036854771712).
const V1_UNLIMITED: u64 = 1 << 62;

/// The machine as the preflight sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Machine {
    pub mem_total: Option<u64>,
    /// `MemAvailable`, or the `GEN_TEST_MEM_AVAILABLE` override.
    pub mem_available: Option<u64>,
    /// The tightest memory cgroup limit above this process, when there is one.
    pub cgroup: Option<CgroupMemory>,
    pub cpus: usize,
    pub disk: Option<Disk>,
    /// `None` when `nvidia-smi` is not there (no NVIDIA GPU, or no driver).
    pub gpus: Option<Vec<Gpu>>,
    /// Peak RSS of each source's last preparation worker (`worker.json`).
    pub peak_rss: BTreeMap<String, u64>,
    /// Prompts each prepared source holds (`manifest.json` `kept`).
    pub prepared: BTreeMap<String, u64>,
    /// Rows in the local files of each source not prepared yet, where they were few enough
    /// to count ([`super::local_rows`]): at most that many prompts.
    pub local_rows: BTreeMap<String, u64>,
    /// What the sources not prepared yet download from the Hub, as it lists their files
    /// (`gen doctor` only, [`super::hub_download`]; `None`: not asked, as in a run's
    /// preflight, which contacts nothing).
    pub hub_download: Option<Result<gen_sources::hub::ListedSize, String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMemory {
    pub path: PathBuf,
    pub limit: u64,
    /// Memory the cgroup already uses (page cache included).
    pub usage: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    pub mount_point: PathBuf,
    pub free: u64,
    pub total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gpu {
    pub total: u64,
    pub used: u64,
}

/// Reads the machine and what earlier runs left in `run_dir` (which need not exist yet).
pub fn read_machine(run_dir: &Path) -> Machine {
    let meminfo = fs_err::read_to_string("/proc/meminfo").unwrap_or_default();
    let (peak_rss, prepared) = earlier_runs(run_dir);
    Machine {
        mem_total: meminfo_field(&meminfo, "MemTotal"),
        mem_available: meminfo_field(&meminfo, "MemAvailable"),
        cgroup: own_cgroup_memory(),
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
        disk: disk_of(run_dir),
        gpus: nvidia_gpus(),
        peak_rss,
        prepared,
        local_rows: BTreeMap::new(),
        hub_download: None,
    }
}

fn read_number(path: &Path) -> Option<u64> {
    fs_err::read_to_string(path).ok()?.trim().parse().ok()
}

/// The tightest limit among this process's memory cgroup and its ancestors.
fn own_cgroup_memory() -> Option<CgroupMemory> {
    let text = fs_err::read_to_string("/proc/self/cgroup").ok()?;
    let mut tightest: Option<CgroupMemory> = None;
    for line in text.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(relative)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (mount, limit_file, usage_file) = if controllers.split(',').any(|c| c == "memory") {
            (
                "/sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else if id == "0" && controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max", "memory.current")
        } else {
            continue;
        };
        let mut dir = Path::new(mount).join(relative.trim_start_matches('/'));
        loop {
            // v2 writes `max` for no limit, which does not parse: skipped.
            if let Some(limit) = read_number(&dir.join(limit_file)).filter(|l| *l < V1_UNLIMITED)
                && tightest.as_ref().is_none_or(|t| limit < t.limit)
            {
                tightest = Some(CgroupMemory {
                    path: dir.clone(),
                    limit,
                    usage: read_number(&dir.join(usage_file)).unwrap_or(0),
                });
            }
            if dir == Path::new(mount) || !dir.pop() {
                break;
            }
        }
    }
    tightest
}

/// Free space of the file system holding `run_dir` (or its nearest existing ancestor).
pub(super) fn disk_of(run_dir: &Path) -> Option<Disk> {
    let absolute = std::path::absolute(run_dir).ok()?;
    let existing = absolute.ancestors().find(|p| p.exists())?;
    let path = fs_err::canonicalize(existing).ok()?;
    let disks = sysinfo::Disks::new_with_refreshed_list().ok()?;
    disks
        .iter()
        .filter(|d| path.starts_with(d.mount_point()))
        .max_by_key(|d| d.mount_point().as_os_str().len())
        .map(|d| Disk {
            mount_point: d.mount_point().to_path_buf(),
            free: d.available_space(),
            total: d.total_space(),
        })
}

/// GPUs as `nvidia-smi` reports them; `None` when it is not installed or fails.
fn nvidia_gpus() -> Option<Vec<Gpu>> {
    let output = Command::new("nvidia-smi")
        .args([
            "--query-gpu=memory.total,memory.used",
            "--format=csv,noheader,nounits",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(parse_nvidia_smi(&String::from_utf8_lossy(&output.stdout)))
}

/// `nvidia-smi --query-gpu=memory.total,memory.used --format=csv,noheader,nounits`: one line
/// per GPU, MiB.
pub(super) fn parse_nvidia_smi(text: &str) -> Vec<Gpu> {
    text.lines()
        .filter_map(|line| {
            let (total, used) = line.split_once(',')?;
            let mib = |s: &str| s.trim().parse::<u64>().ok().map(|m| m << 20);
            Some(Gpu {
                total: mib(total)?,
                used: mib(used)?,
            })
        })
        .collect()
}

#[derive(Deserialize)]
struct WorkerPeak {
    report: PeakOnly,
}

#[derive(Deserialize)]
struct PeakOnly {
    peak_rss_bytes: u64,
}

#[derive(Deserialize)]
struct KeptOnly {
    kept: u64,
}

/// Peak RSS and prepared prompts per source, from `RUN_DIR/sources/NAME/{worker,manifest}.json`.
fn earlier_runs(run_dir: &Path) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let mut peaks = BTreeMap::new();
    let mut prepared = BTreeMap::new();
    let Ok(entries) = fs_err::read_dir(run_dir.join("sources")) else {
        return (peaks, prepared);
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let dir = entry.path();
        if let Ok(text) = fs_err::read(dir.join("worker.json"))
            && let Ok(worker) = serde_json::from_slice::<WorkerPeak>(&text)
            && worker.report.peak_rss_bytes > 0
        {
            peaks.insert(name.clone(), worker.report.peak_rss_bytes);
        }
        if let Ok(text) = fs_err::read(dir.join("manifest.json"))
            && let Ok(manifest) = serde_json::from_slice::<KeptOnly>(&text)
        {
            prepared.insert(name, manifest.kept);
        }
    }
    (peaks, prepared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_and_nvidia_smi_parse() {
        let meminfo = "MemTotal:       24576000 kB\nMemFree:  1 kB\nMemAvailable:   20480000 kB\n";
        assert_eq!(meminfo_field(meminfo, "MemTotal"), Some(24_576_000 * 1024));
        assert_eq!(
            meminfo_field(meminfo, "MemAvailable"),
            Some(20_480_000 * 1024)
        );
        assert_eq!(meminfo_field(meminfo, "Mem"), None);
        assert_eq!(
            parse_nvidia_smi("81559, 1024\n81559, 79000\n"),
            [
                Gpu {
                    total: 81559 << 20,
                    used: 1024 << 20
                },
                Gpu {
                    total: 81559 << 20,
                    used: 79000 << 20
                }
            ]
        );
    }

    #[test]
    fn earlier_runs_give_peaks_and_prompt_counts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let alpha = dir.path().join("sources/alpha");
        fs_err::create_dir_all(&alpha).expect("mkdir");
        fs_err::write(
            alpha.join("worker.json"),
            r#"{"succeeded": true, "report": {"peak_rss_bytes": 12345, "pid": 1}}"#,
        )
        .expect("write");
        fs_err::write(
            alpha.join("manifest.json"),
            r#"{"kept": 42, "source": "alpha"}"#,
        )
        .expect("write");
        let machine = read_machine(dir.path());
        assert_eq!(
            machine.peak_rss,
            BTreeMap::from([("alpha".to_owned(), 12345)])
        );
        assert_eq!(machine.prepared, BTreeMap::from([("alpha".to_owned(), 42)]));
        assert!(machine.cpus >= 1);
        // This machine's real readings: RAM is always there on Linux; the disk of a temp dir
        // is found.
        assert!(machine.mem_total.is_some_and(|t| t > 0));
        assert!(
            machine.disk.as_ref().is_some_and(|d| d.total > 0),
            "{machine:?}"
        );
    }
}
