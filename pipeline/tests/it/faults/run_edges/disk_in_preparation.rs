//! The disk fills up while a source is prepared: the run directory is a 1 MiB tmpfs and the
//! source's prompts compress to about 2 MB. The source must fail naming its prompts file (not
//! `status.json`), leave no temporary file behind, and `gen run --only-failed` must prepare and
//! finish it once there is space; a stale `status.json.PID.tmp` is removed by the next run.
//!
//! Needs `mount` (root). Without it the test is skipped with the reason, unless
//! `GEN_REQUIRE_TMPFS` is set.

use gen_tests::fake_openai::{FakeOpenAi, Knobs};

use crate::faults::disk::Tmpfs;
use crate::faults::{alpha_project, assert_complete};
use crate::support::{Rng, phase_of, walk};

const PROMPTS: usize = 500;

/// `PROMPTS` rows of about 4 KB of barely compressible text each (lower case: the fake
/// server's fault words, `CUT`, `REJECT`, `LONG`, are upper case).
fn big_rows() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = Rng::new(7);
    (0..PROMPTS)
        .map(|i| {
            let text: String = (0..4000)
                .map(|_| char::from(ALPHABET[(rng.next_u64() % 36) as usize]))
                .collect();
            format!("{{\"prompt\": \"row {i}: {text}\"}}\n")
        })
        .collect()
}

#[tokio::test]
async fn disk_full_in_preparation_fails_the_source_naming_its_file_and_only_failed_resumes_it() {
    let Some(fs) = Tmpfs::mount_or_skip("1m") else {
        return;
    };
    let server = FakeOpenAi::start(Knobs::default()).await;
    let project = alpha_project(&server.url(), big_rows());
    let run_dir = fs.path().to_str().expect("utf-8 path").to_owned();
    let prompts_file = format!("{run_dir}/sources/alpha/prompts.jsonl.zst");

    let full = project
        .run(&["run", "cfg.toml", "--run-dir", &run_dir])
        .await;
    eprintln!("full run: exit {:?}\n{}", full.code, full.stderr);
    assert_ne!(full.code, Some(101), "gen panicked: {}", full.stderr);
    assert_eq!(full.code, Some(1), "{}", full.stderr);
    assert!(
        full.stderr.contains(&format!(
            "`alpha` failed: the disk is full: failed to write `{prompts_file}`"
        )),
        "names the prompts file: {}",
        full.stderr
    );
    assert!(
        full.stderr.contains("No space left on device"),
        "{}",
        full.stderr
    );
    // A status write that fails meanwhile may be warned about, but is not the run's error.
    assert!(
        !full.stderr.contains("error: failed to write"),
        "{}",
        full.stderr
    );
    let status = project.status_at(&run_dir).expect("status.json");
    assert_eq!(phase_of(&status, "alpha"), "failed", "{status:#}");
    let note = status["sources"][0]["note"].as_str().unwrap_or("");
    assert!(note.contains(&prompts_file), "{note}");
    let temps: Vec<_> = walk(fs.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(temps.is_empty(), "temporary files left: {temps:?}");
    assert_eq!(server.chat_requests(), 0);

    // A status write torn by a crash on a full disk, left behind.
    let stale = fs.path().join("status.json.99999.tmp");
    std::fs::write(&stale, "{\"layout\": 1, \"conf").expect("write");
    fs.resize("64m");
    let rerun = project
        .run(&["run", "cfg.toml", "--run-dir", &run_dir, "--only-failed"])
        .await;
    assert_eq!(rerun.code, Some(0), "{}", rerun.stderr);
    assert!(
        rerun.stderr.contains("preparing `alpha`"),
        "{}",
        rerun.stderr
    );
    assert!(!stale.exists(), "the stale temporary file is removed");
    let (code, audit) = project.verify_at(&run_dir).await;
    assert_eq!(code, Some(0), "{audit:#}");
    assert_complete(&audit, PROMPTS as u64);
}
