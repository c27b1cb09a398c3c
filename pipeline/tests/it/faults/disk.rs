//! Disk full while writing output: the run directory is a 1 MiB tmpfs this test mounts itself,
//! the fake server's answers are padded so the completions fill it; `gen run` must stop with a
//! clear error (the file, "No space left on device", exit 1), leave nothing corrupt, and finish
//! once the file system is made bigger.
//!
//! Needs `mount` (root). Without it the test is skipped with the reason, unless
//! `GEN_REQUIRE_TMPFS` is set.

use std::path::Path;
use std::process::Command;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};

use super::{alpha_project, assert_complete, rows};
use crate::support::completion_ids;

/// A tmpfs mounted on a fresh temporary directory, unmounted when dropped (even when the test
/// panics), before the directory itself is removed.
pub(crate) struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run `mount`: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "`mount -t tmpfs` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    /// [`Tmpfs::mount`], or `None` with the reason printed: the test is skipped (unless
    /// `GEN_REQUIRE_TMPFS` is set, which makes it a failure).
    pub(crate) fn mount_or_skip(size: &str) -> Option<Tmpfs> {
        match Tmpfs::mount(size) {
            Ok(fs) => Some(fs),
            Err(reason) if std::env::var_os("GEN_REQUIRE_TMPFS").is_some() => {
                panic!("GEN_REQUIRE_TMPFS is set but {reason}")
            }
            Err(reason) => {
                eprintln!("skipped: {reason}");
                None
            }
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `mount -o remount,size=SIZE`: frees space without touching the files.
    pub(crate) fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.path())
            .status()
            .expect("run mount");
        assert!(status.success(), "remount to {size}: {status}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(self.path())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // Still busy (a `gen` being killed): detach it now, it goes when the last user does.
            let lazy = Command::new("umount").arg("-l").arg(self.path()).status();
            eprintln!(
                "umount {} failed; umount -l: {lazy:?}",
                self.path().display()
            );
        }
    }
}

/// Prompts of the disk-full run, and the padded size of each answer: 200 × 16 KiB of barely
/// compressible text is about 2.5 MB of zstd frames, well over the 1 MiB file system, while the
/// prepared prompts take a few KiB (so preparation succeeds and the output is what fills it).
const PROMPTS: usize = 200;
const ANSWER_BYTES: usize = 16 * 1024;

#[tokio::test]
async fn disk_full_while_writing_output_stops_with_a_clear_error_and_resumes_once_freed() {
    let Some(fs) = Tmpfs::mount_or_skip("1m") else {
        return;
    };
    let server = FakeOpenAi::start(Knobs {
        answer_bytes: ANSWER_BYTES,
        ..Knobs::default()
    })
    .await;
    let project = alpha_project(&server.url(), rows("alpha", PROMPTS));
    let run_dir = fs.path().to_str().expect("utf-8 path").to_owned();
    let completions = fs.path().join("sources/alpha/completions.jsonl.zst");

    // 1. The disk fills up: a clear error naming the file and the cause, exit 1, no panic.
    let full = project
        .run(&["run", "cfg.toml", "--run-dir", &run_dir])
        .await;
    eprintln!("full run: exit {:?}\n{}", full.code, full.stderr);
    assert_ne!(full.code, Some(101), "gen panicked: {}", full.stderr);
    assert_eq!(full.code, Some(1), "{}", full.stderr);
    // The error and its chain (`caused by:` lines) end stderr.
    let error = &full.stderr[full
        .stderr
        .find("error: ")
        .unwrap_or_else(|| panic!("no `error:` line: {}", full.stderr))..];
    assert!(
        error.contains("No space left on device"),
        "the cause: {error}"
    );
    assert!(
        error.starts_with(&format!(
            "error: failed to write `{run_dir}/sources/alpha/completions.jsonl.zst`"
        )),
        "names the file it could not write: {error}"
    );
    assert!(!full.stderr.contains("panicked"), "{}", full.stderr);
    let requests_full = server.chat_requests();

    // 2. What the full disk holds is consistent: whole frames, at worst a torn tail the next
    //    run cuts, no duplicate; everything not stored is pending, nothing is lost.
    let stored = completion_ids(&completions);
    let mut unique = stored.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), stored.len(), "a duplicate on the full disk");
    assert!(stored.len() < PROMPTS, "the disk was full before the end");
    let (code, audit) = project.verify_at(&run_dir).await;
    eprintln!(
        "verify on the full disk: exit {code:?}, totals {}, notes {}",
        audit["totals"], audit["sources"][0]["notes"]
    );
    assert_eq!(audit["totals"]["duplicated"], 0, "{audit:#}");
    assert_eq!(audit["totals"]["unknown"], 0, "{audit:#}");
    assert_eq!(audit["totals"]["lost"], 0, "{audit:#}");
    assert_eq!(code, Some(0), "{audit:#}");

    // 3. Space freed: the rerun finishes every prompt, each stored exactly once.
    fs.resize("64m");
    let rerun = project
        .run(&["run", "cfg.toml", "--run-dir", &run_dir])
        .await;
    assert_eq!(rerun.code, Some(0), "{}", rerun.stderr);
    let (code, audit) = project.verify_at(&run_dir).await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, PROMPTS as u64);
    assert!(
        audit["sources"][0]["notes"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "{audit:#}"
    );
    let mut ids = completion_ids(&completions);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), PROMPTS);
    // Only what the full disk did not keep was asked for again.
    assert_eq!(
        server.chat_requests() - requests_full,
        PROMPTS - stored.len(),
        "requests: {requests_full} before, {} after",
        server.chat_requests()
    );
    eprintln!(
        "disk full: {} of {PROMPTS} stored before ENOSPC, {requests_full} requests; rerun sent {}",
        stored.len(),
        server.chat_requests() - requests_full
    );
}
