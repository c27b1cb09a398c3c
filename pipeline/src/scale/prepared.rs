//! Prepare once: `gen prepare CONFIG --run-dir RUN_ROOT` prepares every source into
//! `RUN_ROOT/prepared` (an ordinary run directory that only prepares), and each shard's task
//! takes the prepared sources from there instead of downloading and normalizing them again.
//!
//! A shard takes a source by linking its `prompts.jsonl.zst` (a copy where the file system
//! refuses links) and copying its `manifest.json` last, as a preparation writes them: the
//! shard's directory then holds the source prepared, exactly as if it had prepared it, and
//! everything after (resume, merge, verify) is unchanged. The prompts file is never written
//! in place (a new preparation renames a new file over it), so a link shares nothing a shard
//! can change. A source not prepared there is prepared by the shard itself, as before.
//!
//! Where no scheduler orders the preparation before the shards (Kubernetes), each shard's pod
//! first waits for it (`gen prepare --wait`, [`wait`]).

use std::path::Path;

use anyhow::Context as _;

use super::root::RunRoot;
use crate::config::Plan;
use crate::store::manifest::read_manifest;
use crate::store::{RunDir, atomic};

/// The sources of `plan` that `RUN_ROOT/prepared` does not hold prepared.
pub fn unprepared(plan: &Plan, root: &RunRoot) -> Vec<String> {
    unprepared_in(plan, &root.prepared())
}

fn unprepared_in(plan: &Plan, dir: &RunDir) -> Vec<String> {
    plan.sources
        .iter()
        .map(|s| s.name().to_owned())
        .filter(|name| !read_manifest(dir, name).is_ok_and(|m| m.is_some()))
        .collect()
}

/// `gen prepare CONFIG --run-dir DIR --wait`: prepares nothing, and returns `true` once `DIR`
/// holds every source of `plan` prepared by another `gen prepare` (the preparation Job of
/// `gen k8s`), or `false` once that preparation has finished with a source failed (said which
/// and where to look). The other is another pod, seen only through the shared volume: its
/// status is read again every `every`.
pub fn wait(plan: &Plan, dir: &RunDir, every: std::time::Duration) -> bool {
    let mut said = false;
    loop {
        let left = unprepared_in(plan, dir);
        if left.is_empty() {
            crate::report::plain(&format!(
                "gen: every source is prepared in `{}`",
                dir.root().display()
            ));
            return true;
        }
        let status: Option<crate::status::state::RunStatus> =
            atomic::read_json(&dir.status()).ok().flatten();
        let failed: Vec<&str> = (status.iter().filter(|s| s.finished))
            .flat_map(|s| &s.sources)
            .filter(|s| s.phase == crate::status::state::Phase::Failed)
            .map(|s| s.name.as_str())
            .collect();
        if !failed.is_empty() {
            crate::report::plain(&format!(
                "gen: the preparation in `{dir}` stopped with {} failed: `gen status {dir}` \
                 says why; prepare again (`gen prepare CONFIG --run-dir {dir}`), then start \
                 the shards",
                failed.join(", "),
                dir = dir.root().display()
            ));
            return false;
        }
        if !said {
            crate::report::plain(&format!(
                "gen: waiting for {} to be prepared in `{}` (by `gen prepare`)",
                left.join(", "),
                dir.root().display()
            ));
            said = true;
        }
        std::thread::sleep(every);
    }
}

/// Takes into the shard directory `shard` every source of `plan` that `RUN_ROOT/prepared`
/// holds prepared and `shard` does not. Says what it took and what the shard prepares itself.
/// Nothing to do without `RUN_ROOT/prepared` (a job that does not prepare once).
pub fn adopt(plan: &Plan, root: &RunRoot, shard: &RunDir) -> anyhow::Result<()> {
    let prepared = root.prepared();
    if !prepared.root().is_dir() {
        return Ok(());
    }
    let (mut taken, mut missing) = (Vec::new(), Vec::new());
    for spec in &plan.sources {
        let name = spec.name();
        if read_manifest(shard, name)?.is_some() {
            continue;
        }
        match read_manifest(&prepared, name)? {
            Some(manifest) => {
                let (from, to) = (prepared.source(name), shard.source(name));
                crate::store::private::private_dir(to.root())
                    .with_context(|| format!("failed to create `{}`", to.root().display()))?;
                link_or_copy(&from.prompts(), &to.prompts())?;
                atomic::write_json(&to.manifest(), &manifest)
                    .with_context(|| format!("failed to write `{}`", to.manifest().display()))?;
                taken.push(name);
            }
            None => missing.push(name),
        }
    }
    if !taken.is_empty() {
        crate::report::plain(&format!(
            "gen: prepared once in `{}`: {}",
            prepared.root().display(),
            taken.join(", ")
        ));
    }
    if !missing.is_empty() {
        crate::report::plain(&format!(
            "gen: warning: not prepared in `{}`: {}; this shard prepares them itself",
            prepared.root().display(),
            missing.join(", ")
        ));
    }
    Ok(())
}

/// Links `from` to `to` (replacing what is there), or copies it where links are refused
/// (another file system, a mount without hard links).
fn link_or_copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    let mut name = to.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.adopt", std::process::id()));
    let tmp = to.with_file_name(name);
    fs_err::remove_file(&tmp).ok();
    if fs_err::hard_link(from, &tmp).is_err() {
        fs_err::copy(from, &tmp)
            .with_context(|| format!("failed to copy the prepared `{}`", from.display()))?;
    }
    fs_err::rename(&tmp, to).with_context(|| format!("failed to write `{}`", to.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(dir: &Path) -> Plan {
        fs_err::write(dir.join("a.jsonl"), "{\"prompt\": \"one\"}\n").expect("write");
        fs_err::write(dir.join("b.jsonl"), "{\"prompt\": \"two\"}\n").expect("write");
        let text = "[server]\nurl = \"http://127.0.0.1:1\"\nmodel = \"m\"\n[generation]\nmax-tokens = 8\n\
                    [[source]]\nname = \"a\"\npath = \"a.jsonl\"\n\
                    [[source]]\nname = \"b\"\npath = \"b.jsonl\"\n";
        let config = dir.join("c.toml");
        fs_err::write(&config, text).expect("write");
        Plan::load(&config).expect("plan")
    }

    /// What a pod's wait sees: everything prepared (go), or the preparation finished with a
    /// source failed (stop, rather than wait for ever).
    #[test]
    fn the_wait_ends_when_every_source_is_prepared_or_the_preparation_failed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let plan = plan(tmp.path());
        let dir = RunDir::new(tmp.path().join("prepared"));
        let every = std::time::Duration::ZERO;
        crate::prep::prepare_source(&plan, &dir, "a", None).expect("prepare a");
        let mut status: crate::status::state::RunStatus = serde_json::from_value(
            serde_json::json!({"layout": 1, "config": "c.toml", "pid": 1, "host": "h",
                "started_unix_ms": 1, "heartbeat_unix_ms": 1, "finished": true,
                "servers": [], "sources": []}),
        )
        .expect("status");
        status.sources = vec![
            crate::status::state::SourceStatus::new("a", crate::status::state::Phase::Prepared),
            crate::status::state::SourceStatus::new("b", crate::status::state::Phase::Failed),
        ];
        atomic::write_json(&dir.status(), &status).expect("status");
        assert!(!wait(&plan, &dir, every));
        crate::prep::prepare_source(&plan, &dir, "b", None).expect("prepare b");
        assert!(wait(&plan, &dir, every));
    }

    #[test]
    fn a_shard_takes_the_sources_prepared_once_and_no_others() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let plan = plan(tmp.path());
        let root = RunRoot::new(tmp.path().join("job"));
        root.open_or_create(2, &plan.config_path).expect("root");
        let shard = root.shard(1, 2);
        // Nothing prepared once: nothing taken, nothing said.
        adopt(&plan, &root, &shard).expect("adopt");
        assert!(!shard.root().exists());
        crate::prep::prepare_source(&plan, &root.prepared(), "a", None).expect("prepare a");
        assert_eq!(unprepared(&plan, &root), ["b"]);
        adopt(&plan, &root, &shard).expect("adopt");
        let (from, to) = (root.prepared().source("a"), shard.source("a"));
        assert_eq!(
            fs_err::read(to.prompts()).expect("linked"),
            fs_err::read(from.prompts()).expect("prepared")
        );
        let manifest = |dir: &RunDir| {
            serde_json::to_value(read_manifest(dir, "a").expect("read")).expect("json")
        };
        assert_eq!(manifest(&shard), manifest(&root.prepared()));
        assert!(read_manifest(&shard, "b").expect("read").is_none());
        // A shard's own manifest is its own: written again by the shard, not through a link.
        fs_err::write(to.manifest(), "{}").expect("write");
        assert!(
            read_manifest(&root.prepared(), "a")
                .expect("read")
                .is_some()
        );
    }
}
