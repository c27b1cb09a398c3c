//! Config problems, each pointing at `file:line:column`, reported all at once.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One problem in a config file, already located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl Problem {
    /// Locates `span` (byte offsets into `text`) as 1-based line and column.
    pub fn at(text: &str, span: Option<Range<usize>>, message: impl Into<String>) -> Problem {
        let offset = span.map_or(0, |s| s.start.min(text.len()));
        let before = &text[..floor_char_boundary(text, offset)];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        Problem {
            line,
            column,
            message: message.into(),
        }
    }
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to read config `{}`", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", ProblemList { path, problems })]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
    /// A command-line option that does not fit the config (or another option).
    #[error("`{flag}`: {message}")]
    Flag { flag: String, message: String },
}

struct ProblemList<'a> {
    path: &'a Path,
    problems: &'a [Problem],
}

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.path.display();
        let count = self.problems.len();
        let noun = if count == 1 { "problem" } else { "problems" };
        write!(f, "`{name}` has {count} {noun}")?;
        for p in self.problems {
            // toml's messages can span lines; keep each problem on one line.
            let message = p.message.trim().replace('\n', " ");
            write!(f, "\n  {name}:{}:{}  {message}", p.line, p.column)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_lines_and_columns() {
        let text = "a = 1\nbb = 2\n";
        assert_eq!(Problem::at(text, Some(0..1), "x").line, 1);
        let p = Problem::at(text, Some(9..10), "x");
        assert_eq!((p.line, p.column), (2, 4));
        assert_eq!(Problem::at(text, None, "x").line, 1);
    }
}
