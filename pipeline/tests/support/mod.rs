//! Helpers for tests that spawn the `gen` binary in a temporary project directory.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};

pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// A temporary project directory in which `gen` runs.
pub struct Gen {
    dir: tempfile::TempDir,
}

impl Gen {
    pub fn new() -> Gen {
        Gen {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub fn write(&self, relative: &str, text: &str) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    pub fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative))
            .unwrap_or_else(|e| panic!("read {relative}: {e}"))
    }

    /// Runs `gen ARGS` in the project directory and waits for it.
    pub async fn run(&self, args: &[&str]) -> Output {
        self.run_with_env(args, &[]).await
    }

    /// Runs `gen ARGS` with extra environment variables.
    pub async fn run_with_env(&self, args: &[&str], envs: &[(&str, &str)]) -> Output {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_gen"))
            .args(args)
            .envs(envs.iter().copied())
            .current_dir(self.dir.path())
            .env("NO_COLOR", "1")
            .output()
            .await
            .expect("spawn gen");
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Copies `examples/` (the quickstart config and its data) into the project, as the README
/// runs it.
pub fn copy_examples(gen_: &Gen) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    gen_.write(
        "examples/quickstart.toml",
        &std::fs::read_to_string(examples.join("quickstart.toml")).expect("quickstart"),
    );
    for entry in std::fs::read_dir(examples.join("data")).expect("examples/data") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        gen_.write(
            &format!("examples/data/{name}"),
            &std::fs::read_to_string(entry.path()).expect("data"),
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
    gen_.write("data/a.jsonl", &rows);
    gen_.write(
        "cfg.toml",
        &format!(
            "[server]\nurl = \"http://127.0.0.1:{{port}}\"\nlaunch = [\"{}\", \"-m\", \"{}\", \"--host\", \"127.0.0.1\", \"--port\", \"{{port}}\", \"-np\", \"2\", \"-c\", \"2048\", \"-t\", \"2\", \"--poll\", \"0\"]\n\n[generation]\n{generation}\n\n[[source]]\nname = \"fruit\"\npath = \"data/a.jsonl\"\n",
            bin.display(),
            model.display()
        ),
    );
}
