//! Files and folders only their owner may read: a run directory holds prompts and answers.

use std::io;
use std::path::Path;

/// Opens `path` for appending, created owner-only: it holds prompts and outputs.
pub fn open_private(path: &Path) -> io::Result<fs_err::File> {
    use fs_err::os::unix::fs::OpenOptionsExt as _;
    fs_err::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// Creates `path` (replacing it) for writing, owner-only.
pub fn create_private(path: &Path) -> io::Result<fs_err::File> {
    use fs_err::os::unix::fs::OpenOptionsExt as _;
    fs_err::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Creates `dir` and its parents, owner-only like every run directory.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// [`private_dir`], with `path` named in its error.
pub fn create_private_dir(path: &Path) -> io::Result<()> {
    private_dir(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("failed to create `{}`: {e}", path.display()),
        )
    })
}
