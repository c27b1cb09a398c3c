//! Rust panics and allocation failures in stderr.
//!
//! Three panic formats: before 1.73 `thread 'main' panicked at 'msg', src/x.rs:1:2`; 1.73–1.90
//! `thread 'main' panicked at src/x.rs:1:2:` with the message on the following lines; from 1.91
//! the thread id is added (`thread 'main' (12345) panicked at ...`). Aborts: `memory allocation
//! of N bytes failed`. The first panic is reported (later ones usually propagate it through
//! `join().unwrap()`); backtraces are skipped.

use crate::text::{leading_number, normalize};
use crate::verdict::{ErrorReport, Language, Location, Raised};

/// The first panic or allocation failure in `text`, if any.
pub fn parse(text: &str) -> Option<ErrorReport> {
    let text = normalize(text);
    let lines: Vec<&str> = text.lines().collect();
    let exception = lines.iter().enumerate().find_map(|(i, line)| {
        let Some(bytes) = allocation_failure(line) else {
            return parse_panic(line, &lines[i + 1..]);
        };
        Some(Raised {
            exception_type: "allocation failure".to_string(),
            message: format!("memory allocation of {bytes} bytes failed"),
            location: None,
        })
    })?;
    let memory_related = exception.exception_type == "allocation failure";
    Some(ErrorReport {
        language: Language::Rust,
        exception,
        root_cause: None,
        group_leaves: Vec::new(),
        memory_related,
    })
}

/// `memory allocation of 70368744177664 bytes failed`, also glued to a progress bar before it
/// or a shell's `Aborted` after it (no newline in between).
fn allocation_failure(line: &str) -> Option<u64> {
    let at = line.find("memory allocation of ")?;
    let rest = &line[at + "memory allocation of ".len()..];
    let (bytes, rest) = leading_number(rest)?;
    rest.starts_with(" bytes failed").then_some(bytes)
}

fn parse_panic(line: &str, following: &[&str]) -> Option<Raised> {
    let rest = line.strip_prefix("thread '")?;
    let (thread, rest) = rest.split_once('\'')?;
    // ≥ 1.91: ` (12345)` thread id.
    let rest = match rest.strip_prefix(" (") {
        Some(id) => id.split_once(')')?.1,
        None => rest,
    };
    let rest = rest.strip_prefix(" panicked at ")?;
    let (message, location) = if let Some(quoted) = rest.strip_prefix('\'') {
        // < 1.73: `'msg', src/main.rs:2:5`
        let (message, place) = quoted.rsplit_once("', ")?;
        (message.to_string(), parse_place(place))
    } else {
        // ≥ 1.73: `src/main.rs:2:5:` then the message lines.
        let place = rest.strip_suffix(':').unwrap_or(rest);
        let message: Vec<&str> = following
            .iter()
            .take_while(|l| {
                !l.is_empty()
                    && !l.starts_with("note: ")
                    && !l.starts_with("stack backtrace:")
                    && !l.starts_with("thread '")
            })
            .copied()
            .collect();
        (message.join("\n"), parse_place(place))
    };
    Some(Raised {
        exception_type: "panic".to_string(),
        message,
        location: location.map(|(file, line)| Location {
            file,
            line,
            function: Some(format!("thread '{thread}'")),
        }),
    })
}

/// `src/main.rs:2:5` → (`src/main.rs`, 2)
fn parse_place(place: &str) -> Option<(String, u32)> {
    let (rest, _column) = place.trim().rsplit_once(':')?;
    let (file, line) = rest.rsplit_once(':')?;
    Some((file.to_string(), line.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_1_73_format() {
        let text = "thread 'main' panicked at 'called `Option::unwrap()` on a `None` value', \
                    src/main.rs:4:37\nnote: run with `RUST_BACKTRACE=1`\n";
        let report = parse(text).expect("panic");
        assert_eq!(
            report.exception.message,
            "called `Option::unwrap()` on a `None` value"
        );
        let location = report.exception.location.expect("location");
        assert_eq!((location.file.as_str(), location.line), ("src/main.rs", 4));
    }

    #[test]
    fn format_1_73_to_1_90() {
        let text = "thread 'main' panicked at src/prep.rs:88:14:\nmissing field `prompt`\n\
                    note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        let report = parse(text).expect("panic");
        assert_eq!(report.exception.message, "missing field `prompt`");
        assert_eq!(report.exception.location.expect("location").line, 88);
        assert!(!report.memory_related);
    }

    #[test]
    fn allocation_failure_is_memory_related() {
        let report = parse("memory allocation of 1024 bytes failed\n").expect("abort");
        assert!(report.memory_related);
        assert_eq!(report.exception.exception_type, "allocation failure");
    }
}
