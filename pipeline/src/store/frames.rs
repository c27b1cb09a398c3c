//! Append-only zstd JSONL in independently decodable frames.
//!
//! Every flush writes one complete zstd frame (with a content checksum) and fsyncs, so after a
//! crash the file is a run of whole frames plus, at worst, one torn frame at the end. On open
//! the torn tail is cut off ([`repair`]) before anything is appended: appending after a torn
//! frame would corrupt the stream for every reader.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use zstd::zstd_safe;

const LEVEL: i32 = 3;

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

/// Cuts a torn tail off `path`, returning what was kept.
pub fn repair(path: &Path) -> io::Result<Scan> {
    let scan = scan(path, |_| Ok(()))?;
    if scan.torn_bytes > 0 {
        let file = fs_err::OpenOptions::new().write(true).open(path)?;
        file.set_len(scan.valid_len)?;
        file.sync_all()?;
    }
    Ok(scan)
}

/// Appends records to a framed file.
#[derive(Debug)]
pub struct FrameWriter {
    path: PathBuf,
    file: fs_err::File,
    buffer: Vec<u8>,
    pending: usize,
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
            },
            scan,
        ))
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

    /// Writes the buffered records as one frame and fsyncs.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.pending == 0 {
            return Ok(());
        }
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), LEVEL)?;
        encoder.include_checksum(true)?;
        encoder.write_all(&self.buffer)?;
        let frame = encoder.finish()?;
        self.file.write_all(&frame)?;
        self.file.sync_data()?;
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
