//! What `gen run` tells, one [`Notice`] variant per fact. A notice renders the line a person
//! reads (`Display`) and, for the facts the run's history keeps, its `events.jsonl` entry
//! ([`Notice::event`]). The part of the run that finds a fact out emits it where it happens to
//! the run's [`crate::report::RunReporter`], which alone prints and records; nothing else
//! words a fact. A leaf: it names nothing else of the crate.

use std::fmt;
use std::path::Path;
use std::time::Duration;

/// One fact a run tells. Borrowed: made where the fact happens, rendered at once. A `note` is
/// the source's note as `gen status` shows it; a `message` is text that goes elsewhere too (a
/// source's warnings, the run's error).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Notice<'a> {
    // The run.
    /// The run started (history only).
    RunStarted {
        pid: u32,
        host: &'a str,
    },
    /// The run ended, and how (history only).
    RunFinished {
        ending: &'a str,
    },
    /// The run directory's lock is held by the owner this task took the shard from.
    LockHeldPastLease,
    /// The run directory's file system cannot lock; `leased`: the shard's lease guards it.
    LockUnsupported {
        error: &'a str,
        leased: bool,
    },
    /// `--regenerate`: the source's answers were moved to `file`.
    AnswersSetAside {
        source: &'a str,
        file: &'a str,
    },
    NothingToRestart,
    /// Every prompt is completed or settled, some by the server's refusal.
    NothingToSend,
    NothingToDo,
    /// A finished source's settings changed since its answers were generated (`how`).
    SettingsChangedSince {
        source: &'a str,
        how: &'a str,
        config: &'a str,
    },
    /// A check of the plan or the server warns (`check`: what it checked).
    CheckWarned {
        check: &'a str,
        message: &'a str,
    },
    /// `status.json` could not be written.
    StatusUnwritten {
        error: &'a str,
    },
    Resuming {
        done: u64,
        prepared: u64,
    },
    /// A source's phase changed (history only).
    SourcePhase {
        source: &'a str,
        phase: &'a str,
        note: &'a str,
    },
    /// Stopping after a signal, the server gone too: what is in flight cannot finish.
    InFlightCannotFinish {
        in_flight: u32,
        quiet: Duration,
    },
    /// The first signal (`by`): requests in flight get `grace`.
    Interrupted {
        by: &'a str,
        in_flight: u32,
        grace: Duration,
    },
    /// The run stops for `reason` (a refusal, another model).
    Stopping {
        reason: &'a str,
    },
    InterruptedWaitingForServer {
        by: &'a str,
    },
    InterruptedWhileServerStarts {
        by: &'a str,
    },

    // The sources.
    Preparing {
        source: &'a str,
    },
    WorkerNotStarted {
        source: &'a str,
        note: &'a str,
    },
    /// A prepared source's manifest carries a warning.
    PreparationWarned {
        source: &'a str,
        warning: &'a str,
    },
    /// The worker crashed after its manifest: the output stands.
    OutputKept {
        source: &'a str,
        note: &'a str,
    },
    Prepared {
        source: &'a str,
        prompts: u64,
        /// Prompts that keep tool turns (calls and results).
        with_tool_turns: u64,
        /// Rows cut before a tool turn (a result that answers no call, or any with
        /// `tool-turns = "cut"`).
        cut_at_tool_turn: u64,
    },
    /// Preparing again without earlier sources' prompts failed: the first sample stands.
    FirstSampleKept {
        source: &'a str,
        note: &'a str,
    },
    SourceFailed {
        source: &'a str,
        note: &'a str,
    },
    /// A failed worker's evidence, said in the last run already.
    EvidenceAsBefore {
        source: &'a str,
        config: &'a str,
    },
    /// One line of a failed worker's evidence.
    Evidence {
        line: &'a str,
    },
    /// How a worker ended, when it did not succeed (history only).
    WorkerVerdict {
        source: &'a str,
        exit: &'a str,
        headline: &'a str,
        next_action: &'a str,
    },
    /// A source's inputs changed since it was prepared; kept (`--keep-preparation`).
    PreparationKept {
        source: &'a str,
        changes: &'a str,
    },
    /// A source's inputs changed and nothing of it was generated: prepared again.
    InputsChanged {
        source: &'a str,
        changes: &'a str,
    },
    /// A source is prepared again without earlier sources' prompts.
    PrepareAgain {
        source: &'a str,
        note: &'a str,
    },
    /// A source's damaged preparation file was set aside: prepared again.
    PreparationSetAside {
        source: &'a str,
        message: &'a str,
    },
    /// A source's prompts that another source answers, settled as duplicates.
    DuplicatesAcross {
        source: &'a str,
        note: &'a str,
    },
    /// A source's stored completions or refusals were put right.
    CompletionsRepaired {
        source: &'a str,
        message: &'a str,
    },
    /// The first answer of a source the server's context cut (`usage`: prompt and answer
    /// tokens; `retry`: `on-length = "retry"` does not apply to it).
    ContextCut {
        source: &'a str,
        first: &'a str,
        usage: Option<(u64, u64)>,
        retry: bool,
    },
    /// `cuts`: the cut answers among them, told apart.
    SourceDone {
        source: &'a str,
        done: u64,
        cuts: &'a str,
    },
    GenerationFailed {
        source: &'a str,
        note: &'a str,
    },

    // The servers.
    /// The launched server starts, its output going to `log`.
    StartingServer {
        log: &'a Path,
    },
    ServerServes {
        url: &'a str,
        model: &'a str,
    },
    /// Every server is down; the configured server log says why.
    ServerLog {
        log: &'a Path,
        diagnosis: &'a str,
    },
    /// `max-outage-secs` passed with every server down.
    OutageGaveUp {
        message: &'a str,
    },
    /// The launched server exited (`message`: how, and its log's last lines).
    ServerExited {
        message: &'a str,
    },
    ServerRestarting {
        exit: &'a str,
        restart: u32,
        max: u32,
    },
    ServerRestarted {
        restarts: u32,
    },
    /// History only: the run's error says it.
    ServerRestartFailed {
        message: &'a str,
    },
    /// A server's answers name another model (`named`) than the run asks for.
    ModelMismatch {
        url: &'a str,
        named: &'a str,
        asked: &'a str,
    },
    /// A server refused a conversation's tool turns (`tool` messages, assistant `tool_calls`,
    /// `tools`): from now on conversations end before their first tool turn.
    ToolTurnsRefused {
        url: &'a str,
        reason: &'a str,
    },
    /// A server was found down; `all_down`: no other is up.
    ServerDown {
        url: &'a str,
        reason: &'a str,
        all_down: bool,
    },
    /// A server fails every request although `/health` answers.
    ServerFailing {
        url: &'a str,
        reason: &'a str,
        all_down: bool,
    },
    ServerBack {
        url: &'a str,
        down_for: Duration,
    },
    /// Still waiting for a server to answer (`waited` of `wait`).
    WaitingForServer {
        url: &'a str,
        waited: Duration,
        wait: Duration,
        last_error: &'a str,
    },
    /// `concurrency = "auto"` starts at `limit`, read from the server's `endpoints`.
    ConcurrencyAuto {
        url: &'a str,
        limit: u32,
        reason: &'a str,
        endpoints: &'a str,
        caps: &'a str,
        summary: &'a str,
    },
    ConcurrencyChanged {
        url: &'a str,
        from: u32,
        to: u32,
        reason: &'a str,
        summary: &'a str,
    },
    /// History only.
    ConcurrencyFixed {
        url: &'a str,
        limit: usize,
    },
    /// `run.json` does not decode; `--allow-config-change` records it again.
    RunPinUnreadable {
        error: &'a str,
    },
    /// `--allow-config-change` goes on with these differences.
    SettingsChanged {
        differences: &'a [String],
    },
}

impl<'a> Notice<'a> {
    /// Its `events.jsonl` entry — kind, source and detail — when the history keeps it.
    pub fn event(&self) -> Option<(&'static str, Option<&'a str>, String)> {
        use Notice as N;
        let stopped = |url: &str, reason: &str, all_down: bool| {
            let then = match all_down {
                true => "dispatch paused",
                false => "its requests go to the others",
            };
            format!("{url} stopped answering ({reason}); {then}")
        };
        Some(match *self {
            N::RunStarted { pid, host } => ("run_started", None, format!("pid {pid} on {host}")),
            N::RunFinished { ending } => ("run_finished", None, ending.to_owned()),
            N::SourcePhase {
                source,
                phase,
                note,
            } => match note {
                "" => ("source_phase", Some(source), phase.to_owned()),
                note => ("source_phase", Some(source), format!("{phase}: {note}")),
            },
            N::WorkerVerdict {
                source,
                exit,
                headline,
                next_action,
            } => {
                let detail = format!("{exit}: {headline}; {next_action}");
                ("worker_verdict", Some(source), detail)
            }
            N::PreparationKept { source, changes } => {
                let detail = format!(
                    "changed since it was prepared: {changes}; going on with the prompts \
                     prepared before (--keep-preparation)"
                );
                ("inputs_changed", Some(source), detail)
            }
            N::InputsChanged { source, changes } => {
                let detail = format!("inputs changed ({changes}); preparing again");
                ("inputs_changed", Some(source), detail)
            }
            N::PrepareAgain { source, note: text }
            | N::PreparationSetAside {
                source,
                message: text,
            } => ("prepare_again", Some(source), text.to_owned()),
            N::DuplicatesAcross { source, note } => {
                ("duplicates_across", Some(source), note.to_owned())
            }
            N::CompletionsRepaired { source, message } => {
                ("completions_repaired", Some(source), message.to_owned())
            }
            N::ContextCut {
                source,
                first,
                usage,
                retry,
            } => (
                "context_cut",
                Some(source),
                context_cut(first, usage, retry),
            ),
            N::OutageGaveUp { message } => ("outage_give_up", None, message.to_owned()),
            N::ServerRestarting { exit, restart, max } => {
                let detail = format!("{exit}; restart {restart} of {max}");
                ("server_restart", None, detail)
            }
            N::ServerRestartFailed { message } => {
                ("server_restart_failed", None, message.to_owned())
            }
            N::ModelMismatch { url, named, asked } => {
                let detail = format!("server {url} answers as model `{named}`, not `{asked}`");
                ("model_mismatch", None, detail)
            }
            N::ToolTurnsRefused { url, reason } => (
                "tool_turns_refused",
                None,
                format!("server {url} refuses tool turns: {reason}"),
            ),
            N::ServerDown {
                url,
                reason,
                all_down,
            } => ("server_down", None, stopped(url, reason, all_down)),
            N::ServerFailing {
                url,
                reason,
                all_down,
            } => {
                let why = format!("{reason} (its /health answers, but requests fail)");
                ("server_down", None, stopped(url, &why, all_down))
            }
            N::ServerBack { url, .. } => (
                "server_up",
                None,
                format!("{url} answers again; dispatch resumed"),
            ),
            N::ConcurrencyAuto {
                url,
                limit,
                summary,
                ..
            }
            | N::ConcurrencyChanged {
                url,
                to: limit,
                summary,
                ..
            } => ("concurrency", None, format!("{url} {limit} ({summary})")),
            N::ConcurrencyFixed { url, limit } => {
                ("concurrency", None, format!("{url} {limit} (fixed)"))
            }
            _ => return None,
        })
    }
}

/// The line a person reads; none for a fact only the history keeps.
impl fmt::Display for Notice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Notice as N;
        match *self {
            N::LockHeldPastLease => f.write_str(
                "gen: the run directory's lock is still held by the owner this task took the \
                 shard over from past its lease (fenced: it stops before its next write); \
                 going on under the lease",
            ),
            N::LockUnsupported { error, leased } => {
                let guard = match leased {
                    true => "the shard's lease guards it",
                    false => "make sure no other `gen run` uses this run directory",
                };
                write!(
                    f,
                    "gen: warning: {error}: going on without the lock; {guard}"
                )
            }
            N::AnswersSetAside { source, file } => write!(
                f,
                "gen: `{source}`: its answers are set aside in `{file}`; generating it again \
                 under its current settings"
            ),
            N::NothingToRestart => {
                f.write_str("gen: no source failed in the last run: nothing to restart")
            }
            N::NothingToSend => {
                f.write_str("gen: nothing to send: every prompt is completed or settled")
            }
            N::NothingToDo => {
                f.write_str("gen: nothing to do: every prompt of every source is already completed")
            }
            N::SettingsChangedSince {
                source,
                how,
                config,
            } => write!(
                f,
                "gen: note: `{source}`'s settings changed since its answers were generated \
                 ({how}); they stand as they are — `gen run {config} --regenerate {source}` \
                 generates it again under the new settings"
            ),
            N::CheckWarned { check, message } => write!(f, "gen: warning: {check}: {message}"),
            N::StatusUnwritten { error } => {
                write!(f, "gen: warning: {error}; retrying on every change")
            }
            N::Resuming { done, prepared } => write!(
                f,
                "gen: resuming: {done} of {prepared} prepared prompts already completed"
            ),
            N::InFlightCannotFinish { in_flight, quiet } => write!(
                f,
                "gen: the server stopped too (no `/health`, no token for {} s): the {in_flight} \
                 in flight cannot finish, stopping now; they are asked again on the next run",
                quiet.as_secs()
            ),
            N::Interrupted {
                by, in_flight: 0, ..
            } => {
                write!(
                    f,
                    "gen: {by}: no new requests; nothing in flight, stopping now"
                )
            }
            N::Interrupted {
                by,
                in_flight,
                grace,
            } => write!(
                f,
                "gen: {by}: no new requests; {in_flight} in flight get {} s to finish (a second \
                 Ctrl-C stops at once)",
                grace.as_secs()
            ),
            N::Stopping { reason } => write!(f, "gen: stopping: {reason}"),
            N::InterruptedWaitingForServer { by } => {
                write!(f, "gen: {by} while waiting for the inference server")
            }
            N::InterruptedWhileServerStarts { by } => {
                write!(f, "gen: {by} while the inference server started")
            }
            N::Preparing { source } => write!(f, "gen: preparing `{source}`"),
            N::WorkerNotStarted { source, note }
            | N::OutputKept { source, note }
            | N::FirstSampleKept { source, note }
            | N::PrepareAgain { source, note }
            | N::DuplicatesAcross { source, note }
            | N::GenerationFailed { source, note } => write!(f, "gen: `{source}`: {note}"),
            N::PreparationWarned { source, warning } => {
                write!(f, "gen: warning: `{source}`: {warning}")
            }
            N::Prepared {
                source,
                prompts,
                with_tool_turns,
                cut_at_tool_turn,
            } => {
                write!(f, "gen: prepared `{source}`: {prompts} prompts")?;
                match (with_tool_turns, cut_at_tool_turn) {
                    (0, 0) => Ok(()),
                    (kept, 0) => write!(f, " ({kept} with tool turns, kept)"),
                    (0, cut) => {
                        write!(f, " ({cut} cut before a tool turn)")
                    }
                    (kept, cut) => write!(
                        f,
                        " ({kept} with tool turns, kept; {cut} cut before a tool turn)"
                    ),
                }
            }
            N::SourceFailed { source, note } => write!(f, "gen: `{source}` failed: {note}"),
            N::EvidenceAsBefore { source, config } => write!(
                f,
                "gen:   as in the last run; `gen diagnose {source} --config {config}` shows the \
                 evidence"
            ),
            N::Evidence { line } => write!(f, "gen:   evidence: {line}"),
            N::PreparationKept { source, .. } => {
                let detail = self
                    .event()
                    .map(|(_, _, detail)| detail)
                    .unwrap_or_default();
                write!(f, "gen: `{source}`: {detail}")
            }
            N::InputsChanged { source, changes } => write!(
                f,
                "gen: `{source}`: changed since it was prepared: {changes}; nothing of it was \
                 generated yet: preparing it again"
            ),
            N::PreparationSetAside { source, message }
            | N::CompletionsRepaired { source, message } => {
                write!(f, "gen: WARNING: `{source}`: {message}")
            }
            N::ContextCut {
                source,
                first,
                usage,
                retry,
            } => write!(
                f,
                "gen: `{source}`: {}; shorter prompts (`max-prompt-tokens`) or a longer context \
                 on the server avoid them",
                context_cut(first, usage, retry)
            ),
            N::SourceDone { source, done, cuts } => {
                write!(f, "gen: `{source}` done: {done} completions{cuts}")
            }
            N::StartingServer { log } => write!(
                f,
                "gen: starting the inference server (log: {})",
                log.display()
            ),
            N::ServerServes { url, model } => write!(f, "gen: server {url} serves `{model}`"),
            N::ServerLog { log, diagnosis } => {
                write!(f, "gen: server log `{}`:\n{diagnosis}", log.display())
            }
            N::OutageGaveUp { message } | N::ServerExited { message } => {
                write!(f, "gen: {message}")
            }
            N::ServerRestarting { restart, max, .. } => write!(
                f,
                "gen: restarting the inference server ({restart} of {max}); requests wait for it"
            ),
            N::ServerRestarted { restarts } => {
                write!(f, "gen: the inference server is back (restart {restarts})")
            }
            N::ModelMismatch { url, named, asked } => write!(
                f,
                "gen: WARNING: server {url} answers as model `{named}`, not `{asked}` (the model \
                 `/v1/models` lists and the run asks for): a router or gateway names the model \
                 otherwise, or sends the requests to another model; the answers are stored under \
                 `{named}`; stop the run if that is not the model you want"
            ),
            N::ToolTurnsRefused { url, reason } => write!(
                f,
                "gen: WARNING: server {url} refuses tool turns ({reason}): from now on, \
                 conversations with tool turns end before their first one, as if the dataset \
                 had none, and are counted apart (llama-server needs `--jinja` for them)"
            ),
            N::ServerDown { url, reason, .. } => write!(
                f,
                "gen: server {url} is down ({reason}); pausing until it answers again"
            ),
            N::ServerFailing { url, reason, .. } => write!(
                f,
                "gen: server {url} fails every request although /health answers ({reason}); \
                 pausing, and probing it with a small request until it answers one"
            ),
            N::ServerBack { url, down_for } => write!(
                f,
                "gen: server {url} is back after {} s; resuming",
                down_for.as_secs()
            ),
            N::WaitingForServer {
                url,
                waited,
                wait,
                last_error,
            } => {
                write!(
                    f,
                    "gen: waiting for {url}: {} of {}",
                    minutes_seconds(waited),
                    minutes_seconds(wait)
                )?;
                if !last_error.is_empty() {
                    write!(f, ", {last_error}")?;
                }
                f.write_str("; a server loading its model takes minutes")
            }
            N::ConcurrencyAuto {
                reason,
                endpoints,
                caps,
                ..
            } => {
                write!(
                    f,
                    "gen: concurrency auto: {reason}; read from {endpoints} ({caps})"
                )
            }
            N::ConcurrencyChanged {
                from, to, reason, ..
            } => {
                write!(f, "gen: concurrency {from} → {to} ({reason})")
            }
            N::RunPinUnreadable { error } => write!(
                f,
                "gen: warning: `run.json` does not decode ({error}); recording this run's \
                 settings in it again"
            ),
            N::SettingsChanged { differences } => write!(
                f,
                "gen: continuing with changed settings (--allow-config-change):\n{}",
                differences.join("\n")
            ),
            N::RunStarted { .. }
            | N::RunFinished { .. }
            | N::SourcePhase { .. }
            | N::WorkerVerdict { .. }
            | N::ServerRestartFailed { .. }
            | N::ConcurrencyFixed { .. } => Ok(()),
        }
    }
}

/// What a context cut is, said and recorded alike.
fn context_cut(first: &str, usage: Option<(u64, u64)>, retry: bool) -> String {
    let tokens = usage.map_or_else(String::new, |(prompt, answer)| {
        format!(": {prompt} prompt + {answer} answer tokens")
    });
    let retry = match retry {
        true => {
            "; not asked again with a larger budget (`on-length = \"retry\"`), which cannot help"
        }
        false => "",
    };
    format!(
        "answers cut by the server's context before `max-tokens` (first: prompt `{first}`{tokens}): \
         kept and counted apart from `max-tokens` cuts{retry}"
    )
}

/// `1m20s`, `45s` (a wait; `report::clock` is `h:mm:ss` for run times).
pub fn minutes_seconds(elapsed: Duration) -> String {
    let secs = elapsed.as_secs();
    match secs {
        0..=59 => format!("{secs}s"),
        _ => format!("{}m{:02}s", secs / 60, secs % 60),
    }
}
