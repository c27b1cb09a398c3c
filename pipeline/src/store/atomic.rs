//! Whole-file writes that a reader (or a crash) never sees half done: temp file, fsync,
//! rename. Every known secret is taken out first ([`crate::secrets`]): these files quote
//! servers and workers (`status.json` notes, `worker.json` stderr).

use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;

/// Writes `bytes` to `path` atomically. On failure (a full disk) the temporary file is
/// removed: a half-written copy would only take the space that is missing.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}{TEMP_SUFFIX}", std::process::id()));
    let tmp = path.with_file_name(name);
    let written = (|| {
        // Owner-only: manifests quote rows, worker reports quote stderr.
        use fs_err::os::unix::fs::OpenOptionsExt as _;
        let mut file = fs_err::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&crate::secrets::redact_bytes(bytes))?;
        file.sync_all()?;
        fs_err::rename(&tmp, path)
    })();
    if written.is_err() {
        fs_err::remove_file(&tmp).ok();
    }
    written
}

/// How the temporary files of [`write`] end: `NAME.PID.tmp`.
const TEMP_SUFFIX: &str = ".tmp";

/// `None` for a file (or directory) that is not there, the result otherwise.
pub fn if_exists<T>(result: io::Result<T>) -> io::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes the temporary files [`write`] left in `dir` when a process died mid-write (`kill -9`,
/// a full disk before this cleanup existed). Only for a directory no other process writes: the
/// caller holds the run lock. Returns the files removed.
pub fn remove_stale_temps(dir: &Path) -> io::Result<Vec<std::path::PathBuf>> {
    let mut removed = Vec::new();
    let Some(entries) = if_exists(fs_err::read_dir(dir))? else {
        return Ok(removed);
    };
    let own = format!(".{}{TEMP_SUFFIX}", std::process::id());
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(TEMP_SUFFIX) else {
            continue;
        };
        let pid = stem.rsplit_once('.').map(|(_, pid)| pid);
        let is_temp = pid.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if is_temp && !name.ends_with(&own) && entry.file_type()?.is_file() {
            fs_err::remove_file(entry.path())?;
            removed.push(entry.path());
        }
    }
    Ok(removed)
}

/// Writes `value` as pretty JSON to `path` atomically.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write(path, &bytes)
}

/// Reads JSON from `path`; `Ok(None)` when it does not exist.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    let Some(bytes) = if_exists(fs_err::read(path))? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("`{}`: {e}", path.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_temporary_files_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "status.json",
            "status.json.4242.tmp",
            "run.json.17.tmp",
            "notes.tmp",
            "prompts.jsonl.zst",
        ] {
            fs_err::write(dir.path().join(name), "x").expect("write");
        }
        let mut removed: Vec<String> = remove_stale_temps(dir.path())
            .expect("clean")
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        removed.sort();
        assert_eq!(removed, ["run.json.17.tmp", "status.json.4242.tmp"]);
        let mut left: Vec<String> = fs_err::read_dir(dir.path())
            .expect("read_dir")
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        left.sort();
        assert_eq!(left, ["notes.tmp", "prompts.jsonl.zst", "status.json"]);
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Renaming a file over a non-empty directory fails after the data was written.
        let target = dir.path().join("status.json");
        fs_err::create_dir(&target).expect("mkdir");
        fs_err::write(target.join("inside"), "x").expect("write");
        assert!(write(&target, b"{}").is_err());
        let names: Vec<String> = fs_err::read_dir(dir.path())
            .expect("read_dir")
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        assert_eq!(names, ["status.json"]);
    }
}
