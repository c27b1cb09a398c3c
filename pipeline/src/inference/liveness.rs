//! Whether the server is up, shared by every request: a request that finds the server down
//! (connection refused or reset, a cut stream, 503 while loading) reports it here, and every
//! request waits for the server to come back instead of burning its attempts. One prober task
//! polls `/health` with backoff until it answers 200.
//!
//! A server can also be down for dispatch while `/health` answers: an engine that fails every
//! request (vLLM answering 500 after its engine died, every stream aborted). Requests report
//! each answer ([`Liveness::answered`]) and each failure ([`Liveness::failed`]); a run of
//! failures across different prompts with no answer in between makes the server *failing*:
//! down like any other outage, but probed with a small real chat request
//! ([`Liveness::answers`]) instead of `/health`, which would say all is well.
//!
//! This is what turns an outage into a pause: no prompt is marked failed because the server
//! was away or broken.
//!
//! For a server `gen` launched, an answer counts only while that process runs
//! ([`Liveness::require_process`]): once it died, its port may answer from another process,
//! which must not get the run's requests.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::client::{ChatClient, RequestError};
use super::probe;
use crate::notice::Notice;
use crate::sys::unix_ms;

/// Longest pause between two health probes while the server is down.
const MAX_PROBE_INTERVAL: Duration = Duration::from_secs(10);
/// Failed requests in a row, for at least two different prompts and with no answer in between,
/// that make a server failing. A prompt that fails alone keeps failing alone: its retries
/// never make a streak of two prompts.
const FAILING_STREAK: u32 = 4;
/// Output tokens the probe of a failing server asks for: enough for a reasoning model's first
/// words, few enough to answer in a moment.
const PROBE_TOKENS: u32 = 16;
/// How long the probe of a failing server may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

/// The server's state as requests see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Up,
    /// Down since this Unix time (ms).
    Down {
        since_unix_ms: u64,
    },
}

/// How many of a run's servers are down, shared by their [`Liveness`]es: an outage says
/// whether the others take over or dispatch pauses.
#[derive(Debug)]
pub struct Outages {
    servers: usize,
    down: std::sync::atomic::AtomicUsize,
}

impl Outages {
    pub fn new(servers: usize) -> Arc<Outages> {
        Arc::new(Outages {
            servers,
            down: 0.into(),
        })
    }
}

/// What requests have seen of the server lately.
#[derive(Debug, Default)]
struct Record {
    /// Requests it answered in this run.
    answered: u64,
    /// Failed requests since its last answer.
    streak: u32,
    /// The prompts of those failures (two are enough to tell).
    streak_prompts: Vec<String>,
    /// Why it is down, while it is.
    down_reason: Option<String>,
    /// A test request is out to tell whether the streak is the server's fault.
    probing: bool,
}

#[derive(Debug, Clone)]
pub struct Liveness {
    url: Arc<str>,
    /// The URL as shown to people (credentials redacted).
    shown: Arc<str>,
    state: watch::Sender<Health>,
    record: Arc<Mutex<Record>>,
    /// For a launched server: whether its process runs.
    process: Arc<std::sync::OnceLock<super::managed::ProcessGate>>,
    /// Where outages and recoveries are said.
    reporter: crate::report::RunReporter,
    /// Shared with the run's other servers.
    outages: Arc<Outages>,
}

impl Liveness {
    /// The liveness of one of the servers `outages` counts.
    pub fn new(url: &str, reporter: crate::report::RunReporter, outages: Arc<Outages>) -> Liveness {
        let (state, _) = watch::channel(Health::Up);
        Liveness {
            url: url.into(),
            shown: probe::redact(url).into(),
            state,
            process: Arc::default(),
            record: Arc::default(),
            reporter,
            outages,
        }
    }

    /// Where this server's changes are said.
    pub fn reporter(&self) -> &crate::report::RunReporter {
        &self.reporter
    }

    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        // A panic while holding it cannot leave the counters inconsistent in a harmful way.
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request got an answer: the server works.
    pub fn answered(&self) {
        let mut record = self.record();
        record.answered += 1;
        record.streak = 0;
        record.streak_prompts.clear();
    }

    /// Requests the server answered in this run (to tell whether it answered others since).
    pub fn answers_so_far(&self) -> u64 {
        self.record().answered
    }

    /// Why the server is down, while it is.
    pub fn down_reason(&self) -> Option<String> {
        self.record().down_reason.clone()
    }

    /// A request for `prompt` failed in a way that may be the server's (5xx, an error event,
    /// an aborted or empty answer, a cut stream while `/health` answers). Returns whether the
    /// server is down now: already, or because this failure completes a run of failures
    /// across prompts ([`FAILING_STREAK`]) and a test request through `client` fails too,
    /// which makes it failing. A test request that is answered ends the run: those prompts
    /// fail on their own.
    pub async fn failed(&self, prompt: &str, reason: &str, client: &ChatClient) -> bool {
        if self.health() != Health::Up {
            return true;
        }
        let streak = {
            let mut record = self.record();
            record.streak += 1;
            if record.streak_prompts.len() < 2 && !record.streak_prompts.iter().any(|p| p == prompt)
            {
                record.streak_prompts.push(prompt.to_owned());
            }
            let due = record.streak >= FAILING_STREAK
                && record.streak_prompts.len() >= 2
                && !record.probing;
            record.probing |= due;
            due.then_some(record.streak)
        };
        let Some(streak) = streak else {
            return false;
        };
        let test = Liveness::answers_briefly(client).await;
        self.record().probing = false;
        match test {
            Ok(()) => {
                self.answered();
                false
            }
            Err(e) => {
                self.report_failing(
                    &format!(
                        "{streak} requests in a row failed, for different prompts, and a test \
                         request too ({e}); last: {reason}"
                    ),
                    client,
                );
                true
            }
        }
    }

    /// The server fails requests although `/health` answers: pause everyone, and probe it with
    /// a small real request until it answers one.
    pub fn report_failing(&self, reason: &str, client: &ChatClient) {
        let why = format!("{reason} (its /health answers, but requests fail)");
        if let Some(all_down) = self.go_down(&why) {
            self.reporter.notice(Notice::ServerFailing {
                url: &self.shown,
                reason,
                all_down,
            });
            tokio::spawn(self.clone().probe_until_up(Some(client.clone())));
        }
    }

    /// Whether the server answers a one-line test prompt with the run's settings and a budget
    /// of `max_tokens` (what `/health` cannot tell); how the request failed when it does not.
    pub async fn answers(client: &ChatClient, max_tokens: u32) -> Result<(), RequestError> {
        Liveness::answers_with(client, max_tokens, client.params()).await
    }

    /// [`Liveness::answers`] with `params` instead of the client's own (a source's settings).
    pub async fn answers_with(
        client: &ChatClient,
        max_tokens: u32,
        params: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), RequestError> {
        let question = [gen_sources::Message::new(
            gen_sources::Role::User,
            "Reply with the single word OK.".to_owned(),
        )];
        let answer = client.complete_with(&question, max_tokens, params);
        match tokio::time::timeout(PROBE_TIMEOUT, answer).await {
            Ok(answer) => answer.map(|_| ()),
            Err(_) => Err(RequestError::Transient(format!(
                "the test request got no answer within {} s",
                PROBE_TIMEOUT.as_secs()
            ))),
        }
    }

    /// [`Liveness::answers`] with a small budget: does the server answer at all?
    pub async fn answers_briefly(client: &ChatClient) -> Result<(), RequestError> {
        Liveness::answers(client, PROBE_TOKENS.min(client.max_tokens())).await
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
    pub async fn health_answers(&self) -> bool {
        self.process_runs() && matches!(probe::health(&self.url).await, Ok(true))
    }

    /// Whether the server's own process runs (always, for a server `gen` did not launch).
    fn process_runs(&self) -> bool {
        self.process
            .get()
            .is_none_or(super::managed::ProcessGate::running)
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
    /// Returns whether the server is down now.
    pub async fn confirm_down(&self, reason: &str) -> bool {
        if self.health() == Health::Up && self.health_answers().await {
            tracing::debug!(url = %self.shown, %reason, "request failed but the server answers /health");
            return false;
        }
        self.report_down(reason);
        true
    }

    /// A request found the server down: pause everyone and probe until it is back.
    pub fn report_down(&self, reason: &str) {
        if let Some(all_down) = self.go_down(reason) {
            let url = &self.shown;
            self.reporter.notice(Notice::ServerDown {
                url,
                reason,
                all_down,
            });
            tokio::spawn(self.clone().probe_until_up(None));
        }
    }

    /// Marks the server down for `reason`; when it was up until now, whether every server is
    /// down now.
    fn go_down(&self, reason: &str) -> Option<bool> {
        let newly_down = self.state.send_if_modified(|health| match health {
            Health::Up => {
                *health = Health::Down {
                    since_unix_ms: unix_ms(),
                };
                true
            }
            Health::Down { .. } => false,
        });
        if !newly_down {
            return None;
        }
        self.record().down_reason = Some(reason.to_owned());
        let down = self.outages.down.fetch_add(1, Ordering::Relaxed) + 1;
        Some(down >= self.outages.servers)
    }

    /// Probes until the server is back: `/health`, or with `client` (a failing server) a small
    /// real request.
    async fn probe_until_up(self, client: Option<ChatClient>) {
        let mut interval = Duration::from_millis(250);
        loop {
            tokio::time::sleep(interval).await;
            let back = match &client {
                None => self.health_answers().await,
                Some(client) => {
                    self.process_runs() && Liveness::answers_briefly(client).await.is_ok()
                }
            };
            if back {
                let down_for = match self.health() {
                    Health::Down { since_unix_ms } => unix_ms().saturating_sub(since_unix_ms),
                    Health::Up => 0,
                };
                self.outages.down.fetch_sub(1, Ordering::Relaxed);
                self.reporter.notice(Notice::ServerBack {
                    url: &self.shown,
                    down_for: Duration::from_millis(down_for),
                });
                {
                    let mut record = self.record();
                    record.down_reason = None;
                    record.streak = 0;
                    record.streak_prompts.clear();
                }
                self.state.send_replace(Health::Up);
                return;
            }
            interval = (interval * 2).min(MAX_PROBE_INTERVAL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> ChatClient {
        ChatClient::new(
            "http://127.0.0.1:1",
            "m".into(),
            None,
            8,
            serde_json::Map::new(),
        )
        .expect("client")
    }

    /// One prompt failing again and again is that prompt's business; failures of different
    /// prompts with no answer in between make the server failing, with the last reason.
    #[tokio::test]
    async fn failures_across_prompts_make_a_failing_server_one_prompt_alone_does_not() {
        let reporter = crate::report::RunReporter::new(None);
        let liveness = Liveness::new("http://127.0.0.1:1", reporter, Outages::new(1));
        let client = client();
        for _ in 0..10 {
            assert!(!liveness.failed("a", "HTTP 500: boom", &client).await);
        }
        liveness.answered();
        assert_eq!(liveness.answers_so_far(), 1);
        assert!(!liveness.failed("a", "HTTP 500: boom", &client).await);
        assert!(!liveness.failed("b", "HTTP 500: boom", &client).await);
        assert!(!liveness.failed("a", "HTTP 500: boom", &client).await);
        assert_eq!(liveness.health(), Health::Up);
        // The fourth, of a second prompt: a test request, refused here, confirms it.
        assert!(liveness.failed("c", "HTTP 500: last", &client).await);
        assert!(matches!(liveness.health(), Health::Down { .. }));
        let reason = liveness.down_reason().unwrap_or_default();
        assert!(
            reason.starts_with(
                "4 requests in a row failed, for different prompts, and a test request too ("
            ) && reason
                .ends_with("; last: HTTP 500: last (its /health answers, but requests fail)"),
            "{reason}"
        );
        // Down: every later failure is the outage's.
        assert!(liveness.failed("d", "HTTP 500: boom", &client).await);
    }

    /// An outage is said once, where it is found: on the terminal and in `events.jsonl`, which
    /// says whether the other servers take over. Before, the history got it from a diff of
    /// status snapshots, a tick later, and missed an outage shorter than a tick.
    #[tokio::test]
    async fn an_outage_is_recorded_where_it_is_found_saying_whether_dispatch_pauses() {
        let dir = tempfile::tempdir().expect("tempdir");
        let events = dir.path().join("events.jsonl");
        let reporter = crate::report::RunReporter::new(Some(events.clone()));
        let outages = Outages::new(2);
        let first = Liveness::new("http://127.0.0.1:1", reporter.clone(), outages.clone());
        let second = Liveness::new("http://127.0.0.1:2", reporter, outages);
        first.report_down("connection refused");
        first.report_down("connection refused");
        second.report_down("connection reset");
        let text = fs_err::read_to_string(&events).expect("events.jsonl");
        let details: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("event"))
            .map(|e| format!("{} {}", e["event"].as_str().unwrap_or(""), e["detail"]))
            .collect();
        assert_eq!(
            details,
            [
                "server_down \"http://127.0.0.1:1 stopped answering (connection refused); its \
                 requests go to the others\"",
                "server_down \"http://127.0.0.1:2 stopped answering (connection reset); \
                 dispatch paused\"",
            ]
        );
    }
}
