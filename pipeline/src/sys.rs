//! What `gen` asks of the operating system beyond std and tokio: the process primitives
//! (`wait4` for the exit status *and* the child's own peak RSS, the parent-death signal,
//! signalling a whole process group), the clocks (wall-clock milliseconds for every stored
//! timestamp, `CLOCK_MONOTONIC` for the kernel log), the host name and `/proc/meminfo`'s
//! fields. A leaf module: it uses nothing else of the crate, so every layer may use it.
//! The only `unsafe` in `gen` lives here.
#![expect(
    unsafe_code,
    reason = "thin wrappers over libc calls with no safe equivalent (`flock` included: std and our dependencies have no safe wrapper)"
)]

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

/// How a reaped process ended, plus its own peak RSS (`ru_maxrss`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    /// Exit code when it exited normally.
    pub code: Option<i32>,
    /// Terminating signal when it was killed.
    pub signal: Option<i32>,
    pub core_dumped: bool,
    pub max_rss_bytes: u64,
}

/// Blocks until `pid` (a child of this process) exits, and reaps it.
pub fn wait4(pid: i32) -> io::Result<Reaped> {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid pointers to locals; pid is our own unreaped child.
        let ret = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if ret == pid {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    let (code, signal, core_dumped) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None, false)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)), libc::WCOREDUMP(status))
    } else {
        (None, None, false)
    };
    Ok(Reaped {
        code,
        signal,
        core_dumped,
        // Linux reports ru_maxrss in KiB.
        max_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
    })
}

/// Sends `signal` to every process in group `pgid`. A group that is already gone is fine.
pub fn kill_group(pgid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: killpg has no memory-safety preconditions.
    let ret = unsafe { libc::killpg(pgid, signal) };
    if ret == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}

/// Makes a spawned child receive SIGKILL if `gen` dies, so no orphaned worker keeps running.
pub fn kill_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe; the hook allocates nothing.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The signal's conventional name (`SIGKILL`), for messages.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    name.to_owned()
}

/// Takes an exclusive `flock` on `fd` without blocking: `WouldBlock` when another process
/// holds it. The kernel drops it when the holder exits, however it exits.
pub fn flock_exclusive(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    loop {
        // SAFETY: flock has no memory-safety preconditions; the borrowed fd is open for the call.
        let ret = unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if ret == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Wall-clock time in milliseconds since the Unix epoch (0 for a clock set before 1970): the
/// timestamps of status, events, records and leases.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// This machine's host name, for telling runs on different hosts apart.
pub fn host_name() -> String {
    fs_err::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// CLOCK_MONOTONIC in microseconds: the clock `/dev/kmsg` stamps its records with.
pub fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a local timespec.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if ret != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1000
}

/// In the child, before exec: move itself into the cgroup whose `cgroup.procs` is open as
/// `procs_fd` (writing `0` means "this process"), so the worker starts inside its memory cap
/// with no window outside it; and volunteer as an OOM victim ahead of `gen` itself.
pub fn prepare_worker_child(command: &mut std::process::Command, procs_fd: Option<i32>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (write, open, close) on pre-opened or static data.
    unsafe {
        command.pre_exec(move || {
            if let Some(fd) = procs_fd
                && libc::write(fd, b"0".as_ptr().cast(), 1) != 1
            {
                return Err(io::Error::last_os_error());
            }
            let adj = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
            if adj >= 0 {
                libc::write(adj, b"500".as_ptr().cast(), 3);
                libc::close(adj);
            }
            Ok(())
        });
    }
}

/// Sends `signal` to one process; a process that is already gone is fine.
pub fn kill_pid(pid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    let ret = unsafe { libc::kill(pid, signal) };
    if ret == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A `/proc/meminfo` field in bytes.
pub fn meminfo_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        kib.checked_mul(1024)
    })
}
