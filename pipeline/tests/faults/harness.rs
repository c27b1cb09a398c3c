//! What the fault scenarios share: a project directory, `gen` runs (awaited or spawned to be
//! killed), progress read from `status.json`, the `gen verify` audit, and a seeded PRNG.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) struct Output {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// A temporary project directory in which `gen` runs.
pub(crate) struct Project {
    dir: tempfile::TempDir,
    envs: Vec<(String, String)>,
}

impl Project {
    pub(crate) fn new() -> Project {
        Project {
            dir: tempfile::tempdir().expect("tempdir"),
            envs: Vec::new(),
        }
    }

    /// Sets an environment variable for every `gen` this project starts.
    pub(crate) fn env(&mut self, name: &str, value: &str) {
        self.envs.push((name.to_owned(), value.to_owned()));
    }

    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub(crate) fn write(&self, relative: &str, bytes: impl AsRef<[u8]>) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("write");
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_gen"));
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("NO_COLOR", "1")
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Runs `gen ARGS` and waits for it.
    pub(crate) async fn run_gen(&self, args: &[&str]) -> Output {
        let out = self.command(args).output().await.expect("spawn gen");
        Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Starts `gen ARGS` without waiting (its output is discarded).
    pub(crate) fn spawn(&self, args: &[&str]) -> tokio::process::Child {
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gen")
    }

    /// `gen verify RUN_DIR --json --allow-incomplete`, parsed; also returns the exit code
    /// (1 only for an inconsistent run: the fault scenarios audit runs stopped midway).
    pub(crate) async fn verify(&self, run_dir: &str) -> (Option<i32>, Value) {
        let out = self
            .run_gen(&["verify", run_dir, "--json", "--allow-incomplete"])
            .await;
        let audit = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "verify printed no JSON ({e}): code {:?}\n{}\n{}",
                out.code, out.stdout, out.stderr
            )
        });
        (out.code, audit)
    }

    /// `status.json` of `run_dir`, when it exists and is whole.
    pub(crate) fn status(&self, run_dir: &str) -> Option<Value> {
        let text = std::fs::read(self.path(run_dir).join("status.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }
}

/// Polls `status.json` until `ready` holds for it, or panics at `deadline`. The child must stay
/// alive meanwhile: a run that ended early is reported, not waited on.
pub(crate) async fn wait_for_status(
    project: &Project,
    run_dir: &str,
    child: &mut tokio::process::Child,
    what: &str,
    deadline: Duration,
    mut ready: impl FnMut(&Value) -> bool,
) -> Value {
    let until = Instant::now() + deadline;
    let mut seen = Vec::new();
    loop {
        if let Some(status) = project.status(run_dir) {
            if ready(&status) {
                return status;
            }
            let phases: Vec<Value> = sources(&status)
                .iter()
                .map(|s| s["phase"].clone())
                .collect();
            if seen.last() != Some(&phases) {
                seen.push(phases);
            }
        }
        if let Some(exit) = child.try_wait().expect("try_wait") {
            panic!("gen exited ({exit}) before {what}; phases seen: {seen:?}");
        }
        assert!(
            Instant::now() < until,
            "timed out waiting for {what}; phases seen: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Sum of `done` over the sources of a status document.
pub(crate) fn done(status: &Value) -> u64 {
    sources(status)
        .iter()
        .map(|s| s["done"].as_u64().unwrap_or(0))
        .sum()
}

pub(crate) fn sources(status: &Value) -> Vec<Value> {
    status["sources"].as_array().cloned().unwrap_or_default()
}

pub(crate) fn phase_of(status: &Value, source: &str) -> String {
    sources(status)
        .iter()
        .find(|s| s["name"] == source)
        .and_then(|s| s["phase"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// Ids of a completions file's whole frames, in file order.
pub(crate) fn completion_ids(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let mut ids = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let Ok(size) = zstd::zstd_safe::find_frame_compressed_size(&bytes[offset..]) else {
            break;
        };
        let Ok(text) = zstd::stream::decode_all(&bytes[offset..offset + size]) else {
            break;
        };
        for line in String::from_utf8(text).expect("utf-8").lines() {
            let record: Value = serde_json::from_str(line).expect("json line");
            ids.push(record["id"].as_str().expect("id").to_owned());
        }
        offset += size;
    }
    ids
}

/// splitmix64: a tiny seeded generator, so every fault schedule can be replayed from its seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `low..high` (`low` when the range is empty).
    pub(crate) fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low)
    }
}

/// Every file under `root`, recursively.
pub(crate) fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            out.push(path.clone());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}
