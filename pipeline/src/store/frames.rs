//! Append-only zstd JSONL in independently decodable frames.
//!
//! Every flush writes one complete zstd frame (with a content checksum) and fsyncs, so after a
//! crash the file is a run of whole frames plus, at worst, one torn frame at the end. On open
//! the torn tail is cut off ([`repair`]) before anything is appended: appending after a torn
//! frame would corrupt the stream for every reader. A writer opened with
//! [`FrameWriter::open_indexed`] (completions) follows each data frame with an id index entry,
//! a skippable frame every decoder passes over ([`index`]), in the same write.
//!
//! A frame is valid if it is whole, decodes with its checksum and holds whole lines (a
//! skippable frame is valid and holds none). Only bytes at the very end that are not a whole
//! frame are a *torn tail*, what a crash mid-write leaves. Anything else that does not decode —
//! bytes followed by later whole frames, or a whole frame that fails its checksum — is
//! *damage* (a bad disk block, a stray write): the readers report it in [`Scan::damaged`] and
//! go on with the next whole frame, so one bad frame never hides the intact ones after it.
//! Cutting is for torn tails only; damage is set aside by the done-set ([`super::done`]).
//!
//! Two readers share that rule: [`scan`] calls back line by line in order, [`survey`] checks
//! frames in parallel (they are independent) for the start of `gen run`, where a million
//! records must be read in about a second. It takes a data frame's ids from the entry after
//! it when the entry's checksum matches the frame's bytes — the frame is then exactly as
//! written, so it decodes — and decodes the frame otherwise.

use std::io::{self, Read as _, Seek as _, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;
use zstd::zstd_safe;

use super::index;
use super::private::open_private;

const LEVEL: i32 = 3;

/// Compressed bytes read and decoded per parallel batch: bounds the reader's memory to about
/// this plus one decoded frame per thread. 8 MiB is ~200 frames of completions, plenty for
/// the threads; a larger batch only raised a restart's peak RSS.
const BATCH_BYTES: usize = 8 << 20;

/// A frame header may claim any content size; above this the frame is decoded by streaming,
/// which allocates as the data actually arrives, rather than reserved up front.
const MAX_RESERVE: u64 = 256 << 20;

/// The magic number a zstd data frame starts with (little-endian 0xFD2FB528).
const DATA_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The largest frame looked for when searching past damage.
const MAX_FRAME: usize = 1 << 30;

/// What reading a framed file found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// The file's length.
    pub len: u64,
    /// Bytes of whole, valid frames.
    pub valid_len: u64,
    /// Bytes at the end that do not form a whole frame (a torn write), cut by [`repair`].
    pub torn_bytes: u64,
    pub records: u64,
    /// Byte ranges that do not decode and are not a torn tail: whole frames follow them, or
    /// they are a whole frame that fails its checksum. The records in them are lost.
    pub damaged: Vec<Range<u64>>,
}

impl Scan {
    /// Bytes in damaged ranges.
    pub fn damaged_bytes(&self) -> u64 {
        self.damaged.iter().map(|r| r.end - r.start).sum()
    }

    /// Where the torn tail starts (the file's length when there is none).
    pub fn intact_end(&self) -> u64 {
        self.len - self.torn_bytes
    }
}

/// `a..b, c..d` for damaged ranges.
pub fn ranges(damaged: &[Range<u64>]) -> String {
    damaged
        .iter()
        .map(|r| format!("{}..{}", r.start, r.end))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Calls `on_line` for every JSONL line in the valid frames of `path`, in order, passing over
/// damaged ranges (reported in the result). A missing file is empty. The file is read in
/// batches of [`BATCH_BYTES`] (a frame larger than a batch grows it), so memory stays flat
/// whatever the file's size (`gen export` reads 1M completions this way).
pub fn scan(path: &Path, mut on_line: impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<Scan> {
    scan_batched(path, BATCH_BYTES, &mut on_line)
}

fn scan_batched(
    path: &Path,
    batch_bytes: usize,
    on_line: &mut impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<Scan> {
    let mut decoder = FrameDecoder::new();
    read_stretches(path, batch_bytes, |file, offset, scan| {
        scan_stretch(file, offset, batch_bytes, &mut decoder, on_line, scan)
    })
}

/// Reads `path` stretch by stretch: `stretch` handles the valid units from an offset on and
/// returns where they end; damage after a stretch is passed over to the next valid data frame
/// (recorded in the result), and what is left at the end is damage or a torn tail. A missing
/// file is empty.
fn read_stretches(
    path: &Path,
    batch_bytes: usize,
    mut stretch: impl FnMut(&mut fs_err::File, u64, &mut Scan) -> io::Result<u64>,
) -> io::Result<Scan> {
    let Some(mut file) = super::atomic::if_exists(fs_err::File::open(path))? else {
        return Ok(Scan::default());
    };
    let len = file.metadata()?.len();
    let mut scan = Scan {
        len,
        ..Scan::default()
    };
    let mut offset = 0u64;
    while offset < len {
        let end = stretch(&mut file, offset, &mut scan)?;
        if end >= len {
            break;
        }
        // `end` starts bytes that are not a valid frame: resume at the next one.
        match resync(&mut file, end, len, batch_bytes)? {
            Some(next) => {
                scan.damaged.push(end..next);
                offset = next;
            }
            None => {
                if starts_with_whole_data_frame(&mut file, end, len, batch_bytes)? {
                    scan.damaged.push(end..len);
                } else {
                    scan.torn_bytes = len - end;
                }
                break;
            }
        }
    }
    Ok(scan)
}

/// Decodes the valid units from `start` on, batch by batch, handing their lines to `on_line`,
/// until one is not valid or the file ends; returns where they end. [`survey_stretch`] without
/// the parallel check: every data frame is decoded, in order.
fn scan_stretch(
    file: &mut fs_err::File,
    start: u64,
    batch_bytes: usize,
    decoder: &mut FrameDecoder,
    on_line: &mut impl FnMut(&[u8]) -> io::Result<()>,
    scan: &mut Scan,
) -> io::Result<u64> {
    unit_batches(file, start, batch_bytes, |pending, units, checked| {
        for unit in units {
            let data = &pending[unit.data.clone()];
            if !is_skippable(data) {
                let Some(text) = decoder.decode(data)? else {
                    return Ok(Some(checked + unit.data.start as u64));
                };
                for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    on_line(line)?;
                    scan.records += 1;
                }
            }
            scan.valid_len += (unit.end() - unit.data.start) as u64;
        }
        Ok(None)
    })
}

/// Reads the file from `start` on in batches of about `batch_bytes` and hands each batch's
/// whole units to `on_units` (with the file offset the batch's bytes start at), until
/// `on_units` returns where an invalid unit starts, or no whole unit is left; returns where
/// the valid units end.
fn unit_batches(
    file: &mut fs_err::File,
    start: u64,
    batch_bytes: usize,
    mut on_units: impl FnMut(&[u8], &[Unit], u64) -> io::Result<Option<u64>>,
) -> io::Result<u64> {
    file.seek(SeekFrom::Start(start))?;
    // Bytes read but not yet checked; they start at file offset `checked`.
    let mut checked = start;
    // Sized once: grown by doubling, the last step held both halves at once.
    let mut pending = Vec::with_capacity(batch_bytes);
    let mut want = batch_bytes;
    let mut eof = false;
    loop {
        if !eof && pending.len() < want {
            let missing = (want - pending.len()) as u64;
            let read = (&mut *file).take(missing).read_to_end(&mut pending)?;
            eof = (read as u64) < missing;
        }
        let units = whole_units(&pending, eof);
        let Some(consumed) = units.last().map(Unit::end) else {
            // A whole data frame is held back while the entry after it may be unread.
            if eof || !(is_whole_data_frame(&pending) || could_be_cut_frame(&pending)) {
                return Ok(checked);
            }
            // A frame larger than a batch.
            want = pending.len() * 2;
            continue;
        };
        if let Some(invalid) = on_units(&pending, &units, checked)? {
            return Ok(invalid);
        }
        pending.drain(..consumed);
        checked += consumed as u64;
        want = batch_bytes;
    }
}

/// A valid data frame as [`survey`] hands it over.
#[derive(Debug)]
pub enum FrameBody<'a> {
    /// Its decoded lines: a run of whole `\n`-terminated lines.
    Text(&'a [u8]),
    /// The ids of its records, from the id index entry after it, which matched the frame's
    /// compressed bytes and says its writer checked every record (see [`index`]); the frame
    /// was not decoded.
    Ids(Vec<&'a str>),
}

/// What [`survey`] returns for one valid data frame.
#[derive(Debug)]
pub struct Frame<T> {
    /// Where the frame is, with the id index entry after it.
    pub bytes: Range<u64>,
    /// What `on_frame` returned for it.
    pub value: T,
}

/// Like [`scan`], but frames are read in parallel and `on_frame` is called once per valid data
/// frame, on a worker thread; the results come back in file order. A data frame followed by a
/// matching id index entry that vouches its records were checked is checked by hashing
/// instead of decoding — an entry of the earlier format too when the frame ends by byte
/// `legacy_checked_until` (its records were checked before); any other is decoded. An error
/// from `on_frame` on a valid frame is returned. Damaged ranges are passed over (a slow search
/// for the next whole frame), as [`scan`] does.
pub fn survey<T: Send>(
    path: &Path,
    legacy_checked_until: u64,
    on_frame: impl Fn(FrameBody<'_>) -> io::Result<T> + Sync,
) -> io::Result<(Vec<Frame<T>>, Scan)> {
    survey_batched(path, BATCH_BYTES, legacy_checked_until, on_frame)
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

fn survey_batched<T: Send>(
    path: &Path,
    batch_bytes: usize,
    legacy_checked_until: u64,
    on_frame: impl Fn(FrameBody<'_>) -> io::Result<T> + Sync,
) -> io::Result<(Vec<Frame<T>>, Scan)> {
    let mut frames = Vec::new();
    let scan = read_stretches(path, batch_bytes, |file, offset, scan| {
        survey_stretch(
            file,
            offset,
            batch_bytes,
            legacy_checked_until,
            &on_frame,
            &mut frames,
            scan,
        )
    })?;
    Ok((frames, scan))
}

/// Checks the valid units from `start` on, in parallel batches, until one is not valid or the
/// file ends; returns where they end.
fn survey_stretch<T: Send>(
    file: &mut fs_err::File,
    start: u64,
    batch_bytes: usize,
    legacy_checked_until: u64,
    on_frame: &(impl Fn(FrameBody<'_>) -> io::Result<T> + Sync),
    frames: &mut Vec<Frame<T>>,
    scan: &mut Scan,
) -> io::Result<u64> {
    unit_batches(file, start, batch_bytes, |pending, units, checked| {
        let outcomes: Vec<io::Result<Checked<T>>> = units
            .par_iter()
            .map_init(FrameDecoder::new, |decoder, unit| {
                check_unit(
                    decoder,
                    pending,
                    checked,
                    unit,
                    legacy_checked_until,
                    on_frame,
                )
            })
            .collect();
        for (unit, outcome) in units.iter().zip(outcomes) {
            let bytes = checked + unit.data.start as u64..checked + unit.end() as u64;
            match outcome? {
                Checked::Invalid => return Ok(Some(bytes.start)),
                Checked::Skippable => {}
                Checked::Data(value, records) => {
                    frames.push(Frame {
                        bytes: bytes.clone(),
                        value,
                    });
                    scan.records += records;
                }
            }
            scan.valid_len += bytes.end - bytes.start;
        }
        Ok(None)
    })
}

/// Checks one unit of `pending` (which starts at file offset `start`): a skippable frame, a
/// data frame whose id index entry vouches for its records (checked when written, or before
/// `legacy_checked_until`, up to which an older `gen` checked them), or a data frame decoded
/// here.
fn check_unit<T>(
    decoder: &mut FrameDecoder,
    pending: &[u8],
    start: u64,
    unit: &Unit,
    legacy_checked_until: u64,
    on_frame: &impl Fn(FrameBody<'_>) -> io::Result<T>,
) -> io::Result<Checked<T>> {
    let data = &pending[unit.data.clone()];
    if is_skippable(data) {
        return Ok(Checked::Skippable);
    }
    if let Some(entry) = &unit.entry
        && let Some(vouched) = index::vouched(&pending[entry.clone()], data)
        && (vouched.checked || start + entry.end as u64 <= legacy_checked_until)
    {
        let records = vouched.ids.len() as u64;
        return Ok(Checked::Data(
            on_frame(FrameBody::Ids(vouched.ids))?,
            records,
        ));
    }
    let Some(text) = decoder.decode(data)? else {
        return Ok(Checked::Invalid);
    };
    let records = count_lines(text);
    Ok(Checked::Data(on_frame(FrameBody::Text(text))?, records))
}

/// What checking one [`Unit`] found.
enum Checked<T> {
    /// Its data frame is not valid: the stretch of valid frames ends there.
    Invalid,
    /// A skippable frame: valid, and holds no records.
    Skippable,
    /// A valid data frame: what `on_frame` returned for it, and its record count.
    Data(T, u64),
}

/// What looking for the next valid data frame found.
enum Resync {
    /// One starts at this offset.
    Found(usize),
    /// None starts in the bytes looked at.
    NotFound,
    /// A frame starting at this offset may be valid, but runs past the bytes read.
    NeedMore(usize),
}

/// The first offset in `bytes` where a valid data frame starts. Only data frames count: an id
/// index entry right after damage belongs to the damaged frame.
fn next_data_frame(bytes: &[u8], eof: bool, decoder: &mut FrameDecoder) -> io::Result<Resync> {
    for at in memchr::memmem::find_iter(bytes, &DATA_MAGIC) {
        let rest = &bytes[at..];
        match zstd_safe::find_frame_compressed_size(rest) {
            Ok(size) if size > 0 && size <= rest.len() => {
                let decodes = decoder.decode(&rest[..size])?.is_some();
                if decodes {
                    return Ok(Resync::Found(at));
                }
            }
            // Only a frame cut by the end of the bytes read can still turn out whole.
            _ if !eof && could_be_cut_frame(rest) => return Ok(Resync::NeedMore(at)),
            _ => {}
        }
    }
    Ok(Resync::NotFound)
}

/// The start of the next valid data frame after the invalid bytes at `from`, searched in
/// windows of the file (damage is rare, and this is only reached when there is some).
fn resync(
    file: &mut fs_err::File,
    from: u64,
    len: u64,
    batch_bytes: usize,
) -> io::Result<Option<u64>> {
    let mut decoder = FrameDecoder::new();
    let mut start = from + 1;
    // Large enough that a frame's magic number fits in a window with room to move on.
    let batch_bytes = batch_bytes.max(1 << 16);
    let mut want = batch_bytes;
    while start < len {
        let window = read_at(file, start, want)?;
        let eof = start + window.len() as u64 >= len;
        match next_data_frame(&window, eof, &mut decoder)? {
            Resync::Found(at) => return Ok(Some(start + at as u64)),
            // The candidate is read whole next time round: the window starts at it, and grows
            // if it must, up to a bound past which it is passed over.
            Resync::NeedMore(at) if at > 0 => start += at as u64,
            Resync::NeedMore(_) if want < MAX_FRAME => want = want.saturating_mul(2),
            Resync::NeedMore(_) => {
                start += 1;
                want = batch_bytes;
            }
            Resync::NotFound if eof => return Ok(None),
            // A magic number may straddle the window's end.
            Resync::NotFound => {
                start += window.len().saturating_sub(DATA_MAGIC.len() - 1).max(1) as u64;
            }
        }
    }
    Ok(None)
}

/// Whether the bytes from `from` to the end of the file start with a data frame that is whole
/// by its structure (its blocks all there): it was written whole, so if it does not decode it
/// is damaged, not torn.
fn starts_with_whole_data_frame(
    file: &mut fs_err::File,
    from: u64,
    len: u64,
    batch_bytes: usize,
) -> io::Result<bool> {
    let mut want = batch_bytes.max(1 << 16);
    loop {
        let bytes = read_at(file, from, want)?;
        if is_whole_data_frame(&bytes) {
            return Ok(true);
        }
        if from + bytes.len() as u64 >= len || want >= MAX_FRAME || !could_be_cut_frame(&bytes) {
            return Ok(false);
        }
        want *= 2;
    }
}

/// Whether `bytes` could be the start of a frame that runs past their end: a data frame whose
/// header and block headers so far are well formed, or a skippable frame whose size reaches
/// past them. Tells a frame cut by the end of a read (read more) from bytes that are no frame
/// at all (do not: garbage must not make a reader take the rest of the file into memory).
fn could_be_cut_frame(bytes: &[u8]) -> bool {
    /// zstd's largest block.
    const MAX_BLOCK: usize = 128 << 10;
    if bytes.len() < 4 {
        let skippable = [0x50, 0x2a, 0x4d, 0x18];
        return DATA_MAGIC.starts_with(bytes)
            || bytes
                .iter()
                .zip(skippable)
                .enumerate()
                .all(|(i, (b, s))| if i == 0 { b & 0xf0 == s } else { *b == s });
    }
    if is_skippable(bytes) {
        return bytes.get(4..8).is_none_or(|size| {
            8 + u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize > bytes.len()
        });
    }
    if !bytes.starts_with(&DATA_MAGIC) {
        return false;
    }
    let Some(&descriptor) = bytes.get(4) else {
        return true;
    };
    if descriptor & 0x08 != 0 {
        // The reserved bit.
        return false;
    }
    let single_segment = descriptor & 0x20 != 0;
    let dictionary_id = [0, 1, 2, 4][usize::from(descriptor & 0x03)];
    let content_size = match descriptor >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let checksum = if descriptor & 0x04 != 0 { 4 } else { 0 };
    let mut at = 5 + usize::from(!single_segment) + dictionary_id + content_size;
    loop {
        let Some(header) = bytes.get(at..at + 3) else {
            return true;
        };
        let header = u32::from(header[0]) | u32::from(header[1]) << 8 | u32::from(header[2]) << 16;
        let (last, kind, size) = (header & 1 == 1, (header >> 1) & 3, (header >> 3) as usize);
        if kind == 3 || size > MAX_BLOCK {
            return false;
        }
        at += 3 + if kind == 1 { 1 } else { size };
        if at > bytes.len() {
            return true;
        }
        if last {
            return at + checksum > bytes.len();
        }
    }
}

fn is_whole_data_frame(bytes: &[u8]) -> bool {
    bytes.starts_with(&DATA_MAGIC)
        && zstd_safe::find_frame_compressed_size(bytes).is_ok_and(|size| size <= bytes.len())
}

fn read_at(file: &mut fs_err::File, at: u64, bytes: usize) -> io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(at))?;
    let mut out = Vec::new();
    (&mut *file).take(bytes as u64).read_to_end(&mut out)?;
    Ok(out)
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
            Ok(size) if size > 0 && offset + size <= bytes.len() => {
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

/// Cuts a torn tail off `path`, returning what was kept. Damage before the end is not cut
/// (that would throw the intact frames after it away): it is an error, for the caller to set
/// aside first ([`super::done::load`] does for completions).
pub fn repair(path: &Path) -> io::Result<Scan> {
    // Only validity matters here: any intact entry proves its frame decodes.
    let (_, scan) = survey(path, u64::MAX, |_| Ok(()))?;
    if let Some(first) = scan.damaged.first() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "`{}` is damaged: {} bytes from byte {} do not decode, with whole frames after \
                 them; refusing to append to it",
                path.display(),
                scan.damaged_bytes(),
                first.start
            ),
        ));
    }
    cut_torn_tail(path, &scan)?;
    Ok(scan)
}

/// Cuts the torn tail `scan` found off `path` (nothing when it found none).
pub fn cut_torn_tail(path: &Path, scan: &Scan) -> io::Result<()> {
    if scan.torn_bytes > 0 {
        let file = fs_err::OpenOptions::new().write(true).open(path)?;
        file.set_len(scan.intact_end())?;
        file.sync_all()?;
    }
    Ok(())
}

/// One data frame of `text` (whole JSONL lines) as the writer makes it: checksummed, with its
/// content size, and followed by its id index entry when `indexed`.
pub fn encode_frame(text: &[u8], indexed: bool) -> io::Result<Vec<u8>> {
    let mut encoder = zstd::stream::Encoder::new(Vec::new(), LEVEL)?;
    encoder.include_checksum(true)?;
    // The content size in the frame header lets readers decode it in one call.
    encoder.set_pledged_src_size(Some(text.len() as u64))?;
    encoder.write_all(text)?;
    let mut frame = encoder.finish()?;
    if indexed && let Some(entry) = index::entry(text, &frame) {
        frame.extend_from_slice(&entry);
    }
    Ok(frame)
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
        // One write: a crash leaves the data frame whole or torn, and its entry whole, torn
        // (cut with the tail) or missing (the frame is then decoded on every start).
        let frame = encode_frame(&self.buffer, self.indexed)?;
        self.file.write_all(&frame)?;
        self.unsynced = true;
        self.buffer.clear();
        self.pending = 0;
        Ok(())
    }
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
                let (per_frame, got) = survey_batched(&path, batch, 0, |body| {
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
                .expect("survey");
                let per_frame: Vec<_> = per_frame.into_iter().map(|f| f.value).collect();
                assert_eq!(got, expected, "batch {batch}");
                let mut lines = Vec::new();
                let scanned = scan_batched(&path, batch, &mut |line| {
                    lines.push(String::from_utf8_lossy(line).into_owned());
                    Ok(())
                })
                .expect("scan");
                assert_eq!(scanned, expected, "scan, batch {batch}");
                assert_eq!(lines, expected_lines, "scan, batch {batch}");
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

    /// `count` frames of one record each (`{"id":"r<i>"}`), indexed; the bytes and where each
    /// frame (with its entry) starts.
    fn frames_of_one(count: usize) -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::new();
        let mut starts = Vec::new();
        for i in 0..count {
            starts.push(bytes.len());
            let text = format!("{{\"id\":\"r{i}\",\"pad\":\"{}\"}}\n", "z".repeat(i * 13));
            bytes.extend(encode_frame(text.as_bytes(), true).expect("encode"));
        }
        (bytes, starts)
    }

    fn ids_of(path: &Path, batch: usize) -> (Vec<String>, Scan) {
        let (frames, scan) = survey_batched(path, batch, 0, |body| {
            Ok(match body {
                FrameBody::Ids(ids) => ids.into_iter().map(str::to_owned).collect::<Vec<_>>(),
                FrameBody::Text(text) => text
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| index::record_id(l).expect("id"))
                    .collect(),
            })
        })
        .expect("survey");
        (frames.into_iter().flat_map(|f| f.value).collect(), scan)
    }

    fn line_ids(path: &Path) -> (Vec<String>, Scan) {
        let mut ids = Vec::new();
        let scan = scan(path, |line| {
            ids.push(index::record_id(line)?);
            Ok(())
        })
        .expect("scan");
        (ids, scan)
    }

    /// Damage anywhere but in a partial last frame is damage: both readers report its range
    /// and read every intact frame after it, at any batch size; a whole frame that fails its
    /// checksum at the end is damage too, while a partial one or garbage is a torn tail.
    #[test]
    fn damage_is_passed_over_and_only_a_partial_last_frame_is_torn() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.jsonl.zst");
        let (clean, starts) = frames_of_one(6);
        let all: Vec<String> = (0..6).map(|i| format!("r{i}")).collect();
        let frame = |i: usize| starts[i]..starts.get(i + 1).copied().unwrap_or(clean.len());
        // (what is done to the bytes, ids kept, damaged ranges, torn bytes)
        type Case = (&'static str, Vec<u8>, Vec<usize>, Vec<Range<u64>>, u64);
        let mut cases: Vec<Case> = Vec::new();
        let flip = |at: usize| {
            let mut bytes = clean.clone();
            bytes[at] ^= 0x5a;
            bytes
        };
        let range = |r: Range<usize>| r.start as u64..r.end as u64;
        // The last byte of a data frame's checksum: its structure stays whole.
        let checksum = |i: usize| {
            let start = frame(i).start;
            start + zstd_safe::find_frame_compressed_size(&clean[start..]).expect("frame") - 1
        };
        // A byte flipped inside the compressed data of frame 1 (its checksum fails).
        cases.push((
            "inside frame 1",
            flip(checksum(1)),
            vec![0, 2, 3, 4, 5],
            vec![range(frame(1))],
            0,
        ));
        // The magic number of frame 0 destroyed.
        cases.push((
            "magic of frame 0",
            flip(0),
            vec![1, 2, 3, 4, 5],
            vec![range(frame(0))],
            0,
        ));
        // Two damaged frames.
        let mut two = flip(checksum(2));
        two[checksum(4)] ^= 0x5a;
        cases.push((
            "frames 2 and 4",
            two,
            vec![0, 1, 3, 5],
            vec![range(frame(2)), range(frame(4))],
            0,
        ));
        // Garbage in the middle (no frame structure at all).
        let mut garbage = clean[..frame(3).start].to_vec();
        garbage.extend_from_slice(b"\x28\xb5\x2f\xfd not a frame at all");
        let at = garbage.len();
        garbage.extend_from_slice(&clean[frame(3).start..]);
        cases.push((
            "garbage in the middle",
            garbage,
            vec![0, 1, 2, 3, 4, 5],
            vec![range(frame(3).start..at)],
            0,
        ));
        // The last frame whole but failing its checksum: damage, not a torn write.
        cases.push((
            "inside the last frame",
            flip(checksum(5)),
            vec![0, 1, 2, 3, 4],
            vec![range(frame(5))],
            0,
        ));
        // The last frame cut short: a torn tail.
        let cut = frame(5).start + 10;
        cases.push((
            "last frame cut",
            clean[..cut].to_vec(),
            vec![0, 1, 2, 3, 4],
            vec![],
            (cut - frame(5).start) as u64,
        ));
        // Garbage appended: a torn tail.
        let mut appended = clean.clone();
        appended.extend_from_slice(b"\x28\xb5\x2f\xfd garbage");
        cases.push(("garbage appended", appended, (0..6).collect(), vec![], 12));
        for (what, bytes, kept, damaged, torn) in cases {
            fs_err::write(&path, &bytes).expect("write");
            let kept: Vec<String> = kept.iter().map(|i| all[*i].clone()).collect();
            let (ids, expected) = line_ids(&path);
            assert_eq!(ids, kept, "{what}: line reader");
            assert_eq!(expected.damaged, damaged, "{what}: line reader");
            assert_eq!(expected.torn_bytes, torn, "{what}: line reader");
            assert_eq!(expected.records, kept.len() as u64, "{what}");
            for batch in [1, 7, 100, 4096, BATCH_BYTES] {
                let (ids, scan) = ids_of(&path, batch);
                assert_eq!(ids, kept, "{what}: batch {batch}");
                assert_eq!(scan, expected, "{what}: batch {batch}");
            }
            // Appending refuses a damaged file and cuts only a torn tail.
            let repaired = repair(&path);
            if damaged.is_empty() {
                assert_eq!(repaired.expect("repair").torn_bytes, torn, "{what}");
                assert_eq!(
                    fs_err::metadata(&path).expect("meta").len(),
                    expected.intact_end()
                );
            } else {
                let error = repaired.expect_err(what).to_string();
                assert!(error.contains("is damaged"), "{what}: {error}");
                assert_eq!(
                    fs_err::read(&path).expect("read"),
                    bytes,
                    "{what}: untouched"
                );
            }
        }
    }

    /// Bytes with no frame structure are recognized as such at once: a reader looking past
    /// them does not take the rest of the file into memory.
    #[test]
    fn a_cut_frame_is_told_from_garbage() {
        let (bytes, starts) = frames_of_one(2);
        let first = &bytes[..starts[1]];
        let data_len = zstd_safe::find_frame_compressed_size(first).expect("frame");
        for cut in 0..data_len {
            assert!(could_be_cut_frame(&first[..cut]), "cut at {cut}");
        }
        // The entry after it, cut anywhere, is a cut skippable frame.
        for cut in data_len + 1..first.len() {
            assert!(
                could_be_cut_frame(&first[data_len..cut]),
                "entry cut at {cut}"
            );
        }
        assert!(!could_be_cut_frame(b"\x28\xb5\x2f\xfd\x08garbage"));
        assert!(!could_be_cut_frame(b"not a frame"));
        assert!(!could_be_cut_frame(&[0; 64]));
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
