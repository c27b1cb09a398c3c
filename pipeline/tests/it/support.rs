//! What the integration tests share: one temporary project directory in which `gen` runs, the
//! one config builder ([`Config`]) and the run directory derived from the config written, one
//! way to run `gen` ([`GenCommand`]: awaited, or started in the background as a [`Running`]
//! to be signalled, killed or waited on), one way to wait for observed state ([`wait_for`]:
//! polling with a deadline that names what it waited for, never a sleep as synchronisation),
//! the `gen verify` audit, completions files read back, the real llama-server fixture's skip
//! rules, and a seeded PRNG.

use std::cell::RefCell;
use std::path::{Component, Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `gen` binary under test.
pub(crate) const GEN_BIN: &str = env!("CARGO_BIN_EXE_gen");

/// What `gen` printed and how it exited (`code` is `None` when a signal ended it).
pub(crate) struct Output {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Output {
    fn of(out: std::process::Output) -> Output {
        Output {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// A config file built from its tables: `[run]`, `[server]`, `[generation]` and the sources.
/// Written with [`Project::config`], which also makes it the config whose run directory
/// [`Project::run_dir`] names. A config that must be broken on purpose (a typo, a bad value at
/// a given line) is written as raw text with [`Project::write`] instead.
#[derive(Clone)]
pub(crate) struct Config {
    file: String,
    run: String,
    server: String,
    generation: String,
    sources: String,
}

impl Config {
    /// `cfg.toml` against the server at `url`: answers of up to 16 tokens, 3 at a time.
    pub(crate) fn new(url: &str) -> Config {
        Config::with_server(&format!("url = \"{url}\""))
    }

    /// `cfg.toml` whose `[server]` table's body is `server` (several `urls`, a `launch`...).
    pub(crate) fn with_server(server: &str) -> Config {
        Config {
            file: "cfg.toml".to_owned(),
            run: String::new(),
            server: server.to_owned(),
            generation: "max-tokens = 16\nconcurrency = 3".to_owned(),
            sources: String::new(),
        }
    }

    /// A config launching the real llama-server `bin` with `model` on `port` (a number, or
    /// `{port}` for a free one); `args` are llama-server's further arguments.
    pub(crate) fn launching(bin: &Path, model: &Path, port: &str, args: &[&str]) -> Config {
        let mut launch = vec![
            bin.display().to_string(),
            "-m".to_owned(),
            model.display().to_string(),
            "--host".to_owned(),
            "127.0.0.1".to_owned(),
            "--port".to_owned(),
            port.to_owned(),
        ];
        launch.extend(args.iter().map(|a| (*a).to_owned()));
        Config::launching_command(&launch, port)
    }

    /// A config launching `command` (its `--port` argument `port`: a number, or `{port}`).
    pub(crate) fn launching_command(command: &[String], port: &str) -> Config {
        // A JSON string is a valid TOML basic string.
        let launch: Vec<String> = command
            .iter()
            .map(|a| serde_json::to_string(a).expect("string"))
            .collect();
        Config::with_server(&format!(
            "url = \"http://127.0.0.1:{port}\"\nlaunch = [{}]",
            launch.join(", ")
        ))
    }

    /// The file name, relative to the project (`cfg.toml` unless set).
    pub(crate) fn named(mut self, file: &str) -> Config {
        file.clone_into(&mut self.file);
        self
    }

    /// Lines added to the `[run]` table.
    pub(crate) fn run(mut self, lines: &str) -> Config {
        push_lines(&mut self.run, lines);
        self
    }

    /// Lines added to the `[server]` table.
    pub(crate) fn server(mut self, lines: &str) -> Config {
        push_lines(&mut self.server, lines);
        self
    }

    /// The `[generation]` table's whole body (`max-tokens = 16`, `concurrency = 3` unless set).
    pub(crate) fn generation(mut self, body: &str) -> Config {
        body.clone_into(&mut self.generation);
        self
    }

    /// A `[[source]]` reading `path`.
    pub(crate) fn source(self, name: &str, path: &str) -> Config {
        self.source_with(name, path, "")
    }

    /// A `[[source]]` reading `path`, with `lines` added to its table.
    pub(crate) fn source_with(self, name: &str, path: &str, lines: &str) -> Config {
        self.source_table(name, &format!("path = \"{path}\"\n{lines}"))
    }

    /// A `[[source]]` whose rows a Python `script` prints (`command = ["python3", "-c", …]`),
    /// with `lines` added to its table.
    pub(crate) fn python_source(self, name: &str, script: &str, lines: &str) -> Config {
        // A JSON string is a valid TOML basic string.
        let script = serde_json::to_string(script).expect("string");
        self.source_table(
            name,
            &format!("command = [\"python3\", \"-c\", {script}]\n{lines}"),
        )
    }

    /// A `[[source]]` named `name` whose other keys are `body`.
    pub(crate) fn source_table(mut self, name: &str, body: &str) -> Config {
        self.sources
            .push_str(&format!("\n[[source]]\nname = \"{name}\"\n{body}\n"));
        self
    }

    /// The file's text.
    pub(crate) fn text(&self) -> String {
        let mut text = String::new();
        if !self.run.is_empty() {
            text.push_str(&format!("[run]\n{}\n\n", self.run));
        }
        text.push_str(&format!(
            "[server]\n{}\n\n[generation]\n{}\n",
            self.server, self.generation
        ));
        text.push_str(&self.sources);
        text
    }
}

fn push_lines(table: &mut String, lines: &str) {
    if !table.is_empty() && !lines.is_empty() {
        table.push('\n');
    }
    table.push_str(lines);
}

/// The run directory `gen` derives for the config `file` of `text`, relative to the project:
/// `[run] dir` from the config's directory, else `runs/STEM` there.
fn run_dir_of(file: &str, text: &str) -> String {
    let base = Path::new(file).parent().unwrap_or(Path::new(""));
    let dir = toml::from_str::<toml::Table>(text)
        .ok()
        .and_then(|t| t.get("run")?.get("dir")?.as_str().map(str::to_owned));
    let joined = match dir {
        Some(dir) => base.join(dir),
        None => {
            let stem = Path::new(file)
                .file_stem()
                .map_or_else(|| "run".to_owned(), |s| s.to_string_lossy().into_owned());
            base.join("runs").join(stem)
        }
    };
    // `examples/../runs/quickstart` is `runs/quickstart`.
    let mut normal = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal.to_string_lossy().into_owned()
}

/// A temporary project directory in which `gen` runs, with the environment every `gen` it
/// starts gets, and the config whose run directory the tests read.
pub(crate) struct Project {
    dir: tempfile::TempDir,
    envs: Vec<(String, String)>,
    config: RefCell<Option<String>>,
}

impl Project {
    pub(crate) fn new() -> Project {
        Project {
            dir: tempfile::tempdir().expect("tempdir"),
            envs: Vec::new(),
            config: RefCell::new(None),
        }
    }

    /// A copy of the project directory (times and modes kept, so a prepared source still
    /// matches its inputs), with the same config and environment.
    pub(crate) fn copy(&self) -> Project {
        let mut copy = Project::new();
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(self.dir.path().join("."))
            .arg(copy.dir.path())
            .status()
            .expect("run cp");
        assert!(status.success(), "cp -a: {status}");
        copy.envs = self.envs.clone();
        *copy.config.borrow_mut() = self.config.borrow().clone();
        copy
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

    pub(crate) fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative))
            .unwrap_or_else(|e| panic!("read {relative}: {e}"))
    }

    /// Writes `config` and makes it the project's config; returns its file name.
    pub(crate) fn config(&self, config: &Config) -> String {
        self.write(&config.file, config.text());
        self.use_config(&config.file);
        config.file.clone()
    }

    /// Makes `file`, written as raw text (a copied example, a config broken on purpose), the
    /// project's config.
    pub(crate) fn use_config(&self, file: &str) {
        *self.config.borrow_mut() = Some(file.to_owned());
    }

    /// The run directory of the project's config, relative to the project (`runs/cfg` for
    /// `cfg.toml`), as `gen` derives it from the file's name and `[run] dir`.
    pub(crate) fn run_dir(&self) -> String {
        let file = self
            .config
            .borrow()
            .clone()
            .expect("no config: write one with `Project::config`");
        let text = std::fs::read_to_string(self.path(&file)).unwrap_or_default();
        run_dir_of(&file, &text)
    }

    /// `relative` inside the run directory (`""`: the run directory itself).
    pub(crate) fn run_path(&self, relative: &str) -> PathBuf {
        let root = self.path(&self.run_dir());
        if relative.is_empty() {
            root
        } else {
            root.join(relative)
        }
    }

    /// The text of `relative` inside the run directory.
    pub(crate) fn read_run(&self, relative: &str) -> String {
        self.read(&format!("{}/{relative}", self.run_dir()))
    }

    /// `file` in the run directory of `source`.
    pub(crate) fn source_path(&self, source: &str, file: &str) -> PathBuf {
        self.run_path(&format!("sources/{source}/{file}"))
    }

    /// The records of `source`'s completions file.
    pub(crate) fn completions_of(&self, source: &str) -> Vec<Value> {
        completions(&self.source_path(source, "completions.jsonl.zst"))
    }

    /// The records of `source`'s `rejected.jsonl` (none when it does not exist).
    pub(crate) fn rejected_of(&self, source: &str) -> Vec<Value> {
        std::fs::read_to_string(self.source_path(source, "rejected.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect()
    }

    /// `gen ARGS` in the project directory, to be set up, then awaited or started.
    pub(crate) fn command(&self, args: &[&str]) -> GenCommand<'_> {
        GenCommand {
            project: self,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            envs: Vec::new(),
            removed: Vec::new(),
            wrapper: None,
            binary: None,
        }
    }

    /// Runs `gen ARGS` in the project directory and waits for it.
    pub(crate) async fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().await
    }

    /// Runs `gen ARGS` with extra environment variables.
    pub(crate) async fn run_with_env(&self, args: &[&str], envs: &[(&str, &str)]) -> Output {
        let mut command = self.command(args);
        for (name, value) in envs {
            command = command.env(name, value);
        }
        command.output().await
    }

    /// Starts `gen ARGS` in the background (stdout discarded, stderr piped).
    pub(crate) fn start(&self, args: &[&str]) -> Running {
        self.command(args).start()
    }

    /// `gen verify` of the run directory, `--json --allow-incomplete`, parsed; also returns
    /// the exit code (1 only for an inconsistent run: the fault scenarios audit runs stopped
    /// midway).
    pub(crate) async fn verify(&self) -> (Option<i32>, Value) {
        self.verify_at(&self.run_dir()).await
    }

    /// The same for `run_dir` (a shard of the run, a merged output).
    pub(crate) async fn verify_at(&self, run_dir: &str) -> (Option<i32>, Value) {
        let out = self
            .run(&["verify", run_dir, "--json", "--allow-incomplete"])
            .await;
        let audit = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "verify printed no JSON ({e}): code {:?}\n{}\n{}",
                out.code, out.stdout, out.stderr
            )
        });
        (out.code, audit)
    }

    /// `status.json` of the run directory, when it exists and is whole.
    pub(crate) fn status(&self) -> Option<Value> {
        self.status_at(&self.run_dir())
    }

    /// `status.json` of `run_dir`, when it exists and is whole.
    pub(crate) fn status_at(&self, run_dir: &str) -> Option<Value> {
        read_json(&self.path(run_dir).join("status.json"))
    }
}

/// A parsed JSON file (`status.json`, `owner.json`), when it exists and is whole.
pub(crate) fn read_json(path: &Path) -> Option<Value> {
    let text = std::fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

/// `gen ARGS` being set up: its environment, a wrapper program, another build of `gen`. It
/// runs in the project directory with an empty stdin and `NO_COLOR=1`, and is killed when
/// dropped.
pub(crate) struct GenCommand<'a> {
    project: &'a Project,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    removed: Vec<String>,
    wrapper: Option<String>,
    binary: Option<String>,
}

impl GenCommand<'_> {
    pub(crate) fn env(mut self, name: &str, value: &str) -> Self {
        self.envs.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Leaves `name` out of the environment `gen` inherits.
    pub(crate) fn env_remove(mut self, name: &str) -> Self {
        self.removed.push(name.to_owned());
        self
    }

    /// Runs `PROGRAM gen ARGS` (`nohup`, which execs `gen` under the same pid).
    pub(crate) fn under(mut self, program: &str) -> Self {
        self.wrapper = Some(program.to_owned());
        self
    }

    /// Runs another build of `gen` (an older one, to measure what changed).
    pub(crate) fn binary(mut self, path: &str) -> Self {
        self.binary = Some(path.to_owned());
        self
    }

    fn build(&self) -> tokio::process::Command {
        let gen_bin = self.binary.as_deref().unwrap_or(GEN_BIN);
        let mut command = match &self.wrapper {
            Some(program) => {
                let mut command = tokio::process::Command::new(program);
                command.arg(gen_bin);
                command
            }
            None => tokio::process::Command::new(gen_bin),
        };
        command
            .args(&self.args)
            .current_dir(self.project.dir.path())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for name in &self.removed {
            command.env_remove(name);
        }
        command
            .env("NO_COLOR", "1")
            .envs(
                self.project
                    .envs
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command
    }

    /// Spawns it with its stdout to `stdout` and its stderr piped.
    fn spawn(self, stdout: Stdio) -> tokio::process::Child {
        self.build()
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gen")
    }

    /// Runs it and waits for it.
    pub(crate) async fn output(self) -> Output {
        let child = self.spawn(Stdio::piped());
        Output::of(child.wait_with_output().await.expect("wait for gen"))
    }

    /// Starts it in the background: stdout discarded, stderr piped (read it with
    /// [`Running::finish`], or take it from [`Running::child`]).
    pub(crate) fn start(self) -> Running {
        Running {
            child: self.spawn(Stdio::null()),
        }
    }
}

/// A process started in the background (`gen`, or a script running it); killed when dropped.
pub(crate) struct Running {
    pub(crate) child: tokio::process::Child,
}

impl From<tokio::process::Child> for Running {
    fn from(child: tokio::process::Child) -> Running {
        Running { child }
    }
}

impl Running {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().expect("pid of a running process")
    }

    /// `kill -NAME PID` (`TERM`, `HUP`, `USR1`...).
    pub(crate) fn signal(&self, name: &str) {
        signal(self.pid(), name);
    }

    /// `kill -9`, then its exit status.
    pub(crate) async fn kill9(&mut self) -> ExitStatus {
        self.child.start_kill().expect("kill -9");
        self.child.wait().await.expect("wait")
    }

    /// How it ended, if it has.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Polls `ready` until it holds, panicking if the process ends first or after `within`.
    pub(crate) async fn until(
        &mut self,
        what: &str,
        within: Duration,
        mut ready: impl FnMut() -> bool,
    ) {
        wait_for(what, within)
            .every(Duration::from_millis(1))
            .until_ok(|| {
                if ready() {
                    return Ok(());
                }
                if let Some(exit) = self.exited() {
                    panic!("it exited ({exit}) before {what}");
                }
                Err(String::new())
            })
            .await;
    }

    /// Polls `status.json` of `run_dir` until `ready` holds for it; panics if the process ends
    /// first, or after `within` with the phases it saw.
    pub(crate) async fn until_status(
        &mut self,
        project: &Project,
        run_dir: &str,
        what: &str,
        within: Duration,
        mut ready: impl FnMut(&Value) -> bool,
    ) -> Value {
        let mut seen: Vec<Vec<Value>> = Vec::new();
        wait_for(what, within)
            .every(Duration::from_millis(1))
            .until_ok(|| {
                if let Some(status) = project.status_at(run_dir) {
                    if ready(&status) {
                        return Ok(status);
                    }
                    let phases: Vec<Value> = sources(&status)
                        .iter()
                        .map(|s| s["phase"].clone())
                        .collect();
                    if seen.last() != Some(&phases) {
                        seen.push(phases);
                    }
                }
                if let Some(exit) = self.exited() {
                    panic!("gen exited ({exit}) before {what}; phases seen: {seen:?}");
                }
                Err(format!("phases seen: {seen:?}"))
            })
            .await
    }

    /// The same for the project's run directory.
    pub(crate) async fn until_run_status(
        &mut self,
        project: &Project,
        what: &str,
        within: Duration,
        ready: impl FnMut(&Value) -> bool,
    ) -> Value {
        self.until_status(project, &project.run_dir(), what, within, ready)
            .await
    }

    /// Waits for it to end (within `within`), leaving its output unread.
    pub(crate) async fn exit(&mut self, within: Duration) -> ExitStatus {
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("it did not end within {within:?}"))
            .expect("wait")
    }

    /// Waits for it to end (within `within`); its stderr, unless taken.
    pub(crate) async fn finish(self, within: Duration) -> Output {
        let out = tokio::time::timeout(within, self.child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("it did not end within {within:?}"))
            .expect("wait");
        Output::of(out)
    }
}

/// `kill -SIGNAL PID` (the workspace forbids `unsafe`, so no direct `kill(2)`).
pub(crate) fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// The state letter of process `pid` in `/proc/PID/stat` (`T`: stopped by a signal).
pub(crate) fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the parenthesised command name: state, ppid, ...
    stat.rsplit_once(") ")?.1.chars().next()
}

/// A wait on observed state: polled every `every` (10 ms unless set) until it holds; after
/// `within`, a panic naming `what` and what was last seen.
pub(crate) struct Wait<'a> {
    what: String,
    within: Duration,
    every: Duration,
    context: Option<Box<dyn Fn() -> String + 'a>>,
}

/// Waits for `what`, for at most `within`.
pub(crate) fn wait_for<'a>(what: &str, within: Duration) -> Wait<'a> {
    Wait {
        what: what.to_owned(),
        within,
        every: Duration::from_millis(10),
        context: None,
    }
}

impl<'a> Wait<'a> {
    /// How often to look (a check that forks a program wants a slower pace).
    pub(crate) fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// What a timeout's message adds (logs of the processes waited on).
    pub(crate) fn context(mut self, context: impl Fn() -> String + 'a) -> Self {
        self.context = Some(Box::new(context));
        self
    }

    /// Until `ready` holds.
    pub(crate) async fn until(self, mut ready: impl FnMut() -> bool) {
        self.until_ok(|| if ready() { Ok(()) } else { Err(String::new()) })
            .await;
    }

    /// Until `check` gives a value.
    pub(crate) async fn until_some<T>(self, mut check: impl FnMut() -> Option<T>) -> T {
        self.until_ok(|| check().ok_or_else(String::new)).await
    }

    /// Until `check` gives `Ok`; its last `Err` (what it saw) goes into a timeout's message.
    pub(crate) async fn until_ok<T>(self, mut check: impl FnMut() -> Result<T, String>) -> T {
        let until = Instant::now() + self.within;
        loop {
            let seen = match check() {
                Ok(value) => return value,
                Err(seen) => seen,
            };
            if Instant::now() >= until {
                let context = self.context.as_ref().map(|c| c()).unwrap_or_default();
                panic!(
                    "timed out after {:?} waiting for {}; {seen}\n{context}",
                    self.within, self.what
                );
            }
            tokio::time::sleep(self.every).await;
        }
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

/// Copies `examples/` (the quickstart config and its data) into the project, as the README
/// runs it.
pub(crate) fn copy_examples(gen_: &Project) {
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
    gen_.use_config("examples/quickstart.toml");
}

/// The records of a completions file, in file order.
pub(crate) fn completions(path: &Path) -> Vec<serde_json::Value> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    // A file opened for answers that never came is empty: no records (zstd calls zero bytes
    // an incomplete frame).
    if bytes.is_empty() {
        return Vec::new();
    }
    let text = zstd::stream::decode_all(&bytes[..]).expect("valid zstd");
    String::from_utf8(text)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// `Some(reason)` when a test needing the real llama-server must be skipped; panics instead
/// when `GEN_REQUIRE_LLAMA` is set (as `scripts/test.sh` does), so CI never skips it.
pub(crate) fn llama_skip_reason() -> Option<String> {
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
pub(crate) async fn llama_project(slots: u32) -> Option<(Project, gen_tests::llama::LlamaServer)> {
    if let Some(reason) = llama_skip_reason() {
        eprintln!("skipped: {reason}");
        return None;
    }
    let gen_ = Project::new();
    let server = gen_tests::llama::LlamaServer::start(&gen_.path(""), slots)
        .await
        .expect("llama-server");
    Some((gen_, server))
}

/// `Some(reason)` when a test needing the real vLLM must be skipped; panics instead when
/// `GEN_REQUIRE_VLLM` is set (as `scripts/test.sh` does), so CI never skips it.
pub(crate) fn vllm_skip_reason() -> Option<String> {
    match gen_tests::vllm::installed() {
        Ok(_) => None,
        Err(reason) if std::env::var_os("GEN_REQUIRE_VLLM").is_some() => {
            panic!("GEN_REQUIRE_VLLM is set but {reason}")
        }
        Err(reason) => Some(reason),
    }
}

/// A project directory with a real vLLM started in it with further `args`, or `None` (the
/// reason printed) when the test must be skipped.
pub(crate) async fn vllm_project(args: &[&str]) -> Option<(Project, gen_tests::vllm::VllmServer)> {
    if let Some(reason) = vllm_skip_reason() {
        eprintln!("skipped: {reason}");
        return None;
    }
    let gen_ = Project::new();
    let server = gen_tests::vllm::VllmServer::start(&gen_.path(""), args)
        .await
        .expect("vLLM");
    Some((gen_, server))
}

/// A project whose `cfg.toml` launches the real llama-server (`bin`, `model`) and whose
/// source `fruit` holds `prompts` short questions; `generation` is the `[generation]` table's
/// body.
pub(crate) fn llama_fruit_project(
    gen_: &Project,
    bin: &Path,
    model: &Path,
    prompts: usize,
    generation: &str,
) {
    let rows: String = (0..prompts)
        .map(|i| format!("{{\"prompt\": \"Name a fruit ({i}).\"}}\n"))
        .collect();
    gen_.write("data/a.jsonl", rows);
    gen_.config(
        &Config::launching(
            bin,
            model,
            "{port}",
            &["-np", "2", "-c", "2048", "-t", "2", "--poll", "0"],
        )
        .generation(generation)
        .source("fruit", "data/a.jsonl"),
    );
}

/// Children of `parent` (from `/proc/*/stat`).
pub(crate) fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The fields after the parenthesised comm: state, ppid, ...
        let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
        if after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok())
            == Some(parent)
        {
            out.push(pid);
        }
    }
    out
}

/// A port nothing listens on (now): for a server that is not there, or starts later.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}
