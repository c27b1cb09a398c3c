//! Shared helpers for the fixture tests: reading fixtures and building observations.

// Each test binary uses a different subset, so `expect` would be unfulfilled in some of them.
#![allow(dead_code, unreachable_pub)]

use gen_diagnostics::{Exit, KernelLog, Observation};

pub const MIB: u64 = 1024 * 1024;

/// Reads `tests/fixtures/<name>`.
pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The real memcg OOM kill captured on the VM (see fixtures/README.md).
pub fn real_memcg_oom() -> Observation {
    let mut o = Observation::new(
        Exit::Signal {
            signal: 9,
            sent_by_gen: false,
        },
        9142,
    );
    o.comm = Some("python3".to_string());
    o.cgroup_path = Some("/process_api/af064145901fa865b0eaa13614ea01f0/diagoom".to_string());
    o.spawn_usec = Some(355_041_267);
    o.exit_usec = Some(355_158_915);
    o.peak_rss_bytes = Some(67_108_864);
    o.memory_limit_bytes = Some(64 * MIB);
    o.oom_kill_before = Some(0);
    o.oom_kill_after = Some(1);
    o.kernel_log = KernelLog::Text {
        text: fixture("kernel_kmsg_memcg_real.txt"),
    };
    o
}

/// A worker that failed with `stderr` and exit code 1, kernel log readable and empty.
pub fn failed_with(stderr: &str) -> Observation {
    let mut o = Observation::new(Exit::Code(1), 4000);
    o.stderr_tail = stderr.to_string();
    o.kernel_log = KernelLog::Text {
        text: String::new(),
    };
    o.oom_kill_before = Some(0);
    o.oom_kill_after = Some(0);
    o
}
