//! Kernel log records from raw text in any of the formats the supervisor may hand us.
//!
//! Formats: `/dev/kmsg` records (`<prio>,<seq>,<usec>,<flags>;text`, dictionary continuation lines
//! starting with a space, `\xNN` escapes), `dmesg` (`[  123.456789] text`), `dmesg -T`
//! (`[Mon Nov 30 00:00:00 2026] text`), `journalctl -k` in short and short-monotonic form, and
//! syslog (`Nov 30 00:05:50 host kernel: [  123.456789] text`). Lines of other programs in journal
//! or syslog form (`earlyoom[12]: ...`) keep their identifier in [`KernelRecord::source`].
//!
//! Only monotonic timestamps become [`KernelRecord::usec`]; wall-clock stamps cannot be compared
//! with the worker's CLOCK_MONOTONIC window and are left out. This module knows nothing about OOM.

use serde::{Deserialize, Serialize};

use crate::text::leading_number;

/// One log record, its text unescaped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelRecord {
    /// `/dev/kmsg` sequence number.
    pub seq: Option<u64>,
    /// CLOCK_MONOTONIC microseconds since boot, when the format carries it.
    pub usec: Option<u64>,
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

/// Parsed log: records in order, plus any `/dev/kmsg` sequence gaps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelLogParse {
    /// Records in input order.
    pub records: Vec<KernelRecord>,
    /// Gaps in `/dev/kmsg` sequence numbers (records lost).
    pub seq_gaps: Vec<SeqGap>,
}

/// Parses log text in any supported format (formats may be mixed line by line).
pub fn parse(text: &str) -> KernelLogParse {
    let mut out = KernelLogParse::default();
    let mut last_seq: Option<u64> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        // /dev/kmsg dictionary lines (` SUBSYSTEM=virtio`) belong to the previous record.
        if line.starts_with(' ') && out.records.last().is_some_and(|r| r.seq.is_some()) {
            continue;
        }
        let Some(record) = parse_line(line) else {
            continue;
        };
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

/// Parses one line into a record; returns `None` only for lines with no text.
pub fn parse_line(line: &str) -> Option<KernelRecord> {
    let line = line.trim_end_matches(['\n', '\r']);
    parse_kmsg(line)
        .or_else(|| parse_dmesg(line))
        .or_else(|| parse_dmesg_wall(line))
        .or_else(|| parse_syslog(line))
        .or_else(|| {
            Some(KernelRecord {
                seq: None,
                usec: None,
                level: None,
                source: None,
                text: line.trim().to_string(),
            })
        })
        .filter(|r| !r.text.is_empty())
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
        level: u8::try_from(prio & 7).ok(),
        source: Some(if prio >> 3 == 0 { "kernel" } else { "user" }.to_string()),
        text: unescape(text),
    })
}

/// `[  123.456789] text` (dmesg, journalctl -o short-monotonic without host)
fn parse_dmesg(line: &str) -> Option<KernelRecord> {
    let (usec, rest) = bracket_seconds(line)?;
    // journalctl -o short-monotonic adds `host ident:`; dmesg text never has `kernel:` second.
    if let Some(record) = after_host(rest.trim_start())
        && record.source.as_deref().is_some_and(is_program_ident)
        && rest
            .trim_start()
            .split(' ')
            .nth(1)
            .is_some_and(|t| t.ends_with(':'))
    {
        return Some(KernelRecord {
            usec: Some(usec),
            ..record
        });
    }
    Some(KernelRecord {
        seq: None,
        usec: Some(usec),
        level: None,
        source: None,
        text: rest.trim_start().to_string(),
    })
}

/// `[Mon Nov 30 00:05:50 2026] text` (dmesg -T)
fn parse_dmesg_wall(line: &str) -> Option<KernelRecord> {
    let rest = line.strip_prefix('[')?;
    let (stamp, text) = rest.split_once(']')?;
    let weekday = stamp.get(..3)?;
    if !WEEKDAYS.contains(&weekday) || !stamp.contains(':') {
        return None;
    }
    Some(KernelRecord {
        seq: None,
        usec: None,
        level: None,
        source: Some("kernel".to_string()),
        text: text.trim_start().to_string(),
    })
}

/// `Nov 30 00:05:50 host ident[pid]: text` (syslog, journalctl short) or ISO-stamped syslog.
fn parse_syslog(line: &str) -> Option<KernelRecord> {
    let rest = if MONTHS.iter().any(|m| line.starts_with(m)) {
        // `Nov 30 00:05:50 host ...` (day may be space-padded)
        let (_day, after) = line.get(4..)?.trim_start().split_once(' ')?;
        let (time, after) = after.split_once(' ')?;
        if time.matches(':').count() != 2 {
            return None;
        }
        after
    } else if line.len() > 19
        && line.as_bytes().get(4) == Some(&b'-')
        && line.as_bytes().get(10) == Some(&b'T')
    {
        // `2026-11-30T00:05:50.123456+00:00 host ...`
        line.split_once(' ')?.1
    } else {
        return None;
    };
    after_host(rest.trim_start())
}

/// After the timestamp: `host ident[pid]: text`, with an optional `[  1.2]` kernel stamp.
fn after_host(rest: &str) -> Option<KernelRecord> {
    let (_host, rest) = rest.split_once(' ')?;
    let (ident, text) = rest.split_once(": ")?;
    if ident.contains(' ') {
        return None;
    }
    let source = ident.split('[').next().unwrap_or(ident).to_string();
    let (usec, text) = match bracket_seconds(text) {
        Some((usec, rest)) => (Some(usec), rest.trim_start()),
        None => (None, text),
    };
    Some(KernelRecord {
        seq: None,
        usec,
        level: None,
        source: Some(source),
        text: text.to_string(),
    })
}

/// `kernel`, or a program name seen in journal lines (`earlyoom`, `systemd-oomd`).
fn is_program_ident(ident: &str) -> bool {
    ident == "kernel" || ident == "earlyoom" || ident.starts_with("systemd")
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

const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
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
    fn joins_comma_continuation_of_split_summary() {
        let log = "6,1,10,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null)\n\
                   6,2,11,-;,oom_memcg=/a,task_memcg=/a,task=x,pid=5,uid=0\n";
        let parsed = parse(log);
        assert_eq!(parsed.records.len(), 1);
        assert!(parsed.records[0].text.ends_with("task=x,pid=5,uid=0"));
    }
}
