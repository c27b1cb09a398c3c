//! Whole lines appended to the run directory's text logs (`events.jsonl`, `rejected.jsonl`,
//! `server.log`): one write per call, to a file created owner-only, with every known secret
//! taken out ([`crate::secrets`]) — their text quotes servers, and servers may quote the key.

use std::io::{self, Write as _};
use std::path::Path;

use super::private::open_private;

/// Appends `lines` (each ending in `\n`) to `path` in one write; `sync` waits for the disk.
/// A torn last line (a crash mid-append) is ended first, so it does not swallow the first new
/// line: it stays one unreadable line, which readers pass over.
pub fn lines(path: &Path, lines: &[u8], sync: bool) -> io::Result<()> {
    let mut file = open_private(path)?;
    let mut bytes = Vec::with_capacity(lines.len() + 1);
    if !ends_whole(path)? {
        bytes.push(b'\n');
    }
    bytes.extend_from_slice(&crate::secrets::redact_bytes(lines));
    file.write_all(&bytes)?;
    if sync {
        file.sync_all()?;
    }
    Ok(())
}

/// Whether `path` is empty or ends with a line break.
fn ends_whole(path: &Path) -> io::Result<bool> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut file = fs_err::File::open(path)?;
    if file.metadata()?.len() == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// Appends `values` as JSON lines (see [`lines`]).
pub fn json_lines<T: serde::Serialize>(path: &Path, values: &[T], sync: bool) -> io::Result<()> {
    let mut bytes = Vec::new();
    for value in values {
        serde_json::to_writer(&mut bytes, value).map_err(io::Error::other)?;
        bytes.push(b'\n');
    }
    lines(path, &bytes, sync)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_last_line_is_ended_before_new_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rejected.jsonl");
        lines(&path, b"{\"a\":1}\n", false).expect("append");
        fs_err::write(&path, b"{\"a\":1}\n{\"torn").expect("tear");
        lines(&path, b"{\"b\":2}\n", false).expect("append");
        assert_eq!(
            fs_err::read_to_string(&path).expect("read"),
            "{\"a\":1}\n{\"torn\n{\"b\":2}\n"
        );
    }
}
