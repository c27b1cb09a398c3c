//! Python tracebacks: the exception to report, its root cause, group leaves, and location.
//!
//! Handles CPython 3.8–3.13 output: `File "...", line N, in f` frames with 3.11 caret lines,
//! chains ("direct cause" / "During handling"), exception groups drawn with a `| ` gutter,
//! multiprocessing's `RemoteTraceback` (unwrapped to the child's frame), multi-line messages,
//! `__main__` classes printed without a module, bare `MemoryError`, and 3.13 colours (stripped by
//! [`normalize`]). It does not decide whether the traceback is the failure; `classify` does.

use crate::text::normalize;
use crate::verdict::{ErrorReport, Language, Location, Raised};

const HEADER: &str = "Traceback (most recent call last):";
const GROUP_HEADER: &str = "Exception Group Traceback (most recent call last):";
const DIRECT_CAUSE: &str = "The above exception was the direct cause of the following exception:";
const DURING_HANDLING: &str = "During handling of the above exception, another exception occurred:";
const MAX_MESSAGE_LINES: usize = 20;

#[derive(Debug, Default)]
struct Block {
    depth: usize,
    header: bool,
    chained: bool,
    remote: bool,
    location: Option<Location>,
    raised: Option<Raised>,
}

/// Parses the last traceback in `text`; `None` when there is none.
pub fn parse(text: &str) -> Option<ErrorReport> {
    let blocks = blocks(text);
    let top: Vec<usize> = (0..blocks.len()).filter(|&i| is_top(&blocks[i])).collect();
    // The last chain: top-level blocks linked by chain separators, ending at the last one.
    let last = *top.iter().rev().find(|&&i| blocks[i].raised.is_some())?;
    let mut first = last;
    for &i in top.iter().rev().skip_while(|&&i| i != last) {
        first = i;
        if !blocks[i].chained {
            break;
        }
    }
    let chain: Vec<&Block> = top
        .iter()
        .filter(|&&i| i >= first && i <= last)
        .map(|&i| &blocks[i])
        .collect();
    let main = blocks[last].raised.clone()?;
    let remote = chain
        .iter()
        .find(|b| b.remote)
        .and_then(|b| b.raised.clone());
    let (exception, root_cause) = match remote {
        // The parent re-raises the child's exception at `pool.py: get`; report the child's frame.
        Some(remote) => (remote, None),
        None if chain.len() > 1 => (main, chain[0].raised.clone()),
        None => (main, None),
    };
    let group_leaves: Vec<Raised> = blocks[last..]
        .iter()
        .filter(|b| !is_top(b) && b.depth > blocks[last].depth)
        .filter_map(|b| b.raised.clone())
        .filter(|r| !is_group(r))
        .collect();
    let memory_related = is_memory(&exception)
        || root_cause.as_ref().is_some_and(is_memory)
        || group_leaves.iter().any(is_memory);
    Some(ErrorReport {
        language: Language::Python,
        exception,
        root_cause,
        group_leaves,
        memory_related,
    })
}

/// Every top-level exception in order (for server logs, where the last may be a wrapper).
pub fn exceptions(text: &str) -> Vec<Raised> {
    blocks(text)
        .into_iter()
        .filter(is_top)
        .filter_map(|b| b.raised)
        .collect()
}

fn is_top(block: &Block) -> bool {
    block.header && block.depth <= 1
}

fn is_group(raised: &Raised) -> bool {
    raised.exception_type.ends_with("ExceptionGroup")
}

/// `MemoryError`, `torch.OutOfMemoryError` / `torch.cuda.OutOfMemoryError`, CUDA OOM messages.
pub fn is_memory(raised: &Raised) -> bool {
    raised.exception_type.ends_with("MemoryError")
        || raised.exception_type.ends_with("OutOfMemoryError")
        || raised.message.contains("CUDA out of memory")
}

fn blocks(text: &str) -> Vec<Block> {
    let text = normalize(text);
    let grouped = text.contains(GROUP_HEADER);
    let mut blocks: Vec<Block> = Vec::new();
    let mut chained_pending = false;
    let mut remote_pending = false;
    // Index of the block whose message is being collected, and how many lines it has.
    let mut collecting: Option<(usize, usize)> = None;
    for raw in text.lines() {
        // A group's separator line (`+-+---- 1 ----`) ends a message.
        let gutter = if grouped {
            strip_gutter(raw)
        } else {
            Some((0, raw))
        };
        let Some((depth, line)) = gutter else {
            collecting = None;
            continue;
        };
        let trimmed = line.trim_start();
        // SGLang logs `Scheduler hit an exception: Traceback (most recent call last):`.
        if trimmed.ends_with(HEADER) || trimmed == GROUP_HEADER {
            blocks.push(Block {
                depth,
                header: true,
                chained: std::mem::take(&mut chained_pending),
                remote: std::mem::take(&mut remote_pending),
                ..Block::default()
            });
            collecting = None;
            continue;
        }
        if trimmed == DIRECT_CAUSE || trimmed == DURING_HANDLING {
            chained_pending = true;
            collecting = None;
            continue;
        }
        let open = blocks
            .iter()
            .rposition(|b| b.header && b.depth == depth && b.raised.is_none());
        if line.starts_with(' ') {
            if let Some(location) = parse_frame(trimmed) {
                if let Some(i) = open {
                    blocks[i].location = Some(location);
                }
                collecting = None;
                continue;
            }
            if let Some((i, n)) = collecting
                && blocks[i].depth == depth
                && n < MAX_MESSAGE_LINES
                && !trimmed.is_empty()
            {
                push_message_line(&mut blocks[i], line);
                collecting = Some((i, n + 1));
            }
            continue;
        }
        if line.is_empty() || ends_message(line) {
            collecting = None;
            continue;
        }
        if let Some(i) = open {
            blocks[i].raised = Some(parse_exception_line(line, blocks[i].location.clone()));
            collecting = Some((i, 0));
        } else if let Some((i, n)) = collecting
            && blocks[i].depth == depth
            && n < MAX_MESSAGE_LINES
            && !looks_like_exception(line)
        {
            push_message_line(&mut blocks[i], line);
            collecting = Some((i, n + 1));
        } else if looks_like_exception(line) && line.contains("RemoteTraceback") {
            remote_pending = true;
            collecting = None;
        } else if depth >= 2 && looks_like_exception(line) {
            // A group leaf that was never raised has no traceback of its own.
            blocks.push(Block {
                depth,
                raised: Some(parse_exception_line(line, None)),
                ..Block::default()
            });
            collecting = Some((blocks.len() - 1, 0));
        } else {
            collecting = None;
        }
    }
    blocks
}

fn push_message_line(block: &mut Block, line: &str) {
    if let Some(raised) = &mut block.raised {
        raised.message.push('\n');
        raised.message.push_str(line);
    }
}

/// Lines that end a multi-line message: warnings, quotes, fatal errors, log prefixes.
fn ends_message(line: &str) -> bool {
    line.starts_with("\"\"\"")
        || line.starts_with("Fatal Python error")
        || line.starts_with('[')
        || line.starts_with(|c: char| c.is_ascii_digit())
        || is_warning(line)
}

/// `/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: ...`
pub fn is_warning(line: &str) -> bool {
    line.split(": ")
        .nth(1)
        .is_some_and(|t| t.ends_with("Warning"))
        && line.contains(".py:")
}

/// `Type: message` or a bare `Type` whose name is a (dotted) identifier.
fn looks_like_exception(line: &str) -> bool {
    let name = line.split_once(": ").map_or(line, |(n, _)| n);
    let last = name.rsplit('.').next().unwrap_or(name);
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
        && last.starts_with(|c: char| c.is_ascii_uppercase())
        && (line.contains(": ")
            || ["Error", "Exception", "Exit", "Interrupt", "Warning"]
                .iter()
                .any(|s| last.ends_with(s)))
}

fn parse_exception_line(line: &str, location: Option<Location>) -> Raised {
    let (exception_type, message) = match line.split_once(": ") {
        Some((name, message)) if !name.contains(' ') => (name, message),
        _ => match line.strip_suffix(':') {
            Some(name) if !name.contains(' ') => (name, ""),
            _ => (line, ""),
        },
    };
    Raised {
        exception_type: exception_type.trim().to_string(),
        message: message.to_string(),
        location,
    }
}

/// `File "x.py", line 12, in f` (traceback) or `File "x.py", line 12 in f` (faulthandler).
pub fn parse_frame(line: &str) -> Option<Location> {
    let rest = line.strip_prefix("File \"")?;
    let (file, rest) = rest.split_once("\", line ")?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let number: u32 = rest[..digits].parse().ok()?;
    let rest = &rest[digits..];
    let function = rest
        .strip_prefix(", in ")
        .or_else(|| rest.strip_prefix(" in "))
        .map(|f| f.trim().to_string());
    Some(Location {
        file: file.to_string(),
        line: number,
        function,
    })
}

/// Exception-group gutter: `  | text`, `  + Exception Group ...`, `  +-+---- 1 ----`.
/// Returns depth (gutter column / 2) and the text, `None` for pure separator lines.
fn strip_gutter(line: &str) -> Option<(usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    if let Some(text) = rest.strip_prefix("| ").or(rest.strip_prefix("+ ")) {
        return Some((indent / 2, text));
    }
    if rest == "|" {
        return Some((indent / 2, ""));
    }
    if rest.starts_with("+-") {
        return None;
    }
    Some((0, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_keyerror_keeps_repr() {
        let text = "Traceback (most recent call last):\n  File \"prep.py\", line 12, in load\n    \
                    row['x']\nKeyError: 'x'\n";
        let report = parse(text).expect("traceback");
        assert_eq!(report.exception.exception_type, "KeyError");
        assert_eq!(report.exception.message, "'x'");
        let location = report.exception.location.expect("location");
        assert_eq!(location.to_string(), "prep.py:12 in load");
        assert!(report.root_cause.is_none());
    }

    #[test]
    fn no_traceback_is_none() {
        assert!(parse("error: shard 3 has no rows\n").is_none());
    }

    #[test]
    fn warnings_after_the_exception_are_not_part_of_the_message() {
        let text = "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n\
                    ValueError: bad\n/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: \
                    UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects\n";
        let report = parse(text).expect("traceback");
        assert_eq!(report.exception.message, "bad");
    }

    #[test]
    fn frames_in_faulthandler_form() {
        let frame = parse_frame("File \"<string>\", line 1 in <module>").expect("frame");
        assert_eq!(frame.line, 1);
        assert_eq!(frame.function.as_deref(), Some("<module>"));
    }
}
