//! The real Python with PyPI `datasets` (and so `huggingface_hub`), for the compatibility
//! tests: `GEN_TEST_PYTHON` names it (`scripts/test.sh` installs a venv and sets it).

/// The Python to run, or `None` (printing why) when the test may skip; panics instead when
/// `GEN_REQUIRE_PYTHON_DATASETS=1` (as `scripts/test.sh` sets), so CI never skips.
pub fn with_datasets() -> Option<String> {
    match std::env::var("GEN_TEST_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ if std::env::var("GEN_REQUIRE_PYTHON_DATASETS").as_deref() == Ok("1") => {
            panic!("GEN_REQUIRE_PYTHON_DATASETS=1 but GEN_TEST_PYTHON is not set")
        }
        _ => {
            eprintln!(
                "skipping the Python `datasets` check: GEN_TEST_PYTHON is not set (scripts/test.sh sets it)"
            );
            None
        }
    }
}

/// Runs `python -c script args…` in a fresh `HF_HOME` (datasets cache inside it, no progress
/// bars, no telemetry), offline unless `envs` say otherwise, and returns the JSON object its
/// last line of stdout prints; panics with its output, naming `what`, when it fails.
pub fn run_json(
    python: &str,
    script: &str,
    args: &[&std::ffi::OsStr],
    envs: &[(&str, &std::ffi::OsStr)],
    what: &str,
) -> serde_json::Value {
    let home = std::env::temp_dir().join(format!(
        "gen-tests-python-{}-{}",
        std::process::id(),
        NEXT_HOME.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let out = std::process::Command::new(python)
        .args(["-c", script])
        .args(args)
        .env("HF_HOME", &home)
        .env("HF_DATASETS_CACHE", home.join("datasets"))
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env_remove("HF_TOKEN")
        .envs(envs.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("run {python}: {e}"));
    std::fs::remove_dir_all(&home).ok();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("python printed a line");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{what}: {e}: {stdout}"))
}

static NEXT_HOME: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The trainers' readers: a Python that imports speculators, SpecForge's data modules and
/// `datasets` (`GEN_TRAINERS_PYTHON`), and the tiny local model whose tokenizer they tokenize
/// with (`GEN_VLLM_MODEL`); `scripts/install-trainers.sh` prints both. `None` (printing why)
/// when either is unset; panics instead when `GEN_REQUIRE_TRAINERS=1`, so CI never skips.
pub fn with_trainers() -> Option<(String, String)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    match (var("GEN_TRAINERS_PYTHON"), var("GEN_VLLM_MODEL")) {
        (Some(python), Some(model)) => Some((python, model)),
        _ if std::env::var("GEN_REQUIRE_TRAINERS").as_deref() == Ok("1") => panic!(
            "GEN_REQUIRE_TRAINERS=1 but GEN_TRAINERS_PYTHON or GEN_VLLM_MODEL is not set \
             (eval \"$(scripts/install-trainers.sh)\")"
        ),
        _ => {
            eprintln!(
                "skipping the trainers' readers: GEN_TRAINERS_PYTHON or GEN_VLLM_MODEL is not \
                 set (eval \"$(scripts/install-trainers.sh)\" sets both)"
            );
            None
        }
    }
}
