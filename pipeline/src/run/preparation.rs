//! Preparation workers: a queue of sources to prepare, at most `max-parallel-prep` worker
//! processes at once (each supervised by [`supervisor::supervise`]), and what a worker's end
//! means for its source — prepared, failed with a verdict, or interrupted — recorded in its
//! `worker.json`. The event loop owns a [`Preparation`] and calls it between events.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::Context as _;
use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use super::kernel_log::KernelLogFollower;
use super::observe;
use super::sources::{Sources, enter};
use super::supervisor::{self, WorkerCommand};
use crate::notice::Notice;
use crate::prep;
use crate::report::RunReporter;
use crate::status::state::{Phase, VerdictLine};
use crate::store::manifest::{PrepManifest, read_manifest};
use crate::store::worker::{
    self, ExitRecord, WorkerFile, WorkerReport, custom_output_complete, record_worker,
    settle_first_sample,
};
use gen_diagnostics::Verdict;

/// How a preparation worker ended, with the index of its source.
pub(super) type Ended = (usize, std::io::Result<WorkerReport>);

/// The preparation workers of a run: queued, then running.
pub(super) struct Preparation {
    queue: VecDeque<usize>,
    running: JoinSet<Ended>,
    /// Stops every worker (a signal, or the server refused the run).
    cancel: CancellationToken,
    /// Followed from before the first worker starts, so no OOM report scrolls away unread.
    kernel_log: Option<KernelLogFollower>,
}

impl Preparation {
    pub(super) fn new(queue: Vec<usize>, cancel: CancellationToken) -> Preparation {
        Preparation {
            kernel_log: (!queue.is_empty()).then(KernelLogFollower::start),
            queue: queue.into(),
            running: JoinSet::new(),
            cancel,
        }
    }

    /// No worker runs and none waits.
    pub(super) fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.running.is_empty()
    }

    pub(super) fn enqueue(&mut self, sources: impl IntoIterator<Item = usize>) {
        self.queue.extend(sources);
    }

    /// No worker starts any more; `kill`: the running ones are stopped too.
    pub(super) fn stop(&mut self, kill: bool) {
        self.queue.clear();
        if kill {
            self.cancel.cancel();
        }
    }

    /// The next worker to end (pending forever while none runs, for `select!`).
    pub(super) async fn next_ended(&mut self) -> Result<Ended, JoinError> {
        match self.running.join_next().await {
            Some(ended) => ended,
            None => std::future::pending().await,
        }
    }

    /// Starts queued workers up to `max-parallel-prep`.
    pub(super) fn start(
        &mut self,
        sources: &mut Sources<'_>,
        reporter: &RunReporter,
    ) -> anyhow::Result<()> {
        sources.fenced()?;
        let exe =
            std::env::current_exe().context("cannot find the `gen` executable to start workers")?;
        while self.running.len() < sources.plan().max_parallel_prep.get()
            && let Some(i) = self.queue.pop_front()
        {
            let command = worker_command(sources, i, &exe)?;
            sources[i].status.note.clear();
            enter(&mut sources[i].status, Phase::Preparing, reporter);
            reporter.notice(Notice::Preparing {
                source: &command.name,
            });
            let cancel = self.cancel.clone();
            self.running
                .spawn(async move { (i, supervisor::supervise(&command, cancel).await) });
        }
        Ok(())
    }

    /// Records how source `i`'s worker ended; `interrupted`: a signal stopped the run, so a
    /// worker that did not finish leaves its source pending, not failed.
    pub(super) async fn finish(
        &self,
        sources: &mut Sources<'_>,
        (i, report): Ended,
        interrupted: bool,
        reporter: &RunReporter,
    ) -> anyhow::Result<()> {
        let name = sources[i].status.name.clone();
        let dir = sources.run_dir().source(&name);
        let restored = settle_first_sample(&dir)?;
        let report = match report {
            Ok(report) => report,
            Err(e) => {
                let state = &mut sources[i].status;
                state.note = format!("could not start the preparation worker: {e}");
                enter(state, Phase::Failed, reporter);
                let (source, note) = (&name, &state.note);
                reporter.notice(Notice::WorkerNotStarted { source, note });
                return Ok(());
            }
        };
        let import_error = import_custom_output(sources, &name).await?;
        let manifest = read_manifest(sources.run_dir(), &name)?;
        sources[i].peak_rss_bytes = Some(report.peak_rss_bytes);
        let verdict = if report.exit.success() && manifest.is_some() {
            None
        } else {
            let spec = sources.plan().source(&name);
            let input = spec.map(|s| (s.spec.clone(), sources.plan().base_dir.clone()));
            Some(self.verdict(&report, &dir, manifest.is_some(), input).await)
        };
        // The last worker's verdict, before this one replaces it.
        let said_before = WorkerFile::read(&dir)
            .and_then(|w| w.verdict)
            .is_some_and(|before| {
                verdict
                    .as_ref()
                    .is_some_and(|v| v.full_headline() == before.full_headline())
            });
        record_worker(&dir, &report, verdict.as_ref(), manifest.is_some())?;
        sources[i].status.verdict = verdict.as_ref().map(VerdictLine::from);
        if let Some(verdict) = &verdict {
            reporter.notice(Notice::WorkerVerdict {
                source: &name,
                exit: &report.exit.describe(),
                headline: &verdict.headline(),
                next_action: &verdict.next_action(),
            });
        }
        let ending = Ending {
            report: &report,
            verdict: verdict.as_ref(),
            import_error,
            restored,
            said_before,
        };
        match manifest {
            Some(manifest) => prepared(sources, i, &manifest, &ending, reporter),
            None => not_prepared(sources, i, &dir, &ending, interrupted, reporter)?,
        }
        Ok(())
    }

    /// The diagnostics verdict on a worker that did not simply succeed.
    async fn verdict(
        &self,
        report: &WorkerReport,
        dir: &crate::store::layout::SourceDir,
        outputs_complete: bool,
        input: Option<(gen_sources::SourceSpec, std::path::PathBuf)>,
    ) -> Verdict {
        if matches!(
            report.exit,
            ExitRecord::Signal {
                signal: libc::SIGKILL,
                ..
            }
        ) {
            // The kill line is logged before the signal lands, but the reader thread may lag.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let kernel_log = self.kernel_log.as_ref().map_or_else(
            || gen_diagnostics::KernelLog::Unavailable {
                reason: "not followed".into(),
            },
            KernelLogFollower::snapshot,
        );
        let kernel_log = match kernel_log {
            gen_diagnostics::KernelLog::Unavailable { reason } => {
                super::kernel_log::fallback_snapshot(reason).await
            }
            text => text,
        };
        let mut observation =
            observe::observation(report, &dir.prep_log(), kernel_log, outputs_complete);
        let verdict = observe::verdict(&observation);
        // How much a row needs sizes the advice after an OOM; the scan reads the input, so
        // only then.
        let Some((spec, base_dir)) = input.filter(|_| verdict.class == gen_diagnostics::Class::Oom)
        else {
            return verdict;
        };
        let largest =
            tokio::task::spawn_blocking(move || observe::largest_input_row(&spec, &base_dir))
                .await
                .ok()
                .flatten();
        if largest.is_none() {
            return verdict;
        }
        observation.largest_row_bytes = largest;
        observe::verdict(&observation)
    }
}

/// How a worker ended, as [`prepared`] and [`not_prepared`] report it.
struct Ending<'a> {
    report: &'a WorkerReport,
    verdict: Option<&'a Verdict>,
    /// A custom worker's complete output could not be imported.
    import_error: Option<String>,
    /// A preparation again failed and the first sample was put back.
    restored: bool,
    /// The last run's worker of this source failed the same way: its evidence was said then.
    said_before: bool,
}

/// The command that prepares source `i`: `gen prep` (this executable), or the source's
/// custom command with its output paths in its environment.
fn worker_command(
    sources: &mut Sources<'_>,
    i: usize,
    exe: &std::path::Path,
) -> anyhow::Result<WorkerCommand> {
    let (plan, run_dir) = (sources.plan(), sources.run_dir().clone());
    let name = sources[i].status.name.clone();
    let dir = run_dir.source(&name);
    let log = dir.prep_log();
    if log.exists() {
        fs_err::rename(&log, dir.root().join("prep.previous.log"))?;
    }
    let worker = &plan.sources[i].worker;
    let mut args = crate::cli::worker_args(&plan.config_path, &name, run_dir.root());
    // Written by this run for this preparation only: a later first preparation (after
    // a crash, or changed settings) starts from the full sample and is checked again.
    // The first sample is set aside, not deleted, until the new one is complete.
    if let Some(hashes) = sources[i].exclude.take() {
        worker::write_hashes(&dir.earlier_hashes(), hashes)?;
        // Manifest first: from then on the source is unprepared, whatever stops here.
        fs_err::rename(dir.manifest(), dir.first_manifest())?;
        fs_err::rename(dir.prompts(), dir.first_prompts())?;
        args.insert(
            args.len() - 2,
            crate::cli::option("--exclude-hashes", &dir.earlier_hashes()),
        );
    }
    let mut command = WorkerCommand {
        program: exe.to_path_buf(),
        args,
        envs: Vec::new(),
        log,
        memory_limit: worker.memory_limit,
        stall_timeout: Some(plan.stall_timeout),
        progress_files: vec![dir.prompts().with_extension("zst.tmp"), dir.prompts()],
        name: name.clone(),
    };
    if let Some(custom) = &worker.command {
        let (output, done) = worker::custom_output(&run_dir, &name);
        for stale in [&output, &done] {
            if stale.exists() {
                fs_err::remove_file(stale)?;
            }
        }
        let env = |var: &str| std::env::var(var).ok();
        let expanded = custom
            .iter()
            .map(|a| crate::config::launch::expand(a, 0, &env))
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("source `{name}`: bad `command`"))?;
        command.program = expanded[0].clone().into();
        command.args = expanded[1..].iter().map(Into::into).collect();
        command.envs = vec![
            ("GEN_OUTPUT".into(), output.display().to_string()),
            ("GEN_DONE".into(), done.display().to_string()),
            ("GEN_SOURCE".into(), name.clone()),
        ];
        command.progress_files = vec![output];
    }
    Ok(command)
}

/// Imports a custom worker's output when it is complete; the import's error, if any.
async fn import_custom_output(sources: &Sources<'_>, name: &str) -> anyhow::Result<Option<String>> {
    let (plan, run_dir) = (sources.plan(), sources.run_dir());
    let Some(worker) = plan.source(name).map(|s| &s.worker) else {
        return Ok(None);
    };
    if worker.command.is_none() || !custom_output_complete(run_dir, name, worker.expected) {
        return Ok(None);
    }
    let (plan, run_dir, source) = (plan.clone(), run_dir.clone(), name.to_owned());
    let imported =
        tokio::task::spawn_blocking(move || prep::import_custom_output(&plan, &run_dir, &source))
            .await
            .context("the import of a custom worker's output panicked")?;
    Ok(imported.err().map(|e| format!("{e:#}")))
}

/// Source `i`'s worker wrote its manifest: the source is prepared.
fn prepared(
    sources: &mut Sources<'_>,
    i: usize,
    manifest: &PrepManifest,
    ending: &Ending,
    reporter: &RunReporter,
) {
    let state = &mut sources[i].status;
    let name = state.name.clone();
    state.prepared = Some(manifest.prompts * u64::from(state.samples));
    state.with_tool_turns = manifest.counters.with_tool_turns;
    let source = name.as_str();
    if let Some(warning) = manifest.warning() {
        reporter.notice(Notice::PreparationWarned {
            source,
            warning: &warning,
        });
        state.warnings.push(warning);
    }
    if !ending.report.exit.success() {
        // The manifest is written last: the output is complete, the crash came after it.
        let headline = ending
            .verdict
            .map_or_else(|| ending.report.exit.describe(), Verdict::full_headline);
        state.note = format!("{headline}; output kept");
        reporter.notice(Notice::OutputKept {
            source,
            note: &state.note,
        });
    }
    reporter.notice(Notice::Prepared {
        source,
        prompts: manifest.prompts,
        with_tool_turns: manifest.counters.with_tool_turns,
        cut_at_tool_turn: manifest.counters.cut_at_tool_turn,
    });
    if ending.restored {
        state.note = format!(
            "preparing again without earlier sources' prompts failed ({}); the first sample \
             is kept and its prompts in earlier sources are settled as duplicates",
            ending.report.exit.describe()
        );
        reporter.notice(Notice::FirstSampleKept {
            source,
            note: &state.note,
        });
    }
    enter(state, Phase::Prepared, reporter);
}

/// Source `i`'s worker ended without a manifest: failed, or pending when `interrupted`.
fn not_prepared(
    sources: &mut Sources<'_>,
    i: usize,
    dir: &crate::store::layout::SourceDir,
    ending: &Ending,
    interrupted: bool,
    reporter: &RunReporter,
) -> anyhow::Result<()> {
    // A worker that was killed leaves its partial prompts file: space for nothing.
    let partial = dir.prompts().with_extension("zst.tmp");
    if partial.exists() {
        fs_err::remove_file(&partial)?;
    }
    let config = sources.plan().config_path.display().to_string();
    let state = &mut sources[i].status;
    if interrupted {
        state.note = "interrupted during preparation".into();
        enter(state, Phase::Pending, reporter);
        return Ok(());
    }
    let disk_full = disk_full(&dir.prep_log());
    state.note = match ending.verdict {
        _ if disk_full.is_some() => format!(
            "the disk is full: {}; free space, then run `gen run --only-failed`",
            disk_full.unwrap_or_default()
        ),
        _ if ending.import_error.is_some() => format!(
            "the worker's output could not be read: {}",
            ending.import_error.clone().unwrap_or_default()
        ),
        Some(v) if v.class != gen_diagnostics::Class::Success => {
            format!("{}; {}", v.full_headline(), v.next_action())
        }
        _ => format!(
            "preparation ended ({}) without completing its output: {}",
            ending.report.exit.describe(),
            last_line(&dir.prep_log())
        ),
    };
    enter(state, Phase::Failed, reporter);
    let (source, note) = (&state.name, &state.note);
    reporter.notice(Notice::SourceFailed { source, note });
    match ending.verdict {
        Some(v) if ending.said_before && !v.evidence.is_empty() => {
            let config = &config;
            reporter.notice(Notice::EvidenceAsBefore { source, config });
        }
        Some(v) => {
            for line in &v.evidence {
                reporter.notice(Notice::Evidence { line });
            }
        }
        None => {}
    }
    Ok(())
}

/// The error a worker's log ends with when it ran out of disk space (`ENOSPC`): its `error:`
/// line (the file it could not write) and the cause.
fn disk_full(log: &std::path::Path) -> Option<String> {
    const ENOSPC: &str = "No space left on device (os error 28)";
    let text = fs_err::read(log)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .ok()?;
    if !text.contains(ENOSPC) {
        return None;
    }
    let error = text.lines().rev().find_map(|l| l.strip_prefix("error: "))?;
    Some(format!("{error}: {ENOSPC}"))
}

fn last_line(path: &std::path::Path) -> String {
    let text = fs_err::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
        .trim()
        .to_owned()
}
