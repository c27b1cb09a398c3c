//! What the integration tests share: one temporary project directory in which `gen` runs
//! (awaited, or spawned to be signalled or killed), progress read from `status.json` and
//! waited on by polling, the `gen verify` audit, completions files read back, the real
//! llama-server fixture's skip rules, and a seeded PRNG.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

/// What `gen` printed and how it exited (`-1` when a signal ended it).
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The same, with the exit code as the OS gave it (`None`: ended by a signal).
pub struct Exit {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// A temporary project directory in which `gen` runs, with the environment every `gen` it
/// starts gets.
pub struct Project {
    dir: tempfile::TempDir,
    envs: Vec<(String, String)>,
}

/// The name the end-to-end modules use for a [`Project`].
pub type Gen = Project;

impl Project {
    pub fn new() -> Project {
        Project {
            dir: tempfile::tempdir().expect("tempdir"),
            envs: Vec::new(),
        }
    }

    /// Sets an environment variable for every `gen` this project starts.
    pub fn env(&mut self, name: &str, value: &str) {
        self.envs.push((name.to_owned(), value.to_owned()));
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub fn write(&self, relative: &str, bytes: impl AsRef<[u8]>) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("write");
    }

    pub fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative))
            .unwrap_or_else(|e| panic!("read {relative}: {e}"))
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

    /// Runs `gen ARGS` in the project directory and waits for it.
    pub async fn run(&self, args: &[&str]) -> Output {
        self.run_with_env(args, &[]).await
    }

    /// Runs `gen ARGS` with extra environment variables.
    pub async fn run_with_env(&self, args: &[&str], envs: &[(&str, &str)]) -> Output {
        let out = self.exit_of(args, envs).await;
        Output {
            code: out.code.unwrap_or(-1),
            stdout: out.stdout,
            stderr: out.stderr,
        }
    }

    /// Runs `gen ARGS` and waits for it, keeping "ended by a signal" apart from an exit code.
    pub async fn run_gen(&self, args: &[&str]) -> Exit {
        self.exit_of(args, &[]).await
    }

    async fn exit_of(&self, args: &[&str], envs: &[(&str, &str)]) -> Exit {
        let out = self
            .command(args)
            .envs(envs.iter().copied())
            .output()
            .await
            .expect("spawn gen");
        Exit {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Starts `gen ARGS` without waiting (its output is discarded).
    pub fn spawn(&self, args: &[&str]) -> tokio::process::Child {
        self.command(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gen")
    }

    /// `gen verify RUN_DIR --json --allow-incomplete`, parsed; also returns the exit code
    /// (1 only for an inconsistent run: the fault scenarios audit runs stopped midway).
    pub async fn verify(&self, run_dir: &str) -> (Option<i32>, Value) {
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
    pub fn status(&self, run_dir: &str) -> Option<Value> {
        let text = std::fs::read(self.path(run_dir).join("status.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }
}

/// Polls `status.json` until `ready` holds for it, or panics at `deadline`. The child must stay
/// alive meanwhile: a run that ended early is reported, not waited on.
pub async fn wait_for_status(
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
pub fn done(status: &Value) -> u64 {
    sources(status)
        .iter()
        .map(|s| s["done"].as_u64().unwrap_or(0))
        .sum()
}

pub fn sources(status: &Value) -> Vec<Value> {
    status["sources"].as_array().cloned().unwrap_or_default()
}

pub fn phase_of(status: &Value, source: &str) -> String {
    sources(status)
        .iter()
        .find(|s| s["name"] == source)
        .and_then(|s| s["phase"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// Ids of a completions file's whole frames, in file order.
pub fn completion_ids(path: &Path) -> Vec<String> {
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
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `low..high` (`low` when the range is empty).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low)
    }
}

/// Every file under `root`, recursively.
pub fn walk(root: &Path) -> Vec<PathBuf> {
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

/// Copies `examples/` (the quickstart config and its data) into the project, as the README
/// runs it.
pub fn copy_examples(gen_: &Gen) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    gen_.write(
        "examples/quickstart.toml",
        std::fs::read_to_string(examples.join("quickstart.toml")).expect("quickstart"),
    );
    for entry in std::fs::read_dir(examples.join("data")).expect("examples/data") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        gen_.write(
            &format!("examples/data/{name}"),
            std::fs::read_to_string(entry.path()).expect("data"),
        );
    }
}

/// Writes `cfg.toml` for `sources` (name, path) against `url`; returns its name.
pub fn write_config(gen_: &Gen, url: &str, sources: &[(&str, &str)]) -> String {
    let mut text =
        format!("[server]\nurl = \"{url}\"\n\n[generation]\nmax-tokens = 16\nconcurrency = 3\n");
    for (name, path) in sources {
        text.push_str(&format!(
            "\n[[source]]\nname = \"{name}\"\npath = \"{path}\"\n"
        ));
    }
    gen_.write("cfg.toml", &text);
    "cfg.toml".to_owned()
}

/// The records of a completions file, in file order.
pub fn completions(path: &Path) -> Vec<serde_json::Value> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let text = zstd::stream::decode_all(&bytes[..]).expect("valid zstd");
    String::from_utf8(text)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// `Some(reason)` when a test needing the real llama-server must be skipped; panics instead
/// when `GEN_REQUIRE_LLAMA` is set (as `scripts/test.sh` does), so CI never skips it.
pub fn llama_skip_reason() -> Option<String> {
    match gen_tests::llama::installed() {
        Ok(_) => None,
        Err(reason) if std::env::var_os("GEN_REQUIRE_LLAMA").is_some() => {
            panic!("GEN_REQUIRE_LLAMA is set but {reason}")
        }
        Err(reason) => Some(reason),
    }
}

/// A project directory with a real llama-server of `slots` slots started in it, or `None`
/// (the reason printed) when the test must be skipped.
pub async fn llama_project(slots: u32) -> Option<(Gen, gen_tests::llama::LlamaServer)> {
    if let Some(reason) = llama_skip_reason() {
        eprintln!("skipped: {reason}");
        return None;
    }
    let gen_ = Gen::new();
    let server = gen_tests::llama::LlamaServer::start(&gen_.path(""), slots)
        .await
        .expect("llama-server");
    Some((gen_, server))
}

/// A project whose `cfg.toml` launches the real llama-server (`bin`, `model`) and whose
/// source `fruit` holds `prompts` short questions; `generation` is the `[generation]` table's
/// body.
pub fn llama_fruit_project(gen_: &Gen, bin: &Path, model: &Path, prompts: usize, generation: &str) {
    let rows: String = (0..prompts)
        .map(|i| format!("{{\"prompt\": \"Name a fruit ({i}).\"}}\n"))
        .collect();
    gen_.write("data/a.jsonl", rows);
    gen_.write(
        "cfg.toml",
        format!(
            "[server]\nurl = \"http://127.0.0.1:{{port}}\"\nlaunch = [\"{}\", \"-m\", \"{}\", \"--host\", \"127.0.0.1\", \"--port\", \"{{port}}\", \"-np\", \"2\", \"-c\", \"2048\", \"-t\", \"2\", \"--poll\", \"0\"]\n\n[generation]\n{generation}\n\n[[source]]\nname = \"fruit\"\npath = \"data/a.jsonl\"\n",
            bin.display(),
            model.display()
        ),
    );
}
