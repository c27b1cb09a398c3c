//! `gen status`: one look at a run — a run directory's `status.json`, a sharded job's shards
//! summed ([`super::job`]), a host's run over ssh or several hosts' as one fleet
//! ([`super::remote`]) — as the table or `--json`, printed once or, with `--watch`, until the
//! run is over.

use std::path::Path;

use anyhow::Context as _;

use super::RunStatus;
use super::job::{JobView, ShardState};
use crate::config::Plan;
use crate::exit;
use crate::scale::root::RunRoot;
use crate::store::{RunDir, atomic};

/// `gen status` without a CONFIG, a RUN_DIR or `--remote`: a usage error.
#[derive(Debug, thiserror::Error)]
#[error("say which run: a CONFIG, a RUN_DIR or `--remote`")]
pub struct NoRunNamed;

/// One look at a run for `gen status`: the text to show, the exit code it calls for, and
/// whether the run is over (finished, stopped, or no longer running), which ends `--watch`.
struct StatusView {
    text: String,
    code: u8,
    over: bool,
}

fn view(target: Option<&Path>, json: bool, remote: &[String]) -> anyhow::Result<StatusView> {
    let now = crate::sys::unix_ms();
    if remote.len() > 1 {
        return fleet_view(remote, json, now);
    }
    let status = match (remote.first(), target) {
        (Some(remote), _) => super::remote::fetch(remote)?,
        (None, Some(target)) if job_root(target).is_some() => {
            let root = job_root(target).expect("checked by the guard");
            return job_status(&super::job::view(&root, now)?, json, now);
        }
        (None, Some(target)) => {
            let run_dir = RunDir::named_by(target)?;
            let path = run_dir.status();
            let status: Option<RunStatus> = atomic::read_json(&path)?;
            status.ok_or_else(|| {
                anyhow::anyhow!(
                    "no run found at `{}` (no `status.json`): start one with `gen run CONFIG`",
                    run_dir.root().display()
                )
            })?
        }
        (None, None) => return Err(NoRunNamed.into()),
    };
    let text = if json {
        serde_json::to_string_pretty(&status).context("status serializes")? + "\n"
    } else {
        super::render::render(&status, now, super::render::width())
    };
    let stale = now.saturating_sub(status.heartbeat_unix_ms) > super::render::STALE_AFTER_MS;
    Ok(StatusView {
        text,
        code: super::render::exit_code(&status, now),
        over: status.finished || stale,
    })
}

/// `gen status --remote A --remote B …`: every host's run over ssh at once (a host that
/// cannot be read is a failed line, not an error), as one view.
fn fleet_view(remote: &[String], json: bool, now: u64) -> anyhow::Result<StatusView> {
    let fetched: Vec<(String, Result<RunStatus, String>)> = std::thread::scope(|scope| {
        let fetching: Vec<_> = remote
            .iter()
            .map(|target| scope.spawn(move || super::remote::fetch(target)))
            .collect();
        remote
            .iter()
            .zip(fetching)
            .map(|(target, fetching)| {
                let status = fetching
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("reading it panicked")))
                    .map_err(|e| format!("{e:#}"));
                (target.clone(), status)
            })
            .collect()
    });
    job_status(&super::job::fleet(fetched, now), json, now)
}

/// A job's (or a fleet's) view as `gen status` prints it: over once nothing runs or prepares,
/// failed when over with a shard not done.
fn job_status(job: &JobView, json: bool, now: u64) -> anyhow::Result<StatusView> {
    let text = if json {
        serde_json::to_string_pretty(job).context("status serializes")? + "\n"
    } else {
        super::job::render(job, now)
    };
    let preparing = job
        .preparation
        .as_ref()
        .is_some_and(|p| p.state == ShardState::Running);
    let over = !preparing && job.shards.iter().all(|s| s.state != ShardState::Running);
    let done = job.shards.iter().all(|s| s.state == ShardState::Done);
    Ok(StatusView {
        text,
        code: exit::ok_if(done || !over),
        over,
    })
}

/// `gen status`: prints the run once, or with `--watch` until it is over; returns the exit
/// code ([`super::render::exit_code`]).
pub fn status(
    target: Option<&Path>,
    json: bool,
    watch: Option<u64>,
    remote: &[String],
) -> anyhow::Result<u8> {
    use std::io::{IsTerminal as _, Write as _};
    let redraw = watch.is_some() && !json && std::io::stdout().is_terminal();
    let mut shown_lines = 0usize;
    loop {
        let view = view(target, json, remote)?;
        let mut stdout = std::io::stdout().lock();
        if redraw && shown_lines > 0 {
            // Back to the first line of the last view, and everything below it erased.
            write!(stdout, "\x1b[{shown_lines}F\x1b[J").ok();
        } else if shown_lines > 0 {
            writeln!(stdout).ok();
        }
        stdout.write_all(view.text.as_bytes()).ok();
        stdout.flush().ok();
        drop(stdout);
        shown_lines = view.text.lines().count();
        match watch {
            Some(every) if !view.over => {
                std::thread::sleep(std::time::Duration::from_secs(every.max(1)));
            }
            _ => return Ok(view.code),
        }
    }
}

/// The run root of a sharded job named by `target` (itself, or a config's run directory).
fn job_root(target: &Path) -> Option<RunRoot> {
    let dir = if target.is_dir() {
        target.to_path_buf()
    } else {
        Plan::load(target).ok()?.run_dir
    };
    RunRoot::is_root(&dir).then(|| RunRoot::new(dir))
}
