//! Small text helpers shared by the parsers: ANSI stripping, `\r` splitting, byte formatting.
//!
//! Owns nothing domain-specific; every parser runs its input through [`normalize`] first so that
//! Python 3.13's coloured tracebacks and tqdm's carriage-return progress bars look like plain lines.

/// Strips ANSI escape sequences (CSI and OSC) and splits carriage returns into separate lines.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.peek() {
                Some('[') => {
                    chars.next();
                    // CSI: parameter and intermediate bytes, then one final byte in 0x40..=0x7e.
                    for d in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&d) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    chars.next();
                    // OSC: ends with BEL or ESC \.
                    while let Some(d) = chars.next() {
                        if d == '\u{7}' {
                            break;
                        }
                        if d == '\u{1b}' {
                            chars.next();
                            break;
                        }
                    }
                }
                _ => {
                    chars.next();
                }
            },
            '\r' => {
                if chars.peek() != Some(&'\n') {
                    out.push('\n');
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Removes the prefixes launchers put on every line of a child's output, keeping the
/// indentation after them: torch's `[rank0]: ` and `[default0]:`, accelerate's `stderr: `,
/// mpirun's `[1,0]<stderr>:`, Ray's `(pid=123) ` / `(Worker pid=123) `, and `srun -l`'s `0: `
/// (only when a traceback header carries it, since a bare number is too common to strip
/// blindly).
pub fn strip_launcher_prefixes(text: &str) -> String {
    let text = normalize(text);
    let srun_labels = text.lines().any(|l| {
        l.split_once(": ")
            .is_some_and(|(n, rest)| is_label(n) && rest.starts_with("Traceback ("))
    });
    text.lines()
        .map(|line| strip_line_prefix(line, srun_labels))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_label(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.chars().all(|c| c.is_ascii_digit())
}

fn strip_line_prefix(mut line: &str, srun_labels: bool) -> &str {
    loop {
        let before = line;
        if let Some(rest) = line.strip_prefix('[')
            && let Some((inside, after)) = rest.split_once(']')
        {
            let rank = inside
                .strip_prefix("rank")
                .or_else(|| inside.strip_prefix("default"))
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
            let mpi =
                inside.contains(',') && inside.chars().all(|c| c.is_ascii_digit() || c == ',');
            if rank || mpi {
                let after = after
                    .strip_prefix("<stderr>")
                    .or_else(|| after.strip_prefix("<stdout>"))
                    .unwrap_or(after);
                let after = after.strip_prefix(':').unwrap_or(after);
                line = after.strip_prefix(' ').unwrap_or(after);
            }
        }
        if let Some(rest) = line
            .strip_prefix("stderr: ")
            .or_else(|| line.strip_prefix("stdout: "))
        {
            line = rest;
        }
        // A container runtime's log file (`/var/log/pods/...`):
        // `2024-03-01T10:00:00.123456789Z stderr F message`.
        if let Some((stamp, rest)) = line.split_once(' ')
            && stamp.len() >= 20
            && stamp.as_bytes().get(10) == Some(&b'T')
            && stamp.as_bytes().get(4) == Some(&b'-')
            && let Some(rest) = rest
                .strip_prefix("stderr ")
                .or_else(|| rest.strip_prefix("stdout "))
            && let Some(message) = rest.strip_prefix("F ").or_else(|| rest.strip_prefix("P "))
        {
            line = message;
        }
        if line.starts_with('(')
            && let Some((inside, rest)) = line[1..].split_once(") ")
            && inside.contains("pid=")
            && !inside.contains('(')
        {
            line = rest;
        }
        if srun_labels
            && let Some((label, rest)) = line.split_once(": ")
            && is_label(label)
        {
            line = rest;
        }
        if line == before {
            return line;
        }
    }
}

/// Formats a byte count for people: `96 MiB`, `1.5 GiB`, `512 KiB`.
pub fn human_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    let (value, unit) = if b >= KIB * KIB * KIB {
        (b / (KIB * KIB * KIB), "GiB")
    } else if b >= KIB * KIB {
        (b / (KIB * KIB), "MiB")
    } else if b >= KIB {
        (b / KIB, "KiB")
    } else {
        return format!("{bytes} B");
    };
    if (value - value.round()).abs() < 0.05 {
        format!("{value:.0} {unit}")
    } else {
        format!("{value:.1} {unit}")
    }
}

/// Formats a suggested memory limit the way `datasets.toml` takes it: `192M`, `2G`.
pub fn limit_setting(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * MIB;
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{}G", bytes / GIB)
    } else {
        format!("{}M", bytes.div_ceil(MIB))
    }
}

/// Shortens `text` to at most `max` characters, ending in `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Last path component of a file name, for short locations (`prep.py:12`).
pub fn basename(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// Parses a run of ASCII digits at the start of `s`, returning the number and the rest.
pub fn leading_number(s: &str) -> Option<(u64, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    s[..end].parse().ok().map(|n| (n, &s[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_ansi_colours_of_python_3_13() {
        let coloured = "\u{1b}[1;35mKeyError\u{1b}[0m: \u{1b}[35m'x'\u{1b}[0m";
        assert_eq!(normalize(coloured), "KeyError: 'x'");
    }

    #[test]
    fn splits_carriage_returns_but_keeps_crlf_as_one_break() {
        assert_eq!(normalize("a\rb\r\nc"), "a\nb\nc");
    }

    #[test]
    fn strips_launcher_prefixes_but_keeps_indentation() {
        let text = "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"a.py\", line 1, in <module>\n\
                    stderr: RuntimeError: boom\n(RayWorker pid=77) ValueError: x\n[1,0]<stderr>:KeyError: 'k'";
        assert_eq!(
            strip_launcher_prefixes(text),
            "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n\
             RuntimeError: boom\nValueError: x\nKeyError: 'k'"
        );
        let srun =
            "0: Traceback (most recent call last):\n0:   File \"a.py\", line 1\n0: KeyError: 'k'";
        assert_eq!(
            strip_launcher_prefixes(srun),
            "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'k'"
        );
        assert_eq!(strip_launcher_prefixes("3: not a label"), "3: not a label");
        let cri = "2024-03-01T10:00:00.123456789Z stderr F Traceback (most recent call last):\n\
                   2024-03-01T10:00:00.123456789Z stderr F   File \"a.py\", line 1, in <module>";
        assert_eq!(
            strip_launcher_prefixes(cri),
            "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>"
        );
    }

    #[test]
    fn formats_bytes() {
        assert_eq!(human_bytes(96 * 1024 * 1024), "96 MiB");
        assert_eq!(human_bytes(3 * 512 * 1024 * 1024), "1.5 GiB");
        assert_eq!(limit_setting(192 * 1024 * 1024), "192M");
        assert_eq!(limit_setting(2 * 1024 * 1024 * 1024), "2G");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(basename("/a/b/prep.py"), "prep.py");
    }
}
