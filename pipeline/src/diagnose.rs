//! `gen diagnose`: explains a failure — a source's last worker from the run directory, logs
//! captured anywhere (`--stderr`, `--kernel-log`, …), a whole observation as JSON, or an
//! inference server's log.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use gen_diagnostics::clock::Moment;
use gen_diagnostics::{Class, Exit, KernelLog, Observation, Subtype, Verdict};

use crate::cli::LogEvidence;
use crate::store::worker::WorkerFile;
use crate::store::{RunDir, atomic};

/// What to diagnose.
#[derive(Debug, Clone)]
pub enum Subject {
    /// A source of a run: its `worker.json`.
    Source { run_dir: RunDir, source: String },
    /// Logs captured after the fact.
    Logs {
        stderr: PathBuf,
        evidence: LogEvidence,
    },
    /// A whole observation as JSON (the schema of `gen_diagnostics::Observation`).
    Observation(PathBuf),
    /// An inference server's log.
    ServerLog(PathBuf),
}

/// The observation `gen diagnose --stderr FILE ...` describes; unknown facts stay unknown
/// (exit, pid 0).
fn observation(stderr: &Path, evidence: &LogEvidence) -> anyhow::Result<Observation> {
    let exit = match (evidence.exit_code, evidence.signal) {
        (Some(code), None) => Exit::Code(code),
        (None, Some(signal)) => Exit::Signal {
            signal,
            sent_by_gen: false,
        },
        (None, None) => Exit::Unknown,
        (Some(_), Some(_)) => {
            anyhow::bail!("`--exit-code` and `--signal` exclude each other")
        }
    };
    let mut observation = Observation::new(exit, evidence.pid.unwrap_or(0));
    observation.stderr_tail = read(stderr)?;
    observation.kernel_log = match &evidence.kernel_log {
        Some(path) => KernelLog::Text { text: read(path)? },
        None => KernelLog::Unavailable {
            reason: "no --kernel-log given".into(),
        },
    };
    for path in &evidence.logs {
        if !observation.other_log.is_empty() {
            observation.other_log.push('\n');
        }
        observation.other_log.push_str(&read(path)?);
    }
    observation.cgroup_path = evidence.cgroup.clone();
    match moment("--started-at", evidence.started_at.as_deref())? {
        Some(Moment::SinceBoot(usec)) => observation.spawn_usec = Some(usec),
        Some(Moment::Wall(wall)) => observation.started_at = Some(wall.to_string()),
        None => {}
    }
    match moment("--exited-at", evidence.exited_at.as_deref())? {
        Some(Moment::SinceBoot(usec)) => observation.exit_usec = Some(usec),
        Some(Moment::Wall(wall)) => observation.exited_at = Some(wall.to_string()),
        None => {}
    }
    observation.peak_rss_bytes = evidence.peak_rss;
    observation.memory_limit_bytes = evidence.memory_limit;
    observation.largest_row_bytes = evidence.largest_row;
    observation.outputs_complete = evidence.output_complete;
    Ok(observation)
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
            let mut verdict = worker.verdict.unwrap_or_else(|| {
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
            if verdict.subtype == Some(Subtype::Cancelled) {
                stopped_with_the_run(run_dir, &mut verdict);
            }
            Ok((format!("source `{source}`"), verdict))
        }
        Subject::Logs { stderr, evidence } => {
            let observation = observation(stderr, evidence)?;
            let mut verdict = gen_diagnostics::classify(&observation);
            // An inference server's log handed in as `--stderr`: its own signatures know more.
            if matches!(verdict.class, Class::Traceback | Class::Other) {
                let server = gen_diagnostics::classify_server_log(&observation.stderr_tail);
                if server.subtype.is_some_and(Subtype::is_server) {
                    verdict = server;
                }
            }
            Ok((format!("`{}`", stderr.display()), verdict))
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

/// A worker `gen` stopped because its run stopped did not fail: says why the run stopped
/// and what prepares the source (a plain `gen run`, which `--only-failed` is not).
fn stopped_with_the_run(run_dir: &RunDir, verdict: &mut Verdict) {
    let status: Option<serde_json::Value> = atomic::read_json(&run_dir.status()).ok().flatten();
    let field = |name: &str| {
        status
            .as_ref()
            .and_then(|s| s[name].as_str().map(str::to_owned))
    };
    if let Some(reason) = field("stopped_by") {
        verdict.evidence.push(format!("the run stopped: {reason}"));
    }
    let config = field("config").unwrap_or_else(|| "CONFIG".to_owned());
    // `--only-failed` does not pick a source whose worker was stopped, not failed.
    verdict.advice.retain(|a| !a.contains("--only-failed"));
    verdict.advice.push(format!(
        "nothing failed in the preparation: `gen run {config}` prepares the source again once \
         what stopped the run is fixed"
    ));
}

/// The last line of a rendered verdict: what to do next.
fn next_action(verdict: &Verdict) -> String {
    if verdict.subtype == Some(Subtype::Cancelled) {
        "fix what stopped the run (above), then `gen run` again".to_owned()
    } else {
        verdict.next_action()
    }
}

fn moment(flag: &str, text: Option<&str>) -> anyhow::Result<Option<Moment>> {
    text.map(|text| {
        gen_diagnostics::clock::parse_moment(text)
            .with_context(|| format!("`{flag} {text}` is not a time as logs print it"))
    })
    .transpose()
}

/// The verdict as plain text.
#[expect(
    clippy::let_underscore_must_use,
    reason = "writing to a String cannot fail"
)]
pub fn render(title: &str, verdict: &Verdict) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{title}: {}", verdict.full_headline());
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
    let _ = writeln!(out, "  next        {}", next_action(verdict));
    out
}

#[cfg(test)]
mod tests {
    use gen_diagnostics::{Class, Confidence, Subtype, Verdict};

    /// `gen diagnose --observation`'s fields are documented, every one of them.
    #[test]
    fn the_observation_document_names_every_field() {
        let doc = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/operations.md"
        ));
        let doc = &doc[doc.find("## An observation as JSON").expect("the section")..];
        let observation: gen_diagnostics::Observation =
            serde_json::from_str(r#"{"exit": {"code": 1}, "pid": 7}"#).expect("an observation");
        let json = serde_json::to_value(observation).expect("json");
        for field in json.as_object().expect("an object").keys() {
            assert!(
                doc.contains(&format!("`{field}`")),
                "`{field}` is not documented"
            );
        }
    }

    /// The headline says the whole reason, however long; the terminal wraps it.
    #[test]
    fn the_headline_is_not_cut() {
        let stderr = "Traceback (most recent call last):\n  File \"prep.py\", line 3, in <module>\nFileNotFoundError: [Errno 2] No such file or directory: '/data/hf/science/train.parquet'\n";
        let verdict = Verdict {
            error: gen_diagnostics::traceback::parse(stderr),
            ..Verdict::new(Class::Traceback, Some(Subtype::Python), Confidence::High)
        };
        let text = super::render("source `science`", &verdict);
        assert_eq!(
            text.lines().next(),
            Some(
                "source `science`: traceback: FileNotFoundError: [Errno 2] No such file or directory: '/data/hf/science/train.parquet'"
            ),
            "{text}"
        );
    }
}
