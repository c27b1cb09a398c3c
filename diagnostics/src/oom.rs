//! OOM evidence in log records: kernel kill lines of every era, their context, group kills and
//! userspace killers (earlyoom, systemd-oomd).
//!
//! Parses only; deciding whether a kill belongs to a worker is [`OomKill::matches`] with a
//! [`Target`], and what that means for the verdict is `classify`'s job. The `Killed process`
//! line is the anchor (never the rate-limited header), its pid is the victim, and its comm is
//! matched lazily up to `) total-vm:` because comm may hold spaces and parentheses.

use serde::{Deserialize, Serialize};

use crate::kmsg::KernelRecord;
use crate::text::leading_number;

/// Whether the kill was inside a memory cgroup limit or system-wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OomScope {
    /// `Memory cgroup out of memory`, `CONSTRAINT_MEMCG`, or `limit of /Y` with Y ≠ `/`.
    Memcg,
    /// `Out of memory: Killed process`, `CONSTRAINT_NONE`, `global_oom`.
    Global,
}

/// One kernel OOM kill (`Killed process N (comm) ...`) with the context found before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomKill {
    /// Victim pid (init namespace).
    pub pid: u32,
    /// Victim comm (≤ 15 chars, may contain spaces and parentheses).
    pub comm: String,
    /// CLOCK_MONOTONIC µs of the kill line, when the format carries it.
    pub usec: Option<u64>,
    /// Memcg or global.
    pub scope: OomScope,
    /// Cgroup whose limit was hit (`oom_memcg=`, `limit of /Y`).
    pub oom_memcg: Option<String>,
    /// Victim's cgroup (`task_memcg=`, `Task in /X`).
    pub task_memcg: Option<String>,
    /// Cgroup named by a preceding `memory.oom.group` line.
    pub group_cgroup: Option<String>,
    /// `anon-rss` of the victim in kB.
    pub anon_rss_kb: Option<u64>,
    /// The kill line as logged.
    pub line: String,
    /// The `oom-kill:` summary line for the same pid, when present.
    pub summary: Option<String>,
}

/// A kill by a userspace OOM killer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserspaceKill {
    /// `earlyoom` or `systemd-oomd`.
    pub killer: String,
    /// Victim pid (earlyoom).
    pub pid: Option<u32>,
    /// Victim cgroup (systemd-oomd).
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
}

/// Extracts OOM kills from parsed records.
pub fn find(records: &[KernelRecord]) -> OomEvents {
    let mut events = OomEvents::default();
    // Context lines precede the kill they describe; reset after each kill.
    let mut scope_hint: Option<OomScope> = None;
    let mut task_in: Option<(String, String)> = None;
    let mut summaries: Vec<(u32, Summary, String)> = Vec::new();
    let mut group: Option<String> = None;
    for record in records {
        let text = record.text.as_str();
        if let Some(rest) = text.strip_prefix("oom-kill:") {
            if let Some(summary) = parse_summary(rest) {
                summaries.push((summary.pid, summary, text.to_string()));
            }
        } else if let Some(rest) = text.strip_prefix("Task in ") {
            // `Task in /X killed as a result of limit of /Y`
            if let Some((task, limit)) = rest.split_once(" killed as a result of limit of ") {
                task_in = Some((task.trim().to_string(), limit.trim().to_string()));
            }
        } else if let Some(rest) = text.strip_prefix("Tasks in ") {
            if let Some((cgroup, _)) = rest.split_once(" are going to be killed") {
                group = Some(cgroup.trim().to_string());
            }
        } else if let Some(at) = text.find("Killed process ") {
            let prefix = &text[..at];
            if let Some(mut kill) = parse_kill_line(&text[at + "Killed process ".len()..]) {
                kill.usec = record.usec;
                kill.line = text.to_string();
                let memcg_prefix = prefix.contains("Memory cgroup out of memory");
                let global_prefix = prefix.contains("Out of memory");
                kill.scope = if memcg_prefix {
                    OomScope::Memcg
                } else if global_prefix {
                    OomScope::Global
                } else {
                    scope_hint.unwrap_or(OomScope::Global)
                };
                if let Some(index) = summaries.iter().rposition(|(pid, _, _)| *pid == kill.pid) {
                    let (_, summary, line) = summaries.swap_remove(index);
                    if summary.memcg {
                        kill.scope = OomScope::Memcg;
                    }
                    kill.oom_memcg = summary.oom_memcg;
                    kill.task_memcg = summary.task_memcg;
                    kill.summary = Some(line);
                }
                if let Some((task, limit)) = task_in.take() {
                    if kill.task_memcg.is_none() {
                        kill.task_memcg = Some(task);
                    }
                    if limit != "/" {
                        kill.scope = OomScope::Memcg;
                        kill.oom_memcg.get_or_insert(limit);
                    }
                }
                kill.group_cgroup = group.clone();
                scope_hint = None;
                events.kills.push(kill);
            }
        } else if text.starts_with("Memory cgroup out of memory") {
            // 2.6 selection line: `... Kill process N (comm) score S or sacrifice child`
            scope_hint = Some(OomScope::Memcg);
        } else if text.starts_with("Out of memory") {
            scope_hint = Some(OomScope::Global);
        } else if let Some(kill) = parse_userspace(record) {
            events.userspace.push(kill);
        }
    }
    events
}

/// After `Killed process `: `N (comm) total-vm:...` or 2.6's `N, UID U, (comm) total-vm:...`.
fn parse_kill_line(rest: &str) -> Option<OomKill> {
    let (pid, rest) = leading_number(rest)?;
    let rest = match rest.strip_prefix(", UID ") {
        Some(uid_rest) => leading_number(uid_rest)?.1.strip_prefix(", ")?,
        None => rest.strip_prefix(' ')?,
    };
    let rest = rest.strip_prefix('(')?;
    let (comm, tail) = match rest.find(") total-vm:") {
        Some(end) => (&rest[..end], &rest[end + 2..]),
        None => {
            let end = rest.rfind(')')?;
            (&rest[..end], &rest[end + 1..])
        }
    };
    let anon_rss_kb = tail
        .split_once("anon-rss:")
        .and_then(|(_, v)| leading_number(v))
        .map(|(n, _)| n);
    Some(OomKill {
        pid: u32::try_from(pid).ok()?,
        comm: comm.to_string(),
        usec: None,
        scope: OomScope::Global,
        oom_memcg: None,
        task_memcg: None,
        group_cgroup: None,
        anon_rss_kb,
        line: String::new(),
        summary: None,
    })
}

struct Summary {
    pid: u32,
    memcg: bool,
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
    Some(Summary {
        pid: get("pid")?.parse().ok()?,
        memcg: get("constraint").is_some_and(|c| c == "CONSTRAINT_MEMCG"),
        oom_memcg: get("oom_memcg"),
        task_memcg: get("task_memcg"),
    })
}

/// earlyoom: `sending SIGTERM to process 1234 uid 1000 "python3": ...`;
/// systemd-oomd: `Killed /user.slice/x.scope due to memory pressure for ...`.
fn parse_userspace(record: &KernelRecord) -> Option<UserspaceKill> {
    let text = record.text.as_str();
    if let Some(at) = text
        .find("sending SIGTERM to process ")
        .or(text.find("sending SIGKILL to process "))
    {
        let (pid, _) = leading_number(&text[at + "sending SIGTERM to process ".len()..])?;
        return Some(UserspaceKill {
            killer: "earlyoom".to_string(),
            pid: u32::try_from(pid).ok(),
            cgroup: None,
            usec: record.usec,
            line: text.to_string(),
        });
    }
    let rest = text.strip_prefix("Killed /")?;
    let (path, _) = rest.split_once(" due to memory")?;
    Some(UserspaceKill {
        killer: "systemd-oomd".to_string(),
        pid: None,
        cgroup: Some(format!("/{path}")),
        usec: record.usec,
        line: text.to_string(),
    })
}

/// What a kill must match to belong to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'a> {
    /// The worker pid.
    pub pid: u32,
    /// Its descendants (and pids named by symptom lines).
    pub descendants: &'a [u32],
    /// The worker's comm, when known.
    pub comm: Option<&'a str>,
    /// The worker's leaf cgroup, when known.
    pub cgroup: Option<&'a str>,
    /// Accepted window in µs: [spawn − 1 s, exit + 5 s], when both ends are known.
    pub window: Option<(u64, u64)>,
}

/// Why a kill did or did not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillMatch {
    /// Belongs to the worker; `timed` says whether the time window was checked.
    Yes {
        /// The time window was checked (false: format without monotonic stamps).
        timed: bool,
    },
    /// Does not belong; the reason is quoted in evidence when the pid was ours.
    No(String),
}

impl OomKill {
    /// Joins on pid-or-descendant **and** time window (or cgroup), never pid or comm alone.
    pub fn matches(&self, target: &Target<'_>) -> KillMatch {
        let cgroups = [&self.task_memcg, &self.oom_memcg, &self.group_cgroup];
        let in_cgroup = target.cgroup.is_some_and(|worker| {
            self.task_memcg
                .as_deref()
                .is_some_and(|c| same_or_below(c, worker))
        });
        let ours = self.pid == target.pid || target.descendants.contains(&self.pid) || in_cgroup;
        if !ours {
            return KillMatch::No(format!(
                "pid {} is not the worker or a descendant",
                self.pid
            ));
        }
        if self.pid == target.pid
            && let Some(comm) = target.comm
        {
            let expected: String = comm.chars().take(15).collect();
            if self.comm != expected {
                return KillMatch::No(format!("comm `{}` is not `{expected}`", self.comm));
            }
        }
        if let Some(worker) = target.cgroup {
            let named: Vec<&str> = cgroups.iter().filter_map(|c| c.as_deref()).collect();
            let related = named
                .iter()
                .any(|c| same_or_below(c, worker) || same_or_below(worker, c));
            if !named.is_empty() && !related {
                return KillMatch::No(format!("cgroup {} is not `{worker}`", named.join(", ")));
            }
        }
        match (self.usec, target.window) {
            (Some(usec), Some((start, end))) if usec < start || usec > end => {
                KillMatch::No(format!(
                    "logged at {:.3} s, outside the worker's window {:.3}–{:.3} s",
                    usec as f64 / 1e6,
                    start as f64 / 1e6,
                    end as f64 / 1e6
                ))
            }
            (Some(_), Some(_)) => KillMatch::Yes { timed: true },
            // No usable stamps: only a cgroup match guards against pid reuse.
            _ if in_cgroup => KillMatch::Yes { timed: false },
            _ => KillMatch::No("no monotonic timestamp and no cgroup to confirm it".to_string()),
        }
    }
}

impl UserspaceKill {
    /// Same join rules as kernel kills: pid or cgroup, within the window when stamped.
    pub fn matches(&self, target: &Target<'_>) -> bool {
        let by_pid = self
            .pid
            .is_some_and(|p| p == target.pid || target.descendants.contains(&p));
        let by_cgroup = match (&self.cgroup, target.cgroup) {
            (Some(killed), Some(worker)) => same_or_below(worker, killed),
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
    let ends: Vec<usize> = path
        .match_indices('/')
        .map(|(i, _)| i)
        .skip(1)
        .chain(std::iter::once(path.len()))
        .collect();
    ends.into_iter()
        .any(|end| same_cgroup(&path[..end], ancestor))
}

/// Equal, or one is a component-aligned suffix of the other (paths start with `/`).
fn same_cgroup(a: &str, b: &str) -> bool {
    let a = a.trim_end_matches('/');
    let b = b.trim_end_matches('/');
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    short.len() > 1 && short.starts_with('/') && long.ends_with(short)
}
