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
    fn formats_bytes() {
        assert_eq!(human_bytes(96 * 1024 * 1024), "96 MiB");
        assert_eq!(human_bytes(3 * 512 * 1024 * 1024), "1.5 GiB");
        assert_eq!(limit_setting(192 * 1024 * 1024), "192M");
        assert_eq!(limit_setting(2 * 1024 * 1024 * 1024), "2G");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(basename("/a/b/prep.py"), "prep.py");
    }
}
