//! Shard ownership: at most one task writes a shard's run directory, even when a scheduler
//! starts a duplicate, requeues a task whose old copy is still alive on a cut-off node, or
//! two tasks start at once.
//!
//! The protocol, on a shared file system without a lock service:
//! - **Claim.** A task claims epoch `e` by creating `claims/<e>` exclusively (`O_EXCL`,
//!   atomic on local file systems and NFSv3+). Exactly one task wins each epoch; the winner
//!   writes `owner.json` (host, pid, job, array task, epoch, heartbeat).
//! - **Take over or refuse.** An existing owner that released the shard, or whose process is
//!   gone from this host, is taken over at once (epoch + 1). Otherwise its heartbeat is
//!   watched: a heartbeat that moves means a live owner, and the task refuses to write. One
//!   that stays still for [`Timing::lease`] by this task's own clock — or for
//!   [`Timing::watch`] when its wall-clock age is already past the lease — is a dead owner,
//!   taken over.
//! - **Lease.** The owner renews its heartbeat every [`Timing::renew_every`] from a thread
//!   of its own (so a long server start-up does not let it go stale). A renewal that finds a
//!   higher epoch claimed, or another owner recorded, marks the ownership lost.
//! - **Fence.** Before every append and status write, the run checks [`Fence::check`]: lost
//!   ownership, or no successful renewal for half the lease (by both its monotonic and its
//!   wall clock), stops the task before it writes. A taker waits a whole lease, so a stale
//!   owner has fenced itself before anyone else writes, as long as clocks across hosts agree
//!   to within half a lease.
//!
//! What it cannot stop: a write that was checked and then stalls in the kernel for longer
//! than half a lease (storage cannot check a token here). `gen verify` and `gen merge` find
//! duplicates such a write would leave.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::store::private::private_dir;
use crate::store::{RunDir, atomic};
use crate::sys;

/// How long a heartbeat may stand still before its owner counts as dead.
pub const LEASE: Duration = Duration::from_secs(60);
/// Overrides [`LEASE`], in seconds (tests use short leases).
pub const LEASE_ENV: &str = "GEN_SHARD_LEASE_SECS";

/// The protocol's clocks.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub lease: Duration,
    pub renew_every: Duration,
    /// How long a heartbeat already older than the lease must stay still before takeover.
    pub watch: Duration,
}

impl Timing {
    /// [`LEASE`] (or [`LEASE_ENV`]), renewed every second (six times per lease when it is
    /// shorter), a dead owner confirmed in 5 s.
    pub fn from_env() -> Timing {
        let lease = std::env::var(LEASE_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|secs| *secs >= 2)
            .map_or(LEASE, Duration::from_secs);
        Timing {
            lease,
            renew_every: (lease / 6).min(Duration::from_secs(1)),
            watch: Duration::from_secs(5).min(lease),
        }
    }
}

/// `owner.json`: who writes this shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRecord {
    pub epoch: u64,
    pub host: String,
    pub pid: u32,
    /// The scheduler's name for the task (`1234_7` for Slurm array task 7 of job 1234, a pod).
    pub job: Option<String>,
    pub array_task: Option<u32>,
    pub started_unix_ms: u64,
    pub heartbeat_unix_ms: u64,
    /// Set when the owner let the shard go at its end; the next task takes over at once.
    pub released_unix_ms: Option<u64>,
}

impl OwnerRecord {
    /// `job 1234_7, pid 4242 on node7`.
    pub fn describe(&self) -> String {
        let job = self
            .job
            .as_ref()
            .map_or_else(String::new, |j| format!("job {j}, "));
        format!("{job}pid {} on {}", self.pid, self.host)
    }
}

/// Who is asking for the shard.
#[derive(Debug, Clone, Default)]
pub struct Claimant {
    pub job: Option<String>,
    pub array_task: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    #[error(
        "shard `{}` is owned by a live task ({owner}, heartbeat {}); this task refuses to \
         write to it",
        dir.display(),
        age(*heartbeat_unix_ms)
    )]
    Live {
        dir: PathBuf,
        owner: String,
        heartbeat_unix_ms: u64,
    },
    #[error(
        "another task claimed shard `{}` at the same moment (epoch {epoch}); this one leaves \
         it to that task",
        dir.display()
    )]
    Raced { dir: PathBuf, epoch: u64 },
    #[error("failed to read or write `{}`", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Why a task may no longer write its shard.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FenceError {
    #[error(
        "shard `{}` was taken over by another task ({by}); this task stops without writing \
         to it again",
        dir.display()
    )]
    Lost { dir: PathBuf, by: String },
    #[error(
        "the ownership of shard `{}` was not renewed for {} s (is the shared file system \
         reachable?); this task stops writing so that a task taking the shard over is its \
         only writer",
        dir.display(),
        secs
    )]
    Expired { dir: PathBuf, secs: u64 },
}

fn age(unix_ms: u64) -> String {
    let now = sys::unix_ms();
    match now.checked_sub(unix_ms) {
        Some(ms) => format!("{} s ago", ms / 1000),
        None => format!(
            "{} s in the future (clocks disagree)",
            (unix_ms - now) / 1000
        ),
    }
}

/// What is known about a shard's previous owner before watching its heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Judgement {
    /// Nobody owns it (or owned it and let go): take it.
    Free,
    /// Its owner is gone: take it over.
    Dead(String),
    /// Its heartbeat moved: its owner is alive, refuse.
    Live,
    /// Only its heartbeat can tell.
    Watch,
}

fn judge(previous: Option<&OwnerRecord>, host: &str, pid_alive: impl Fn(u32) -> bool) -> Judgement {
    let Some(previous) = previous else {
        return Judgement::Free;
    };
    if previous.released_unix_ms.is_some() {
        return Judgement::Free;
    }
    if previous.host == host {
        if previous.pid == std::process::id() {
            return Judgement::Dead("it was this process".to_owned());
        }
        if !pid_alive(previous.pid) {
            return Judgement::Dead(format!("its process {} on {host} is gone", previous.pid));
        }
    }
    // A live pid may be a reused one: only a moving heartbeat proves a live owner.
    Judgement::Watch
}

fn pid_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

fn claims_dir(dir: &RunDir) -> PathBuf {
    dir.root().join("claims")
}

fn claim_path(dir: &RunDir, epoch: u64) -> PathBuf {
    claims_dir(dir).join(format!("{epoch:012}"))
}

fn owner_path(dir: &RunDir) -> PathBuf {
    dir.root().join("owner.json")
}

/// Reads a shard's `owner.json` (`None`: never owned).
pub fn read_owner(dir: &RunDir) -> Result<Option<OwnerRecord>, OwnerError> {
    let path = owner_path(dir);
    atomic::read_json(&path).map_err(|source| OwnerError::Io { path, source })
}

/// Takes shard `dir` for this process (see the module documentation), waiting at most one
/// lease to tell a dead owner from a live one. Says what it did on stderr.
pub fn acquire(dir: &RunDir, claimant: &Claimant, timing: Timing) -> Result<Ownership, OwnerError> {
    let io_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OwnerError::Io { path, source }
    };
    private_dir(&claims_dir(dir)).map_err(io_error(&claims_dir(dir)))?;
    let host = sys::host_name();
    let mut previous = read_owner(dir)?;
    let verdict = match judge(previous.as_ref(), &host, pid_alive) {
        Judgement::Watch => {
            let seen = previous.clone().expect("watch implies an owner");
            let (verdict, last) = watch(dir, seen, timing)?;
            previous = Some(last);
            verdict
        }
        other => other,
    };
    let taking_over = match (&verdict, &previous) {
        (Judgement::Live, Some(owner)) => {
            return Err(OwnerError::Live {
                dir: dir.root().to_path_buf(),
                owner: owner.describe(),
                heartbeat_unix_ms: owner.heartbeat_unix_ms,
            });
        }
        (Judgement::Dead(why), Some(owner)) => Some(format!("{} ({why})", owner.describe())),
        _ => None,
    };
    let epoch = previous.as_ref().map_or(1, |p| p.epoch + 1);
    let now = sys::unix_ms();
    let record = OwnerRecord {
        epoch,
        host,
        pid: std::process::id(),
        job: claimant.job.clone(),
        array_task: claimant.array_task,
        started_unix_ms: now,
        heartbeat_unix_ms: now,
        released_unix_ms: None,
    };
    write_claim(dir, &record)?;
    atomic::write_json(&owner_path(dir), &record).map_err(io_error(&owner_path(dir)))?;
    say_taken(dir, taking_over.as_deref(), epoch);
    Ok(Ownership::start(dir.clone(), record, timing))
}

/// Creates the claim file of `record`'s epoch: only one claimant of an epoch gets it, any
/// other is told it raced.
fn write_claim(dir: &RunDir, record: &OwnerRecord) -> Result<(), OwnerError> {
    let epoch = record.epoch;
    let claim = claim_path(dir, epoch);
    let io_error = |source| OwnerError::Io {
        path: claim.clone(),
        source,
    };
    let created = fs_err::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&claim);
    match created {
        Ok(mut file) => {
            use std::io::Write as _;
            let text = serde_json::to_vec(record).map_err(io::Error::other);
            text.and_then(|t| file.write_all(&t)).map_err(io_error)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(OwnerError::Raced {
            dir: dir.root().to_path_buf(),
            epoch,
        }),
        Err(e) => Err(io_error(e)),
    }
}

/// Says on stderr that this process took shard `dir`, and from whom.
fn say_taken(dir: &RunDir, taking_over: Option<&str>, epoch: u64) {
    let message = match taking_over {
        Some(old) => format!(
            "gen: took over `{}` from {old}; epoch {epoch}",
            dir.root().display()
        ),
        None if epoch > 1 => format!(
            "gen: took `{}` (released by its last owner); epoch {epoch}",
            dir.root().display()
        ),
        None => format!("gen: took `{}`; epoch {epoch}", dir.root().display()),
    };
    crate::report::plain(&message);
}

/// Watches a heartbeat from another host: moved means alive; still for a lease (or for
/// `watch` when already older than the lease by the wall clock) means dead.
fn watch(
    dir: &RunDir,
    mut seen: OwnerRecord,
    timing: Timing,
) -> Result<(Judgement, OwnerRecord), OwnerError> {
    let started = Instant::now();
    loop {
        let watched = started.elapsed();
        let wall_age = Duration::from_millis(sys::unix_ms().saturating_sub(seen.heartbeat_unix_ms));
        if watched >= timing.lease || (wall_age > timing.lease && watched >= timing.watch) {
            let why = format!("no heartbeat for {} s", wall_age.as_secs());
            return Ok((Judgement::Dead(why), seen));
        }
        std::thread::sleep(timing.renew_every);
        let Some(now) = read_owner(dir)? else {
            return Ok((Judgement::Free, seen));
        };
        if now.released_unix_ms.is_some() {
            return Ok((Judgement::Free, now));
        }
        if now != seen {
            return Ok((Judgement::Live, now));
        }
        seen = now;
    }
}

#[derive(Debug)]
struct Lease {
    renewed_at: Instant,
    renewed_unix_ms: u64,
    lost: Option<FenceError>,
}

#[derive(Debug)]
struct Shared {
    dir: RunDir,
    record: Mutex<OwnerRecord>,
    lease: Mutex<Lease>,
    timing: Timing,
}

/// Checked before every write to the shard; cheap (no I/O).
#[derive(Debug, Clone)]
pub struct Fence {
    shared: Arc<Shared>,
}

impl Fence {
    /// `Ok` while this task still owns the shard and its lease is fresh. Once it fails it
    /// keeps failing: a task that stalled past its lease may have been taken over by a task
    /// that decided a moment before any late renewal, so it never writes again.
    pub fn check(&self) -> Result<(), FenceError> {
        let mut lease = self.shared.lease.lock().expect("lease lock");
        expire(&self.shared, &mut lease);
        match &lease.lost {
            Some(lost) => Err(lost.clone()),
            None => Ok(()),
        }
    }
}

/// Marks the lease lost when it was not renewed for half a lease, by the monotonic or the
/// wall clock (a suspended virtual machine stops the first, a stepped clock moves the second).
fn expire(shared: &Shared, lease: &mut Lease) {
    if lease.lost.is_some() {
        return;
    }
    let half = shared.timing.lease / 2;
    let wall = Duration::from_millis(sys::unix_ms().saturating_sub(lease.renewed_unix_ms));
    let monotonic = lease.renewed_at.elapsed();
    if monotonic > half || wall > half {
        lease.lost = Some(FenceError::Expired {
            dir: shared.dir.root().to_path_buf(),
            secs: monotonic.max(wall).as_secs(),
        });
    }
}

/// A held shard: renewed by a thread until [`Ownership::release`] (or drop).
#[derive(Debug)]
pub struct Ownership {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

impl Ownership {
    fn start(dir: RunDir, record: OwnerRecord, timing: Timing) -> Ownership {
        let shared = Arc::new(Shared {
            dir,
            lease: Mutex::new(Lease {
                renewed_at: Instant::now(),
                renewed_unix_ms: record.heartbeat_unix_ms,
                lost: None,
            }),
            record: Mutex::new(record),
            timing,
        });
        let (stop, stopped) = mpsc::channel::<()>();
        let renewing = Arc::clone(&shared);
        let renewer = std::thread::Builder::new()
            .name("gen-shard-lease".to_owned())
            .spawn(move || {
                // The channel's timeout is the renewal clock; a message or a dropped sender
                // ends the thread at once.
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(renewing.timing.renew_every)
                {
                    if renew(&renewing).is_break() {
                        return;
                    }
                }
            })
            .ok();
        Ownership {
            shared,
            stop: Some(stop),
            renewer,
        }
    }

    pub fn fence(&self) -> Fence {
        Fence {
            shared: Arc::clone(&self.shared),
        }
    }

    pub fn record(&self) -> OwnerRecord {
        self.shared.record.lock().expect("record lock").clone()
    }

    pub fn dir(&self) -> &RunDir {
        &self.shared.dir
    }

    /// Stops renewing and, if the shard is still ours, marks it released so the next task
    /// takes it at once.
    pub fn release(mut self) {
        self.stop_renewing();
        if self.shared.lease.lock().expect("lease lock").lost.is_some() {
            return;
        }
        let mut record = self.record();
        if !still_ours(&self.shared, &record) {
            return;
        }
        record.released_unix_ms = Some(sys::unix_ms());
        record.heartbeat_unix_ms = sys::unix_ms();
        atomic::write_json(&owner_path(&self.shared.dir), &record).ok();
    }

    fn stop_renewing(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.send(()).ok();
        }
        if let Some(thread) = self.renewer.take() {
            thread.join().ok();
        }
    }
}

impl Drop for Ownership {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}

/// Whether the shard is still this owner's: no later epoch is claimed, and `owner.json`
/// names no later epoch. The claims are the truth; `owner.json` is what other tasks read, and
/// a stale owner that overwrote it once (in the instant of a takeover) is corrected by the
/// new owner's next renewal, after which the stale one sees the later epoch.
fn still_ours(shared: &Shared, mine: &OwnerRecord) -> bool {
    if claim_path(&shared.dir, mine.epoch + 1).exists() {
        return false;
    }
    match read_owner(&shared.dir) {
        Ok(Some(current)) if current.epoch > mine.epoch => false,
        Ok(Some(current)) if current.epoch == mine.epoch => {
            current.host == mine.host && current.pid == mine.pid
        }
        _ => true,
    }
}

/// One renewal: re-reads the record and writes a new heartbeat when the shard is still ours.
fn renew(shared: &Shared) -> std::ops::ControlFlow<()> {
    {
        let mut lease = shared.lease.lock().expect("lease lock");
        expire(shared, &mut lease);
        if lease.lost.is_some() {
            return std::ops::ControlFlow::Break(());
        }
    }
    let mut record = shared.record.lock().expect("record lock").clone();
    if !still_ours(shared, &record) {
        // The taker's claim holds its record; `owner.json` may still be ours when this
        // task's last renewal overwrote the taker's record in the same instant.
        let claimed = fs_err::read(claim_path(&shared.dir, record.epoch + 1))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<OwnerRecord>(&bytes).ok());
        let by = claimed
            .or_else(|| read_owner(&shared.dir).ok().flatten())
            .filter(|c| c.epoch != record.epoch || c.pid != record.pid)
            .map_or_else(
                || format!("a task that claimed epoch {}", record.epoch + 1),
                |c| c.describe(),
            );
        let mut lease = shared.lease.lock().expect("lease lock");
        lease.lost = Some(FenceError::Lost {
            dir: shared.dir.root().to_path_buf(),
            by,
        });
        return std::ops::ControlFlow::Break(());
    }
    let now = sys::unix_ms();
    record.heartbeat_unix_ms = now;
    let started = Instant::now();
    if atomic::write_json(&owner_path(&shared.dir), &record).is_ok() {
        *shared.record.lock().expect("record lock") = record;
        let mut lease = shared.lease.lock().expect("lease lock");
        if lease.lost.is_none() {
            lease.renewed_at = started;
            lease.renewed_unix_ms = now;
        }
    }
    std::ops::ControlFlow::Continue(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            lease: Duration::from_millis(400),
            renew_every: Duration::from_millis(20),
            watch: Duration::from_millis(100),
        }
    }

    fn shard() -> (tempfile::TempDir, RunDir) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = RunDir::new(tmp.path().join("shard-000"));
        (tmp, dir)
    }

    fn record(epoch: u64, host: &str, pid: u32, heartbeat_unix_ms: u64) -> OwnerRecord {
        OwnerRecord {
            epoch,
            host: host.to_owned(),
            pid,
            job: Some("40_0".to_owned()),
            array_task: Some(0),
            started_unix_ms: heartbeat_unix_ms,
            heartbeat_unix_ms,
            released_unix_ms: None,
        }
    }

    /// A previous owner as another task would have left it: claim file and `owner.json`.
    fn leave_owner(dir: &RunDir, owner: &OwnerRecord) {
        leave_claim(dir, owner);
        atomic::write_json(&owner_path(dir), owner).expect("owner");
    }

    /// A claim file as [`write_claim`] leaves it: the claimant's record.
    fn leave_claim(dir: &RunDir, owner: &OwnerRecord) {
        private_dir(&claims_dir(dir)).expect("mkdir");
        let text = serde_json::to_vec(owner).expect("json");
        fs_err::write(claim_path(dir, owner.epoch), text).expect("claim");
    }

    #[test]
    fn judging_an_owner_before_watching() {
        let alive = |pid: u32| pid == 7;
        assert_eq!(judge(None, "a", alive), Judgement::Free);
        let mut released = record(1, "a", 7, 0);
        released.released_unix_ms = Some(1);
        assert_eq!(judge(Some(&released), "a", alive), Judgement::Free);
        assert_eq!(
            judge(Some(&record(1, "a", 7, 0)), "a", alive),
            Judgement::Watch
        );
        assert!(matches!(
            judge(Some(&record(1, "a", 8, 0)), "a", alive),
            Judgement::Dead(why) if why == "its process 8 on a is gone"
        ));
        assert_eq!(
            judge(Some(&record(1, "b", 7, 0)), "a", alive),
            Judgement::Watch
        );
    }

    #[test]
    fn the_first_task_takes_epoch_one_and_releases_it() {
        let (_tmp, dir) = shard();
        let owner = acquire(&dir, &Claimant::default(), timing()).expect("acquire");
        assert_eq!(owner.record().epoch, 1);
        owner.fence().check().expect("fresh");
        owner.release();
        let left = read_owner(&dir).expect("read").expect("owner");
        assert!(left.released_unix_ms.is_some());
        let next = acquire(&dir, &Claimant::default(), timing()).expect("after release");
        assert_eq!(next.record().epoch, 2);
    }

    #[test]
    fn a_live_owner_on_another_host_is_refused() {
        let (_tmp, dir) = shard();
        let other = record(3, "other-node", 1, sys::unix_ms());
        leave_owner(&dir, &other);
        // The other owner's renewals, as its lease thread would write them.
        let beating = dir.clone();
        let (stop, stopped) = mpsc::channel::<()>();
        let heart = std::thread::spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(Duration::from_millis(10))
            {
                let mut r = other.clone();
                r.heartbeat_unix_ms = sys::unix_ms();
                atomic::write_json(&owner_path(&beating), &r).expect("beat");
            }
        });
        let error = acquire(&dir, &Claimant::default(), timing()).expect_err("live");
        stop.send(()).expect("stop");
        heart.join().expect("join");
        assert!(matches!(error, OwnerError::Live { .. }), "{error}");
        let message = error.to_string();
        assert!(
            message.contains("job 40_0, pid 1 on other-node"),
            "{message}"
        );
        assert!(message.contains("refuses to write"), "{message}");
        assert!(
            !claim_path(&dir, 4).exists(),
            "a refused task claims nothing"
        );
    }

    #[test]
    fn a_dead_owner_is_taken_over_and_its_fence_then_fails() {
        let (_tmp, dir) = shard();
        // A stale owner elsewhere: heartbeat long past the lease, and it never moves.
        leave_owner(&dir, &record(1, "other-node", 1, sys::unix_ms() - 60_000));
        let taker = acquire(&dir, &Claimant::default(), timing()).expect("take over");
        assert_eq!(taker.record().epoch, 2);

        // A stale task of this host whose process is gone (e.g. killed by the scheduler).
        let (_tmp2, dir2) = shard();
        leave_owner(
            &dir2,
            &record(5, &sys::host_name(), u32::MAX - 1, sys::unix_ms()),
        );
        let taker2 = acquire(&dir2, &Claimant::default(), timing()).expect("take over");
        assert_eq!(taker2.record().epoch, 6);
    }

    #[test]
    fn a_stale_owner_that_comes_back_finds_itself_fenced() {
        let (_tmp, dir) = shard();
        let first = acquire(&dir, &Claimant::default(), timing()).expect("first");
        let fence = first.fence();
        // Another task claims the next epoch behind the first's back (as after a takeover),
        // and the first's renewal overwrites the taker's `owner.json` in the same instant:
        // only the claim names the taker.
        let mut taker = first.record();
        taker.epoch = 2;
        taker.host = "other-node".into();
        leave_claim(&dir, &taker);
        // Observed state, not a fixed delay: the renewer notices within a few renewals.
        let deadline = Instant::now() + Duration::from_secs(10);
        while fence.check().is_ok() {
            assert!(Instant::now() < deadline, "the fence never closed");
            std::thread::yield_now();
        }
        let error = fence.check().expect_err("lost");
        assert!(matches!(error, FenceError::Lost { .. }), "{error}");
        assert!(error.to_string().contains("other-node"), "{error}");
        // The taker's next renewal (its record again, in case the first's last renewal
        // overwrote it in the same instant); then the first lets go, which must not touch it.
        atomic::write_json(&owner_path(&dir), &taker).expect("taker renews");
        first.release();
        let left = read_owner(&dir).expect("read").expect("owner");
        assert_eq!(left.epoch, 2, "a lost owner neither renews nor releases");
        assert_eq!(left.released_unix_ms, None);
    }

    #[test]
    fn an_unrenewed_lease_expires_by_itself() {
        let (_tmp, dir) = shard();
        let owner = acquire(&dir, &Claimant::default(), timing()).expect("acquire");
        let fence = owner.fence();
        let mut owner = owner;
        // Renewals stop (as when the shared file system hangs); half a lease later the
        // fence closes on its own.
        owner.stop_renewing();
        let deadline = Instant::now() + Duration::from_secs(10);
        while fence.check().is_ok() {
            assert!(Instant::now() < deadline, "the lease never expired");
            std::thread::yield_now();
        }
        assert!(matches!(fence.check(), Err(FenceError::Expired { .. })));
    }

    #[test]
    fn two_tasks_racing_for_one_epoch_get_one_winner() {
        let (_tmp, dir) = shard();
        private_dir(&claims_dir(&dir)).expect("mkdir");
        fs_err::write(claim_path(&dir, 1), "{}").expect("the other task's claim");
        let error = acquire(&dir, &Claimant::default(), timing()).expect_err("raced");
        assert!(
            matches!(error, OwnerError::Raced { epoch: 1, .. }),
            "{error}"
        );
    }
}
