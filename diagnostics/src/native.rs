//! Crash signatures that are not tracebacks, symptom lines, and the last meaningful stderr line.
//!
//! Signatures: `Fatal Python error: ...` (with the shutdown variants `_enter_buffered_busy`,
//! `PyGILState_Release`, `PyCOND_WAIT` and `Python runtime state: finalizing`), faulthandler's
//! `Fatal Python error: Segmentation fault`, glibc heap aborts of three eras, C++
//! `terminate called ...` + `what():`, Rust stack overflow and panics while panicking.
//! Symptoms are lines that report a child's death rather than its cause (resource_tracker,
//! datasets' map, torch's DataLoader, `BrokenProcessPool`); `classify` lets kernel evidence about
//! a child outrank them.

use serde::{Deserialize, Serialize};

use crate::text::{leading_number, normalize};
use crate::traceback::is_warning;

/// Kind of a non-traceback crash signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NativeKind {
    /// `Fatal Python error: ...` other than a segfault.
    FatalPython,
    /// A segfault reported by faulthandler or a shell.
    Segfault,
    /// glibc heap corruption abort.
    Glibc,
    /// C++ `terminate called ...`.
    CppTerminate,
    /// Rust abort: stack overflow or panic while panicking.
    RustAbort,
}

/// A crash signature found in stderr.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NativeSignature {
    /// What kind of crash.
    pub kind: NativeKind,
    /// The signature line, plus `what():` for C++.
    pub line: String,
    /// `Python runtime state: finalizing` or a known shutdown-only function was named.
    pub at_shutdown: bool,
}

/// The first crash signature in `text` (the first one is the cause; later ones are fallout).
pub fn find_signature(text: &str) -> Option<NativeSignature> {
    let text = normalize(text);
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let finalizing = text.contains("Python runtime state: finalizing");
    let found = |kind, line: &str, at_shutdown| {
        let line = line.to_string();
        Some(NativeSignature {
            kind,
            line,
            at_shutdown,
        })
    };
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if let Some(what) = trimmed.strip_prefix("Fatal Python error: ") {
            let kind = if what.starts_with("Segmentation fault") {
                NativeKind::Segfault
            } else {
                NativeKind::FatalPython
            };
            let shutdown_only = ["_enter_buffered_busy", "PyGILState_Release", "PyCOND_WAIT"]
                .iter()
                .any(|f| what.contains(f));
            return found(kind, trimmed, finalizing || shutdown_only);
        }
        if trimmed.starts_with("terminate called") {
            let what = lines[i + 1..]
                .iter()
                .take(2)
                .find(|l| l.trim_start().starts_with("what():"))
                .map(|l| format!(" ({})", l.trim()));
            let line = format!("{trimmed}{}", what.unwrap_or_default());
            return found(NativeKind::CppTerminate, &line, finalizing);
        }
        if is_glibc(trimmed) {
            return found(NativeKind::Glibc, trimmed, finalizing);
        }
        if trimmed.contains("has overflowed its stack")
            || trimmed.starts_with("thread caused non-unwinding panic")
            || trimmed.contains("panicked while processing panic")
        {
            return found(NativeKind::RustAbort, trimmed, false);
        }
        if trimmed.ends_with("Segmentation fault (core dumped)") || trimmed == "Segmentation fault"
        {
            return found(NativeKind::Segfault, trimmed, finalizing);
        }
    }
    None
}

/// glibc ≥ 2.26 (`free(): double free detected in tcache 2`, `malloc(): corrupted top size`,
/// `double free or corruption (out)`), ~2.18–2.25 (`*** Error in `prog': ...`) and older
/// (`*** glibc detected *** prog: ...`).
fn is_glibc(line: &str) -> bool {
    if line.starts_with("*** Error in ") || line.starts_with("*** glibc detected ***") {
        return true;
    }
    const MESSAGES: [&str; 6] = [
        "double free or corruption",
        "corrupted size vs. prev_size",
        "corrupted double-linked list",
        "free(): invalid pointer",
        "munmap_chunk(): invalid pointer",
        "realloc(): invalid",
    ];
    if MESSAGES.iter().any(|m| line.starts_with(m)) {
        return true;
    }
    // `<function>(): <message>` from malloc.c's malloc_printerr.
    let functions = [
        "free(): ",
        "malloc(): ",
        "realloc(): ",
        "malloc_consolidate(): ",
        "_int_free(): ",
    ];
    functions.iter().any(|f| line.starts_with(f))
}

/// A line reporting a child's death rather than its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SymptomKind {
    /// resource_tracker's leaked semaphores/shared memory warning (its parent was SIGKILLed).
    ResourceTracker,
    /// datasets: "One of the subprocesses has abruptly died during map operation".
    DatasetsMapWorkerDied,
    /// torch: "DataLoader worker (pid N) is killed by signal: Killed".
    DataLoaderWorkerKilled,
    /// concurrent.futures: `BrokenProcessPool`.
    BrokenProcessPool,
    /// A launcher or library reporting a child's death by a signal: torchrun's `exitcode: -9`,
    /// joblib's `{SIGKILL(-9)}`, subprocess's `died with <Signals.SIGKILL: 9>`,
    /// multiprocessing's `exitcode=-SIGKILL`, vLLM's `Worker proc ... died unexpectedly`.
    ChildKilled,
}

/// A symptom line and the child pids it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Symptom {
    /// Which symptom.
    pub kind: SymptomKind,
    /// The line as printed.
    pub line: String,
    /// Child pids named in the line (DataLoader, torchrun).
    pub pids: Vec<u32>,
    /// The signal that killed the child, when the line says (9 for `Killed`, `-9`, `SIGKILL`).
    pub signal: Option<i32>,
}

/// All symptom lines in `text`.
pub fn symptoms(text: &str) -> Vec<Symptom> {
    let text = normalize(text);
    let mut found: Vec<Symptom> = Vec::new();
    for line in text.lines().map(str::trim) {
        let kind = if line.contains("resource_tracker: There appear to be")
            && !line.starts_with("warnings.warn(")
        {
            SymptomKind::ResourceTracker
        } else if line.contains("One of the subprocesses has abruptly died") {
            SymptomKind::DatasetsMapWorkerDied
        } else if line.contains("DataLoader worker (pid") {
            SymptomKind::DataLoaderWorkerKilled
        } else if line.contains("BrokenProcessPool")
            || line.contains("A process in the process pool was terminated abruptly")
            || line.contains("A child process terminated abruptly")
        {
            SymptomKind::BrokenProcessPool
        } else if child_signal(line).is_some()
            || (line.contains("Worker proc") && line.contains("died unexpectedly"))
            || line.contains("TerminatedWorkerError")
        {
            SymptomKind::ChildKilled
        } else {
            continue;
        };
        // Rich and IPython tracebacks repeat the raising source line; keep the message.
        if line.starts_with("raise ") || line.starts_with('│') || line.starts_with("-->") {
            continue;
        }
        if found.iter().any(|s| s.kind == kind && s.line == line) {
            continue;
        }
        found.push(Symptom {
            kind,
            pids: pids_in(line),
            signal: child_signal(line),
            line: line.to_string(),
        });
    }
    found
}

/// The signal a symptom line says killed the child.
fn child_signal(line: &str) -> Option<i32> {
    // torch: `is killed by signal: Killed.`; `Signal 9 (SIGKILL) received by PID 14750`.
    if let Some((_, rest)) = line.split_once("killed by signal: ") {
        return crate::batch::signal_word_number(rest);
    }
    if let Some(at) = line.find("Signal ")
        && line.contains("received by PID")
    {
        return leading_number(&line[at + 7..]).and_then(|(n, _)| i32::try_from(n).ok());
    }
    // torchrun: `failed (exitcode: -9) local_rank: 0 (pid: 1322)`, `exitcode  : -9 (pid: 14750)`.
    if let Some(at) = line.find("exitcode") {
        let rest = line[at + 8..].trim_start_matches([' ', ':', '=']);
        if let Some(negative) = rest.strip_prefix('-') {
            if let Some(name) = negative.strip_prefix("SIG") {
                return crate::batch::signal_number(name.split(['>', ' ']).next().unwrap_or(""));
            }
            return leading_number(negative).and_then(|(n, _)| i32::try_from(n).ok());
        }
    }
    // joblib: `{SIGKILL(-9)}`; subprocess: `died with <Signals.SIGKILL: 9>`.
    if let Some(at) = line.find("{SIG").or_else(|| line.find("<Signals.SIG")) {
        let name = line[at..]
            .trim_start_matches(['{', '<'])
            .trim_start_matches("Signals.");
        let name = name.split(['(', ':', '}', '>']).next().unwrap_or("");
        return crate::batch::signal_number(name);
    }
    if let Some((_, rest)) = line.split_once("returned non-zero exit status -") {
        return leading_number(rest).and_then(|(n, _)| i32::try_from(n).ok());
    }
    None
}

/// Pids after `(pid `, `(pid(s) ` or `(pid: `: `DataLoader worker (pid(s) 1234, 1235) exited`,
/// torchrun's `local_rank: 0 (pid: 1322)`, `received by PID 14750`.
fn pids_in(line: &str) -> Vec<u32> {
    if let Some(at) = line.find("received by PID ") {
        return leading_number(&line[at + 16..])
            .and_then(|(n, _)| u32::try_from(n).ok())
            .into_iter()
            .collect();
    }
    let Some(at) = line.find("(pid") else {
        return Vec::new();
    };
    let rest = &line[at + 4..];
    let rest = rest.strip_prefix("(s)").unwrap_or(rest);
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    let list = rest.split(')').next().unwrap_or("");
    list.split([',', ' '])
        .filter_map(|p| leading_number(p.trim()).and_then(|(n, _)| u32::try_from(n).ok()))
        .collect()
}

/// Whether a stderr line is noise for the "last line" fallback (warnings, progress bars, tips).
pub fn is_noise(line: &str) -> bool {
    let trimmed = line.trim();
    trimmed.is_empty()
        || is_warning(trimmed)
        || trimmed.starts_with("warnings.warn(")
        || trimmed.contains("resource_tracker:")
        || trimmed.contains("%|")
        || trimmed.starts_with("note: run with `RUST_BACKTRACE")
        || trimmed.starts_with("note: Some details are omitted")
        || trimmed == "\"\"\""
}

/// The last line that reads as a Python exception (`RuntimeError: ...`, `module.Error: ...`),
/// for logs that kept the message but not its traceback.
pub fn last_exception_line(text: &str) -> Option<String> {
    normalize(text)
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| {
            let Some((name, _)) = line.split_once(": ") else {
                return false;
            };
            let last = name.rsplit('.').next().unwrap_or(name);
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
                && (last.ends_with("Error") || last.ends_with("Exception"))
        })
        .map(str::to_string)
}

/// Last non-noise line of stderr (`sys.exit("msg")`, a logged error), if any.
pub fn last_meaningful_line(text: &str) -> Option<String> {
    normalize(text)
        .lines()
        .rev()
        .find(|l| !is_noise(l))
        .map(|l| l.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_eras() {
        for line in [
            "free(): double free detected in tcache 2",
            "*** Error in `python3': double free or corruption (fasttop): 0x0000000001c4e010 ***",
            "*** glibc detected *** python: free(): invalid pointer: 0x00007f7c8c000010 ***",
        ] {
            let signature = find_signature(line).expect(line);
            assert_eq!(signature.kind, NativeKind::Glibc, "{line}");
        }
    }

    #[test]
    fn shutdown_fatal_errors() {
        let text = "Fatal Python error: PyCOND_WAIT(gil_cond) failed\n\
                    Python runtime state: initialized\n";
        let signature = find_signature(text).expect("fatal");
        assert_eq!(signature.kind, NativeKind::FatalPython);
        assert!(signature.at_shutdown);
        let text =
            "Fatal Python error: Aborted\n\nCurrent thread 0x00007f (most recent call first):\n";
        assert!(!find_signature(text).expect("fatal").at_shutdown);
    }

    #[test]
    fn cpp_terminate_keeps_what() {
        let text = "terminate called after throwing an instance of 'std::runtime_error'\n  \
                    what():  arrow thread pool shut down\n";
        let signature = find_signature(text).expect("terminate");
        assert_eq!(signature.kind, NativeKind::CppTerminate);
        assert!(
            signature
                .line
                .contains("what():  arrow thread pool shut down")
        );
    }

    #[test]
    fn dataloader_pids() {
        let found =
            symptoms("RuntimeError: DataLoader worker (pid(s) 1234, 1235) exited unexpectedly");
        assert_eq!(found[0].pids, vec![1234, 1235]);
        let found =
            symptoms("RuntimeError: DataLoader worker (pid 77) is killed by signal: Killed.");
        assert_eq!(found[0].pids, vec![77]);
    }

    #[test]
    fn last_line_skips_noise() {
        let text = "error: shard 3 has no rows\n/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: \
                    UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to \
                    clean up at shutdown\n  warnings.warn('resource_tracker: There appear to be %d '\n";
        assert_eq!(
            last_meaningful_line(text).as_deref(),
            Some("error: shard 3 has no rows")
        );
    }
}
