//! `gen status --remote user@host:RUN_DIR`: runs the system `ssh` client (batch mode, the
//! user's own keys and config) to fetch the remote `gen status --json` and renders it here.

use crate::status::RunStatus;

/// Fetches the status of the run at `target` (`user@host:RUN_DIR`).
pub fn fetch(target: &str) -> anyhow::Result<RunStatus> {
    anyhow::bail!("`gen status --remote {target}` is not implemented yet")
}
