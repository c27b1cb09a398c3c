//! Whether the server is up, shared by every request: a request that finds the server down
//! (connection refused or reset, a cut stream, 503 while loading) reports it here, and every
//! request waits for the server to come back instead of burning its attempts. One prober task
//! polls `/health` with backoff until it answers 200.
//!
//! This is what turns an outage into a pause: no prompt is marked failed because the server
//! was away.
//!
//! For a server `gen` launched, an answer counts only while that process runs
//! ([`Liveness::require_process`]): once it died, its port may answer from another process,
//! which must not get the run's requests.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::probe;
use crate::status::state::unix_ms;

/// Longest pause between two health probes while the server is down.
const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// The server's state as requests see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Up,
    /// Down since this Unix time (ms).
    Down {
        since_unix_ms: u64,
    },
}

#[derive(Debug, Clone)]
pub struct Liveness {
    url: Arc<str>,
    /// The URL as shown to people (credentials redacted).
    shown: Arc<str>,
    state: watch::Sender<Health>,
    /// For a launched server: whether its process runs.
    process: Arc<std::sync::OnceLock<super::managed::ProcessGate>>,
}

impl Liveness {
    pub fn new(url: &str) -> Liveness {
        let (state, _) = watch::channel(Health::Up);
        Liveness {
            url: url.into(),
            shown: probe::redact(url).into(),
            state,
            process: Arc::default(),
        }
    }

    /// From now on the server counts as up only while the process behind `gate` runs: it is
    /// down as soon as that process exits, until one runs again and answers.
    pub fn require_process(&self, gate: super::managed::ProcessGate) {
        if self.process.set(gate.clone()).is_err() {
            return;
        }
        let liveness = self.clone();
        tokio::spawn(async move {
            while gate.stopped().await {
                liveness.report_down("its process exited");
                gate.started().await;
            }
        });
    }

    /// `/health` answers 200, from the server's own process when it is one `gen` launched.
    async fn answers(&self) -> bool {
        self.process
            .get()
            .is_none_or(super::managed::ProcessGate::running)
            && matches!(probe::health(&self.url).await, Ok(true))
    }

    pub fn health(&self) -> Health {
        *self.state.borrow()
    }

    /// Follows the server's state (e.g. to wake up when any of several servers changes).
    pub fn subscribe(&self) -> watch::Receiver<Health> {
        self.state.subscribe()
    }

    /// Waits until the server is found down (never, while it stays up).
    pub async fn wait_down(&self) {
        let mut receiver = self.state.subscribe();
        receiver
            .wait_for(|h| matches!(h, Health::Down { .. }))
            .await
            .ok();
    }

    /// The server's base URL (may hold credentials: not for display).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL as shown to people (credentials redacted).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Sets the state without probing (tests).
    #[cfg(test)]
    pub(crate) fn force(&self, health: Health) {
        self.state.send_replace(health);
    }

    /// A request failed as if the server were down. One quick probe tells a real outage from a
    /// stale pooled connection the server had closed: only a failed probe pauses everyone.
    pub async fn confirm_down(&self, reason: &str) {
        if self.health() == Health::Up && self.answers().await {
            tracing::debug!(url = %self.shown, %reason, "request failed but the server answers /health");
            return;
        }
        self.report_down(reason);
    }

    /// A request found the server down: pause everyone and probe until it is back.
    pub fn report_down(&self, reason: &str) {
        let newly_down = self.state.send_if_modified(|health| match health {
            Health::Up => {
                *health = Health::Down {
                    since_unix_ms: unix_ms(),
                };
                true
            }
            Health::Down { .. } => false,
        });
        if newly_down {
            crate::say!(
                "gen: server {} is down ({reason}); pausing until it answers again",
                self.shown
            );
            tokio::spawn(self.clone().probe_until_up());
        }
    }

    async fn probe_until_up(self) {
        let mut interval = Duration::from_millis(250);
        loop {
            tokio::time::sleep(interval).await;
            if self.answers().await {
                let down_for = match self.health() {
                    Health::Down { since_unix_ms } => {
                        unix_ms().saturating_sub(since_unix_ms) / 1000
                    }
                    Health::Up => 0,
                };
                crate::say!(
                    "gen: server {} is back after {down_for} s; resuming",
                    self.shown
                );
                self.state.send_replace(Health::Up);
                return;
            }
            interval = (interval * 2).min(MAX_PROBE_INTERVAL);
        }
    }
}
