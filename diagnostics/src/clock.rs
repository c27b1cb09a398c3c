//! Wall-clock timestamps as logs print them, and moments given on the command line.
//!
//! Formats: ctime (`Tue Dec  1 10:00:00 2026`, `dmesg -T`), syslog (`Dec  1 10:00:00`, no year;
//! journald prints the month in the locale's language, which is stripped but not understood),
//! ISO 8601 (`2026-12-01T10:00:00.123456+00:00`, `2026-12-01 10:00:00,123`, journald's
//! `short-iso`, Slurm's `CANCELLED AT 2026-12-01T10:00:00`) and seconds since boot
//! (`355.041267`, the clock of `dmesg` and `/dev/kmsg`).
//!
//! Pure: nothing here reads the clock or the time zone. Two stamps are compared only when both
//! carry a UTC offset or neither does (then both are taken in the same local zone), and a stamp
//! without a year takes the other's year.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::text::leading_number;

/// A civil date and time as a log printed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WallTime {
    /// Year, when the format has one (syslog lines have none).
    pub year: Option<i32>,
    /// 1–12.
    pub month: u8,
    /// 1–31.
    pub day: u8,
    /// Seconds since midnight.
    pub seconds: u32,
    /// Microseconds within the second.
    pub micros: u32,
    /// Minutes east of UTC, when the stamp says (`Z`, `+02:00`); `None` for local time.
    pub offset_minutes: Option<i32>,
}

impl WallTime {
    /// `self − other` in seconds, when the two can be compared (see the module docs).
    pub fn seconds_since(&self, other: &WallTime) -> Option<f64> {
        if self.offset_minutes.is_some() != other.offset_minutes.is_some() {
            return None;
        }
        // A stamp without a year borrows the other's; with neither, any leap year will do.
        let year_a = self.year.or(other.year).unwrap_or(2000);
        let year_b = other.year.or(self.year).unwrap_or(2000);
        let a = self.epoch_micros(year_a)?;
        let b = other.epoch_micros(year_b)?;
        Some((a - b) as f64 / 1e6)
    }

    fn epoch_micros(&self, year: i32) -> Option<i64> {
        if !(1..=12).contains(&self.month) || !(1..=31).contains(&self.day) {
            return None;
        }
        let days = days_from_civil(year, self.month, self.day);
        let offset = i64::from(self.offset_minutes.unwrap_or(0)) * 60;
        Some(
            (days * 86_400 + i64::from(self.seconds) - offset) * 1_000_000 + i64::from(self.micros),
        )
    }

    /// Orders two stamps when they can be compared.
    pub fn compare(&self, other: &WallTime) -> Option<Ordering> {
        self.seconds_since(other).and_then(|d| d.partial_cmp(&0.0))
    }
}

impl std::fmt::Display for WallTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(year) = self.year {
            write!(f, "{year:04}-")?;
        }
        write!(
            f,
            "{:02}-{:02} {:02}:{:02}:{:02}",
            self.month,
            self.day,
            self.seconds / 3600,
            self.seconds / 60 % 60,
            self.seconds % 60
        )?;
        match self.offset_minutes {
            Some(0) => write!(f, " UTC"),
            Some(m) => write!(f, " {:+03}:{:02}", m / 60, (m % 60).abs()),
            None => Ok(()),
        }
    }
}

/// A moment given by people: a wall-clock time or seconds since boot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Moment {
    /// CLOCK_MONOTONIC microseconds since boot (the clock of `dmesg` and `/dev/kmsg`).
    SinceBoot(u64),
    /// A civil time.
    Wall(WallTime),
}

/// Parses a moment as `--started-at` / `--exited-at` take it: seconds since boot (`355.04`),
/// ISO 8601, ctime, or a syslog stamp; the whole text must be the stamp.
pub fn parse_moment(text: &str) -> Option<Moment> {
    let text = text.trim();
    if let Some(seconds) = seconds_since_boot(text) {
        return Some(Moment::SinceBoot(seconds));
    }
    parse_wall(text).map(Moment::Wall)
}

/// A whole string as a wall-clock stamp in any supported format.
pub fn parse_wall(text: &str) -> Option<WallTime> {
    let text = text.trim();
    let (stamp, rest) = iso_prefix(text)
        .or_else(|| ctime_prefix(text))
        .or_else(|| syslog_prefix(text))?;
    rest.trim().is_empty().then_some(stamp?)
}

/// `355.041267` → microseconds.
fn seconds_since_boot(text: &str) -> Option<u64> {
    let (whole, rest) = leading_number(text)?;
    let (micros, rest) = optional_fraction(rest, &['.'])?;
    rest.is_empty()
        .then_some(whole * 1_000_000 + u64::from(micros))
}

/// `2026-12-01T10:00:00[.ffffff|,fff][Z|±HH:MM|±HHMM]` (or a space for `T`) at the start of
/// `text`: the stamp and the rest.
pub fn iso_prefix(text: &str) -> Option<(Option<WallTime>, &str)> {
    let bytes = text.as_bytes();
    if bytes.len() < 19 || bytes[4] != b'-' || bytes[7] != b'-' || !matches!(bytes[10], b'T' | b' ')
    {
        return None;
    }
    let year: i32 = text.get(..4)?.parse().ok()?;
    let month: u8 = text.get(5..7)?.parse().ok()?;
    let day: u8 = text.get(8..10)?.parse().ok()?;
    let (seconds, rest) = clock_time(text.get(11..)?)?;
    let (micros, mut rest) = optional_fraction(rest, &['.', ','])?;
    let mut offset_minutes = None;
    if let Some(after) = rest.strip_prefix('Z') {
        offset_minutes = Some(0);
        rest = after;
    } else if let Some(sign) = rest.chars().next().filter(|c| *c == '+' || *c == '-') {
        let digits: String = rest[1..]
            .chars()
            .take(5)
            .filter(|c| c.is_ascii_digit())
            .collect();
        let with_colon = rest.get(3..4) == Some(":");
        let length = if with_colon { 6 } else { 5 };
        if digits.len() >= 4 && rest.len() >= length {
            let hours: i32 = digits[..2].parse().ok()?;
            let minutes: i32 = digits[2..4].parse().ok()?;
            let total = hours * 60 + minutes;
            offset_minutes = Some(if sign == '-' { -total } else { total });
            rest = &rest[length..];
        }
    }
    let stamp = WallTime {
        year: Some(year),
        month,
        day,
        seconds,
        micros,
        offset_minutes,
    };
    Some((Some(stamp), rest))
}

/// `Tue Dec  1 10:00:00 2026` at the start of `text` (the weekday may be missing).
pub fn ctime_prefix(text: &str) -> Option<(Option<WallTime>, &str)> {
    let after_weekday = match WEEKDAYS.iter().find(|w| text.starts_with(*w)) {
        Some(w) => text[w.len()..].strip_prefix(' ')?,
        None => return None,
    };
    let (stamp, rest) = syslog_prefix(after_weekday)?;
    let rest_trimmed = rest.trim_start();
    let (year, after_year) = leading_number(rest_trimmed)?;
    if !(1970..=9999).contains(&year) {
        return None;
    }
    let stamp = stamp.map(|s| WallTime {
        year: i32::try_from(year).ok(),
        ..s
    });
    Some((stamp, after_year))
}

/// `Dec  1 10:00:00[.ffffff]` at the start of `text`. A month word that is not English (journald
/// prints the locale's, e.g. `апр 28 01:23:30`) is accepted but gives no stamp.
pub fn syslog_prefix(text: &str) -> Option<(Option<WallTime>, &str)> {
    let (word, rest) = text.split_once(' ')?;
    let word_chars = word.chars().count();
    if !(3..=10).contains(&word_chars) || !word.chars().all(|c| c.is_alphabetic() || c == '.') {
        return None;
    }
    let rest = rest.trim_start();
    let (day, rest) = leading_number(rest)?;
    if !(1..=31).contains(&day) {
        return None;
    }
    let rest = rest.strip_prefix(' ')?;
    let (seconds, rest) = clock_time(rest)?;
    let (micros, rest) = optional_fraction(rest, &['.'])?;
    let month = MONTHS
        .iter()
        .position(|m| word.eq_ignore_ascii_case(m))
        .and_then(|i| u8::try_from(i + 1).ok());
    let stamp = month.map(|month| WallTime {
        year: None,
        month,
        day: u8::try_from(day).unwrap_or(0),
        seconds,
        micros,
        offset_minutes: None,
    });
    Some((stamp, rest))
}

/// `HH:MM:SS` → seconds since midnight, and the rest.
fn clock_time(text: &str) -> Option<(u32, &str)> {
    let bytes = text.as_bytes();
    if bytes.len() < 8 || bytes[2] != b':' || bytes[5] != b':' {
        return None;
    }
    let hours: u32 = text.get(..2)?.parse().ok()?;
    let minutes: u32 = text.get(3..5)?.parse().ok()?;
    let seconds: u32 = text.get(6..8)?.parse().ok()?;
    if hours > 23 || minutes > 59 || seconds > 60 {
        return None;
    }
    Some((hours * 3600 + minutes * 60 + seconds, &text[8..]))
}

/// A fraction after one of `marks`, if there is one: microseconds (0 without), and the rest.
fn optional_fraction<'a>(text: &'a str, marks: &[char]) -> Option<(u32, &'a str)> {
    match text.strip_prefix(marks) {
        Some(fraction) => fraction_micros(fraction),
        None => Some((0, text)),
    }
}

/// Leading fraction digits → microseconds, and the rest.
fn fraction_micros(text: &str) -> Option<(u32, &str)> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    if digits == 0 {
        return None;
    }
    let kept = &text[..digits.min(6)];
    let value: u32 = kept.parse().ok()?;
    let scale = 10u32.pow(6 - u32::try_from(kept.len()).ok()?);
    Some((value * scale, &text[digits..]))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i32, month: u8, day: u8) -> i64 {
    let year = i64::from(year) - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn wall(text: &str) -> WallTime {
        parse_wall(text).unwrap_or_else(|| panic!("{text}"))
    }

    #[test]
    fn formats_agree_on_the_same_moment() {
        let iso = wall("2026-12-01T10:00:00");
        let ctime = wall("Tue Dec  1 10:00:00 2026");
        let spaced = wall("2026-12-01 10:00:00,250");
        assert_eq!(ctime.seconds_since(&iso), Some(0.0));
        assert_eq!(spaced.seconds_since(&iso), Some(0.25));
        // Syslog has no year: it borrows the other's.
        let syslog = wall("Dec  1 10:00:05");
        assert_eq!(syslog.seconds_since(&iso), Some(5.0));
    }

    #[test]
    fn offsets_compare_only_with_offsets() {
        let utc = wall("2026-12-01T10:00:00Z");
        let paris = wall("2026-12-01T11:00:00+01:00");
        let compact = wall("2026-12-01T11:00:00+0100");
        assert_eq!(paris.seconds_since(&utc), Some(0.0));
        assert_eq!(compact.seconds_since(&utc), Some(0.0));
        assert_eq!(utc.seconds_since(&wall("2026-12-01T10:00:00")), None);
    }

    #[test]
    fn moments_from_flags() {
        assert_eq!(
            parse_moment("355.041267"),
            Some(Moment::SinceBoot(355_041_267))
        );
        assert_eq!(parse_moment("12"), Some(Moment::SinceBoot(12_000_000)));
        assert!(matches!(
            parse_moment("2026-12-01T10:00:00"),
            Some(Moment::Wall(_))
        ));
        assert_eq!(parse_moment("yesterday"), None);
        assert_eq!(parse_moment("2026-12-01T10:00:00 trailing"), None);
    }

    #[test]
    fn localized_syslog_month_is_stripped_without_a_stamp() {
        let (stamp, rest) = syslog_prefix("апр 28 01:23:30 PC kernel: x").expect("prefix");
        assert_eq!(stamp, None);
        assert_eq!(rest, " PC kernel: x");
    }

    #[test]
    fn crosses_a_month_and_a_leap_day() {
        let a = wall("2024-03-01T00:00:00");
        let b = wall("2024-02-28T23:59:59");
        assert_eq!(a.seconds_since(&b), Some(86_401.0));
    }
}
