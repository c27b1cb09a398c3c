//! Whole lines appended to the run directory's text logs (`events.jsonl`, `rejected.jsonl`,
//! `server.log`): one write per call, to a file created owner-only, with every known secret
//! taken out ([`crate::secrets`]) — their text quotes servers, and servers may quote the key.

use std::io::{self, Write as _};
use std::path::Path;

use super::frames::open_private;

/// Appends `lines` (each ending in `\n`) to `path` in one write; `sync` waits for the disk.
pub fn lines(path: &Path, lines: &[u8], sync: bool) -> io::Result<()> {
    let mut file = open_private(path)?;
    file.write_all(&crate::secrets::redact_bytes(lines))?;
    if sync {
        file.sync_all()?;
    }
    Ok(())
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
