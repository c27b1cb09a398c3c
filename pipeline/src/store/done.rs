//! The done-set: the ids of the completions stored in a source's `completions.jsonl.zst`,
//! rebuilt on every start of `gen run` (a million records in about a second).
//!
//! The file is read with [`frames::scan_frames`] — frames decoded in parallel, a torn tail cut
//! off first, exactly the frames [`frames::scan`] accepts — and only each record's `id` is
//! read: `CompletionRecord` serializes `id` first, so a line starts with `{"id":"` and the id
//! runs to the next quote unless it holds an escape. Any other line (escapes, another key
//! order) is parsed as JSON, so the fast path only skips work, never changes the answer.
//!
//! The set holds the ids as strings, not hashes: membership is then exact by construction,
//! and a million ids of ~30 bytes cost about 70 MB, well inside the run's budget.

use std::collections::HashSet;
use std::io;
use std::path::Path;

use serde::Deserialize;

use super::frames;

const FAST_PREFIX: &[u8] = br#"{"id":""#;

/// Ids with a stored completion, cutting a torn tail off `path` first. A missing file is empty.
pub fn completed_ids(path: &Path) -> io::Result<HashSet<String>> {
    let (per_frame, scan) = frames::scan_frames(path, frame_ids)?;
    frames::cut_torn_tail(path, &scan)?;
    let mut ids = HashSet::with_capacity(scan.records as usize);
    for frame in per_frame {
        ids.extend(frame);
    }
    Ok(ids)
}

/// The ids of one frame's lines, in order.
fn frame_ids(text: &[u8]) -> io::Result<Vec<String>> {
    text.split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(record_id)
        .collect()
}

#[derive(Deserialize)]
struct IdOnly {
    id: String,
}

/// The `id` of one JSON record.
fn record_id(line: &[u8]) -> io::Result<String> {
    if let Some(rest) = line.strip_prefix(FAST_PREFIX)
        && let Some(end) = memchr::memchr2(b'"', b'\\', rest)
        && rest[end] == b'"'
        && let Ok(id) = std::str::from_utf8(&rest[..end])
        && !id.bytes().any(|b| b < 0x20)
    {
        return Ok(id.to_owned());
    }
    let record: IdOnly = serde_json::from_slice(line).map_err(io::Error::other)?;
    Ok(record.id)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use serde_json::json;

    use super::*;
    use crate::store::frames::{FrameWriter, open_private};

    #[test]
    fn ids_are_read_fast_or_by_parsing_with_the_same_answer() {
        for (line, id) in [
            (r#"{"id":"alpha-00ff","source":"alpha"}"#, "alpha-00ff"),
            (r#"{"id":"a\"b","x":1}"#, "a\"b"),
            (r#"{"id":"caf\u00e9"}"#, "café"),
            (r#"{"id":"café"}"#, "café"),
            (r#"{"source":"s","id":"later"}"#, "later"),
            (r#"{ "id" : "spaced" }"#, "spaced"),
        ] {
            assert_eq!(record_id(line.as_bytes()).expect(line), id, "{line}");
        }
        for bad in [r#"{"source":"no id"}"#, r#"{"id":3}"#, "not json"] {
            assert!(record_id(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    /// A crash mid-flush leaves part of a frame: the rebuild gives exactly the ids of the
    /// intact frames, cuts the tail, and a writer appends after it.
    #[test]
    fn a_torn_tail_leaves_exactly_the_ids_of_intact_frames() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("completions.jsonl.zst");
        let (mut writer, _) = FrameWriter::open(&path).expect("open");
        let mut intact = HashSet::new();
        for frame in 0..5 {
            for i in 0..10 {
                let id = format!("s-{frame}-{i}");
                writer
                    .push(&json!({"id": id, "content": "x".repeat(100 * i)}))
                    .expect("push");
                intact.insert(id);
            }
            writer.flush().expect("flush");
        }
        drop(writer);
        let good_len = fs_err::metadata(&path).expect("meta").len();

        // The next frame, torn at every possible length: never one of its ids, always the cut.
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), 3).expect("encoder");
        encoder.include_checksum(true).expect("checksum");
        encoder
            .write_all(b"{\"id\":\"torn-1\"}\n{\"id\":\"torn-2\"}\n")
            .expect("write");
        let torn = encoder.finish().expect("finish");
        for cut in 1..torn.len() {
            let mut file = open_private(&path).expect("append");
            file.write_all(&torn[..cut]).expect("write");
            drop(file);
            assert_eq!(completed_ids(&path).expect("ids"), intact, "cut at {cut}");
            assert_eq!(fs_err::metadata(&path).expect("meta").len(), good_len);
        }

        // A whole frame with a flipped byte fails its checksum: cut too, with what follows.
        let mut corrupt = torn.clone();
        let middle = corrupt.len() / 2;
        corrupt[middle] ^= 0x55;
        let mut file = open_private(&path).expect("append");
        file.write_all(&corrupt).expect("write");
        file.write_all(&torn).expect("write");
        drop(file);
        assert_eq!(completed_ids(&path).expect("ids"), intact);
        assert_eq!(fs_err::metadata(&path).expect("meta").len(), good_len);

        // Appending after the repair yields a readable file with the new id.
        let (mut writer, scan) = FrameWriter::open(&path).expect("reopen");
        assert_eq!(scan.records, 50);
        writer.push(&json!({"id": "after"})).expect("push");
        writer.flush().expect("flush");
        intact.insert("after".into());
        assert_eq!(completed_ids(&path).expect("ids"), intact);
    }

    #[test]
    fn the_parallel_reader_agrees_with_the_line_reader_on_many_frames() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.jsonl.zst");
        let records: Vec<_> = (0..3000)
            .map(|i| json!({"id": format!("id-{i}")}))
            .collect();
        let (mut writer, _) = FrameWriter::open(&path).expect("open");
        // Frames of 1 to 13 records.
        for (n, frame) in records.chunks(13).enumerate() {
            for record in &frame[..=(n % frame.len())] {
                writer.push(record).expect("push");
            }
            writer.flush().expect("flush");
        }
        drop(writer);
        let mut sequential = HashSet::new();
        let line_scan = frames::scan(&path, |line| {
            sequential.insert(record_id(line)?);
            Ok(())
        })
        .expect("scan");
        let (_, parallel_scan) = frames::scan_frames(&path, |_| Ok(())).expect("scan");
        assert_eq!(parallel_scan, line_scan);
        assert_eq!(completed_ids(&path).expect("ids"), sequential);
        assert!(sequential.len() > 1000, "{}", sequential.len());
    }

    #[test]
    fn a_missing_file_is_an_empty_set_and_a_bad_record_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.jsonl.zst");
        assert!(completed_ids(&path).expect("ids").is_empty());
        let (mut writer, _) = FrameWriter::open(&path).expect("open");
        writer.push(&json!({"no": "id"})).expect("push");
        writer.flush().expect("flush");
        assert!(completed_ids(&path).is_err());
    }
}
