//! Every fact `gen run` tells, as a person reads it and as `events.jsonl` keeps it: one
//! snapshot, so a change of wording is seen in review.

use std::path::Path;
use std::time::Duration;

use gen_pipeline::notice::Notice;

#[test]
fn every_notice_reads_and_is_recorded_as_in_the_snapshot() {
    let differences = ["model: `a` → `b`".to_owned()];
    let notices = [
        Notice::RunStarted {
            pid: 41,
            host: "node-3",
        },
        Notice::RunFinished { ending: "finished" },
        Notice::LockHeldPastLease,
        Notice::LockUnsupported {
            error: "cannot lock `runs/x/lock`",
            leased: false,
        },
        Notice::LockUnsupported {
            error: "cannot lock `runs/x/lock`",
            leased: true,
        },
        Notice::AnswersSetAside {
            source: "alpha",
            file: "completions.superseded-7.jsonl.zst",
        },
        Notice::NothingToRestart,
        Notice::NothingToSend,
        Notice::NothingToDo,
        Notice::SettingsChangedSince {
            source: "alpha",
            how: "temperature 0.6 → 0.7",
            config: "cfg.toml",
        },
        Notice::CheckWarned {
            check: "context",
            message: "4096 tokens leave 96 for the prompt",
        },
        Notice::StatusUnwritten {
            error: "failed to write `status.json`: disk full",
        },
        Notice::Resuming {
            done: 120,
            prepared: 400,
        },
        Notice::SourcePhase {
            source: "alpha",
            phase: "pending",
            note: "",
        },
        Notice::SourcePhase {
            source: "alpha",
            phase: "failed",
            note: "OOM killed",
        },
        Notice::InFlightCannotFinish {
            in_flight: 8,
            quiet: Duration::from_secs(2),
        },
        Notice::Interrupted {
            by: "interrupted by Ctrl-C (SIGINT)",
            in_flight: 0,
            grace: Duration::from_secs(30),
        },
        Notice::Interrupted {
            by: "interrupted by Ctrl-C (SIGINT)",
            in_flight: 8,
            grace: Duration::from_secs(30),
        },
        Notice::Stopping {
            reason: "the server refuses the requests",
        },
        Notice::InterruptedWaitingForServer {
            by: "interrupted by SIGTERM",
        },
        Notice::InterruptedWhileServerStarts {
            by: "interrupted by SIGTERM",
        },
        Notice::Preparing { source: "alpha" },
        Notice::WorkerNotStarted {
            source: "alpha",
            note: "could not start the preparation worker: ENOENT",
        },
        Notice::PreparationWarned {
            source: "alpha",
            warning: "2 rows had no prompt",
        },
        Notice::OutputKept {
            source: "alpha",
            note: "exit 139; output kept",
        },
        Notice::Prepared {
            source: "alpha",
            prompts: 3,
            with_tool_turns: 0,
            cut_at_tool_turn: 0,
        },
        Notice::Prepared {
            source: "alpha",
            prompts: 3,
            with_tool_turns: 2,
            cut_at_tool_turn: 1,
        },
        Notice::FirstSampleKept {
            source: "alpha",
            note: "the first sample is kept",
        },
        Notice::SourceFailed {
            source: "alpha",
            note: "OOM killed",
        },
        Notice::EvidenceAsBefore {
            source: "alpha",
            config: "cfg.toml",
        },
        Notice::Evidence {
            line: "Killed process 123 (gen)",
        },
        Notice::WorkerVerdict {
            source: "alpha",
            exit: "killed by SIGKILL",
            headline: "out of memory",
            next_action: "lower `max-parallel-prep`",
        },
        Notice::PreparationKept {
            source: "alpha",
            changes: "`data/a.jsonl` changed",
        },
        Notice::InputsChanged {
            source: "alpha",
            changes: "`data/a.jsonl` changed",
        },
        Notice::PrepareAgain {
            source: "beta",
            note: "preparing again: 2 of its prompts are in earlier sources; sampling others instead",
        },
        Notice::PreparationSetAside {
            source: "alpha",
            message: "`manifest.json` does not decode: moved it aside",
        },
        Notice::DuplicatesAcross {
            source: "beta",
            note: "2 prompts are duplicates of earlier sources",
        },
        Notice::CompletionsRepaired {
            source: "alpha",
            message: "3 damaged bytes set aside",
        },
        Notice::ContextCut {
            source: "alpha",
            first: "p1",
            usage: Some((4000, 96)),
            retry: true,
        },
        Notice::ContextCut {
            source: "alpha",
            first: "p1",
            usage: None,
            retry: false,
        },
        Notice::SourceDone {
            source: "alpha",
            done: 3,
            cuts: "",
        },
        Notice::GenerationFailed {
            source: "alpha",
            note: "2 prompts out of attempts",
        },
        Notice::StartingServer {
            log: Path::new("runs/x/server.log"),
        },
        Notice::ServerServes {
            url: "http://127.0.0.1:8000",
            model: "qwen3-8b",
        },
        Notice::ServerLog {
            log: Path::new("server.log"),
            diagnosis: "CUDA out of memory",
        },
        Notice::OutageGaveUp {
            message: "giving up: no server has answered for 60 s",
        },
        Notice::ServerExited {
            message: "the inference server exited (signal 9)",
        },
        Notice::ServerRestarting {
            exit: "signal 9",
            restart: 1,
            max: 3,
        },
        Notice::ServerRestarted { restarts: 1 },
        Notice::ServerRestartFailed {
            message: "the inference server could not be restarted",
        },
        Notice::ModelMismatch {
            url: "http://127.0.0.1:8000",
            named: "b",
            asked: "a",
        },
        Notice::ToolTurnsRefused {
            url: "http://127.0.0.1:8000",
            reason: "HTTP 400: tools param requires --jinja flag",
        },
        Notice::ServerDown {
            url: "http://127.0.0.1:8000",
            reason: "connection refused",
            all_down: true,
        },
        Notice::ServerDown {
            url: "http://127.0.0.1:8000",
            reason: "connection refused",
            all_down: false,
        },
        Notice::ServerFailing {
            url: "http://127.0.0.1:8000",
            reason: "HTTP 500",
            all_down: true,
        },
        Notice::ServerBack {
            url: "http://127.0.0.1:8000",
            down_for: Duration::from_millis(12_900),
        },
        Notice::WaitingForServer {
            url: "http://127.0.0.1:8000",
            waited: Duration::from_secs(80),
            wait: Duration::from_secs(1800),
            last_error: "connection refused",
        },
        Notice::WaitingForServer {
            url: "http://127.0.0.1:8000",
            waited: Duration::from_secs(3),
            wait: Duration::from_secs(10),
            last_error: "",
        },
        Notice::ConcurrencyAuto {
            url: "http://127.0.0.1:8000",
            limit: 32,
            reason: "the server's running cap",
            endpoints: "/metrics",
            caps: "32 running at most, KV unknown",
            summary: "starting at 32",
        },
        Notice::ConcurrencyChanged {
            url: "http://127.0.0.1:8000",
            from: 32,
            to: 47,
            reason: "KV 60% full",
            summary: "ramped 32 → 47",
        },
        Notice::ConcurrencyFixed {
            url: "http://127.0.0.1:8000",
            limit: 8,
        },
        Notice::RunPinUnreadable {
            error: "EOF while parsing",
        },
        Notice::SettingsChanged {
            differences: &differences,
        },
    ];
    let shown: Vec<String> = notices
        .iter()
        .map(|notice| {
            let event = notice
                .event()
                .map_or_else(String::new, |(kind, source, detail)| {
                    format!("\n    {kind} [{}] {detail}", source.unwrap_or("-"))
                });
            match notice.to_string().as_str() {
                "" => format!("(history only){event}"),
                line => format!("{line}{event}"),
            }
        })
        .collect();
    insta::assert_snapshot!(shown.join("\n"));
}
