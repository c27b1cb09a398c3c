//! Counters of a source's stored completions that the done-set does not carry: how many were
//! cut by `max-tokens` (`finish_reason = "length"`). They are counted from
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

use super::atomic;
use super::layout::SourceDir;

/// What [`load`] counted in a source's completions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Stored completions with `finish_reason = "length"`.
    pub truncated: u64,
}

/// `tally.json`: a [`Tally`] and the completions file it was counted from.
#[derive(Debug, Serialize, Deserialize)]
struct Cached {
    bytes: u64,
    modified_ns: u128,
    truncated: u64,
}

/// The file's length and modification time: what says it is the file a count was made from.
fn identity(path: &Path) -> io::Result<Option<(u64, u128)>> {
    match fs_err::metadata(path) {
        Ok(meta) => {
            let modified = meta
                .modified()?
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            Ok(Some((meta.len(), modified)))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Counts the completions of `dir` (from its cache when the file is unchanged).
pub fn load(dir: &SourceDir) -> io::Result<Tally> {
    let path = dir.completions();
    let Some((bytes, modified_ns)) = identity(&path)? else {
        return Ok(Tally::default());
    };
    if let Ok(Some(cached)) = atomic::read_json::<Cached>(&dir.tally())
        && (cached.bytes, cached.modified_ns) == (bytes, modified_ns)
    {
        return Ok(Tally {
            truncated: cached.truncated,
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
    };
    atomic::write_json(&dir.tally(), &cached)
}

/// Only the field counted; the rest of a record is skipped unread.
#[derive(Deserialize)]
struct Finish<'a> {
    #[serde(default, borrow)]
    finish_reason: Option<&'a str>,
}

/// Counts by streaming the file through one zstd decoder (index entries are skippable
/// frames it passes over), a line at a time: the file can be far larger than memory. The
/// done-set has repaired the file before (torn tail cut, damage set aside); a part that still
/// does not decode ends the count, which is only a shortcut for the next start.
fn count(path: &Path) -> io::Result<Tally> {
    use std::io::BufRead as _;
    let mut tally = Tally::default();
    let file = match fs_err::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(tally),
        Err(e) => return Err(e),
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
        if let Ok(record) = serde_json::from_slice::<Finish<'_>>(&line)
            && record.finish_reason == Some("length")
        {
            tally.truncated += 1;
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frames::FrameWriter;

    fn write(dir: &SourceDir, reasons: &[&str]) {
        let (mut writer, _) = FrameWriter::open(&dir.completions()).expect("open");
        for (i, reason) in reasons.iter().enumerate() {
            writer
                .push(&serde_json::json!({"id": format!("p{i}"), "content": "x", "finish_reason": reason}))
                .expect("push");
        }
        writer.flush().expect("flush");
    }

    #[test]
    fn truncations_are_counted_from_the_file_and_recounted_when_it_changes() {
        let temp = tempfile::tempdir().expect("tempdir");
        let dir = SourceDir::new(temp.path());
        assert_eq!(load(&dir).expect("load"), Tally::default());
        write(&dir, &["length", "stop", "length"]);
        assert_eq!(load(&dir).expect("load").truncated, 2);
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
    }
}
