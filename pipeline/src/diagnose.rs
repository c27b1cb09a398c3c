//! `gen diagnose`: explains a failure — a source's last worker from the run directory, logs
//! captured anywhere (`--stderr`, `--kernel-log`, …), a whole observation as JSON, or an
//! inference server's log.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use gen_diagnostics::{Exit, KernelLog, Observation, Verdict};

use crate::run::orchestrator::WorkerFile;
use crate::store::{RunDir, atomic};

/// What to diagnose.
#[derive(Debug, Clone)]
pub enum Subject {
    /// A source of a run: its `worker.json`.
    Source { run_dir: RunDir, source: String },
    /// Logs captured after the fact.
    Logs(LogInputs),
    /// A whole observation as JSON (the schema of `gen_diagnostics::Observation`).
    Observation(PathBuf),
    /// An inference server's log.
    ServerLog(PathBuf),
}

#[derive(Debug, Clone, Default)]
pub struct LogInputs {
    pub stderr: PathBuf,
    pub kernel_log: Option<PathBuf>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub pid: Option<u32>,
    pub peak_rss: Option<u64>,
    pub memory_limit: Option<u64>,
    pub output_complete: bool,
}

fn read(path: &Path) -> anyhow::Result<String> {
    let bytes = fs_err::read(path)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The verdict for `subject`, with a title for rendering.
pub fn diagnose(subject: &Subject) -> anyhow::Result<(String, Verdict)> {
    match subject {
        Subject::Source { run_dir, source } => {
            let path = run_dir.source(source).worker();
            let worker: WorkerFile = atomic::read_json(&path)?.with_context(|| {
                format!("source `{source}` has no worker record at `{}`: has it been prepared by `gen run`?", path.display())
            })?;
            let verdict = worker.verdict.unwrap_or_else(|| {
                let mut verdict = Verdict::new(
                    gen_diagnostics::Class::Success,
                    None,
                    gen_diagnostics::Confidence::High,
                );
                verdict.evidence.push(format!(
                    "the worker exited with {} and its output is complete",
                    worker.report.exit.describe()
                ));
                verdict
            });
            Ok((format!("source `{source}`"), verdict))
        }
        Subject::Logs(inputs) => {
            let exit = match (inputs.exit_code, inputs.signal) {
                (Some(code), None) => Exit::Code(code),
                (None, Some(signal)) => Exit::Signal {
                    signal,
                    sent_by_gen: false,
                },
                (None, None) => {
                    anyhow::bail!("say how the worker ended: `--exit-code N` or `--signal N`")
                }
                (Some(_), Some(_)) => {
                    anyhow::bail!("`--exit-code` and `--signal` exclude each other")
                }
            };
            let mut observation = Observation::new(exit, inputs.pid.unwrap_or(0));
            observation.stderr_tail = read(&inputs.stderr)?;
            observation.kernel_log = match &inputs.kernel_log {
                Some(path) => KernelLog::Text { text: read(path)? },
                None => KernelLog::Unavailable {
                    reason: "no --kernel-log given".into(),
                },
            };
            observation.peak_rss_bytes = inputs.peak_rss;
            observation.memory_limit_bytes = inputs.memory_limit;
            observation.outputs_complete = inputs.output_complete;
            Ok((
                format!("`{}`", inputs.stderr.display()),
                gen_diagnostics::classify(&observation),
            ))
        }
        Subject::Observation(path) => {
            let observation: Observation =
                serde_json::from_str(&read(path)?).with_context(|| {
                    format!(
                        "`{}` is not a valid observation (see the schema in `gen diagnose --help`)",
                        path.display()
                    )
                })?;
            Ok((
                format!("`{}`", path.display()),
                gen_diagnostics::classify(&observation),
            ))
        }
        Subject::ServerLog(path) => {
            let verdict = gen_diagnostics::classify_server_log(&read(path)?);
            Ok((format!("server log `{}`", path.display()), verdict))
        }
    }
}

/// The verdict as plain text.
#[expect(
    clippy::let_underscore_must_use,
    reason = "writing to a String cannot fail"
)]
pub fn render(title: &str, verdict: &Verdict) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{title}: {}", verdict.headline());
    let class = serde_json::to_value(verdict.class)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let subtype = verdict
        .subtype
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|v| v.as_str().map(|s| format!(" / {s}")))
        .unwrap_or_default();
    let confidence = serde_json::to_value(verdict.confidence)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "  class       {class}{subtype} (confidence: {confidence})"
    );
    if let Some(error) = &verdict.error {
        let raised = error.primary();
        let _ = writeln!(
            out,
            "  error       {}: {}",
            raised.exception_type, raised.message
        );
        if let Some(location) = &raised.location {
            let _ = writeln!(out, "  where       {}:{}", location.file, location.line);
        }
    }
    for line in &verdict.evidence {
        let _ = writeln!(out, "  evidence    {line}");
    }
    for line in &verdict.advice {
        let _ = writeln!(out, "  advice      {line}");
    }
    let _ = writeln!(out, "  next        {}", verdict.next_action());
    out
}
