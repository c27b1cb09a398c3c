//! Append-only zstd JSONL in independently decodable frames.
//!
//! Every flush writes one complete zstd frame (with a content checksum) and fsyncs, so after a
//! crash the file is a run of whole frames plus, at worst, one torn frame at the end. On open
//! the torn tail is cut off ([`repair`]) before anything is appended: appending after a torn
//! frame would corrupt the stream for every reader. A writer opened with
//! [`FrameWriter::open_indexed`] (completions) follows each data frame with an id index entry,
//! a skippable frame every decoder passes over ([`index`]), in the same write.
//!
//! Two readers share one rule — a frame is valid if it is whole, decodes with its checksum and
//! holds whole lines (a skippable frame is valid and holds none); reading stops at the first
//! frame that is not: [`scan`] calls back line by line in order, [`scan_frames`] checks frames
//! in parallel (they are independent) for the start of `gen run`, where a million records must
//! be read in about a second. It takes a data frame's ids from the entry after it when the
//! entry's checksum matches the frame's bytes — the frame is then exactly as written, so it
//! decodes — and decodes the frame otherwise.

use std::io::{self, Read as _, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;
use zstd::zstd_safe;

use super::index;

const LEVEL: i32 = 3;

/// Compressed bytes read and decoded per parallel batch: bounds the reader's memory to about
/// this plus one decoded frame per thread.
const BATCH_BYTES: usize = 32 << 20;

/// A frame header may claim any content size; above this the frame is decoded by streaming,
/// which allocates as the data actually arrives, rather than reserved up front.
const MAX_RESERVE: u64 = 256 << 20;

/// What reading a framed file found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scan {
    /// Bytes of whole, valid frames from the start of the file.
    pub valid_len: u64,
    /// Bytes after them that do not form a valid frame (a torn write).
    pub torn_bytes: u64,
    pub records: u64,
}

/// Calls `on_line` for every JSONL line in the valid frames of `path`. A missing file is empty.
pub fn scan(path: &Path, mut on_line: impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<Scan> {
    let bytes = match fs_err::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Scan::default()),
        Err(e) => return Err(e),
    };
    let mut scan = Scan::default();
    let mut offset = 0usize;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        let Ok(size) = zstd_safe::find_frame_compressed_size(rest) else {
            break;
        };
        let Ok(decoded) = zstd::stream::decode_all(&rest[..size]) else {
            break;
        };
        // A frame is only valid if it holds whole lines.
        if !decoded.is_empty() && decoded.last() != Some(&b'\n') {
            break;
        }
        for line in decoded.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            on_line(line)?;
            scan.records += 1;
        }
        offset += size;
    }
    scan.valid_len = offset as u64;
    scan.torn_bytes = (bytes.len() - offset) as u64;
    Ok(scan)
}

/// A valid data frame as [`scan_frames`] hands it over.
#[derive(Debug)]
pub enum FrameBody<'a> {
    /// Its decoded lines: a run of whole `\n`-terminated lines.
    Text(&'a [u8]),
    /// The ids of its records, from the id index entry after it, which matched the frame's
    /// compressed bytes (see [`index`]); the frame was not decoded.
    Ids(Vec<&'a str>),
}

/// Like [`scan`], but frames are read in parallel and `on_frame` is called once per valid data
/// frame, on a worker thread; the results come back in file order. A data frame followed by a
/// matching id index entry is checked by hashing instead of decoding; any other is decoded. An
/// error from `on_frame` on a valid frame is returned; frames after the first invalid one are
/// never looked at.
pub fn scan_frames<T: Send>(
    path: &Path,
    on_frame: impl Fn(FrameBody<'_>) -> io::Result<T> + Sync,
) -> io::Result<(Vec<T>, Scan)> {
    scan_frames_batched(path, BATCH_BYTES, on_frame)
}

/// A whole frame and, when it is a data frame and the next frame is an id index entry, that
/// entry.
struct Unit {
    data: Range<usize>,
    entry: Option<Range<usize>>,
}

impl Unit {
    fn end(&self) -> usize {
        self.entry.as_ref().unwrap_or(&self.data).end
    }
}

fn scan_frames_batched<T: Send>(
    path: &Path,
    batch_bytes: usize,
    on_frame: impl Fn(FrameBody<'_>) -> io::Result<T> + Sync,
) -> io::Result<(Vec<T>, Scan)> {
    let mut file = match fs_err::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Scan::default())),
        Err(e) => return Err(e),
    };
    let file_len = file.metadata()?.len();
    let mut results = Vec::new();
    let mut scan = Scan::default();
    // Bytes read but not yet checked; they start at file offset `scan.valid_len`.
    let mut pending = Vec::new();
    let mut want = batch_bytes;
    let mut eof = false;
    loop {
        if !eof && pending.len() < want {
            let missing = (want - pending.len()) as u64;
            let read = (&mut file).take(missing).read_to_end(&mut pending)?;
            eof = (read as u64) < missing;
        }
        let units = whole_units(&pending, eof);
        let Some(consumed) = units.last().map(Unit::end) else {
            if eof {
                break;
            }
            // A frame larger than a batch (or garbage up to the end of the file).
            want = pending.len() * 2;
            continue;
        };
        let checked: Vec<io::Result<Checked<T>>> = units
            .par_iter()
            .map_init(FrameDecoder::new, |decoder, unit| {
                let data = &pending[unit.data.clone()];
                if is_skippable(data) {
                    return Ok(Checked::Skippable);
                }
                if let Some(entry) = &unit.entry
                    && let Some(ids) = index::verified_ids(&pending[entry.clone()], data)
                {
                    let records = ids.len() as u64;
                    return Ok(Checked::Data(on_frame(FrameBody::Ids(ids))?, records));
                }
                let Some(text) = decoder.decode(data)? else {
                    return Ok(Checked::Invalid);
                };
                let records = count_lines(text);
                Ok(Checked::Data(on_frame(FrameBody::Text(text))?, records))
            })
            .collect();
        for (unit, outcome) in units.iter().zip(checked) {
            match outcome? {
                Checked::Invalid => {
                    scan.torn_bytes = file_len - scan.valid_len;
                    return Ok((results, scan));
                }
                Checked::Skippable => {}
                Checked::Data(value, records) => {
                    results.push(value);
                    scan.records += records;
                }
            }
            scan.valid_len += (unit.end() - unit.data.start) as u64;
        }
        pending.drain(..consumed);
        want = batch_bytes;
    }
    scan.torn_bytes = file_len - scan.valid_len;
    Ok((results, scan))
}

/// What checking one [`Unit`] found.
enum Checked<T> {
    /// Its data frame is not valid: the scan stops there.
    Invalid,
    /// A skippable frame: valid, and holds no records.
    Skippable,
    /// A valid data frame: what `on_frame` returned for it, and its record count.
    Data(T, u64),
}

/// The whole frames at the start of `bytes`, each data frame paired with the id index entry
/// after it. Before the end of the file a data frame that is the last whole frame is left for
/// the next batch, whose bytes may hold its entry.
fn whole_units(bytes: &[u8], eof: bool) -> Vec<Unit> {
    let mut units = Vec::new();
    let mut frames = whole_frames(bytes).into_iter().peekable();
    while let Some(data) = frames.next() {
        let skippable = is_skippable(&bytes[data.clone()]);
        let entry = if skippable {
            None
        } else {
            frames.next_if(|next| index::is_entry(&bytes[next.clone()]))
        };
        if !eof && !skippable && entry.is_none() && frames.peek().is_none() {
            break;
        }
        units.push(Unit { data, entry });
    }
    units
}

/// The byte ranges of the whole frames at the start of `bytes` (whole by their structure; the
/// checksum is checked when they are decoded).
fn whole_frames(bytes: &[u8]) -> Vec<Range<usize>> {
    let mut frames = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        match zstd_safe::find_frame_compressed_size(&bytes[offset..]) {
            Ok(size) if size > 0 => {
                frames.push(offset..offset + size);
                offset += size;
            }
            _ => break,
        }
    }
    frames
}

/// Whether a whole frame is a skippable frame (magic 0x184D2A50 to 0x184D2A5F), which every
/// decoder passes over: it holds no records.
fn is_skippable(frame: &[u8]) -> bool {
    frame
        .first_chunk::<4>()
        .is_some_and(|magic| u32::from_le_bytes(*magic) >> 4 == 0x0184_D2A5)
}

/// Non-empty lines, as [`scan`] counts records.
fn count_lines(text: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', text)
        .filter(|&end| end > 0 && text[end - 1] != b'\n')
        .count() as u64
}

/// One thread's decompression context and output buffer, reused from frame to frame.
struct FrameDecoder {
    context: zstd_safe::DCtx<'static>,
    text: Vec<u8>,
}

impl FrameDecoder {
    fn new() -> FrameDecoder {
        FrameDecoder {
            context: zstd_safe::DCtx::create(),
            text: Vec::new(),
        }
    }

    /// The decoded text of one whole frame, or `None` when it does not decode (a bad checksum
    /// or block) or does not end with a whole line.
    fn decode(&mut self, frame: &[u8]) -> io::Result<Option<&[u8]>> {
        self.text.clear();
        self.context
            .reset(zstd_safe::ResetDirective::SessionOnly)
            .map_err(|code| io::Error::other(zstd_safe::get_error_name(code)))?;
        let decoded = match zstd_safe::get_frame_content_size(frame) {
            Ok(Some(size)) if size <= MAX_RESERVE => {
                self.text.reserve(size as usize);
                self.context
                    .decompress(&mut self.text, frame)
                    .is_ok_and(|written| written as u64 == size)
            }
            Ok(_) => zstd::stream::read::Decoder::with_context(frame, &mut self.context)
                .single_frame()
                .read_to_end(&mut self.text)
                .is_ok(),
            Err(_) => false,
        };
        let whole_lines = self.text.last().is_none_or(|b| *b == b'\n');
        Ok((decoded && whole_lines).then_some(self.text.as_slice()))
    }
}

/// Cuts a torn tail off `path`, returning what was kept.
pub fn repair(path: &Path) -> io::Result<Scan> {
    let (_, scan) = scan_frames(path, |_| Ok(()))?;
    cut_torn_tail(path, &scan)?;
    Ok(scan)
}

/// Cuts the torn tail `scan` found off `path` (nothing when it found none).
pub fn cut_torn_tail(path: &Path, scan: &Scan) -> io::Result<()> {
    if scan.torn_bytes > 0 {
        let file = fs_err::OpenOptions::new().write(true).open(path)?;
        file.set_len(scan.valid_len)?;
        file.sync_all()?;
    }
    Ok(())
}

/// Appends records to a framed file.
#[derive(Debug)]
pub struct FrameWriter {
    path: PathBuf,
    file: fs_err::File,
    buffer: Vec<u8>,
    pending: usize,
    /// Follow each data frame with an id index entry.
    indexed: bool,
    /// Frames written since the last fsync.
    unsynced: bool,
}

impl FrameWriter {
    /// Repairs `path` and opens it for appending (creating it, mode 0600, if missing).
    pub fn open(path: &Path) -> io::Result<(FrameWriter, Scan)> {
        let scan = repair(path)?;
        let file = open_private(path)?;
        Ok((
            FrameWriter {
                path: path.to_path_buf(),
                file,
                buffer: Vec::new(),
                pending: 0,
                indexed: false,
                unsynced: false,
            },
            scan,
        ))
    }

    /// Like [`FrameWriter::open`], for records with an `id` (completions): each data frame is
    /// followed by an id index entry, so the done-set is rebuilt without decoding.
    pub fn open_indexed(path: &Path) -> io::Result<(FrameWriter, Scan)> {
        let (mut writer, scan) = FrameWriter::open(path)?;
        writer.indexed = true;
        Ok((writer, scan))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Buffers one record; nothing reaches the disk until [`FrameWriter::flush`].
    pub fn push<T: Serialize>(&mut self, record: &T) -> io::Result<()> {
        serde_json::to_writer(&mut self.buffer, record).map_err(io::Error::other)?;
        self.buffer.push(b'\n');
        self.pending += 1;
        Ok(())
    }

    /// Records buffered since the last flush.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Bytes buffered since the last flush (uncompressed).
    pub fn pending_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// Writes the buffered records as one frame and fsyncs (frames written before by
    /// [`FrameWriter::write_frame`] too).
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_frame()?;
        if self.unsynced {
            self.file.sync_data()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Writes the buffered records as one frame without waiting for the disk: the frame
    /// survives a crash of the process, and [`FrameWriter::flush`] (every second in `gen run`)
    /// makes it durable. An fsync per frame held the run's loop for milliseconds at a time
    /// on a busy disk, while completions queued up in memory.
    pub fn write_frame(&mut self) -> io::Result<()> {
        if self.pending == 0 {
            return Ok(());
        }
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), LEVEL)?;
        encoder.include_checksum(true)?;
        // The content size in the frame header lets readers decode it in one call.
        encoder.set_pledged_src_size(Some(self.buffer.len() as u64))?;
        encoder.write_all(&self.buffer)?;
        let mut frame = encoder.finish()?;
        // One write: a crash leaves the data frame whole or torn, and its entry whole, torn
        // (cut with the tail) or missing (the frame is then decoded on every start).
        if self.indexed
            && let Some(entry) = index::entry(&self.buffer, &frame)
        {
            frame.extend_from_slice(&entry);
        }
        self.file.write_all(&frame)?;
        self.unsynced = true;
        self.buffer.clear();
        self.pending = 0;
        Ok(())
    }
}

/// Opens `path` for appending, created owner-only: it holds prompts and outputs.
pub fn open_private(path: &Path) -> io::Result<fs_err::File> {
    use fs_err::os::unix::fs::OpenOptionsExt as _;
    fs_err::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<String> {
        let mut out = Vec::new();
        scan(path, |l| {
            out.push(String::from_utf8_lossy(l).into_owned());
            Ok(())
        })
        .expect("scan");
        out
    }

    #[test]
    fn frames_round_trip_and_torn_tails_are_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.jsonl.zst");
        let (mut writer, scan0) = FrameWriter::open(&path).expect("open");
        assert_eq!(scan0, Scan::default());
        writer.push(&serde_json::json!({"id": "a"})).expect("push");
        writer.push(&serde_json::json!({"id": "b"})).expect("push");
        writer.flush().expect("flush");
        writer.push(&serde_json::json!({"id": "c"})).expect("push");
        writer.flush().expect("flush");
        drop(writer);
        assert_eq!(
            lines(&path),
            [r#"{"id":"a"}"#, r#"{"id":"b"}"#, r#"{"id":"c"}"#]
        );

        // Simulate a crash mid-write: half of a third frame.
        let good_len = fs_err::metadata(&path).expect("meta").len();
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), 3).expect("enc");
        encoder.write_all(b"{\"id\":\"d\"}\n").expect("write");
        let frame = encoder.finish().expect("finish");
        let mut file = open_private(&path).expect("open");
        file.write_all(&frame[..frame.len() / 2]).expect("write");
        drop(file);

        let (mut writer, scan1) = FrameWriter::open(&path).expect("reopen");
        assert_eq!(scan1.valid_len, good_len);
        assert!(scan1.torn_bytes > 0);
        assert_eq!(scan1.records, 3);
        writer.push(&serde_json::json!({"id": "e"})).expect("push");
        writer.flush().expect("flush");
        assert_eq!(
            lines(&path).last().map(String::as_str),
            Some(r#"{"id":"e"}"#)
        );
        assert_eq!(lines(&path).len(), 4);
    }

    /// The parallel reader accepts exactly what the line reader accepts, whatever the batch
    /// size and with or without id index entries: frames cut by a batch end are carried over
    /// (a data frame with the entry after it), frames larger than a batch are read whole, and a
    /// torn tail is reported the same.
    #[test]
    fn parallel_scan_agrees_with_the_line_scan_at_any_batch_size() {
        for indexed in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("c.jsonl.zst");
            let (mut writer, _) = if indexed {
                FrameWriter::open_indexed(&path)
            } else {
                FrameWriter::open(&path)
            }
            .expect("open");
            let mut flushes = 0;
            for i in 0..200 {
                writer
                    .push(&serde_json::json!({"id": format!("id-{i}"), "pad": "y".repeat(i * 7)}))
                    .expect("push");
                if i % 9 == 0 {
                    writer.flush().expect("flush");
                    flushes += 1;
                }
            }
            writer.flush().expect("flush");
            flushes += 1;
            drop(writer);
            // A frame as earlier versions wrote it (no content size in its header), then a torn
            // one.
            let legacy = zstd::stream::encode_all(&b"{\"id\":\"legacy\"}\n"[..], 3).expect("enc");
            assert!(matches!(
                zstd_safe::get_frame_content_size(&legacy),
                Ok(None)
            ));
            let mut encoder = zstd::stream::Encoder::new(Vec::new(), 3).expect("enc");
            encoder.write_all(b"{\"id\":\"torn\"}\n").expect("write");
            let frame = encoder.finish().expect("finish");
            let mut file = open_private(&path).expect("open");
            file.write_all(&legacy).expect("write");
            file.write_all(&frame[..frame.len() - 3]).expect("write");
            drop(file);

            let expected_lines = lines(&path);
            let expected_ids: Vec<String> = expected_lines
                .iter()
                .map(|l| index::record_id(l.as_bytes()).expect("id"))
                .collect();
            let expected = scan(&path, |_| Ok(())).expect("scan");
            assert!(expected.torn_bytes > 0);
            assert_eq!(expected.records, 201);
            for batch in [1, 50, 333, 4096, BATCH_BYTES] {
                let (per_frame, got) = scan_frames_batched(&path, batch, |body| {
                    Ok(match body {
                        FrameBody::Text(text) => (
                            false,
                            text.split(|b| *b == b'\n')
                                .filter(|l| !l.is_empty())
                                .map(|l| String::from_utf8_lossy(l).into_owned())
                                .collect::<Vec<_>>(),
                        ),
                        FrameBody::Ids(ids) => (true, ids.into_iter().map(str::to_owned).collect()),
                    })
                })
                .expect("scan_frames");
                assert_eq!(got, expected, "batch {batch}");
                let from_index = per_frame.iter().filter(|(ids, _)| *ids).count();
                if indexed {
                    assert_eq!(from_index, flushes, "batch {batch}");
                    let ids: Vec<String> = per_frame
                        .into_iter()
                        .flat_map(|(from_index, values)| {
                            if from_index {
                                values
                            } else {
                                values
                                    .iter()
                                    .map(|l| index::record_id(l.as_bytes()).expect("id"))
                                    .collect()
                            }
                        })
                        .collect();
                    assert_eq!(ids, expected_ids, "batch {batch}");
                } else {
                    assert_eq!(from_index, 0, "batch {batch}");
                    let lines: Vec<String> =
                        per_frame.into_iter().flat_map(|(_, lines)| lines).collect();
                    assert_eq!(lines, expected_lines, "batch {batch}");
                }
            }
        }
    }

    #[test]
    fn frames_carry_their_content_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.jsonl.zst");
        let (mut writer, _) = FrameWriter::open(&path).expect("open");
        writer.push(&serde_json::json!({"id": "a"})).expect("push");
        writer.flush().expect("flush");
        let bytes = fs_err::read(&path).expect("read");
        assert!(matches!(
            zstd_safe::get_frame_content_size(&bytes),
            Ok(Some(11))
        ));
    }

    #[test]
    fn files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.jsonl.zst");
        drop(FrameWriter::open(&path).expect("open"));
        let mode = fs_err::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
