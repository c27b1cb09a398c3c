//! Counters of a source's stored completions that the done-set does not carry: how many were
//! cut by `max-tokens` (`finish_reason = "length"`), how many by the context instead
//! (`cut_by = "context"`), their output tokens (`usage`), and how many were answered without
//! their tool turns (`tool_turns_cut`: the server refused them). They are counted from
//! `completions.jsonl.zst` itself, so a run that generates nothing for a source (it was done,
//! or another source was selected) shows the same count as the run that generated it.
//!
//! Counting decodes the whole file, which the done-set avoids on every start; so the count is
//! kept in `sources/NAME/tally.json` together with the length and modification time of the
//! file it was counted from, and counted again only when the file is not that file any more.
//! The cache is a shortcut, never the truth: a missing, old or unreadable one means a recount.

use std::io;
use std::path::Path;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use super::atomic::{self, if_exists};
use super::layout::SourceDir;

/// What [`load`] counted in a source's completions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Stored completions cut by `max-tokens` (`finish_reason = "length"`, not by the context).
    pub truncated: u64,
    /// Stored completions cut by the context (`cut_by = "context"`).
    pub cut_by_context: u64,
    /// Output tokens of the stored completions (`usage.completion_tokens`).
    pub output_tokens: u64,
    /// Stored completions whose tool turns were left out: the server refused them.
    pub tool_turns_cut: u64,
}

/// `tally.json`: a [`Tally`] and the completions file it was counted from.
#[derive(Debug, Serialize, Deserialize)]
struct Cached {
    bytes: u64,
    modified_ns: u128,
    truncated: u64,
    /// Not counted by older `gen`s: such a cache is counted again.
    output_tokens: Option<u64>,
    /// The same.
    cut_by_context: Option<u64>,
    /// Older `gen`s never cut tool turns: 0 is their count.
    #[serde(default)]
    tool_turns_cut: u64,
}

/// The file's length and modification time: what says it is the file a count was made from.
fn identity(path: &Path) -> io::Result<Option<(u64, u128)>> {
    let Some(meta) = if_exists(fs_err::metadata(path))? else {
        return Ok(None);
    };
    let modified = meta.modified()?.duration_since(UNIX_EPOCH);
    Ok(Some((meta.len(), modified.map_or(0, |d| d.as_nanos()))))
}

/// Counts the completions of `dir` (from its cache when the file is unchanged).
pub fn load(dir: &SourceDir) -> io::Result<Tally> {
    let path = dir.completions();
    let Some((bytes, modified_ns)) = identity(&path)? else {
        return Ok(Tally::default());
    };
    if let Ok(Some(cached)) = atomic::read_json::<Cached>(&dir.tally())
        && (cached.bytes, cached.modified_ns) == (bytes, modified_ns)
        && let (Some(output_tokens), Some(cut_by_context)) =
            (cached.output_tokens, cached.cut_by_context)
    {
        return Ok(Tally {
            truncated: cached.truncated,
            cut_by_context,
            output_tokens,
            tool_turns_cut: cached.tool_turns_cut,
        });
    }
    let tally = count(&path)?;
    save(dir, tally)?;
    Ok(tally)
}

/// Records `tally` as the count of `dir`'s completions file as it is now; the caller vouches
/// that every record it counted is in the file (its writer flushed).
pub fn save(dir: &SourceDir, tally: Tally) -> io::Result<()> {
    let Some((bytes, modified_ns)) = identity(&dir.completions())? else {
        return Ok(());
    };
    let cached = Cached {
        bytes,
        modified_ns,
        truncated: tally.truncated,
        output_tokens: Some(tally.output_tokens),
        cut_by_context: Some(tally.cut_by_context),
        tool_turns_cut: tally.tool_turns_cut,
    };
    atomic::write_json(&dir.tally(), &cached)
}

/// Only the fields counted; the rest of a record is skipped unread.
#[derive(Deserialize)]
struct Counted<'a> {
    #[serde(default, borrow)]
    finish_reason: Option<&'a str>,
    #[serde(default, borrow)]
    cut_by: Option<&'a str>,
    usage: Option<Tokens>,
    #[serde(default)]
    tool_turns_cut: bool,
}

#[derive(Deserialize)]
struct Tokens {
    #[serde(default)]
    completion_tokens: u64,
}

/// Counts by streaming the file through one zstd decoder (index entries are skippable
/// frames it passes over), a line at a time: the file can be far larger than memory. The
/// done-set has repaired the file before (torn tail cut, damage set aside); a part that still
/// does not decode ends the count, which is only a shortcut for the next start.
fn count(path: &Path) -> io::Result<Tally> {
    use std::io::BufRead as _;
    let mut tally = Tally::default();
    let Some(file) = if_exists(fs_err::File::open(path))? else {
        return Ok(tally);
    };
    let mut reader = io::BufReader::new(zstd::stream::read::Decoder::new(file)?);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        // A line that is not a record is the done-set's and `gen verify`'s to report.
        if let Ok(record) = serde_json::from_slice::<Counted<'_>>(&line) {
            if record.finish_reason == Some("length") {
                match record.cut_by {
                    Some("context") => tally.cut_by_context += 1,
                    _ => tally.truncated += 1,
                }
            }
            tally.output_tokens += record.usage.map_or(0, |u| u.completion_tokens);
            tally.tool_turns_cut += u64::from(record.tool_turns_cut);
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frames::FrameWriter;
    use crate::store::records::CutBy;

    fn write(dir: &SourceDir, reasons: &[&str]) {
        let records: Vec<_> = reasons.iter().map(|r| (*r, None)).collect();
        write_cut(dir, &records);
    }

    /// Records with a finish reason and what cut them.
    fn write_cut(dir: &SourceDir, records: &[(&str, Option<CutBy>)]) {
        let (mut writer, _) = FrameWriter::open(&dir.completions()).expect("open");
        for (i, (reason, cut_by)) in records.iter().enumerate() {
            let mut record = serde_json::json!({"id": format!("p{i}"), "content": "x", "finish_reason": reason,
                "usage": {"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}});
            if let Some(cut_by) = cut_by {
                record["cut_by"] = serde_json::to_value(cut_by).expect("serializes");
            }
            writer.push(&record).expect("push");
        }
        writer.flush().expect("flush");
    }

    #[test]
    fn truncations_are_counted_from_the_file_and_recounted_when_it_changes() {
        let temp = tempfile::tempdir().expect("tempdir");
        let dir = SourceDir::new(temp.path());
        assert_eq!(load(&dir).expect("load"), Tally::default());
        write(&dir, &["length", "stop", "length"]);
        assert_eq!(
            load(&dir).expect("load"),
            Tally {
                truncated: 2,
                cut_by_context: 0,
                output_tokens: 30,
                tool_turns_cut: 0,
            }
        );
        assert!(dir.tally().exists());
        // Unchanged: the cache answers (a changed cache proves it was read).
        let mut cached: Cached = atomic::read_json(&dir.tally())
            .expect("read")
            .expect("cached");
        cached.truncated = 7;
        atomic::write_json(&dir.tally(), &cached).expect("write");
        assert_eq!(load(&dir).expect("load").truncated, 7);
        // Appended to: counted again from the file.
        write(&dir, &["length"]);
        assert_eq!(load(&dir).expect("load").truncated, 3);
        // A cache an older `gen` wrote (no token count) is counted again.
        let mut cached: Cached = atomic::read_json(&dir.tally())
            .expect("read")
            .expect("cached");
        cached.output_tokens = None;
        atomic::write_json(&dir.tally(), &cached).expect("write");
        assert_eq!(load(&dir).expect("load").output_tokens, 40);
    }

    #[test]
    fn cuts_by_the_context_are_counted_apart_and_an_older_cache_is_counted_again() {
        let temp = tempfile::tempdir().expect("tempdir");
        let dir = SourceDir::new(temp.path());
        write_cut(
            &dir,
            &[
                ("length", Some(CutBy::Context)),
                ("length", Some(CutBy::MaxTokens)),
                // An older `gen`'s cut: by `max-tokens`.
                ("length", None),
                ("stop", None),
            ],
        );
        let counted = Tally {
            truncated: 2,
            cut_by_context: 1,
            output_tokens: 40,
            tool_turns_cut: 0,
        };
        assert_eq!(load(&dir).expect("load"), counted);
        // A cache written before context cuts were counted apart is not trusted.
        let mut cached: Cached = atomic::read_json(&dir.tally())
            .expect("read")
            .expect("cached");
        cached.cut_by_context = None;
        cached.truncated = 3;
        atomic::write_json(&dir.tally(), &cached).expect("write");
        assert_eq!(load(&dir).expect("load"), counted);
    }
}
