//! `gen status RUN_ROOT`: one view of a sharded job — every shard's `status.json` and owner
//! summed into a table per source, then a line per shard (host, owner, state, tok/s) — as
//! text for 80 columns or as `--json`. A job that prepares once (`RUN_ROOT/prepared`) shows
//! that preparation too: a source that failed there is failed for the job, with its verdict.

use std::fmt::Write as _;

use serde::Serialize;

use super::render::{self, STALE_AFTER_MS, cut};
use super::state::{Phase, RunStatus, SourceStatus};
use crate::report::clock;
use crate::scale::owner::{self, OwnerRecord};
use crate::scale::root::{self, RootError, RunRoot};
use crate::store::atomic;

/// Where a shard is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardState {
    /// No task has written its status yet.
    NotStarted,
    /// Its task ended before `gen` wrote the shard's status (e.g. exit 127: a wrong `gen`
    /// binary): see its log.
    Failed,
    Running,
    /// Every source done.
    Done,
    /// Its last run ended with work left (failed sources, a stop, an error): rerun it.
    Stopped,
    /// Its task vanished without ending (heartbeat stale, not finished).
    Lost,
}

impl ShardState {
    fn label(self) -> &'static str {
        match self {
            ShardState::NotStarted => "not started",
            ShardState::Failed => "failed",
            ShardState::Running => "running",
            ShardState::Done => "done",
            ShardState::Stopped => "stopped",
            ShardState::Lost => "lost",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ShardView {
    pub index: u32,
    pub dir: String,
    pub state: ShardState,
    pub host: Option<String>,
    /// The task that owns (or last owned) it.
    pub owner: Option<OwnerRecord>,
    pub prepared: u64,
    pub done: u64,
    pub tokens_per_sec: Option<f64>,
    /// While it runs: its time to finish, as its run estimates it.
    pub eta_secs: Option<u64>,
    pub heartbeat_unix_ms: Option<u64>,
    /// Why its run stopped early, when an error stopped it.
    pub stopped_by: Option<String>,
    /// Its last Slurm task's log (`RUN_ROOT/slurm/%A_%a.out`), when the batch script recorded
    /// how that task ended.
    pub log: Option<String>,
}

/// The job's one preparation, `gen prepare` into `RUN_ROOT/prepared`.
#[derive(Debug, Clone, Serialize)]
pub struct PreparationView {
    pub dir: String,
    /// `running`, `done` (every source prepared), `stopped` (a source failed or it was
    /// stopped: see the sources), `lost` (its process vanished).
    pub state: ShardState,
    pub host: String,
    /// Sources prepared there, of all.
    pub prepared: usize,
    pub sources: usize,
    /// The sources whose preparation failed there.
    pub failed: Vec<String>,
    /// Why it stopped before `gen` could say (its job ended first, e.g. exit 127).
    pub stopped_by: Option<String>,
    /// Its Slurm job's log, when the job recorded how it ended.
    pub log: Option<String>,
}

/// The whole job.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    pub root: String,
    pub config: String,
    pub shards: Vec<ShardView>,
    /// The preparation once for every shard, when the job has one.
    pub preparation: Option<PreparationView>,
    /// Every source summed over the shards that reported it.
    pub sources: Vec<SourceStatus>,
    /// `RUN_ROOT/merged` exists.
    pub merged: bool,
    /// How `gen slurm` submitted the tasks (what `--only-failed` reuses), when it did.
    pub submitted: Option<crate::scale::slurm::SlurmJob>,
    /// Hosts read over ssh (`gen status --remote A --remote B`), not a run root's shards.
    pub fleet: bool,
    /// Output tokens per second of every running shard together.
    pub tokens_per_sec: Option<f64>,
    /// The job's time to finish: its slowest running shard's.
    pub eta_secs: Option<u64>,
}

impl JobView {
    /// The job's rate and time to finish, from its running shards.
    fn with_totals(mut self) -> JobView {
        let running = || {
            self.shards
                .iter()
                .filter(|s| s.state == ShardState::Running)
        };
        let rates: Vec<f64> = running().filter_map(|s| s.tokens_per_sec).collect();
        self.tokens_per_sec = (!rates.is_empty()).then(|| rates.iter().sum());
        self.eta_secs = running().filter_map(|s| s.eta_secs).max();
        self
    }
}

/// The runs of several hosts read over ssh (`--remote` given more than once), as one view: a
/// line per host (its `--remote` target; one that could not be read is `failed`, with why),
/// every source summed over them.
pub fn fleet(hosts: Vec<(String, Result<RunStatus, String>)>, now_ms: u64) -> JobView {
    let statuses: Vec<Option<&RunStatus>> = hosts.iter().map(|(_, s)| s.as_ref().ok()).collect();
    let names = source_names(statuses.iter().flatten().copied());
    let sources = names.iter().map(|n| sum_source(n, &statuses)).collect();
    let shards = hosts
        .iter()
        .enumerate()
        .map(|(index, (target, status))| {
            let ok = status.as_ref().ok();
            let state = match ok {
                Some(status) => shard_state(Some(status), now_ms),
                None => ShardState::Failed,
            };
            let running = ok.filter(|_| state == ShardState::Running);
            ShardView {
                index: index as u32,
                dir: target.clone(),
                state,
                host: ok.map(|s| s.host.clone()),
                owner: None,
                prepared: ok.map_or(0, |s| s.sources.iter().filter_map(|s| s.prepared).sum()),
                done: ok.map_or(0, |s| s.sources.iter().map(|s| s.done).sum()),
                tokens_per_sec: running
                    .map(|s| s.sources.iter().filter_map(|s| s.tokens_per_sec).sum()),
                eta_secs: running.and_then(|s| s.eta_secs),
                heartbeat_unix_ms: ok.map(|s| s.heartbeat_unix_ms),
                stopped_by: match status {
                    Ok(status) => status.stopped_by.clone(),
                    Err(error) => Some(error.clone()),
                },
                log: None,
            }
        })
        .collect();
    JobView {
        root: format!("{} hosts over ssh", hosts.len()),
        config: statuses
            .iter()
            .flatten()
            .map(|s| s.config.clone())
            .next()
            .unwrap_or_default(),
        shards,
        preparation: None,
        sources,
        merged: false,
        submitted: None,
        fleet: true,
        tokens_per_sec: None,
        eta_secs: None,
    }
    .with_totals()
}

fn shard_state(status: Option<&RunStatus>, now_ms: u64) -> ShardState {
    match status {
        None => ShardState::NotStarted,
        Some(_) if root::shard_done(status) => ShardState::Done,
        Some(s) if s.finished => ShardState::Stopped,
        Some(s) if now_ms.saturating_sub(s.heartbeat_unix_ms) > STALE_AFTER_MS => ShardState::Lost,
        Some(_) => ShardState::Running,
    }
}

/// Sums source `name` over the shards; its phase is the furthest-behind shard's, with
/// activity first (a source generating anywhere is generating).
fn sum_source(name: &str, statuses: &[Option<&RunStatus>]) -> SourceStatus {
    let mut sum = SourceStatus::new(name, Phase::Done);
    let mut phases = Vec::new();
    let mut prepared = Some(0u64);
    for status in statuses {
        let Some(source) = status.and_then(|s| s.sources.iter().find(|s| s.name == name)) else {
            phases.push(Phase::Pending);
            prepared = None;
            continue;
        };
        phases.push(source.phase);
        prepared = prepared.zip(source.prepared).map(|(a, b)| a + b);
        sum.done += source.done;
        sum.failed += source.failed;
        sum.rejected += source.rejected;
        sum.duplicates += source.duplicates;
        sum.truncated += source.truncated;
        sum.cut_by_context += source.cut_by_context;
        sum.output_tokens += source.output_tokens;
        if source.phase == Phase::Generating
            && let Some(rate) = source.tokens_per_sec
        {
            *sum.tokens_per_sec.get_or_insert(0.0) += rate;
        }
        if source.phase == Phase::Generating {
            sum.eta_secs = sum.eta_secs.max(source.eta_secs);
        }
        if sum.verdict.is_none() && source.phase == Phase::Failed {
            sum.verdict.clone_from(&source.verdict);
            sum.note.clone_from(&source.note);
        }
    }
    sum.prepared = prepared;
    let order = [
        Phase::Generating,
        Phase::Preparing,
        Phase::Failed,
        Phase::Prepared,
        Phase::Pending,
    ];
    sum.phase = order
        .into_iter()
        .find(|p| phases.contains(p))
        .unwrap_or(Phase::Done);
    sum
}

/// A source no shard has taken yet is where the job's preparation has it: failed there (with
/// its verdict), preparing or prepared.
fn with_preparation(mut sum: SourceStatus, prepared: Option<&RunStatus>) -> SourceStatus {
    let Some(source) = prepared.and_then(|p| p.sources.iter().find(|s| s.name == sum.name)) else {
        return sum;
    };
    if sum.phase == Phase::Pending && source.phase != Phase::Pending {
        sum.phase = source.phase;
        sum.prepared = source.prepared;
        sum.verdict.clone_from(&source.verdict);
        sum.note.clone_from(&source.note);
    }
    sum
}

/// A preparation job that ended before `gen` wrote the preparation's status: failed, with
/// its log and the log's last line.
fn preparation_never_started(root: &RunRoot) -> Option<PreparationView> {
    let ended = crate::scale::slurm::preparation_end(root.root()).filter(|e| e.exit != 0)?;
    let log = crate::scale::slurm::preparation_log(root.root(), &ended.job);
    let last = last_line(&log);
    Some(PreparationView {
        dir: root.prepared().root().display().to_string(),
        state: ShardState::Failed,
        host: ended.host.clone(),
        prepared: 0,
        sources: 0,
        failed: Vec::new(),
        stopped_by: Some(format!(
            "job {} exited with {} on {} before `gen` started{}",
            ended.job,
            ended.exit,
            ended.host,
            last.map_or_else(String::new, |l| format!(": {l}"))
        )),
        log: Some(log.display().to_string()),
    })
}

fn preparation_view(root: &RunRoot, status: &RunStatus, now_ms: u64) -> PreparationView {
    let failed: Vec<String> = status
        .sources
        .iter()
        .filter(|s| s.phase == Phase::Failed)
        .map(|s| s.name.clone())
        .collect();
    let prepared = status
        .sources
        .iter()
        .filter(|s| s.prepared.is_some())
        .count();
    let state = if !status.finished {
        if now_ms.saturating_sub(status.heartbeat_unix_ms) > STALE_AFTER_MS {
            ShardState::Lost
        } else {
            ShardState::Running
        }
    } else if prepared == status.sources.len() {
        ShardState::Done
    } else {
        ShardState::Stopped
    };
    PreparationView {
        dir: root.prepared().root().display().to_string(),
        state,
        host: status.host.clone(),
        prepared,
        sources: status.sources.len(),
        failed,
        stopped_by: None,
        log: None,
    }
}

/// Every source name of `statuses`, each once, in the order first seen.
fn source_names<'a>(statuses: impl Iterator<Item = &'a RunStatus>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for source in statuses.flat_map(|s| &s.sources) {
        if !names.contains(&source.name) {
            names.push(source.name.clone());
        }
    }
    names
}

/// Reads every shard of `root`.
pub fn view(root: &RunRoot, now_ms: u64) -> Result<JobView, RootError> {
    let file = root.read()?.ok_or_else(|| RootError::NotARoot {
        root: root.root().to_path_buf(),
    })?;
    let shards = root.shards()?;
    let statuses: Vec<Option<&RunStatus>> = shards.iter().map(|(_, _, s)| s.as_ref()).collect();
    let prepared: Option<RunStatus> = atomic::read_json(&root.prepared().status()).ok().flatten();
    let names = source_names(statuses.iter().flatten().copied().chain(prepared.as_ref()));
    let sources = names
        .iter()
        .map(|n| with_preparation(sum_source(n, &statuses), prepared.as_ref()))
        .collect();
    let preparation = match prepared {
        Some(status) => Some(preparation_view(root, &status, now_ms)),
        None => preparation_never_started(root),
    };
    let mut views = Vec::new();
    for (index, dir, status) in &shards {
        let owner = owner::read_owner(dir).ok().flatten();
        let mut state = shard_state(status.as_ref(), now_ms);
        let ended = crate::scale::slurm::task_end(root.root(), *index);
        let log = ended.as_ref().map(|e| e.log(root.root()));
        let mut stopped_by = status.as_ref().and_then(|s| s.stopped_by.clone());
        if let Some(ended) = ended.as_ref().filter(|e| e.exit != 0)
            && state == ShardState::NotStarted
        {
            state = ShardState::Failed;
            let last = log.as_deref().and_then(last_line);
            stopped_by = Some(format!(
                "task {}_{} exited with {} on {} before `gen` started{}",
                ended.job,
                ended.task,
                ended.exit,
                ended.host,
                last.map_or_else(String::new, |l| format!(": {l}"))
            ));
        }
        // Once `gen` ran, its owner record names the task whose log has the rest (a lost
        // task's last words: an OOM kill, the time limit).
        let log = match owner.as_ref().and_then(|o| o.job.as_ref()) {
            Some(job) if state != ShardState::Failed => {
                Some(root.slurm_dir().join(format!("{job}.out")))
                    .filter(|path| path.is_file())
                    .or(log)
            }
            _ => log,
        };
        let rate: Option<f64> = status.as_ref().and_then(|s| {
            let rates: Vec<f64> = s
                .sources
                .iter()
                .filter(|s| s.phase == Phase::Generating)
                .filter_map(|s| s.tokens_per_sec)
                .collect();
            (!rates.is_empty()).then(|| rates.iter().sum())
        });
        views.push(ShardView {
            index: *index,
            dir: dir.root().display().to_string(),
            state,
            host: status.as_ref().map(|s| s.host.clone()),
            prepared: status
                .as_ref()
                .map_or(0, |s| s.sources.iter().filter_map(|s| s.prepared).sum()),
            done: status
                .as_ref()
                .map_or(0, |s| s.sources.iter().map(|s| s.done).sum()),
            tokens_per_sec: if state == ShardState::Running {
                rate
            } else {
                None
            },
            eta_secs: status
                .as_ref()
                .filter(|_| state == ShardState::Running)
                .and_then(|s| s.eta_secs),
            heartbeat_unix_ms: status.as_ref().map(|s| s.heartbeat_unix_ms),
            stopped_by,
            log: log.map(|l| l.display().to_string()),
            owner,
        });
    }
    Ok(JobView {
        root: root.root().display().to_string(),
        config: file.config,
        shards: views,
        preparation,
        sources,
        merged: root.merged().is_dir(),
        submitted: crate::scale::slurm::submitted(root.root()),
        fleet: false,
        tokens_per_sec: None,
        eta_secs: None,
    }
    .with_totals())
}

/// The last line of a task's log with text in it (the shell's `gen: No such file or
/// directory`), if the log can be read.
fn last_line(log: &std::path::Path) -> Option<String> {
    let text = fs_err::read_to_string(log).ok()?;
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    // bash says `SCRIPT: line 20: /opt/gen: No such file or directory`; the path of the
    // script's copy in Slurm's spool says nothing.
    let line = line
        .split_once(": line ")
        .and_then(|(_, rest)| rest.split_once(": "))
        .map_or(line, |(_, message)| message);
    Some(line.to_owned())
}

/// Why a shard or the preparation stopped, wrapped whole, not cut: its end often says what
/// to do.
fn stopped_by(out: &mut String, error: &str) {
    render::push_wrapped(out, error, render::WIDTH, "      stopped by: ", "        ");
}

/// The job as text, each line at most 80 columns.
pub fn render(job: &JobView, now_ms: u64) -> String {
    let mut out = String::new();
    for line in header(job) {
        writeln!(out, "{}", cut(&line, 80)).ok();
    }
    if let Some(submitted) = &job.submitted {
        for (i, part) in submitted.describe_parts().iter().enumerate() {
            let label = if i == 0 { "slurm" } else { "" };
            writeln!(out, "{}", cut(&format!("{label:<6} {part}"), 80)).ok();
        }
    }
    if let Some(preparation) = &job.preparation {
        let failed = if preparation.failed.is_empty() {
            String::new()
        } else {
            format!("; failed: {}", preparation.failed.join(", "))
        };
        let line = format!(
            "prep   {} on {}: {} of {} sources prepared once{failed}",
            preparation.state.label(),
            preparation.host,
            preparation.prepared,
            preparation.sources
        );
        if let Some(error) = &preparation.stopped_by {
            let line = format!("prep   failed on {}", preparation.host);
            writeln!(out, "{}", cut(&line, 80)).ok();
            stopped_by(&mut out, error);
        } else {
            writeln!(out, "{}", cut(&line, 80)).ok();
        }
        if let Some(log) = &preparation.log {
            writeln!(out, "{}", cut(&format!("      log: {log}"), 80)).ok();
        }
        if let Some(first) = preparation.failed.first() {
            let line = format!(
                "       why: `gen diagnose {first} --run-dir {}`",
                preparation.dir
            );
            writeln!(out, "{}", cut(&line, 80)).ok();
        }
    }
    writeln!(out).ok();
    out.push_str(&render::source_table(&job.sources, render::WIDTH));
    writeln!(out).ok();
    writeln!(
        out,
        "{:<5} {:<11} {:<14} {:<17} {:>12} {:>6} {:>8}",
        if job.fleet { "#" } else { "SHARD" },
        "STATE",
        "HOST",
        "OWNER",
        "DONE",
        "TOK/S",
        "BEAT"
    )
    .ok();
    for shard in &job.shards {
        writeln!(out, "{}", cut(shard_row(shard, now_ms).trim_end(), 80)).ok();
        if let Some(error) = &shard.stopped_by {
            stopped_by(&mut out, error);
        }
        if let Some(log) = shard
            .log
            .as_ref()
            .filter(|_| matches!(shard.state, ShardState::Failed | ShardState::Lost))
        {
            writeln!(out, "{}", cut(&format!("      log: {log}"), 80)).ok();
        }
    }
    // A failed preparation ended the array's tasks before they started (Slurm cancels a job
    // whose dependency can no longer be met).
    let preparation_stopped = job.preparation.as_ref().is_some_and(|p| {
        matches!(
            p.state,
            ShardState::Stopped | ShardState::Lost | ShardState::Failed
        )
    });
    let rerun: Vec<String> = job
        .shards
        .iter()
        .filter(|s| {
            matches!(
                s.state,
                ShardState::Stopped | ShardState::Lost | ShardState::Failed
            ) || (s.state == ShardState::NotStarted && preparation_stopped)
        })
        .map(|s| s.index.to_string())
        .collect();
    if !rerun.is_empty() {
        // Only a job `gen slurm` submitted can be resubmitted by it; any other launcher starts
        // the shards' tasks again itself.
        let what = if job.fleet {
            format!(
                "on hosts {}: `gen run {}` there",
                rerun.join(","),
                job.config
            )
        } else {
            let how = match job.submitted {
                Some(_) => format!("`gen slurm {} --only-failed --submit`", job.config),
                None if preparation_stopped => format!(
                    "`gen prepare {} --run-dir {}`, then start their tasks again",
                    job.config,
                    std::path::Path::new(&job.root).join("prepared").display()
                ),
                None => format!(
                    "start their tasks again as the job did (`gen run {} --shard auto`); a \
                     Kubernetes Job: `kubectl replace --force -f job.json` (done shards end at \
                     once)",
                    job.config
                ),
            };
            format!("shards {}: {how}", rerun.join(","))
        };
        render::push_wrapped(&mut out, &what, render::WIDTH, "rerun  ", "       ");
    }
    out
}

/// The job's config, root, and how many shards are in each state.
fn header(job: &JobView) -> Vec<String> {
    let count = |state: ShardState| job.shards.iter().filter(|s| s.state == state).count();
    let mut states = Vec::new();
    for state in [
        ShardState::Done,
        ShardState::Running,
        ShardState::Stopped,
        ShardState::Lost,
        ShardState::Failed,
        ShardState::NotStarted,
    ] {
        let n = count(state);
        if n > 0 {
            states.push(format!("{n} {}", state.label()));
        }
    }
    let running = count(ShardState::Running);
    let time = job.tokens_per_sec.map(|rate| {
        let shard = if job.fleet { "host" } else { "shard" };
        let eta = job.eta_secs.map_or_else(String::new, |eta| {
            let eta = clock(std::time::Duration::from_secs(eta));
            format!("ETA {eta} (the slowest {shard}'s), ")
        });
        let plural = if running == 1 { "" } else { "s" };
        format!("time   {eta}{rate:.0} tok/s over {running} running {shard}{plural}")
    });
    if job.fleet {
        let mut lines = vec![
            format!("job    {}", job.config),
            format!("fleet  {}", job.root),
            format!("hosts  {}", states.join(", ")),
        ];
        lines.extend(time);
        return lines;
    }
    let merged = if job.merged {
        "merged into RUN_ROOT/merged".to_owned()
    } else {
        "not merged yet".to_owned()
    };
    let mut lines = vec![
        format!("job    {}", job.config),
        format!("root   {}", job.root),
        format!(
            "shards {} ({}); {merged}",
            job.shards.len(),
            states.join(", ")
        ),
    ];
    lines.extend(time);
    lines
}

/// One shard's line of the shard table (not yet cut to 80 columns).
fn shard_row(shard: &ShardView, now_ms: u64) -> String {
    let owner = shard.owner.as_ref().map_or_else(
        || "-".to_owned(),
        |o| match &o.job {
            Some(job) => format!("{job} e{}", o.epoch),
            None => format!("pid {} e{}", o.pid, o.epoch),
        },
    );
    let done = if matches!(shard.state, ShardState::NotStarted | ShardState::Failed) {
        "-".to_owned()
    } else {
        format!("{}/{}", shard.done, shard.prepared)
    };
    let rate = shard
        .tokens_per_sec
        .map_or_else(|| "-".to_owned(), |r| format!("{r:.0}"));
    let beat = shard.heartbeat_unix_ms.map_or_else(
        || "-".to_owned(),
        |ms| format!("{}s", now_ms.saturating_sub(ms) / 1000),
    );
    format!(
        "{:<5} {:<11} {:<14} {:<17} {:>12} {:>6} {:>8}",
        shard.index,
        shard.state.label(),
        cut(shard.host.as_deref().unwrap_or("-"), 14),
        cut(&owner, 17),
        done,
        rate,
        beat
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::state::VerdictLine;

    const NOW: u64 = 1_800_000_000_000;

    fn status(host: &str, finished: bool, sources: Vec<SourceStatus>) -> RunStatus {
        RunStatus {
            layout: 1,
            config: "/data/jobs/datasets.toml".into(),
            pid: 4242,
            host: host.into(),
            started_unix_ms: NOW - 600_000,
            heartbeat_unix_ms: NOW - 1_000,
            finished,
            servers: Vec::new(),
            sources,
            machine: None,
            stopped_by: None,
            waiting_for: None,
            eta_secs: None,
        }
    }

    fn source(
        name: &str,
        phase: Phase,
        prepared: u64,
        done: u64,
        rate: Option<f64>,
    ) -> SourceStatus {
        SourceStatus {
            prepared: Some(prepared),
            done,
            tokens_per_sec: rate,
            ..SourceStatus::new(name, phase)
        }
    }

    #[test]
    fn a_job_of_three_shards_sums_sources_and_lists_shards() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = RunRoot::new(tmp.path().join("job"));
        root.open_or_create(3, std::path::Path::new("/data/jobs/datasets.toml"))
            .expect("root");
        let write = |index: u32, status: &RunStatus, owner: OwnerRecord| {
            let dir = root.shard(index, 3);
            fs_err::create_dir_all(dir.root()).expect("mkdir");
            atomic::write_json(&dir.status(), status).expect("status");
            atomic::write_json(&dir.root().join("owner.json"), &owner).expect("owner");
        };
        let owner = |job: &str, epoch: u64| OwnerRecord {
            epoch,
            host: "node".into(),
            pid: 1,
            job: Some(job.into()),
            array_task: None,
            started_unix_ms: NOW,
            heartbeat_unix_ms: NOW,
            released_unix_ms: None,
        };
        write(
            0,
            &status(
                "gpu-node-01",
                true,
                vec![
                    source("sharegpt", Phase::Done, 3334, 3334, None),
                    source("wildchat", Phase::Done, 3300, 3300, None),
                ],
            ),
            owner("812_0", 1),
        );
        write(
            1,
            &RunStatus {
                eta_secs: Some(7_500),
                ..status(
                    "gpu-node-02",
                    false,
                    vec![
                        source("sharegpt", Phase::Done, 3333, 3333, None),
                        source("wildchat", Phase::Generating, 3350, 1200, Some(2100.0)),
                    ],
                )
            },
            owner("812_1", 2),
        );
        let view = view(&root, NOW).expect("view");
        // The job's rate and time to finish, for `--json` and the `time` line (issue 29).
        assert_eq!(
            (view.tokens_per_sec, view.eta_secs),
            (Some(2100.0), Some(7_500))
        );
        assert_eq!(view.shards.len(), 3);
        assert_eq!(view.shards[2].state, ShardState::NotStarted);
        let wildchat = &view.sources[1];
        assert_eq!(wildchat.phase, Phase::Generating);
        assert_eq!(wildchat.done, 4500);
        assert_eq!(wildchat.prepared, None, "shard 2 has not counted it yet");
        assert_eq!(view.sources[0].done, 6667);
        let text = super::render(&view, NOW);
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{line}");
        }
        let text = text.replace(&tmp.path().display().to_string(), "[TEMP_DIR]");
        insta::assert_snapshot!(text);
    }

    /// Why a shard stopped is wrapped under its row, whole (it was cut at 80 columns).
    #[test]
    fn a_shard_stopped_by_a_long_error_says_all_of_it() {
        let reason = "the server refused the requests: HTTP 400: This model's maximum context length is 4096 tokens; lower `max-tokens` or leave out the longest prompts";
        let view = JobView {
            root: "/data/runs/job".into(),
            config: "/data/jobs/datasets.toml".into(),
            shards: vec![ShardView {
                index: 0,
                dir: "shard-000".into(),
                state: ShardState::Stopped,
                host: Some("gpu-node-01".into()),
                owner: None,
                prepared: 10,
                done: 4,
                tokens_per_sec: None,
                eta_secs: None,
                heartbeat_unix_ms: Some(NOW - 60_000),
                stopped_by: Some(reason.into()),
                log: None,
            }],
            preparation: None,
            sources: Vec::new(),
            fleet: false,
            merged: false,
            submitted: None,
            tokens_per_sec: None,
            eta_secs: None,
        };
        let text = super::render(&view, NOW);
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        // Not submitted by `gen slurm`: the rerun is the launcher's, said whole.
        assert!(
            text.contains(
                "rerun  shards 0: start their tasks again as the job did (`gen run\n       \
                 /data/jobs/datasets.toml --shard auto`); a Kubernetes Job: `kubectl\n       \
                 replace --force -f job.json` (done shards end at once)"
            ),
            "{text}"
        );
        let said: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.contains("stopped by:"))
            .take_while(|l| l.starts_with("      "))
            .map(str::trim)
            .collect();
        assert_eq!(said.join(" "), format!("stopped by: {reason}"), "{text}");
    }

    /// A job that prepares once: before any task starts, a source that failed there is the
    /// job's failed source (its verdict shown), the preparation has a line, and the shards the
    /// failed preparation kept from starting are to be run again.
    #[test]
    fn a_failed_preparation_fails_its_source_for_the_job() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = RunRoot::new(tmp.path().join("job"));
        root.open_or_create(2, std::path::Path::new("/data/jobs/datasets.toml"))
            .expect("root");
        let failed = SourceStatus {
            verdict: Some(VerdictLine {
                class: "traceback".into(),
                headline: "`org/private` at `main`: HTTP 401 (RepoNotFound)".into(),
                next_action: "set HF_TOKEN to a token that may read it".into(),
            }),
            ..SourceStatus::new("wildchat", Phase::Failed)
        };
        let prepared = root.prepared();
        fs_err::create_dir_all(prepared.root()).expect("mkdir");
        let status = status(
            "login-01",
            true,
            vec![source("sharegpt", Phase::Prepared, 10000, 0, None), failed],
        );
        atomic::write_json(&prepared.status(), &status).expect("status");
        let view = view(&root, NOW).expect("view");
        let preparation = view.preparation.as_ref().expect("preparation");
        assert_eq!(preparation.state, ShardState::Stopped);
        assert_eq!(preparation.failed, ["wildchat"]);
        assert_eq!(view.sources[0].phase, Phase::Prepared);
        assert_eq!(view.sources[1].phase, Phase::Failed);
        assert!(view.sources[1].verdict.is_some());
        let text = super::render(&view, NOW);
        let text = text.replace(&tmp.path().display().to_string(), "[TEMP_DIR]");
        insta::assert_snapshot!(text);
    }

    /// Plain SSH boxes as one fleet (`--remote` given once per host): a box that runs, one whose
    /// source failed (its diagnosis in the table and in `--json`), one that ssh cannot reach.
    #[test]
    fn a_fleet_of_ssh_hosts_reads_as_one_job() {
        let oom = SourceStatus {
            verdict: Some(VerdictLine {
                class: "oom".into(),
                headline: "killed by the kernel OOM killer at 61.2 GiB RSS (cgroup limit 64 GiB)"
                    .into(),
                next_action: "raise `memory-limit` or lower `batch-rows` for this source".into(),
            }),
            ..source("lmsys", Phase::Failed, 0, 0, None)
        };
        let running = RunStatus {
            eta_secs: Some(3_600),
            ..status(
                "gpu-a",
                false,
                vec![source(
                    "sharegpt",
                    Phase::Generating,
                    5000,
                    2100,
                    Some(1800.0),
                )],
            )
        };
        let failed = status(
            "gpu-b",
            true,
            vec![source("sharegpt", Phase::Done, 5000, 5000, None), oom],
        );
        let unreachable = "ssh gpu-c: connect to host gpu-c port 22: Connection refused".to_owned();
        let view = fleet(
            vec![
                ("me@gpu-a:runs/job".into(), Ok(running)),
                ("me@gpu-b:runs/job".into(), Ok(failed)),
                ("me@gpu-c:runs/job".into(), Err(unreachable)),
            ],
            NOW,
        );
        let json = serde_json::to_value(&view).expect("json");
        let lmsys = &json["sources"][1];
        assert_eq!(lmsys["name"], "lmsys", "{json:#}");
        assert_eq!(lmsys["verdict"]["class"], "oom", "{json:#}");
        assert_eq!(json["shards"][2]["state"], "failed", "{json:#}");
        assert_eq!(json["tokens_per_sec"], 1800.0, "{json:#}");
        let text = super::render(&view, NOW);
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn a_task_that_died_before_gen_started_is_failed_with_its_log() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = RunRoot::new(tmp.path().join("job"));
        root.open_or_create(2, std::path::Path::new("/data/jobs/datasets.toml"))
            .expect("root");
        // What the batch script writes after a wrong `--gen-bin`, and what bash logged.
        let slurm = root.slurm_dir();
        fs_err::create_dir_all(slurm.join("tasks")).expect("mkdir");
        fs_err::write(
            slurm.join("tasks/0.json"),
            r#"{"job": "14", "task": 0, "exit": 127, "host": "node-1"}"#,
        )
        .expect("task end");
        fs_err::write(
            slurm.join("14_0.out"),
            "gen slurm: task 0 of job 14 on node-1 (restart 0)\n/var/spool/slurmd/job00014/\
             slurm_script: line 19: /opt/nope/gen: No such file or directory\n",
        )
        .expect("log");
        let view = view(&root, NOW).expect("view");
        let failed = &view.shards[0];
        assert_eq!(failed.state, ShardState::Failed);
        assert_eq!(view.shards[1].state, ShardState::NotStarted);
        let log = slurm.join("14_0.out").display().to_string();
        assert_eq!(failed.log.as_deref(), Some(log.as_str()));
        assert_eq!(
            failed.stopped_by.as_deref(),
            Some(
                "task 14_0 exited with 127 on node-1 before `gen` started: /opt/nope/gen: \
                 No such file or directory"
            )
        );
        let text = super::render(&view, NOW);
        assert!(text.contains("\n0     failed "), "{text}");
        assert!(text.contains(&format!("      log: {log}")), "{text}");
        assert!(text.contains("rerun  shards 0:"), "{text}");

        // A task that vanished after `gen` started: its owner names the log.
        let shard = root.shard(1, 2);
        fs_err::create_dir_all(shard.root()).expect("mkdir");
        let lost = RunStatus {
            heartbeat_unix_ms: NOW - 3_600_000,
            ..status(
                "node-2",
                false,
                vec![source("alpha", Phase::Generating, 60, 10, None)],
            )
        };
        atomic::write_json(&shard.status(), &lost).expect("status");
        let owner = OwnerRecord {
            epoch: 1,
            host: "node-2".into(),
            pid: 7,
            job: Some("15_1".into()),
            array_task: Some(1),
            started_unix_ms: NOW - 3_700_000,
            heartbeat_unix_ms: NOW - 3_600_000,
            released_unix_ms: None,
        };
        atomic::write_json(&shard.root().join("owner.json"), &owner).expect("owner");
        fs_err::write(
            slurm.join("15_1.out"),
            "slurmstepd: error: Detected 1 oom_kill event\n",
        )
        .expect("log");
        let view = super::view(&root, NOW).expect("view");
        assert_eq!(view.shards[1].state, ShardState::Lost);
        let log = slurm.join("15_1.out").display().to_string();
        assert_eq!(view.shards[1].log.as_deref(), Some(log.as_str()));
        let text = super::render(&view, NOW);
        assert!(text.contains(&format!("      log: {log}")), "{text}");
    }
}
