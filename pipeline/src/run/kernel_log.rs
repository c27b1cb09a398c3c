//! One follower of the kernel log for the whole run, started before the first worker, so an
//! OOM report cannot scroll out of the ring buffer before we read it.
//!
//! Raw `/dev/kmsg` records (`<prio>,<seq>,<usec>,<flags>;text`) are kept as text for the
//! diagnostics crate to parse. When the log is unreadable (dmesg_restrict without CAP_SYSLOG,
//! containers) the reason is recorded, so a verdict can say which evidence was missing.

use std::collections::VecDeque;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::sync::{Arc, Mutex};

use gen_diagnostics::KernelLog;

/// Records kept (the most recent).
const KEEP: usize = 20_000;

#[derive(Debug, Clone)]
pub struct KernelLogFollower {
    state: Arc<Mutex<Followed>>,
}

#[derive(Debug)]
enum Followed {
    Records(VecDeque<String>),
    Unavailable(String),
}

impl KernelLogFollower {
    /// Opens `/dev/kmsg` at its end and follows it on a background thread.
    pub fn start() -> KernelLogFollower {
        // Tests force the fallback path with GEN_TEST_KMSG=/nonexistent.
        let path = std::env::var_os("GEN_TEST_KMSG").unwrap_or_else(|| "/dev/kmsg".into());
        let state = match std::fs::File::open(&path) {
            Ok(mut file) => match file.seek(SeekFrom::End(0)) {
                Ok(_) => {
                    let state = Arc::new(Mutex::new(Followed::Records(VecDeque::new())));
                    let shared = state.clone();
                    let spawned = std::thread::Builder::new()
                        .name("kmsg".into())
                        .spawn(move || follow(&mut file, &shared));
                    if let Err(e) = spawned {
                        *state.lock().expect("not poisoned") = Followed::Unavailable(format!(
                            "cannot start the kernel log reader: {e}"
                        ));
                    }
                    state
                }
                Err(e) => Arc::new(Mutex::new(Followed::Unavailable(format!(
                    "cannot seek /dev/kmsg: {e}"
                )))),
            },
            Err(e) => Arc::new(Mutex::new(Followed::Unavailable(format!(
                "/dev/kmsg unreadable ({e}); dmesg_restrict or a container hides the kernel log"
            )))),
        };
        KernelLogFollower { state }
    }

    /// The records seen so far, as the diagnostics crate takes them.
    pub fn snapshot(&self) -> KernelLog {
        let state = self.state.lock().expect("kernel log lock not poisoned");
        match &*state {
            Followed::Records(records) => KernelLog::Text {
                text: records
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join("\n"),
            },
            Followed::Unavailable(reason) => KernelLog::Unavailable {
                reason: reason.clone(),
            },
        }
    }
}

/// When `/dev/kmsg` could not be followed: one read of the kernel log after the fact, from
/// `dmesg`, else `journalctl -k` (both keep monotonic timestamps). An OOM report may have
/// scrolled out of the ring buffer by then; the verdict says which source was used.
pub async fn fallback_snapshot(kmsg_reason: String) -> KernelLog {
    let attempts: [(&str, &[&str]); 2] = [
        ("dmesg", &[]),
        (
            "journalctl",
            &["-k", "--no-pager", "-o", "short-monotonic", "-b"],
        ),
    ];
    let mut reasons = vec![kmsg_reason];
    for (program, args) in attempts {
        match tokio::process::Command::new(program)
            .args(args)
            .output()
            .await
        {
            Ok(out) if out.status.success() && !out.stdout.is_empty() => {
                return KernelLog::Text {
                    text: String::from_utf8_lossy(&out.stdout).into_owned(),
                };
            }
            Ok(out) => reasons.push(format!(
                "`{program}` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => reasons.push(format!("`{program}` unavailable: {e}")),
        }
    }
    KernelLog::Unavailable {
        reason: reasons.join("; "),
    }
}

fn follow(file: &mut std::fs::File, state: &Mutex<Followed>) {
    // One record per read; 16 KiB fits any record.
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return,
            Ok(n) => {
                let record = String::from_utf8_lossy(&buffer[..n]).trim_end().to_owned();
                let mut state = state.lock().expect("kernel log lock not poisoned");
                if let Followed::Records(records) = &mut *state {
                    if records.len() == KEEP {
                        records.pop_front();
                    }
                    records.push_back(record);
                }
            }
            // Overwritten under us: records were lost; the next read goes on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                *state.lock().expect("kernel log lock not poisoned") =
                    Followed::Unavailable(format!("reading /dev/kmsg failed: {e}"));
                return;
            }
        }
    }
}
