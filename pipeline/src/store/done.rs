//! The done-set: the ids of the completions stored in a source's `completions.jsonl.zst`,
//! rebuilt on every start of `gen run` (a million records in well under a second).
//!
//! The file is read with [`frames::scan_frames`] — frames checked in parallel, a torn tail cut
//! off first, exactly the frames [`frames::scan`] accepts. A data frame's ids come from the id
//! index entry after it when that entry matches the frame's bytes ([`index`]), so nothing is
//! decompressed; a frame without a matching entry (files written before the index, a frame
//! whose entry a crash cut off) is decoded and only each record's `id` is read
//! ([`index::record_id`]), the same function the writer used to fill the entry.
//!
//! The set holds the ids as strings, not hashes: membership is then exact by construction,
//! and a million ids of ~30 bytes cost about 70 MB, well inside the run's budget.

use std::collections::HashSet;
use std::io;
use std::path::Path;

use super::frames::{self, FrameBody};
use super::index;

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

/// The ids of one frame's records, in order.
fn frame_ids(body: FrameBody<'_>) -> io::Result<Vec<String>> {
    match body {
        FrameBody::Ids(ids) => Ok(ids.into_iter().map(str::to_owned).collect()),
        FrameBody::Text(text) => text
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .map(index::record_id)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use serde_json::json;

    use super::*;
    use crate::store::frames::{FrameWriter, open_private};

    fn open(path: &Path, indexed: bool) -> FrameWriter {
        let (writer, _) = if indexed {
            FrameWriter::open_indexed(path)
        } else {
            FrameWriter::open(path)
        }
        .expect("open");
        writer
    }

    /// Writes frames of ids `{prefix}-{frame}-{i}`, `sizes[frame]` records each; returns them.
    fn write_frames(path: &Path, indexed: bool, prefix: &str, sizes: &[usize]) -> Vec<String> {
        let mut writer = open(path, indexed);
        let mut ids = Vec::new();
        for (frame, size) in sizes.iter().enumerate() {
            for i in 0..*size {
                let id = format!("{prefix}-{frame}-{i}");
                writer
                    .push(&json!({"id": id, "content": "x".repeat(100 * i)}))
                    .expect("push");
                ids.push(id);
            }
            writer.flush().expect("flush");
        }
        ids
    }

    /// For each valid data frame: whether its ids came from its index entry (not decoding).
    fn from_index(path: &Path) -> Vec<bool> {
        let (per_frame, _) =
            frames::scan_frames(path, |body| Ok(matches!(body, FrameBody::Ids(_)))).expect("scan");
        per_frame
    }

    fn len(path: &Path) -> u64 {
        fs_err::metadata(path).expect("meta").len()
    }

    fn append(path: &Path, bytes: &[u8]) {
        let mut file = open_private(path).expect("append");
        file.write_all(bytes).expect("write");
    }

    /// One more flush as the writer makes it (data frame + entry when indexed), not appended.
    fn next_flush(ids: &[&str], indexed: bool) -> (Vec<u8>, usize) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("one.jsonl.zst");
        let mut writer = open(&path, indexed);
        for id in ids {
            writer.push(&json!({"id": id})).expect("push");
        }
        writer.flush().expect("flush");
        let bytes = fs_err::read(&path).expect("read");
        let data = zstd::zstd_safe::find_frame_compressed_size(&bytes).expect("frame");
        (bytes, data)
    }

    /// A crash mid-flush leaves part of a data frame or of the index entry after it: the
    /// rebuild gives exactly the ids of the intact data frames and cuts the tail at the end of
    /// the last one, with or without an index, and a writer appends after it.
    #[test]
    fn a_torn_tail_leaves_exactly_the_ids_of_intact_frames() {
        for indexed in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("completions.jsonl.zst");
            let mut intact: HashSet<String> = write_frames(&path, indexed, "s", &[10; 5])
                .into_iter()
                .collect();
            assert_eq!(from_index(&path), [indexed; 5]);
            let good_len = len(&path);

            // The next flush, torn at every length: a torn data frame gives none of its ids and
            // is cut; a whole data frame with a torn entry is intact (decoded), only the entry
            // is cut.
            let (torn, data_len) = next_flush(&["torn-1", "torn-2"], indexed);
            assert_eq!(data_len < torn.len(), indexed);
            for cut in 1..torn.len() {
                append(&path, &torn[..cut]);
                let mut expected = intact.clone();
                let mut kept = good_len;
                if cut >= data_len {
                    expected.extend(["torn-1".to_owned(), "torn-2".to_owned()]);
                    kept += data_len as u64;
                }
                assert_eq!(completed_ids(&path).expect("ids"), expected, "cut at {cut}");
                assert_eq!(len(&path), kept, "cut at {cut}");
                fs_err::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .expect("open")
                    .set_len(good_len)
                    .expect("truncate");
            }

            // A whole data frame with a flipped byte is cut with what follows, even when its
            // entry is intact: the entry no longer matches, and decoding fails the checksum.
            let mut corrupt = torn.clone();
            corrupt[data_len / 2] ^= 0x55;
            append(&path, &corrupt);
            append(&path, &torn);
            assert_eq!(completed_ids(&path).expect("ids"), intact);
            assert_eq!(len(&path), good_len);

            // Appending after the repair yields a readable file with the new id.
            let (mut writer, scan) = if indexed {
                FrameWriter::open_indexed(&path)
            } else {
                FrameWriter::open(&path)
            }
            .expect("reopen");
            assert_eq!(scan.records, 50);
            writer.push(&json!({"id": "after"})).expect("push");
            writer.flush().expect("flush");
            intact.insert("after".into());
            assert_eq!(completed_ids(&path).expect("ids"), intact);
            assert_eq!(from_index(&path), [indexed; 6]);
        }
    }

    /// An entry vouches only for the exact bytes it was written after: a data frame replaced
    /// by another (here one of another flush, keeping the old entry) is decoded, and its own
    /// ids count, not the entry's.
    #[test]
    fn an_entry_that_does_not_match_its_data_frame_is_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("completions.jsonl.zst");
        write_frames(&path, true, "s", &[3, 3]);
        let bytes = fs_err::read(&path).expect("read");
        let first = zstd::zstd_safe::find_frame_compressed_size(&bytes).expect("frame");
        let (other, other_len) = next_flush(&["new-1", "new-2"], true);
        let mut replaced = other[..other_len].to_vec();
        replaced.extend_from_slice(&bytes[first..]);
        fs_err::write(&path, &replaced).expect("write");

        let mut expected: HashSet<String> = ["new-1", "new-2", "s-1-0", "s-1-1", "s-1-2"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(completed_ids(&path).expect("ids"), expected);
        assert_eq!(from_index(&path), [false, true]);
        assert_eq!(len(&path), replaced.len() as u64, "nothing is cut");

        // An entry moved after another data frame, or standing alone, vouches for nothing.
        let entry_of_new = &other[other_len..];
        let mut moved = bytes[..first].to_vec();
        moved.extend_from_slice(entry_of_new);
        moved.extend_from_slice(entry_of_new);
        fs_err::write(&path, &moved).expect("write");
        expected = ["s-0-0", "s-0-1", "s-0-2"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(completed_ids(&path).expect("ids"), expected);
        assert_eq!(from_index(&path), [false]);
        assert_eq!(len(&path), moved.len() as u64);
    }

    /// A file begun without an index (older `gen`) and continued with one reads whole, and
    /// the parallel reader accepts exactly what the line reader accepts.
    #[test]
    fn old_frames_without_entries_and_new_ones_with_read_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.jsonl.zst");
        // Frames of 1 to 13 records.
        let sizes: Vec<usize> = (0..40).map(|n| 1 + n % 13).collect();
        let mut all = write_frames(&path, false, "old", &sizes);
        all.extend(write_frames(&path, true, "new", &sizes));
        let mut sequential = HashSet::new();
        let line_scan = frames::scan(&path, |line| {
            sequential.insert(index::record_id(line)?);
            Ok(())
        })
        .expect("scan");
        let (_, parallel_scan) = frames::scan_frames(&path, |_| Ok(())).expect("scan");
        assert_eq!(parallel_scan, line_scan);
        assert_eq!(sequential, all.into_iter().collect());
        assert_eq!(completed_ids(&path).expect("ids"), sequential);
        let flags = from_index(&path);
        assert_eq!(flags.len(), 80);
        assert!(flags[..40].iter().all(|f| !f) && flags[40..].iter().all(|f| *f));
    }

    /// The entries are invisible to plain zstd readers: the streaming decoder (what `zstd -d`,
    /// `gen export` and Python read with) gives the same JSONL with or without them.
    #[test]
    fn a_streaming_decoder_reads_the_same_jsonl_with_or_without_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plain = dir.path().join("plain.jsonl.zst");
        let indexed = dir.path().join("indexed.jsonl.zst");
        write_frames(&plain, false, "s", &[5, 1, 7]);
        write_frames(&indexed, true, "s", &[5, 1, 7]);
        assert!(len(&indexed) > len(&plain));
        let decode = |path: &Path| {
            zstd::stream::decode_all(&fs_err::read(path).expect("read")[..]).expect("decode")
        };
        let text = decode(&plain);
        assert_eq!(text.iter().filter(|b| **b == b'\n').count(), 13);
        assert_eq!(decode(&indexed), text);
        let mut lines = Vec::new();
        frames::scan(&indexed, |line| {
            lines.extend_from_slice(line);
            lines.push(b'\n');
            Ok(())
        })
        .expect("scan");
        assert_eq!(lines, text);
    }

    #[test]
    fn a_missing_file_is_an_empty_set_and_a_bad_record_is_an_error() {
        for indexed in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("c.jsonl.zst");
            assert!(completed_ids(&path).expect("ids").is_empty());
            let mut writer = open(&path, indexed);
            writer.push(&json!({"no": "id"})).expect("push");
            writer.flush().expect("flush");
            assert!(completed_ids(&path).is_err());
        }
    }
}
