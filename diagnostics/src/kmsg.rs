//! Kernel log records from raw text in any of the formats people capture it in.
//!
//! Formats: `/dev/kmsg` records (`<prio>,<seq>,<usec>,<flags>;text`, dictionary continuation lines
//! starting with a space, `\xNN` escapes), `dmesg` (`[  123.456789] text`, also `-r`'s `<4>` and
//! `-x`'s `kern  :err   :`), `dmesg -T` (`[Tue Dec  1 10:00:00 2026] text`), `journalctl -k` in
//! short, short-precise, short-iso and short-monotonic form (also newest first with `-r`),
//! syslog (`Nov 30 00:05:50 host kernel: [  123.456789] text`), with CRLF line ends, ANSI colours
//! and `> ` quoting removed. Lines of other programs in journal or syslog form
//! (`earlyoom[12]: ...`) keep their identifier in [`KernelRecord::source`].
//!
//! Monotonic stamps become [`KernelRecord::usec`] (comparable with the worker's CLOCK_MONOTONIC
//! window), wall-clock stamps [`KernelRecord::wall`] (comparable with `--started-at`). This
//! module knows nothing about OOM.

use serde::{Deserialize, Serialize};

use crate::clock::{self, WallTime};
use crate::text::{leading_number, normalize};

/// One log record, its text unescaped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelRecord {
    /// `/dev/kmsg` sequence number.
    pub seq: Option<u64>,
    /// CLOCK_MONOTONIC microseconds since boot, when the format carries it.
    pub usec: Option<u64>,
    /// Wall-clock stamp (`dmesg -T`, syslog, journald), when the format carries one.
    pub wall: Option<WallTime>,
    /// Syslog level (0 emerg .. 7 debug), from the `/dev/kmsg` priority.
    pub level: Option<u8>,
    /// Program that logged it, when known (`kernel`, `earlyoom`, `systemd-oomd`).
    pub source: Option<String>,
    /// The message text.
    pub text: String,
}

/// Records lost between two `/dev/kmsg` records (ring buffer overwritten or reader too slow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqGap {
    /// Last sequence number seen before the gap.
    pub after: u64,
    /// First sequence number seen after the gap.
    pub next: u64,
}

impl SeqGap {
    /// Number of records lost.
    pub fn lost(&self) -> u64 {
        self.next.saturating_sub(self.after + 1)
    }
}

/// Parsed log: records in time order, plus any `/dev/kmsg` sequence gaps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelLogParse {
    /// Records, oldest first.
    pub records: Vec<KernelRecord>,
    /// Gaps in `/dev/kmsg` sequence numbers (records lost).
    pub seq_gaps: Vec<SeqGap>,
    /// The text ran newest first (`journalctl -r`) and was reversed.
    #[serde(default)]
    pub reversed: bool,
}

/// Parses log text in any supported format (formats may be mixed line by line). ANSI colours
/// and carriage returns are removed first; a log printed newest first (`journalctl -r`) is put
/// back in time order.
pub fn parse(text: &str) -> KernelLogParse {
    let text = normalize(text);
    let mut records: Vec<KernelRecord> = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() || is_journal_marker(line) {
            continue;
        }
        // /dev/kmsg dictionary lines (` SUBSYSTEM=virtio`) belong to the previous record.
        if line.starts_with(' ') && records.last().is_some_and(|r| r.seq.is_some()) {
            continue;
        }
        if let Some(record) = parse_line(line) {
            records.push(record);
        }
    }
    let reversed = is_newest_first(&records);
    if reversed {
        records.reverse();
    }
    let mut out = KernelLogParse {
        reversed,
        ..KernelLogParse::default()
    };
    let mut last_seq: Option<u64> = None;
    for record in records {
        if let Some(seq) = record.seq {
            if let Some(prev) = last_seq
                && seq > prev + 1
            {
                out.seq_gaps.push(SeqGap {
                    after: prev,
                    next: seq,
                });
            }
            last_seq = Some(seq);
        }
        // 4.19-era kernels split the oom-kill summary; the second record starts with a comma.
        if record.text.starts_with(',')
            && let Some(prev) = out.records.last_mut()
        {
            prev.text.push_str(&record.text);
            continue;
        }
        out.records.push(record);
    }
    out
}

/// journald's `-- Logs begin at ... --`, `-- Boot 1a2b... --`, `-- No entries --` lines.
fn is_journal_marker(line: &str) -> bool {
    let line = line.trim();
    line.starts_with("-- ") && line.ends_with(" --")
}

/// Whether the records run newest first: most stamped neighbours go back in time, or, with no
/// stamps at all, a kill line comes before the header of its own OOM report.
fn is_newest_first(records: &[KernelRecord]) -> bool {
    let (mut forward, mut backward) = (0usize, 0usize);
    for pair in records.windows(2) {
        let order = match (&pair[0], &pair[1]) {
            (a, b) if a.seq.is_some() && b.seq.is_some() => a.seq.cmp(&b.seq),
            (a, b) if a.usec.is_some() && b.usec.is_some() => a.usec.cmp(&b.usec),
            (a, b) => match a.wall.zip(b.wall).and_then(|(x, y)| x.compare(&y)) {
                Some(order) => order,
                None => continue,
            },
        };
        match order {
            std::cmp::Ordering::Less => forward += 1,
            std::cmp::Ordering::Greater => backward += 1,
            std::cmp::Ordering::Equal => {}
        }
    }
    if forward + backward > 0 {
        return backward > forward;
    }
    heuristic_kill_report_order(records) < 0
}

/// Without usable stamps: the lines that name a victim around its `Killed process` line vote.
/// In time order the selection line (`Kill process N`) and the summary (`pid=N`) come before
/// the kill line, and the reaper's `reaped process N` after it. Positive: oldest first.
fn heuristic_kill_report_order(records: &[KernelRecord]) -> i32 {
    let pid_after = |text: &str, marker: &str| {
        text.find(marker)
            .and_then(|at| leading_number(&text[at + marker.len()..]))
            .map(|(pid, _)| pid)
    };
    let mut vote = 0;
    for (at, record) in records.iter().enumerate() {
        let Some(victim) = pid_after(&record.text, "Killed process ") else {
            continue;
        };
        for (other_at, other) in records.iter().enumerate() {
            let text = other.text.as_str();
            let selection =
                pid_after(text, "ill process ") == Some(victim) && text.contains("score");
            let summary = text.starts_with("oom-kill:") && pid_after(text, ",pid=") == Some(victim);
            let before = if selection || summary {
                true
            } else if pid_after(text, "reaped process ") == Some(victim) {
                false
            } else {
                continue;
            };
            match (other_at < at, before) {
                (true, true) | (false, false) => vote += 1,
                _ => vote -= 1,
            }
        }
    }
    vote
}

/// Parses one line into a record; returns `None` only for lines with no text.
///
/// Layers are peeled in the order tools stack them: a `<N>` priority (`dmesg -r`), `dmesg -x`'s
/// `kern  :err   : `, a stamp (monotonic `[  1.5]`, `dmesg -T`'s `[Tue Dec  1 ...]`, syslog,
/// ISO), the `host ident[pid]:` of syslog and journald, then a kernel stamp again
/// (`kernel: [  1.5] text`).
pub fn parse_line(line: &str) -> Option<KernelRecord> {
    let line = line.trim_end_matches(['\n', '\r']);
    if let Some(record) = parse_kmsg(line) {
        return Some(record);
    }
    let mut record = KernelRecord::default();
    let mut rest = strip_quote(line.trim_start());
    if let Some((level, after)) = strip_priority(rest) {
        record.level = Some(level);
        rest = after;
    }
    if let Some((level, after)) = strip_decoded_level(rest) {
        record.level = Some(level);
        rest = after;
    }
    if let Some((usec, after)) = bracket_seconds(rest) {
        record.usec = Some(usec);
        rest = after.trim_start();
        // journalctl -o short-monotonic: `[  1.5] host kernel: text`.
        if let Some((source, text)) = split_ident(rest, IdentRule::KnownProgramAfterHost) {
            record.source = Some(source);
            rest = text;
        }
    } else if let Some((wall, after)) = bracket_wall(rest) {
        record.wall = wall;
        record.source = Some("kernel".to_string());
        rest = after.trim_start();
    } else if let Some((wall, after)) = clock::iso_prefix(rest)
        .or_else(|| clock::ctime_prefix(rest))
        .or_else(|| clock::syslog_prefix(rest))
    {
        record.wall = wall;
        rest = after.strip_prefix(':').unwrap_or(after).trim_start();
        // `dmesg --time-format iso` has no host; syslog and journald do.
        if let Some((source, text)) = split_ident(rest, IdentRule::Any) {
            record.source = Some(source);
            rest = text;
        }
    } else if let Some((source, text)) = split_ident(rest, IdentRule::KnownProgramAlone) {
        record.source = Some(source);
        rest = text;
    }
    if let Some((usec, after)) = bracket_seconds(rest) {
        record.usec = Some(usec);
        rest = after.trim_start();
    } else if record.usec.is_none()
        && let Some((usec, after)) = embedded_stamp(rest)
    {
        // A console log wrapped by something else (a hypervisor's `... Guest: <6>[  1.5] text`).
        record.usec = Some(usec);
        rest = after.trim_start();
    }
    record.text = rest.trim().to_string();
    (!record.text.is_empty()).then_some(record)
}

/// `<prio>,<seq>,<usec>,<flags>[,more];text`
fn parse_kmsg(line: &str) -> Option<KernelRecord> {
    let (header, text) = line.split_once(';')?;
    let mut fields = header.split(',');
    let prio: u32 = fields.next()?.parse().ok()?;
    let seq: u64 = fields.next()?.parse().ok()?;
    let usec: u64 = fields.next()?.parse().ok()?;
    let flags = fields.next()?;
    if !(flags.is_empty() || flags.chars().all(|c| c == '-' || c == 'c' || c == '+')) {
        return None;
    }
    Some(KernelRecord {
        seq: Some(seq),
        usec: Some(usec),
        wall: None,
        level: u8::try_from(prio & 7).ok(),
        source: Some(if prio >> 3 == 0 { "kernel" } else { "user" }.to_string()),
        text: unescape(text),
    })
}

/// Markdown and e-mail quoting (`> `) around a pasted log.
fn strip_quote(mut line: &str) -> &str {
    while let Some(rest) = line.strip_prefix("> ") {
        line = rest.trim_start();
    }
    line
}

/// `<4>` (`dmesg -r`, raw syslog): the level and the rest.
fn strip_priority(line: &str) -> Option<(u8, &str)> {
    let rest = line.strip_prefix('<')?;
    let (number, rest) = leading_number(rest)?;
    let rest = rest.strip_prefix('>')?;
    Some((u8::try_from(number & 7).ok()?, rest))
}

/// `dmesg -x`: `kern  :err   : text`.
fn strip_decoded_level(line: &str) -> Option<(u8, &str)> {
    let (facility, rest) = line.split_once(':')?;
    if !FACILITIES.contains(&facility.trim_end()) {
        return None;
    }
    let (level, rest) = rest.split_once(':')?;
    let level = LEVELS.iter().position(|l| *l == level.trim_end())?;
    Some((u8::try_from(level).ok()?, rest.trim_start()))
}

/// A bracketed wall-clock stamp: `dmesg -T`'s `[Tue Dec  1 10:00:00 2026]`, or one without a
/// usable time (`dmesg -H`'s `[Dec 1 10:00]`, its deltas `[  +0.000012]`).
fn bracket_wall(line: &str) -> Option<(Option<WallTime>, &str)> {
    let inner = line.strip_prefix('[')?;
    let (stamp, rest) = inner.split_once(']')?;
    let stamp = stamp.trim();
    if let Some((wall, tail)) = clock::ctime_prefix(stamp)
        && tail.trim().is_empty()
    {
        return Some((wall, rest));
    }
    let delta = stamp
        .strip_prefix('+')
        .is_some_and(|d| d.trim().chars().all(|c| c.is_ascii_digit() || c == '.'));
    let human = stamp
        .get(..3)
        .is_some_and(|m| MONTHS.iter().any(|month| month.trim() == m) && stamp.contains(':'));
    (delta || human).then_some((None, rest))
}

/// Which `ident:` forms to accept after a stamp.
#[derive(Clone, Copy, PartialEq, Eq)]
enum IdentRule {
    /// `host ident[pid]:` or `ident[pid]:` for any program (after a syslog or ISO stamp).
    Any,
    /// `host ident:` where ident is a known program, or `ident[pid]:` (after a monotonic
    /// stamp, where a kernel message such as `audit: type=1400` could otherwise look like one).
    KnownProgramAfterHost,
    /// `ident:` alone for a known program (a pasted `kernel: text`).
    KnownProgramAlone,
}

/// Splits `host ident[pid]: text` (or `ident[pid]: text`) into the program name and the text.
fn split_ident(rest: &str, rule: IdentRule) -> Option<(String, &str)> {
    let (first, after_first) = rest.split_once(' ')?;
    // `ident[pid]:` with no host (journald with the host cut, or a pasted line).
    if let Some(ident) = first.strip_suffix(':')
        && let Some(name) = program_name(ident)
    {
        let known = is_known_program(name);
        let with_pid = ident.ends_with(']');
        let accepted = match rule {
            IdentRule::Any | IdentRule::KnownProgramAfterHost => known || with_pid,
            IdentRule::KnownProgramAlone => known,
        };
        if accepted {
            return Some((name.to_string(), after_first.trim_start()));
        }
    }
    if rule == IdentRule::KnownProgramAlone || first.contains(':') {
        return None;
    }
    let (second, text) = after_first.split_once(' ').unwrap_or((after_first, ""));
    let ident = second.strip_suffix(':')?;
    let name = program_name(ident)?;
    let accepted = match rule {
        IdentRule::Any => true,
        IdentRule::KnownProgramAfterHost => is_known_program(name),
        IdentRule::KnownProgramAlone => false,
    };
    accepted.then(|| (name.to_string(), text.trim_start()))
}

/// `name` of `name[123]` when it looks like a program name.
fn program_name(ident: &str) -> Option<&str> {
    let name = match ident.split_once('[') {
        Some((name, pid)) => {
            let pid = pid.strip_suffix(']')?;
            if pid.is_empty() || !pid.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            name
        }
        None => ident,
    };
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '@' | '/'))
        && !name.chars().all(|c| c.is_ascii_digit());
    valid.then_some(name)
}

/// Programs whose journal lines we read: the kernel, user-space OOM killers, schedulers.
fn is_known_program(name: &str) -> bool {
    const KNOWN: [&str; 9] = [
        "kernel",
        "earlyoom",
        "systemd",
        "nohang",
        "slurmstepd",
        "slurmd",
        "kubelet",
        "containerd",
        "dockerd",
    ];
    KNOWN
        .iter()
        .any(|k| name == *k || name.starts_with(&format!("{k}-")))
}

/// A `[  123.456789]` kernel stamp behind another program's prefix, near the line's start.
fn embedded_stamp(line: &str) -> Option<(u64, &str)> {
    line.match_indices('[')
        .take_while(|(at, _)| *at < 160)
        .filter(|(at, _)| *at > 0)
        .find_map(|(at, _)| bracket_seconds(&line[at..]))
}

/// `[  123.456789]` at the start of `s`: microseconds and the rest.
fn bracket_seconds(s: &str) -> Option<(u64, &str)> {
    let inner_start = s.strip_prefix('[')?.trim_start();
    let (secs, rest) = leading_number(inner_start)?;
    let rest = rest.strip_prefix('.')?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    if digits == 0 || digits > 9 {
        return None;
    }
    let frac: u64 = rest[..digits].parse().ok()?;
    let micros = match digits {
        d if d <= 6 => frac * 10u64.pow(6 - d as u32),
        d => frac / 10u64.pow(d as u32 - 6),
    };
    let rest = rest[digits..].strip_prefix(']')?;
    Some((secs * 1_000_000 + micros, rest))
}

/// Decodes `/dev/kmsg` `\xNN` escapes (non-printable bytes and backslashes).
pub fn unescape(text: &str) -> String {
    if !text.contains("\\x") {
        return text.to_string();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && bytes.get(i + 1) == Some(&b'x')
            && let Some(hex) = text.get(i + 2..i + 4)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

const FACILITIES: [&str; 20] = [
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
    "ftp", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
];
const LEVELS: [&str; 8] = [
    "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
];
const MONTHS: [&str; 12] = [
    "Jan ", "Feb ", "Mar ", "Apr ", "May ", "Jun ", "Jul ", "Aug ", "Sep ", "Oct ", "Nov ", "Dec ",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmsg_record_with_escape_and_dictionary_lines() {
        let log = "6,341,1266114,-;virtio_blk virtio1: [vda] new size\n SUBSYSTEM=virtio\n \
                   DEVICE=+virtio:virtio1\n4,342,1267489,c,caller=T1;tab\\x09here \\x5c done\n";
        let parsed = parse(log);
        assert_eq!(parsed.records.len(), 2);
        assert_eq!(parsed.records[0].usec, Some(1_266_114));
        assert_eq!(parsed.records[0].level, Some(6));
        assert_eq!(parsed.records[1].text, "tab\there \\ done");
        assert!(parsed.seq_gaps.is_empty());
    }

    #[test]
    fn reports_sequence_gaps() {
        let log = "6,10,100,-;a\n6,11,101,-;b\n3,15,105,-;c\n";
        let parsed = parse(log);
        assert_eq!(
            parsed.seq_gaps,
            vec![SeqGap {
                after: 11,
                next: 15
            }]
        );
        assert_eq!(parsed.seq_gaps[0].lost(), 3);
    }

    #[test]
    fn dmesg_formats() {
        let r = parse_line("[  355.150418] Memory cgroup out of memory").expect("record");
        assert_eq!(r.usec, Some(355_150_418));
        assert_eq!(r.text, "Memory cgroup out of memory");
        let r = parse_line("[Mon Nov 30 00:05:50 2026] oom-kill:constraint=X").expect("record");
        assert_eq!((r.usec, r.text.as_str()), (None, "oom-kill:constraint=X"));
    }

    #[test]
    fn journal_and_syslog_formats() {
        let r = parse_line("Nov 30 00:05:50 vm kernel: Killed process 1 (a)").expect("record");
        assert_eq!(r.source.as_deref(), Some("kernel"));
        assert_eq!((r.usec, r.text.as_str()), (None, "Killed process 1 (a)"));
        let r = parse_line("Nov  3 07:15:02 vm kernel: [ 12.500000] Killed process 2 (b)")
            .expect("record");
        assert_eq!(
            (r.usec, r.text.as_str()),
            (Some(12_500_000), "Killed process 2 (b)")
        );
        let r = parse_line("[  355.150418] vm kernel: Killed process 3 (c)").expect("record");
        assert_eq!(
            (r.usec, r.text.as_str()),
            (Some(355_150_418), "Killed process 3 (c)")
        );
        let r = parse_line("2026-11-30T00:05:50.1+00:00 vm earlyoom[88]: sending SIGTERM")
            .expect("record");
        assert_eq!(r.source.as_deref(), Some("earlyoom"));
        assert_eq!(r.text, "sending SIGTERM");
    }

    #[test]
    fn programs_after_a_monotonic_stamp_but_not_kernel_subsystems() {
        let r =
            parse_line("[   77.749597] systemd-oomd[659]: oomd attempting to kill 407 with KILL")
                .expect("record");
        assert_eq!(r.source.as_deref(), Some("systemd-oomd"));
        assert_eq!(r.text, "oomd attempting to kill 407 with KILL");
        let r = parse_line("[   12.300000] audit: type=1400 audit(1.2:3): apparmor=\"STATUS\"")
            .expect("record");
        assert_eq!(r.source, None);
        assert!(r.text.starts_with("audit: type=1400"));
        let r =
            parse_line("[ 7063.263325] oom_reaper: reaped process 63214 (uwsgi), now anon-rss:0kB")
                .expect("record");
        assert!(r.text.starts_with("oom_reaper: reaped process 63214"));
    }

    #[test]
    fn journal_iso_and_precise_stamps() {
        let r = parse_line(
            "2024-03-01T10:00:00+0100 gpu-box kernel: Out of memory: Killed process 5 (e)",
        )
        .expect("record");
        assert_eq!(r.source.as_deref(), Some("kernel"));
        assert_eq!(r.wall.and_then(|w| w.offset_minutes), Some(60));
        assert_eq!(r.text, "Out of memory: Killed process 5 (e)");
        let r = parse_line("Mar 01 10:00:00.123456 gpu-box kernel: Killed process 6 (f)")
            .expect("record");
        assert_eq!(
            (r.wall.map(|w| w.micros), r.text.as_str()),
            (Some(123_456), "Killed process 6 (f)")
        );
        let r = parse_line("2024-03-01T10:00:00,123456+00:00 Out of memory: Killed process 7 (g)")
            .expect("record");
        assert_eq!(r.text, "Out of memory: Killed process 7 (g)");
    }

    #[test]
    fn dmesg_level_prefixes_and_human_stamps() {
        let r = parse_line("kern  :err   : [ 7063.247407] Killed process 1 (a)").expect("record");
        assert_eq!((r.level, r.usec), (Some(3), Some(7_063_247_407)));
        let r = parse_line("<3>[ 7063.247407] Killed process 1 (a)").expect("record");
        assert_eq!(
            (r.level, r.text.as_str()),
            (Some(3), "Killed process 1 (a)")
        );
        let r = parse_line("[Nov21 14:22] Out of memory: Killed process 2 (b)").expect("record");
        assert_eq!(r.text, "Out of memory: Killed process 2 (b)");
        let r = parse_line("[  +0.000012] oom_reaper: reaped process 2 (b)").expect("record");
        assert_eq!(r.text, "oom_reaper: reaped process 2 (b)");
        let r = parse_line("2023-12-04T10:49:30.127Z In(05) vcpu-5 - Guest: <3>[39291577.009543] Killed process 3 (c)")
            .expect("record");
        assert_eq!(
            (r.usec, r.text.as_str()),
            (Some(39_291_577_009_543), "Killed process 3 (c)")
        );
    }

    #[test]
    fn newest_first_is_put_back_in_order_even_without_distinct_stamps() {
        let log = "Aug 16 20:29:54 h kernel: Killed process 42474 (t), UID 0, total-vm:7296kB\n\
                   Aug 16 20:29:54 h kernel: Memory cgroup out of memory: Kill process 42474 (t) score 0 or sacrifice child\n";
        let parsed = parse(log);
        assert!(parsed.reversed);
        assert!(
            parsed.records[0]
                .text
                .starts_with("Memory cgroup out of memory")
        );
        let forward = "Out of memory: Kill process 16929 (beam.smp) score 580 or sacrifice child\n\
                       Killed process 28364, UID 0, (sh) total-vm:106064kB\n\
                       rsyslogd invoked oom-killer: gfp_mask=0x201da, order=0\n";
        assert!(!parse(forward).reversed);
    }

    #[test]
    fn joins_comma_continuation_of_split_summary() {
        let log = "6,1,10,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null)\n\
                   6,2,11,-;,oom_memcg=/a,task_memcg=/a,task=x,pid=5,uid=0\n";
        let parsed = parse(log);
        assert_eq!(parsed.records.len(), 1);
        assert!(parsed.records[0].text.ends_with("task=x,pid=5,uid=0"));
    }
}
