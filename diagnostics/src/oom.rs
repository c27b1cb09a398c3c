//! OOM evidence in log records: kernel kill lines of every era, their context, group kills and
//! user-space killers (earlyoom, systemd-oomd, nohang, Ray's memory monitor, kubelet eviction).
//!
//! Parses only; deciding whether a kill belongs to a worker is [`OomKill::matches`] with a
//! [`Target`], and what that means for the verdict is `classify`'s job. The `Killed process`
//! line is the anchor (never the rate-limited header); when it is missing, the `oom-kill:`
//! summary or the `oom_reaper:` line stands in. Its pid is the victim, and its comm is matched
//! lazily up to `) total-vm:` because comm may hold spaces and parentheses.
//!
//! Kernel wording by era: 2.6.32 `Out of memory: Kill process N (comm) score S or sacrifice
//! child` then `Killed process N, UID U, (comm) total-vm:...` (RHEL) or `... (comm) vsz:...`;
//! 3.x–5.0 the same selection line, optionally `Memory cgroup out of memory: `, and `Killed
//! process N (comm) total-vm:...`, with `Task in /X killed as a result of limit of /Y` on
//! cgroup v1; 5.1+ `Out of memory: Killed process ...` / `Memory cgroup out of memory: Killed
//! process ...` after an `oom-kill:constraint=...,pid=N,...` summary.

use serde::{Deserialize, Serialize};

use crate::clock::WallTime;
use crate::kmsg::KernelRecord;
use crate::text::leading_number;

/// Whether the kill was inside a memory cgroup limit or system-wide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomScope {
    /// `Memory cgroup out of memory`, `CONSTRAINT_MEMCG`, or `limit of /Y` with Y ≠ `/`.
    Memcg,
    /// `Out of memory: Killed process`, `CONSTRAINT_NONE`, `global_oom`.
    Global,
    /// A bare kill line whose context was rate-limited or cut from the log.
    #[default]
    Unknown,
}

/// One kernel OOM kill (`Killed process N (comm) ...`) with the context found around it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomKill {
    /// Victim pid (init namespace).
    pub pid: u32,
    /// Victim comm (≤ 15 chars, may contain spaces and parentheses).
    pub comm: String,
    /// CLOCK_MONOTONIC µs of the kill line, when the format carries it.
    pub usec: Option<u64>,
    /// Wall-clock stamp of the kill line, when the format carries it.
    pub wall: Option<WallTime>,
    /// Memcg, global, or not logged.
    pub scope: OomScope,
    /// Cgroup whose limit was hit (`oom_memcg=`, `limit of /Y`).
    pub oom_memcg: Option<String>,
    /// Victim's cgroup (`task_memcg=`, `Task in /X`).
    pub task_memcg: Option<String>,
    /// Cgroup named by a preceding `memory.oom.group` line.
    pub group_cgroup: Option<String>,
    /// The pid the kernel selected when it killed a child of it instead (`Kill process N ...
    /// or sacrifice child` naming another pid than the kill line).
    pub selected_parent: Option<u32>,
    /// `anon-rss` of the victim in kB.
    pub anon_rss_kb: Option<u64>,
    /// `anon-rss + file-rss + shmem-rss` of the victim in kB.
    pub rss_kb: Option<u64>,
    /// The memory cgroup's limit in kB (`memory: usage ..., limit N kB`), when logged.
    pub limit_kb: Option<u64>,
    /// The kill line as logged (or the summary / reaper line standing in for it).
    pub line: String,
    /// The `oom-kill:` summary line for the same pid, when present.
    pub summary: Option<String>,
    /// Pids in the report's task table: for a memcg OOM, the tasks of that cgroup.
    #[serde(default)]
    pub report_pids: Vec<u32>,
}

/// A kill by a user-space OOM killer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserspaceKill {
    /// `earlyoom`, `systemd-oomd`, `nohang`, `ray memory monitor` or `kubelet eviction`.
    pub killer: String,
    /// Victim pid, when the killer names one.
    pub pid: Option<u32>,
    /// Victim cgroup or unit (systemd-oomd).
    pub cgroup: Option<String>,
    /// CLOCK_MONOTONIC µs, when the format carries it.
    pub usec: Option<u64>,
    /// The line as logged.
    pub line: String,
}

/// All OOM evidence found in a log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomEvents {
    /// Kernel kills in log order.
    pub kills: Vec<OomKill>,
    /// Userspace kills in log order.
    pub userspace: Vec<UserspaceKill>,
    /// `N callbacks suppressed` lines of the OOM killer: parts of reports were rate-limited.
    #[serde(default)]
    pub suppressed: Vec<String>,
    /// OOM reports, for logs cut before their kill line.
    #[serde(default)]
    pub reports: Vec<OomReport>,
}

/// The head of an OOM report: what a log cut before its kill line still says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomReport {
    /// `comm invoked oom-killer: ...`, or `Task in /X killed as a result of limit of /Y`.
    pub header: String,
    /// The task that invoked it (`CPU: 0 PID: 9142 Comm: ...`, 2.6's `Pid: 1205, comm: ...`).
    pub invoker: Option<u32>,
    /// The memory cgroup the report is about, when it names one.
    pub memcg: Option<String>,
    /// That cgroup's limit in kB (`memory: usage ..., limit N kB`).
    pub limit_kb: Option<u64>,
}

fn report(header: &str, memcg: Option<String>) -> OomReport {
    OomReport {
        header: header.to_string(),
        invoker: None,
        memcg,
        limit_kb: None,
    }
}

/// Memory cgroup limits at or above this many kB mean "no limit" (the kernel prints
/// `9007199254740988kB`).
const UNLIMITED_KB: u64 = 1 << 50;

/// Extracts OOM kills from parsed records (oldest first).
pub fn find(records: &[KernelRecord]) -> OomEvents {
    let mut events = OomEvents::default();
    // Context lines precede the kill they describe; reset after each kill.
    let mut scope_hint: Option<OomScope> = None;
    let mut selected: Option<u32> = None;
    let mut task_in: Option<(String, String)> = None;
    let mut limit_kb: Option<u64> = None;
    let mut summaries: Vec<(u32, Summary, String, &KernelRecord)> = Vec::new();
    let mut group: Option<String> = None;
    let mut reaped: Vec<(u32, String, &KernelRecord)> = Vec::new();
    let mut nohang_victim: Option<(u32, String)> = None;
    let mut report_pids: Vec<u32> = Vec::new();
    let mut stats_memcg: Option<String> = None;
    for record in records {
        let text = record.text.as_str();
        if text.contains("invoked oom-killer") {
            report_pids.clear();
            stats_memcg = None;
            events.reports.push(report(text, None));
            continue;
        }
        if let Some(last) = events.reports.last_mut()
            && last.invoker.is_none()
            && let Some(pid) = invoking_pid(text)
        {
            last.invoker = Some(pid);
            continue;
        }
        if let Some(pid) = task_table_pid(text) {
            report_pids.push(pid);
            continue;
        }
        if let Some(rest) = text.strip_prefix("oom-kill:") {
            if let Some(summary) = parse_summary(rest) {
                summaries.push((summary.pid, summary, text.to_string(), record));
            }
        } else if let Some(rest) = text.strip_prefix("Task in ") {
            // `Task in /X killed as a result of limit of /Y`
            if let Some((task, limit)) = rest.split_once(" killed as a result of limit of ") {
                let task = task.trim().to_string();
                match events.reports.last_mut() {
                    Some(last) if last.memcg.is_none() => last.memcg = Some(task.clone()),
                    _ => events.reports.push(report(text, Some(task.clone()))),
                }
                task_in = Some((task, limit.trim().to_string()));
            }
        } else if let Some(rest) = text.strip_prefix("Memory cgroup stats for ") {
            // 3.x–4.x print the victim's cgroup here when no `Task in` line names it.
            let path = rest.split(':').next().unwrap_or(rest).trim();
            if task_in.is_none() && path.starts_with('/') {
                stats_memcg = Some(path.to_string());
                if let Some(last) = events.reports.last_mut() {
                    last.memcg.get_or_insert(path.to_string());
                }
            }
        } else if let Some(rest) = text.strip_prefix("Memory limit reached of cgroup ") {
            task_in = Some((rest.trim().to_string(), rest.trim().to_string()));
        } else if let Some(rest) = text.strip_prefix("memory: usage ") {
            // `memory: usage 1048576kB, limit 1048576kB, failcnt 189`
            limit_kb = rest
                .split_once("limit ")
                .and_then(|(_, v)| leading_number(v))
                .map(|(n, _)| n)
                .filter(|&n| n < UNLIMITED_KB);
            if let Some(last) = events.reports.last_mut() {
                last.limit_kb = last.limit_kb.or(limit_kb);
            }
        } else if let Some(rest) = text.strip_prefix("Tasks in ") {
            if let Some((cgroup, _)) = rest.split_once(" are going to be killed") {
                group = Some(cgroup.trim().to_string());
            }
        } else if let Some(at) = text.find("Killed process ") {
            let prefix = &text[..at];
            if let Some(mut kill) = parse_kill_line(&text[at + "Killed process ".len()..]) {
                kill.usec = record.usec;
                kill.wall = record.wall;
                kill.line = text.to_string();
                kill.scope = if prefix.contains("Memory cgroup out of memory") {
                    OomScope::Memcg
                } else if prefix.contains("Out of memory") {
                    OomScope::Global
                } else {
                    scope_hint.unwrap_or(OomScope::Unknown)
                };
                if let Some(index) = summaries.iter().rposition(|(pid, ..)| *pid == kill.pid) {
                    let (_, summary, line, _) = summaries.swap_remove(index);
                    apply_summary(&mut kill, summary, line);
                }
                if let Some((task, limit)) = task_in.take() {
                    if kill.task_memcg.is_none() {
                        kill.task_memcg = Some(task);
                    }
                    if limit != "/" {
                        kill.scope = OomScope::Memcg;
                        kill.oom_memcg.get_or_insert(limit);
                    } else if kill.scope == OomScope::Unknown {
                        kill.scope = OomScope::Global;
                    }
                }
                kill.selected_parent = selected.take().filter(|&p| p != kill.pid);
                kill.limit_kb = limit_kb.take();
                if let Some(path) = stats_memcg.take() {
                    kill.task_memcg.get_or_insert(path);
                    if kill.scope == OomScope::Unknown {
                        kill.scope = OomScope::Memcg;
                    }
                }
                kill.group_cgroup = group.clone();
                kill.report_pids = report_pids.clone();
                scope_hint = None;
                events.kills.push(kill);
            }
        } else if let Some((scope, pid)) = selection_line(text) {
            scope_hint = Some(scope);
            selected = pid;
        } else if text.contains("callbacks suppressed")
            && (text.starts_with("oom_kill_process") || text.contains("oom"))
        {
            events.suppressed.push(text.to_string());
        } else if let Some(rest) = text.strip_prefix("oom_reaper: reaped process ") {
            if let Some((pid, rest)) = leading_number(rest)
                && let Ok(pid) = u32::try_from(pid)
            {
                let comm = rest
                    .trim_start()
                    .strip_prefix('(')
                    .and_then(|r| r.rsplit_once("), now").map(|(c, _)| c))
                    .unwrap_or("")
                    .to_string();
                reaped.push((pid, comm, record));
            }
        } else if let Some(victim) = nohang_victim_line(text) {
            nohang_victim = Some(victim);
        } else if let Some(kill) = parse_userspace(record, &mut nohang_victim) {
            events.userspace.push(kill);
        }
    }
    // A summary whose kill line is missing (cut from the log, or a kernel that printed only
    // the summary for a memcg OOM) still names the victim.
    for (pid, summary, line, record) in summaries {
        if events.kills.iter().any(|k| k.pid == pid) {
            continue;
        }
        let mut kill = bare_kill(pid, summary.task.clone().unwrap_or_default(), record);
        apply_summary(&mut kill, summary, line.clone());
        kill.line = line;
        events.kills.push(kill);
    }
    // The reaper only works on OOM victims: its line proves a kill whose report was lost.
    for (pid, comm, record) in reaped {
        if events.kills.iter().any(|k| k.pid == pid) {
            continue;
        }
        events.kills.push(bare_kill(pid, comm, record));
    }
    events
}

fn bare_kill(pid: u32, comm: String, record: &KernelRecord) -> OomKill {
    OomKill {
        pid,
        comm,
        usec: record.usec,
        wall: record.wall,
        line: record.text.clone(),
        ..OomKill::default()
    }
}

/// The invoking task of an OOM report: `CPU: 0 PID: 9142 Comm: python3 ...` (3.x+) or
/// `Pid: 1205, comm: rsyslogd ...` (2.6).
fn invoking_pid(text: &str) -> Option<u32> {
    let rest = if text.starts_with("CPU: ") {
        &text[text.find(" PID: ")? + " PID: ".len()..]
    } else {
        text.strip_prefix("Pid: ")?
    };
    leading_number(rest).and_then(|(pid, _)| u32::try_from(pid).ok())
}

/// A task table row of an OOM report, `[  22789]     0 22789  ...  python`: its pid.
fn task_table_pid(text: &str) -> Option<u32> {
    let rest = text.strip_prefix('[')?;
    let (inside, after) = rest.split_once(']')?;
    let pid = inside.trim();
    if pid.is_empty() || !pid.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    // uid and tgid follow; a kernel stamp `[  12.5]` has a dot and is not a row.
    let fields = after.split_whitespace().count();
    (fields >= 4).then(|| pid.parse().ok()).flatten()
}

fn apply_summary(kill: &mut OomKill, summary: Summary, line: String) {
    if summary.memcg {
        kill.scope = OomScope::Memcg;
    } else if summary.global && kill.scope == OomScope::Unknown {
        kill.scope = OomScope::Global;
    }
    kill.oom_memcg = summary.oom_memcg;
    kill.task_memcg = summary.task_memcg;
    kill.summary = Some(line);
}

/// The selection line before a kill: `Out of memory: Kill process N (comm) score S or
/// sacrifice child` (2.6.36–5.0), `... kill process N (comm) score S or a child` (2.6.32), or a
/// bare `Memory cgroup out of memory` / `Out of memory` header.
fn selection_line(text: &str) -> Option<(OomScope, Option<u32>)> {
    let scope = if text.starts_with("Memory cgroup out of memory") {
        OomScope::Memcg
    } else if text.starts_with("Out of memory") {
        OomScope::Global
    } else {
        return None;
    };
    let lower = text.to_ascii_lowercase();
    let pid = lower
        .find("kill process ")
        .and_then(|at| leading_number(&text[at + "kill process ".len()..]))
        .and_then(|(pid, _)| u32::try_from(pid).ok());
    Some((scope, pid))
}

/// After `Killed process `: `N (comm) total-vm:...`, 2.6's `N, UID U, (comm) total-vm:...`,
/// or 2.6.32's `N (comm) vsz:...`.
fn parse_kill_line(rest: &str) -> Option<OomKill> {
    let (pid, rest) = leading_number(rest)?;
    let rest = match rest.strip_prefix(", UID ") {
        Some(uid_rest) => leading_number(uid_rest)?.1.strip_prefix(", ")?,
        None => rest.strip_prefix(' ')?,
    };
    // A quote cut right after the pid (`Killed process 62769 (`) still names the victim.
    let rest = rest.strip_prefix('(').unwrap_or(rest);
    let end = [") total-vm:", ") vsz:", "), UID "]
        .iter()
        .filter_map(|marker| rest.find(marker))
        .min()
        .or_else(|| rest.rfind(')'))
        .unwrap_or(rest.len());
    let (comm, tail) = (&rest[..end], rest.get(end + 1..).unwrap_or(""));
    let field = |name: &str| {
        tail.split_once(name)
            .and_then(|(_, v)| leading_number(v))
            .map(|(n, _)| n)
    };
    let anon_rss_kb = field("anon-rss:");
    let parts = [anon_rss_kb, field("file-rss:"), field("shmem-rss:")];
    let rss_kb = parts
        .iter()
        .any(Option::is_some)
        .then(|| parts.iter().flatten().sum());
    Some(OomKill {
        pid: u32::try_from(pid).ok()?,
        comm: comm.to_string(),
        anon_rss_kb,
        rss_kb,
        ..OomKill::default()
    })
}

struct Summary {
    pid: u32,
    task: Option<String>,
    memcg: bool,
    global: bool,
    oom_memcg: Option<String>,
    task_memcg: Option<String>,
}

/// `constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,
/// task_memcg=/a,task=python3,pid=9142,uid=0` (`global_oom` instead of `oom_memcg=`).
fn parse_summary(rest: &str) -> Option<Summary> {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    for token in rest.split(',') {
        match token.split_once('=') {
            Some((key, value)) => pairs.push((key, value.to_string())),
            None if token == "global_oom" => pairs.push(("global_oom", String::new())),
            // A comma inside a value (`mems_allowed=0,2`): glue it back.
            None => {
                if let Some((_, value)) = pairs.last_mut() {
                    value.push(',');
                    value.push_str(token);
                }
            }
        }
    }
    let get = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    };
    let constraint = get("constraint");
    Some(Summary {
        pid: get("pid")?.trim().parse().ok()?,
        task: get("task"),
        memcg: constraint.as_deref() == Some("CONSTRAINT_MEMCG"),
        global: get("global_oom").is_some() || constraint.as_deref() == Some("CONSTRAINT_NONE"),
        oom_memcg: get("oom_memcg"),
        task_memcg: get("task_memcg"),
    })
}

/// nohang names its victim on a line of its own before it acts:
/// `  PID: 12297, Name: tail, badness: 727` (also `name:`).
fn nohang_victim_line(text: &str) -> Option<(u32, String)> {
    let rest = text.trim_start().strip_prefix("PID: ")?;
    let (pid, rest) = leading_number(rest)?;
    let rest = rest.strip_prefix(", ")?;
    let name = rest
        .strip_prefix("Name: ")
        .or_else(|| rest.strip_prefix("name: "))?;
    let name = name.split(',').next().unwrap_or(name).trim();
    Some((u32::try_from(pid).ok()?, name.to_string()))
}

/// User-space killers' kill lines. earlyoom: `sending SIGTERM to process 1234 uid 1000
/// "python3": ...` (1.2+), `killing process 1234 "bash" with signal 15: ...` and `Killing
/// process 'bash' with signal 15, pid: 5874, ...` (1.0–1.3); systemd-oomd: `Killed /x.scope due
/// to memory pressure for ...` / `... due to swap used ...`, `Marked /x for killing due to ...`,
/// `oomd attempting to kill 407 with KILL`, and the unit's `x.scope: systemd-oomd killed 12
/// process(es) in this unit.`; nohang: `Send SIGTERM to the victim` after its victim line; Ray:
/// `Task was killed due to the node running low on memory`; kubelet: `The node was low on
/// resource: memory`.
fn parse_userspace(
    record: &KernelRecord,
    nohang_victim: &mut Option<(u32, String)>,
) -> Option<UserspaceKill> {
    let text = record.text.as_str();
    let kill = |killer: &str, pid: Option<u64>, cgroup: Option<String>| UserspaceKill {
        killer: killer.to_string(),
        pid: pid.and_then(|p| u32::try_from(p).ok()),
        cgroup,
        usec: record.usec,
        line: text.trim().to_string(),
    };
    let lower = text.to_ascii_lowercase();
    // earlyoom always reports the victim's badness or oom_score and VmRSS.
    let earlyoom = record.source.as_deref() == Some("earlyoom")
        || lower.contains("badness")
        || lower.contains("oom_score")
        || lower.contains("vmrss");
    for lead in [
        "sending sigterm to process ",
        "sending sigkill to process ",
        "killing process ",
    ] {
        if earlyoom
            && let Some(at) = lower.find(lead)
            && let Some((pid, _)) = leading_number(&text[at + lead.len()..])
        {
            return Some(kill("earlyoom", Some(pid), None));
        }
    }
    if earlyoom
        && lower.contains("killing process '")
        && let Some(at) = text.find("pid: ")
    {
        let pid = leading_number(&text[at + 5..]).map(|(p, _)| p);
        return Some(kill("earlyoom", pid, None));
    }
    if let Some(rest) = text
        .strip_prefix("Killed /")
        .or_else(|| text.strip_prefix("Marked /"))
    {
        let end = rest
            .find(" due to ")
            .or_else(|| rest.find(" for killing"))?;
        let path = rest[..end].trim_end_matches(" for killing");
        return Some(kill("systemd-oomd", None, Some(format!("/{path}"))));
    }
    if let Some(rest) = text.strip_prefix("oomd attempting to kill ") {
        let pid = leading_number(rest).map(|(p, _)| p);
        return Some(kill("systemd-oomd", pid, None));
    }
    if let Some(at) = text.find(": systemd-oomd killed ") {
        let unit = text[..at].trim();
        return Some(kill("systemd-oomd", None, Some(unit.to_string())));
    }
    let nohang_acts = (text.contains("Send SIG") && text.contains("to the victim"))
        || (nohang_victim.is_some() && text.trim_start().starts_with("Run the command: kill"));
    if nohang_acts {
        let victim = nohang_victim.take();
        let mut found = kill("nohang", victim.as_ref().map(|(p, _)| u64::from(*p)), None);
        if let Some((pid, name)) = victim {
            found.line = format!("{} (victim pid {pid}, {name})", found.line);
        }
        return Some(found);
    }
    if text.contains("killed due to the node running low on memory")
        || text.contains("Ray killed this worker")
    {
        let pid = text
            .find("pid=")
            .and_then(|at| leading_number(&text[at + 4..]))
            .map(|(p, _)| p);
        return Some(kill("ray memory monitor", pid, None));
    }
    if text.contains("The node was low on resource: memory") {
        return Some(kill("kubelet eviction", None, None));
    }
    None
}

/// What a kill must match to belong to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Target<'a> {
    /// The worker pid; 0 when unknown.
    pub pid: u32,
    /// Its descendants (and pids named by symptom lines).
    pub descendants: &'a [u32],
    /// The worker's comm, when known.
    pub comm: Option<&'a str>,
    /// The worker's leaf cgroup, when known.
    pub cgroup: Option<&'a str>,
    /// Accepted CLOCK_MONOTONIC window in µs, [spawn − 1 s, exit + 5 s]; an unknown end is
    /// 0 or `u64::MAX`.
    pub window: Option<(u64, u64)>,
    /// Accepted wall-clock window, from `--started-at` / `--exited-at` (either may be missing).
    pub wall_window: (Option<WallTime>, Option<WallTime>),
    /// A moment the worker itself was still alive (a stamped line it printed), so a kill of
    /// its pid logged well before it was another process's.
    pub alive_at: Option<WallTime>,
    /// The worker ended by this exit code (not 137, 128 + SIGKILL): the OOM killer kills with
    /// SIGKILL, so a kill of the worker's own pid is another process's that had it earlier.
    pub exit_code: Option<i32>,
}

/// Slack on wall-clock comparisons: stamps have one-second resolution and clocks drift.
const WALL_SLACK_SECS: f64 = 2.0;

/// Why a kill did or did not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillMatch {
    /// Belongs to the worker; `timed` says whether a time window confirmed it.
    Yes {
        /// A window confirmed it (false: no stamps comparable with the worker's lifetime).
        timed: bool,
    },
    /// Does not belong; the reason is quoted in evidence when the pid was ours.
    No(String),
}

impl OomKill {
    /// Joins on pid-or-descendant (or cgroup), then rejects the kill only on evidence that it
    /// belongs to another process: another comm or cgroup, stamps that put it outside the
    /// worker's lifetime (pid reuse), or a worker that exited with a code although the kill
    /// names its own pid (a killed process dies by SIGKILL). Without comparable stamps the log given is taken to cover
    /// the worker's lifetime, as `gen diagnose --kernel-log` documents.
    pub fn matches(&self, target: &Target<'_>) -> KillMatch {
        let in_cgroup = target.cgroup.is_some_and(|worker| {
            self.task_memcg
                .as_deref()
                .is_some_and(|c| same_or_below(c, worker))
        });
        let is_worker = target.pid != 0 && self.pid == target.pid;
        let child_of_worker = target.pid != 0 && self.selected_parent == Some(target.pid);
        // A memcg report lists only that cgroup's tasks: the worker among them means the
        // victim shared its memory cgroup (a child, or the pool it started).
        let cotenant = target.pid != 0
            && self.scope == OomScope::Memcg
            && self.report_pids.contains(&target.pid);
        let ours = is_worker
            || target.descendants.contains(&self.pid)
            || child_of_worker
            || cotenant
            || in_cgroup;
        if !ours {
            return KillMatch::No(format!(
                "pid {} is not the worker or a descendant",
                self.pid
            ));
        }
        if is_worker && let Some(code) = target.exit_code {
            return KillMatch::No(format!(
                "the worker exited with exit code {code}, but the OOM killer kills with SIGKILL: \
                 this kill is of an earlier process that had pid {} (pid reuse)",
                self.pid
            ));
        }
        if is_worker && let Some(comm) = target.comm {
            let expected: String = comm.chars().take(15).collect();
            if !self.comm.is_empty() && self.comm != expected {
                return KillMatch::No(format!("comm `{}` is not `{expected}`", self.comm));
            }
        }
        if let Some(worker) = target.cgroup
            && self.of_another_cgroup(worker)
        {
            let named = self.named_cgroups().join(", ");
            return KillMatch::No(format!("cgroup {named} is not `{worker}`"));
        }
        let mut timed = false;
        if let (Some(usec), Some((start, end))) = (self.usec, target.window) {
            if usec < start || usec > end {
                let bound = |b: u64| {
                    if b == u64::MAX {
                        "…".to_string()
                    } else {
                        format!("{:.3}", b as f64 / 1e6)
                    }
                };
                return KillMatch::No(format!(
                    "logged at {:.3} s, outside the worker's window {}–{} s",
                    usec as f64 / 1e6,
                    bound(start),
                    bound(end)
                ));
            }
            timed = true;
        }
        if let Some(wall) = &self.wall {
            let (started, exited) = &target.wall_window;
            if let Some(started) = started
                && let Some(before) = started.seconds_since(wall)
            {
                if before > WALL_SLACK_SECS {
                    return KillMatch::No(format!(
                        "logged at {wall}, before the worker started ({started})"
                    ));
                }
                timed = true;
            }
            if let Some(exited) = exited
                && let Some(after) = wall.seconds_since(exited)
            {
                if after > WALL_SLACK_SECS + 3.0 {
                    return KillMatch::No(format!(
                        "logged at {wall}, after the worker exited ({exited})"
                    ));
                }
                timed = true;
            }
            if is_worker
                && let Some(alive) = &target.alive_at
                && alive
                    .seconds_since(wall)
                    .is_some_and(|d| d > WALL_SLACK_SECS)
            {
                return KillMatch::No(format!(
                    "logged at {wall}, but the worker still printed at {alive}"
                ));
            }
        }
        KillMatch::Yes { timed }
    }

    /// The memory cgroups the kill names: the victim's, the one whose limit was hit, the group.
    fn named_cgroups(&self) -> Vec<&str> {
        [&self.task_memcg, &self.oom_memcg, &self.group_cgroup]
            .into_iter()
            .filter_map(|c| c.as_deref())
            .collect()
    }

    /// The kill names memory cgroups, none of them `worker`'s or related to it.
    pub(crate) fn of_another_cgroup(&self, worker: &str) -> bool {
        let named = self.named_cgroups();
        let related = |c: &&str| same_or_below(c, worker) || same_or_below(worker, c);
        !named.is_empty() && !named.iter().any(related)
    }
}

impl UserspaceKill {
    /// Same join rules as kernel kills: pid or cgroup (or unit), within the window when stamped.
    pub fn matches(&self, target: &Target<'_>) -> bool {
        let by_pid = self.pid.is_some_and(|p| {
            (target.pid != 0 && p == target.pid) || target.descendants.contains(&p)
        });
        let by_cgroup = match (&self.cgroup, target.cgroup) {
            (Some(killed), Some(worker)) if killed.starts_with('/') => {
                same_or_below(worker, killed)
            }
            // systemd names the unit, not the path: `x.scope` matches `/a/x.scope/b`.
            (Some(unit), Some(worker)) => worker.split('/').any(|part| part == unit),
            _ => false,
        };
        let in_window = match (self.usec, target.window) {
            (Some(usec), Some((start, end))) => (start..=end).contains(&usec),
            _ => true,
        };
        (by_pid || by_cgroup) && in_window
    }
}

/// `path` is `ancestor` or below it, comparing by suffix so container-relative paths match
/// host paths (`/kubepods/pod1/gen/w` and `/gen/w` are the same cgroup).
pub fn same_or_below(path: &str, ancestor: &str) -> bool {
    let path = path.trim_end_matches('/');
    let mut prefixes = path.match_indices('/').skip(1).map(|(end, _)| &path[..end]);
    prefixes.any(|prefix| same_cgroup(prefix, ancestor)) || same_cgroup(path, ancestor)
}

/// Equal, or one is a component-aligned suffix of the other (paths start with `/`).
fn same_cgroup(a: &str, b: &str) -> bool {
    let a = a.trim_end_matches('/');
    let b = b.trim_end_matches('/');
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    short.len() > 1 && short.starts_with('/') && long.ends_with(short)
}
