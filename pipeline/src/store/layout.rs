//! Where everything lives in a run directory. The layout is versioned ([`LAYOUT_VERSION`]);
//! `ARCHITECTURE.md` documents it.
//!
//! ```text
//! RUN_DIR/
//!   status.json                 live view written by `gen run` (heartbeat, phases, counters)
//!   events.jsonl                append-only history: phase changes, verdicts, outages
//!   server.log                  output of a server `gen` launched
//!   sources/NAME/prep.log       the preparation worker's stdout and stderr
//!   sources/NAME/prompts.jsonl.zst   prepared prompts (written whole, then renamed)
//!   sources/NAME/manifest.json  preparation counters; written last = preparation complete
//!   sources/NAME/worker.json    how the last preparation worker ended
//!   sources/NAME/completions.jsonl.zst  one record per completed prompt, appended in frames
//!   sources/NAME/rejected.jsonl prompts the server refused or that ran out of attempts
//!   sources/NAME/tally.json     counters of the completions (truncations), with the
//!                               length and time of the file they were counted from
//!   sources/NAME/completions.damaged-MS.bin      bytes of the completions that did not decode,
//!                                                set aside by `gen run` (their prompts redone)
//!   sources/NAME/completions.not-answers-MS.jsonl  stored records that were not answers
//!                                                (aborted, empty), set aside the same way
//!   sources/NAME/completions.repeated-MS.jsonl   records of a prompt stored before (frames
//!                                                appended twice), set aside the same way
//!   sources/NAME/completions.foreign-MS.jsonl    records that are not of the source's prompts
//!                                                (another source's or run's), set aside
//!   sources/NAME/completions.jsonl.zst.checked   up to which byte the records were checked to
//!                                                be answers (frames an older `gen` indexed)
//!   sources/NAME/prompts.damaged-MS.jsonl.zst    a prompts file that did not read (or did not
//!                                                match its manifest), set aside by `gen run`,
//!                                                which prepared the source again
//!   sources/NAME/manifest.damaged-MS.json        a manifest that did not decode or add up,
//!                                                set aside the same way
//!   sources/NAME/rejected.damaged-MS.jsonl       lines of `rejected.jsonl` that were not
//!                                                records (their prompts are sent again)
//!   sources/NAME/completions.superseded-MS.jsonl.zst  the answers `gen run --regenerate NAME`
//!                                                set aside to generate the source again
//!   sources/NAME/rejected.superseded-MS.jsonl    its refusals, set aside with them
//! ```

use std::path::{Path, PathBuf};

use super::atomic::if_exists;

/// The prefixes of the files `gen run` sets aside in a source directory, and what each holds.
pub const SET_ASIDE: [(&str, &str); 9] = [
    ("completions.damaged-", "damaged bytes of the completions"),
    (
        "completions.not-answers-",
        "stored records that were not answers",
    ),
    (
        "completions.repeated-",
        "records of prompts stored before (repeats)",
    ),
    (
        "completions.foreign-",
        "records that are not of the source's prompts",
    ),
    ("prompts.damaged-", "a prompts file that did not read"),
    (
        "manifest.damaged-",
        "a manifest that did not decode or add up",
    ),
    (
        "rejected.damaged-",
        "lines of `rejected.jsonl` that were not records",
    ),
    (
        "completions.superseded-",
        "answers of settings since changed (`--regenerate`)",
    ),
    (
        "rejected.superseded-",
        "refusals under settings since changed (`--regenerate`)",
    ),
];

/// Bumped when the layout changes incompatibly.
pub const LAYOUT_VERSION: u32 = 1;

#[derive(Debug, Clone)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    pub fn new(root: impl Into<PathBuf>) -> RunDir {
        RunDir { root: root.into() }
    }

    /// The run directory `target` names: a run directory itself, or a config file's.
    pub fn named_by(target: &Path) -> Result<RunDir, crate::config::ConfigError> {
        if target.is_dir() {
            Ok(RunDir::new(target))
        } else {
            Ok(RunDir::new(crate::config::Plan::load(target)?.run_dir))
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn status(&self) -> PathBuf {
        self.root.join("status.json")
    }

    pub fn events(&self) -> PathBuf {
        self.root.join("events.jsonl")
    }

    pub fn pin(&self) -> PathBuf {
        self.root.join("run.json")
    }

    pub fn server_log(&self) -> PathBuf {
        self.root.join("server.log")
    }

    pub fn source(&self, name: &str) -> SourceDir {
        SourceDir {
            root: self.root.join("sources").join(name),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SourceDir {
    root: PathBuf,
}

impl SourceDir {
    /// The source directory at `root`.
    pub fn new(root: impl Into<PathBuf>) -> SourceDir {
        SourceDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn prep_log(&self) -> PathBuf {
        self.root.join("prep.log")
    }

    pub fn prompts(&self) -> PathBuf {
        self.root.join("prompts.jsonl.zst")
    }

    pub fn manifest(&self) -> PathBuf {
        self.root.join("manifest.json")
    }

    pub fn worker(&self) -> PathBuf {
        self.root.join("worker.json")
    }

    pub fn completions(&self) -> PathBuf {
        self.root.join("completions.jsonl.zst")
    }

    pub fn tally(&self) -> PathBuf {
        self.root.join("tally.json")
    }

    pub fn rejected(&self) -> PathBuf {
        self.root.join("rejected.jsonl")
    }

    /// Bytes of `completions.jsonl.zst` that did not decode, set aside at `unix_ms`.
    pub fn damaged_completions(&self, unix_ms: u64) -> PathBuf {
        self.root.join(format!("completions.damaged-{unix_ms}.bin"))
    }

    /// Stored records that were not answers (aborted, empty), set aside at `unix_ms`.
    pub fn not_answers(&self, unix_ms: u64) -> PathBuf {
        self.root
            .join(format!("completions.not-answers-{unix_ms}.jsonl"))
    }

    /// Records of a prompt stored before, set aside at `unix_ms`.
    pub fn repeated_completions(&self, unix_ms: u64) -> PathBuf {
        self.root
            .join(format!("completions.repeated-{unix_ms}.jsonl"))
    }

    /// Records that are not of the source's prompts, set aside at `unix_ms`.
    pub fn foreign_completions(&self, unix_ms: u64) -> PathBuf {
        self.root
            .join(format!("completions.foreign-{unix_ms}.jsonl"))
    }

    /// A prompts file that did not read, set aside at `unix_ms`.
    pub fn damaged_prompts(&self, unix_ms: u64) -> PathBuf {
        self.root
            .join(format!("prompts.damaged-{unix_ms}.jsonl.zst"))
    }

    /// Lines of `rejected.jsonl` that were not records, set aside at `unix_ms`.
    pub fn damaged_rejections(&self, unix_ms: u64) -> PathBuf {
        self.root.join(format!("rejected.damaged-{unix_ms}.jsonl"))
    }

    /// A manifest that did not decode or add up, set aside at `unix_ms`.
    pub fn damaged_manifest(&self, unix_ms: u64) -> PathBuf {
        self.root.join(format!("manifest.damaged-{unix_ms}.json"))
    }

    /// Sets the stored answers and refusals aside (`gen run --regenerate`), so the source is
    /// generated again; its counters go with them. The answers' new name, if there were any.
    pub fn supersede(&self, unix_ms: u64) -> std::io::Result<Option<String>> {
        let answers = self
            .root
            .join(format!("completions.superseded-{unix_ms}.jsonl.zst"));
        let moved = rename_if_there(&self.completions(), &answers)?;
        let refusals = self
            .root
            .join(format!("rejected.superseded-{unix_ms}.jsonl"));
        rename_if_there(&self.rejected(), &refusals)?;
        for derived in [
            self.tally(),
            self.completions().with_extension("zst.checked"),
        ] {
            if_exists(fs_err::remove_file(&derived))?;
        }
        Ok(moved.then(|| answers.display().to_string()))
    }

    /// The files `gen run` set aside in this directory, by name.
    pub fn set_aside(&self) -> std::io::Result<Vec<String>> {
        let mut names = Vec::new();
        let Some(entries) = if_exists(fs_err::read_dir(&self.root))? else {
            return Ok(names);
        };
        for entry in entries {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if SET_ASIDE.iter().any(|(prefix, _)| name.starts_with(prefix)) {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// The first sample's prompts and manifest, set aside while the source is prepared again
    /// without the earlier sources' prompts (restored if that fails).
    pub fn first_prompts(&self) -> PathBuf {
        self.root.join("prompts.first.jsonl.zst")
    }

    pub fn first_manifest(&self) -> PathBuf {
        self.root.join("manifest.first.json")
    }

    /// Content hashes of earlier sources' prompts, which this source's sample leaves out
    /// (little-endian u64s, written by `gen run` before it prepares the source again).
    pub fn earlier_hashes(&self) -> PathBuf {
        self.root.join("earlier-prompts.hashes")
    }
}

/// Renames `from` to `to`; false when `from` does not exist.
fn rename_if_there(from: &Path, to: &Path) -> std::io::Result<bool> {
    Ok(if_exists(fs_err::rename(from, to))?.is_some())
}
