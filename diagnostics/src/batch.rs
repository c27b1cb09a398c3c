//! What schedulers, shells and container runtimes say about a process they ran: the evidence a
//! batch log holds when no pid or kernel record is known.
//!
//! Slurm (`slurmstepd: error: Detected 1 oom_kill event in StepId=...`, `srun: error: node:
//! task 0: Out Of Memory`, `*** JOB 12 ON node CANCELLED AT ... DUE TO TIME LIMIT ***`, sacct and
//! seff states), PBS, LSF, the shell (`script.sh: line 12: 45678 Killed   python x.py`, a bare
//! `Killed`, zsh and fish wordings), Kubernetes (`Reason: OOMKilled`, `Exit Code: 137`, liveness
//! kills, evictions), docker (`"OOMKilled": true`), systemd units (`Failed with result
//! 'oom-kill'`, watchdog and stop timeouts) and coreutils `timeout`. Parses only: what the lines
//! mean for a verdict is `classify`'s job.

use serde::{Deserialize, Serialize};

use crate::text::{leading_number, normalize};

/// What a batch line says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchKind {
    /// The scheduler or runtime counted an OOM kill (Slurm oom_kill events, `OUT_OF_MEMORY`,
    /// Kubernetes `OOMKilled`, docker `"OOMKilled": true`, systemd `'oom-kill'`, LSF
    /// `TERM_MEMLIMIT`, PBS `mem ... exceeded limit`).
    MemoryKill,
    /// The scheduler saw the memory limit reached without saying it killed (`Exceeded step
    /// memory limit at some point`).
    MemoryLimitReached,
    /// Killed for a time limit (Slurm `DUE TO TIME LIMIT`, `TIMEOUT`, PBS walltime, LSF
    /// `TERM_RUNLIMIT`).
    TimeLimit,
    /// A watchdog stopped it (coreutils `timeout`, systemd `WatchdogSec=` or stop timeout,
    /// a Kubernetes liveness probe).
    Watchdog,
    /// Cancelled or preempted by a person or the scheduler (`scancel`, `DUE TO PREEMPTION`).
    Cancelled,
    /// The node failed under the job.
    NodeFailure,
    /// A shell or launcher reported the death signal (`line 12: 45678 Killed  python x.py`).
    ShellSignal,
    /// Kubernetes reported the container's exit code (`Exit Code: 137`).
    ContainerExit,
    /// The runtime says its OOM watch saw no kill in the container's cgroup (docker
    /// `"OOMKilled": false`): a kill by the container's own limit is unlikely, a host-wide OOM
    /// is not ruled out.
    NoMemoryKill,
}

/// One batch line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchEvent {
    /// What it says.
    pub kind: BatchKind,
    /// The line, trimmed.
    pub line: String,
    /// The process it names (shell job lines).
    pub pid: Option<u32>,
    /// The signal it reports (shell lines), or the exit code (container lines).
    pub signal: Option<i32>,
    /// The command the shell ran, when named.
    pub command: Option<String>,
    /// Who reported it: `slurm`, `kubernetes`, `shell`, `systemd`, ...
    pub reporter: &'static str,
    /// The memory limit the line names, kB (Slurm's `exceeded memory limit (used > limit)`).
    pub limit_kb: Option<u64>,
}

/// All batch lines in `text`, in order.
pub fn scan(text: &str) -> Vec<BatchEvent> {
    let text = normalize(text);
    let mut events: Vec<BatchEvent> = Vec::new();
    let mut k8s_exit: Option<BatchEvent> = None;
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        for event in classify_line(line) {
            if event.kind == BatchKind::ContainerExit {
                k8s_exit.get_or_insert(event);
                continue;
            }
            if !events
                .iter()
                .any(|e| e.kind == event.kind && e.line == event.line)
            {
                events.push(event);
            }
        }
    }
    events.extend(k8s_exit);
    events
}

fn event(kind: BatchKind, line: &str, reporter: &'static str) -> BatchEvent {
    BatchEvent {
        kind,
        line: line.to_string(),
        pid: None,
        signal: None,
        command: None,
        reporter,
        limit_kb: None,
    }
}

fn classify_line(line: &str) -> Vec<BatchEvent> {
    let mut found = Vec::new();
    let lower = line.to_ascii_lowercase();
    // Slurm
    let oom_events = (lower.contains("oom_kill event") || lower.contains("oom-kill event"))
        && lower.contains("detected");
    // `Exceeded job/step memory limit at some point.`: the limit was reached, a kill not said.
    let at_some_point = lower.contains("memory limit at some point");
    if at_some_point {
        found.push(event(BatchKind::MemoryLimitReached, line, "slurm"));
    } else if oom_events
        || lower.contains("exceeded memory limit") && lower.contains("being killed")
        || lower.contains("exceeded job memory limit")
        || line.contains("OUT_OF_MEMORY")
        || line.contains("Reason=OutOfMemory")
        || (line.starts_with("srun: error:") && line.ends_with(": Out Of Memory"))
    {
        let mut kill = event(BatchKind::MemoryKill, line, "slurm");
        // `exceeded memory limit (52917772 > 20971520)`, in KiB.
        kill.limit_kb = lower
            .split_once("exceeded memory limit (")
            .and_then(|(_, rest)| rest.split_once(" > "))
            .and_then(|(_, limit)| leading_number(limit))
            .map(|(kb, _)| kb);
        found.push(kill);
    }
    if line.contains("CANCELLED AT") && line.contains("***") {
        let kind = if line.contains("DUE TO TIME LIMIT") {
            BatchKind::TimeLimit
        } else if line.contains("DUE TO NODE FAILURE") {
            BatchKind::NodeFailure
        } else {
            BatchKind::Cancelled
        };
        found.push(event(kind, line, "slurm"));
    } else if line.contains("JobState=TIMEOUT")
        || (line.starts_with("State:") && line.contains("TIMEOUT"))
        || line.starts_with("srun: Force Terminated job")
        || sacct_state(line) == Some("TIMEOUT")
    {
        found.push(event(BatchKind::TimeLimit, line, "slurm"));
    } else if sacct_state(line) == Some("CANCELLED") {
        found.push(event(BatchKind::Cancelled, line, "slurm"));
    } else if line.contains("JobState=NODE_FAIL") {
        found.push(event(BatchKind::NodeFailure, line, "slurm"));
    } else if line.contains("JobState=PREEMPTED") || line.contains("DUE TO PREEMPTION") {
        found.push(event(BatchKind::Cancelled, line, "slurm"));
    }
    // PBS / Torque and LSF
    if line.contains("PBS: job killed: mem") || line.contains("TERM_MEMLIMIT") {
        found.push(event(BatchKind::MemoryKill, line, "pbs/lsf"));
    }
    if line.contains("PBS: job killed: walltime") || line.contains("TERM_RUNLIMIT") {
        found.push(event(BatchKind::TimeLimit, line, "pbs/lsf"));
    }
    // Kubernetes and docker
    if let Some(value) = key_value(line, "reason") {
        // kubelet wrote `OOM Killed` before it settled on `OOMKilled`.
        match value.replace(' ', "").as_str() {
            "OOMKilled" | "OOMKilling" => {
                found.push(event(BatchKind::MemoryKill, line, "kubernetes"));
            }
            "Evicted" => found.push(event(BatchKind::Cancelled, line, "kubernetes")),
            _ => {}
        }
    } else if line.contains("\"OOMKilled\": false") || line.contains("OOMKilled:false") {
        found.push(event(BatchKind::NoMemoryKill, line, "docker"));
    } else if line.contains("\"OOMKilled\": true")
        || line.contains("\"OOMKilled\":true")
        || line.contains("OOMKilled:true")
    {
        found.push(event(BatchKind::MemoryKill, line, "docker"));
    } else if line
        .split_whitespace()
        .any(|t| t == "OOMKilled" || t == "OOMKilling")
        && !lower.contains("reason")
    {
        // `kubectl get pods`: `web-7d9  0/1  OOMKilled  4 (57s ago)  2m40s`
        found.push(event(BatchKind::MemoryKill, line, "kubernetes"));
    }
    if let Some(code) = key_value(line, "exit code").or_else(|| key_value(line, "exitcode"))
        && let Some((code, _)) = leading_number(code)
    {
        let mut exit = event(BatchKind::ContainerExit, line, "kubernetes");
        exit.signal = i32::try_from(code).ok();
        found.push(exit);
    }
    if lower.contains("liveness probe") && (lower.contains("restart") || lower.contains("fail")) {
        found.push(event(BatchKind::Watchdog, line, "kubernetes"));
    }
    // systemd units
    if line.contains("Failed with result 'oom-kill'")
        || line.contains("has been killed by the OOM killer")
    {
        found.push(event(BatchKind::MemoryKill, line, "systemd"));
    } else if line.contains("Failed with result 'timeout'")
        || line.contains("Failed with result 'watchdog'")
        || line.contains("Watchdog timeout (limit")
        || line.contains("watchdog timeout!")
        || (line.contains("State 'stop-") && line.contains("timed out"))
    {
        found.push(event(BatchKind::Watchdog, line, "systemd"));
    }
    // coreutils timeout(1) -v, and watchdogs that say what they did.
    if line.starts_with("timeout: sending signal")
        || (lower.contains("watchdog")
            && (lower.contains("kill") || lower.contains("terminat"))
            && !lower.contains("collective operation"))
    {
        found.push(event(BatchKind::Watchdog, line, "watchdog"));
    }
    if let Some(shell) = shell_signal(line) {
        found.push(shell);
    }
    found
}

/// The State column of an `sacct` row (`123456  train  gpu  8  TIMEOUT  0:0`): a state word
/// followed, somewhere after it, by the `exit:signal` column.
fn sacct_state(line: &str) -> Option<&'static str> {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    let exit_column = |t: &&str| {
        t.split_once(':').is_some_and(|(a, b)| {
            !a.is_empty()
                && !b.is_empty()
                && a.chars().all(|c| c.is_ascii_digit())
                && b.chars().all(|c| c.is_ascii_digit())
        })
    };
    let at = tokens.iter().position(exit_column)?;
    ["TIMEOUT", "CANCELLED"]
        .into_iter()
        .find(|state| tokens[..at].iter().any(|t| t == state))
}

/// `Key: value` (describe), `key: value` (YAML), `"key": "value"` (JSON), case-insensitive on
/// the key; the value without quotes and trailing commas.
fn key_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let trimmed = line.trim_start_matches(['-', ' ']);
    let unquoted = trimmed.strip_prefix('"').unwrap_or(trimmed);
    let head = unquoted.get(..key.len())?;
    if !head.eq_ignore_ascii_case(key) {
        return None;
    }
    let rest = &unquoted[key.len()..];
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    let rest = rest.strip_prefix(':')?;
    let value = rest.trim().trim_end_matches(',').trim_matches('"');
    (!value.is_empty()).then_some(value)
}

/// What the shell, srun or a launcher printed about a child's death.
fn shell_signal(line: &str) -> Option<BatchEvent> {
    // bash: `script.sh: line 12: 45678 Killed                  python train.py`, also glued to
    // the text before it (`...bytes failedsh: line 371: 18018 Aborted`).
    let mut search = line;
    while let Some(at) = search.find("line ") {
        let after = &search[at + 5..];
        search = after;
        let Some((_, rest)) = leading_number(after) else {
            continue;
        };
        let Some(rest) = rest.strip_prefix(": ") else {
            continue;
        };
        let Some((pid, rest)) = leading_number(rest.trim_start()) else {
            continue;
        };
        let Some((signal, command)) = signal_word(rest.trim_start()) else {
            continue;
        };
        return Some(BatchEvent {
            pid: u32::try_from(pid).ok(),
            ..shell_event(line, signal, command)
        });
    }
    // bash job control: `[1]+  Killed                  python x.py`
    if let Some(rest) = line.strip_prefix('[')
        && let Some((job, rest)) = rest.split_once(']')
        && job.chars().all(|c| c.is_ascii_digit())
        && let Some((signal, command)) =
            signal_word(rest.trim_start_matches(['+', '-']).trim_start())
    {
        return Some(shell_event(line, signal, command));
    }
    // zsh: `zsh: killed     python x.py`; fish: `fish: Job 1, 'cmd' terminated by signal SIGKILL`.
    if let Some(rest) = line.strip_prefix("zsh: ")
        && let Some((signal, command)) = zsh_signal(rest)
    {
        return Some(shell_event(line, signal, command));
    }
    if line.starts_with("fish: ")
        && let Some(at) = line.find("terminated by signal SIG")
    {
        let name = line[at + "terminated by signal ".len()..]
            .split_whitespace()
            .next()
            .unwrap_or("");
        let signal = signal_number(name)?;
        return Some(shell_event(line, signal, ""));
    }
    // srun: `srun: error: node17: task 0: Killed`, `... tasks 1-3: Segmentation fault`.
    if line.starts_with("srun: error:")
        && let Some((_, last)) = line.rsplit_once(": ")
        && let Some((signal, _)) = signal_word(last)
    {
        return Some(BatchEvent {
            reporter: "slurm",
            ..shell_event(line, signal, "")
        });
    }
    // A foreground job in sh or bash: the line is just the signal's description.
    if let Some((signal, rest)) = signal_word(line)
        && rest.is_empty()
    {
        return Some(shell_event(line, signal, ""));
    }
    None
}

fn shell_event(line: &str, signal: i32, command: &str) -> BatchEvent {
    BatchEvent {
        signal: Some(signal),
        command: non_empty(command),
        ..event(BatchKind::ShellSignal, line, "shell")
    }
}

fn non_empty(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// strsignal(3) wording at the start of `text` (`Killed`, `Segmentation fault (core dumped)`):
/// the signal and the rest (the command).
fn signal_word(text: &str) -> Option<(i32, &str)> {
    const WORDS: [(&str, i32); 14] = [
        ("Killed", 9),
        ("Terminated", 15),
        ("Aborted", 6),
        ("Segmentation fault", 11),
        ("Bus error", 7),
        ("Illegal instruction", 4),
        ("Floating point exception", 8),
        ("Hangup", 1),
        ("Quit", 3),
        ("Trace/breakpoint trap", 5),
        ("CPU time limit exceeded", 24),
        ("File size limit exceeded", 25),
        ("User defined signal 1", 10),
        ("User defined signal 2", 12),
    ];
    let (signal, rest) = WORDS.iter().find_map(|(word, signal)| {
        let rest = text.strip_prefix(word)?;
        let boundary = rest.is_empty() || rest.starts_with([' ', '\t', '.']);
        boundary.then_some((*signal, rest))
    })?;
    let rest = rest.trim_start_matches('.').trim_start();
    let rest = rest.strip_prefix("(core dumped)").unwrap_or(rest);
    Some((signal, rest.trim()))
}

/// The signal named by strsignal(3) wording at the start of `text` (`Killed.` → 9).
pub fn signal_word_number(text: &str) -> Option<i32> {
    signal_word(text.trim_start()).map(|(signal, _)| signal)
}

/// zsh's lowercase wording: `killed`, `segmentation fault`, `abort`, `terminated`, `bus error`.
fn zsh_signal(text: &str) -> Option<(i32, &str)> {
    const WORDS: [(&str, i32); 5] = [
        ("killed", 9),
        ("terminated", 15),
        ("abort", 6),
        ("segmentation fault", 11),
        ("bus error", 7),
    ];
    WORDS.iter().find_map(|(word, signal)| {
        let rest = text.strip_prefix(word)?;
        let rest = rest
            .trim_start()
            .strip_prefix("(core dumped)")
            .unwrap_or(rest);
        Some((*signal, rest.trim()))
    })
}

/// `SIGKILL` → 9.
pub fn signal_number(name: &str) -> Option<i32> {
    let name = name.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let name = name.strip_prefix("SIG").unwrap_or(name);
    Some(match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ILL" => 4,
        "TRAP" => 5,
        "ABRT" => 6,
        "BUS" => 7,
        "FPE" => 8,
        "KILL" => 9,
        "USR1" => 10,
        "SEGV" => 11,
        "USR2" => 12,
        "PIPE" => 13,
        "ALRM" => 14,
        "TERM" => 15,
        "XCPU" => 24,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(BatchKind, Option<i32>)> {
        scan(text).into_iter().map(|e| (e.kind, e.signal)).collect()
    }

    #[test]
    fn shell_wordings() {
        let bash = "/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py --epochs 400";
        let event = &scan(bash)[0];
        assert_eq!(
            (event.kind, event.pid, event.signal),
            (BatchKind::ShellSignal, Some(8156), Some(9))
        );
        assert_eq!(
            event.command.as_deref(),
            Some("python3 main.py --epochs 400")
        );
        assert_eq!(
            kinds("memory allocation of 166442784 bytes failedsh: line 371: 18018 Aborted"),
            vec![(BatchKind::ShellSignal, Some(6))]
        );
        assert_eq!(kinds("Killed"), vec![(BatchKind::ShellSignal, Some(9))]);
        assert_eq!(
            kinds("Segmentation fault (core dumped)"),
            vec![(BatchKind::ShellSignal, Some(11))]
        );
        assert_eq!(
            kinds("zsh: killed     python train.py"),
            vec![(BatchKind::ShellSignal, Some(9))]
        );
        assert_eq!(
            kinds("fish: Job 1, 'npx react-doctor' terminated by signal SIGABRT (Abort)"),
            vec![(BatchKind::ShellSignal, Some(6))]
        );
        assert_eq!(
            kinds("[1]+  Killed                  python x.py"),
            vec![(BatchKind::ShellSignal, Some(9))]
        );
        assert!(scan("Killed process 12 (python3)").is_empty());
        assert!(scan("the job was Killed by a user").is_empty());
    }

    #[test]
    fn kubernetes_describe_yaml_and_json() {
        let describe = "    Last State:     Terminated\n      Reason:       OOMKilled\n      Exit Code:    137\n";
        assert_eq!(
            kinds(describe),
            vec![
                (BatchKind::MemoryKill, None),
                (BatchKind::ContainerExit, Some(137))
            ]
        );
        assert_eq!(
            kinds("        reason: OOMKilled"),
            vec![(BatchKind::MemoryKill, None)]
        );
        assert_eq!(
            kinds("\"reason\": \"OOMKilled\","),
            vec![(BatchKind::MemoryKill, None)]
        );
        assert_eq!(
            kinds("tax-tribunals-base-74464f6b98-2kj6g   0/1   OOMKilled   4 (57s ago)   2m40s"),
            vec![(BatchKind::MemoryKill, None)]
        );
        assert_eq!(
            kinds("\"exitCode\": 137,"),
            vec![(BatchKind::ContainerExit, Some(137))]
        );
    }

    #[test]
    fn slurm_states() {
        assert_eq!(
            kinds(
                "slurmstepd: error: *** JOB 494583 ON nid1 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***"
            ),
            vec![(BatchKind::TimeLimit, None)]
        );
        assert_eq!(
            kinds(
                "slurmstepd: error: Detected 1 oom_kill event in StepId=440575.0. Some of the step tasks have been OOM Killed."
            ),
            vec![(BatchKind::MemoryKill, None)]
        );
        assert_eq!(
            kinds("slurmstepd: error: Exceeded step memory limit at some point."),
            vec![(BatchKind::MemoryLimitReached, None)]
        );
        assert_eq!(
            kinds("srun: error: nid001277: tasks 1-3: Out Of Memory"),
            vec![(BatchKind::MemoryKill, None)]
        );
        assert_eq!(
            kinds("srun: error: nid01934: tasks 2,4-5,7: Terminated"),
            vec![(BatchKind::ShellSignal, Some(15))]
        );
        assert_eq!(
            kinds("4242.batch   batch   gpu-users   8   TIMEOUT   0:15"),
            vec![(BatchKind::TimeLimit, None)]
        );
        assert_eq!(
            kinds("4242         train   gpu   a100   8   CANCELLED by 1000   0:0"),
            vec![(BatchKind::Cancelled, None)]
        );
        assert!(scan("request TIMEOUT while fetching shard 3").is_empty());
    }
}
