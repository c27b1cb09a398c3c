//! Feeds one source's pending prompts to the servers of the run ([`Fleet`]): each
//! conversation takes a [`Lease`] on the least-loaded healthy server and keeps it (its turns
//! reuse that server's prefix cache) unless the server goes down. Results go back to the
//! orchestrator as [`DispatchEvent`]s; nothing here writes files or status.
//!
//! Error handling per prompt. A prompt's attempts are spent only on errors that single it out:
//! - a server that is down ([`RequestError::ServerDown`] confirmed by a failed `/health`, or
//!   marked down while the request streams) costs no attempt: the lease is returned and the
//!   request goes to another server, or waits until one answers (see [`Liveness`]) — only
//!   after [`MAX_CRASHES`] outages found by this prompt's own requests is it set aside;
//! - a busy server (503 while `/health` answers) costs none either: the request waits and asks
//!   again;
//! - any other failure that may be the server's — a 5xx, an error event, an aborted or empty
//!   answer, a malformed stream, a stream cut while `/health` answers — is retried with backoff
//!   and jitter, and said as what it was. It is reported to the server's [`Liveness`]: a run of
//!   them across prompts makes the server *failing*, an outage that forgives the attempts it
//!   cost. A prompt runs out of `max_attempts` only when the server answered other requests
//!   since its first failure, or answers a test request then: otherwise it is the server's
//!   fault, and the server is failing;
//! - a refusal (400) is judged once per kind ([`Refusals`]): the prompt's own is final (it is
//!   recorded with the settings it was refused under); one a test prompt gets too stops the
//!   run ([`DispatchEvent::Fatal`]) with the prompts left pending;
//! - `finish_reason = length` follows the source's [`LengthPolicy`].
//!
//! A prompt with several user turns is regenerated turn by turn: each turn is answered on the
//! model's own earlier answers (their reasoning stripped from the history), and the whole
//! conversation is one record.
//!
//! [`Liveness`]: crate::inference::liveness::Liveness

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::feed::Prompts;
use super::fleet::{Backend, Fleet, Lease};
use super::refusal::{Judgement, Refusals};
use crate::config::values::LengthPolicy;
use crate::inference::RequestError;
use crate::inference::client::{Completion, Usage};
use crate::inference::liveness::{Health, Liveness};
use crate::store::records::{CompletionRecord, RejectKind, RejectedRecord, TurnRecord};
use crate::sys::unix_ms;
use gen_sources::{Message, Prompt, Role};

/// Longest wait between two attempts of one prompt.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Finished conversations that may wait to report, beyond those holding a place.
const REPORT_BACKLOG: usize = 256;
/// Server outages one prompt may live through before it is set aside (a prompt that keeps
/// crashing the server must not take it down forever).
pub const MAX_CRASHES: u32 = 3;

#[derive(Debug)]
pub enum DispatchEvent {
    Completed {
        source: usize,
        record: Box<CompletionRecord>,
    },
    GaveUp {
        source: usize,
        record: RejectedRecord,
    },
    /// An error that is wrong for every request (bad key, model, path): the run stops.
    Fatal(String),
    SourceFinished {
        source: usize,
    },
}

/// Shared by every source's dispatch task.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    pub fleet: Fleet,
    /// The model every server serves (recorded with each completion).
    pub model: Arc<str>,
    pub max_tokens: u32,
    pub max_attempts: u32,
    /// Bounded: when the orchestrator falls behind (it writes every record), finished
    /// conversations wait to report, holding their places, so no more requests start and
    /// unwritten completions cannot pile up in memory.
    pub events: mpsc::Sender<DispatchEvent>,
    /// Aborts requests in flight.
    pub cancel: CancellationToken,
    /// Stops sending new prompts (requests in flight go on).
    pub stop_admitting: CancellationToken,
    /// Whose fault each kind of refusal is.
    pub refusals: Arc<Refusals>,
    /// The generation settings' fingerprint, recorded with each refusal
    /// ([`crate::store::records::settings_fingerprint`]).
    pub settings: Arc<str>,
}

/// How one request for one turn ended, after retries.
enum TurnOutcome {
    Answered(Completion, u32),
    GaveUp(RejectKind, String, u32),
    Fatal(String),
    Cancelled,
}

impl Dispatcher {
    /// Sends every prompt `feed` yields for `source` and reports
    /// [`DispatchEvent::SourceFinished`] at the end.
    pub async fn run_source(self, source: usize, mut feed: Prompts, length: LengthPolicy) {
        // One reference count per conversation instead of a clone of every field (the
        // cancellation tokens' clones take a lock).
        let this = Arc::new(self);
        let mut in_flight = JoinSet::new();
        'admit: loop {
            let prompt = tokio::select! {
                prompt = feed.recv() => match prompt {
                    Some(prompt) => prompt,
                    None => break,
                },
                () = this.stop_admitting.cancelled() => break,
            };
            // A conversation gives its place back before it reports: when the orchestrator
            // is behind, finished ones wait here, each with its record; at most
            // REPORT_BACKLOG of them, then no new request starts.
            while in_flight.len() >= this.fleet.capacity() + REPORT_BACKLOG {
                tokio::select! {
                    _ = in_flight.join_next() => {}
                    () = this.stop_admitting.cancelled() => break 'admit,
                }
            }
            let lease = tokio::select! {
                lease = this.fleet.acquire() => lease,
                () = this.stop_admitting.cancelled() => break,
            };
            let this = this.clone();
            in_flight.spawn(async move {
                let event = this.conversation(source, prompt, length, lease).await;
                if let Some(event) = event {
                    // A closed channel means the orchestrator is shutting down.
                    this.events.send(event).await.ok();
                }
            });
            // Reaps finished conversations, so the set holds only those in flight.
            while in_flight.try_join_next().is_some() {}
        }
        while in_flight.join_next().await.is_some() {}
        this.events
            .send(DispatchEvent::SourceFinished { source })
            .await
            .ok();
    }

    /// Answers every user turn of `prompt` in order; `None` when cancelled.
    async fn conversation(
        &self,
        source: usize,
        prompt: Prompt,
        length: LengthPolicy,
        lease: Lease,
    ) -> Option<DispatchEvent> {
        let mut lease = Some(lease);
        let started = Instant::now();
        let mut history: Vec<Message> = Vec::new();
        let mut turns: Vec<TurnRecord> = Vec::new();
        let mut attempts = 0;
        // With the dataset's own answers kept as context (`turns = "history"`), only the last
        // user turn is answered; otherwise every user turn is, on the model's own answers.
        let with_history = prompt.messages.iter().any(|m| m.role == Role::Assistant);
        let last_user = prompt.messages.iter().rposition(|m| m.role == Role::User);
        for (index, message) in prompt.messages.iter().enumerate() {
            history.push(message.clone());
            if message.role != Role::User || (with_history && Some(index) != last_user) {
                continue;
            }
            let mut budget = self.max_tokens;
            // The answer cut by `max-tokens`, while a larger budget is tried.
            let mut cut: Option<Completion> = None;
            let completion = loop {
                match self.turn(&mut lease, &prompt.id, &history, budget).await {
                    TurnOutcome::Answered(completion, used) => {
                        attempts += used;
                        let truncated = completion.finish_reason.as_deref() == Some("length");
                        match length {
                            LengthPolicy::Retry if truncated && cut.is_none() => {
                                cut = Some(completion);
                                budget = budget.saturating_mul(2);
                            }
                            LengthPolicy::Drop if truncated => {
                                let reason = format!(
                                    "answer cut at {budget} tokens (finish_reason = length)"
                                );
                                return Some(self.give_up(
                                    source,
                                    prompt.id,
                                    RejectKind::Truncated,
                                    reason,
                                    attempts,
                                ));
                            }
                            _ => break completion,
                        }
                    }
                    // The larger budget is refused (beyond the context): keep the cut answer.
                    TurnOutcome::GaveUp(RejectKind::Rejected, _, used) if cut.is_some() => {
                        attempts += used;
                        break cut.take().expect("checked by the guard");
                    }
                    TurnOutcome::GaveUp(kind, reason, used) => {
                        return Some(self.give_up(
                            source,
                            prompt.id,
                            kind,
                            reason,
                            attempts + used,
                        ));
                    }
                    TurnOutcome::Fatal(message) => return Some(DispatchEvent::Fatal(message)),
                    TurnOutcome::Cancelled => return None,
                }
            };
            // The model's own answer becomes history; its reasoning does not.
            history.push(Message::new(Role::Assistant, completion.content.clone()));
            turns.push(TurnRecord::from(completion));
        }
        let last = turns.last().cloned().unwrap_or_default();
        let usage = total_usage(&turns);
        Some(DispatchEvent::Completed {
            source,
            record: Box::new(CompletionRecord {
                id: prompt.id,
                source: prompt.source,
                model: self.model.to_string(),
                messages: prompt.messages,
                content: last.content,
                reasoning_content: last.reasoning_content,
                finish_reason: last.finish_reason,
                usage,
                turns: if turns.len() > 1 { turns } else { Vec::new() },
                attempts,
                latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                created_unix_ms: unix_ms(),
            }),
        })
    }

    /// One request, retried: failures with backoff on the same server, outages by moving to
    /// another server or waiting until one answers (see the module documentation for what
    /// costs an attempt). `lease` is `None` only between giving a down server's place back and
    /// getting the next one.
    async fn turn(
        &self,
        lease: &mut Option<Lease>,
        id: &str,
        messages: &[Message],
        max_tokens: u32,
    ) -> TurnOutcome {
        // Failed requests charged to this prompt.
        let mut attempt = 0u32;
        // Outages this prompt's own requests found (a prompt that keeps crashing the server).
        let mut crashes = 0u32;
        // The server of this prompt's first charged failure, and how many requests it had
        // answered by then: whether it answered others since tells whose fault the failures
        // are.
        let mut since: Option<(Arc<Backend>, u64)> = None;
        loop {
            if lease
                .as_ref()
                .is_none_or(|l| l.backend.liveness.health() != Health::Up)
            {
                // Its place goes back first: with one server, it is the place to wait for.
                *lease = None;
                *lease = tokio::select! {
                    next = self.fleet.acquire() => Some(next),
                    () = self.cancel.cancelled() => return TurnOutcome::Cancelled,
                };
            }
            let backend = lease.as_ref().expect("leased above").backend.clone();
            backend.touch();
            let result = tokio::select! {
                result = backend.client.complete(messages, max_tokens) => Some(result),
                // Another request found the server down (or the stall watchdog did): this
                // stream is lost with it; the prompt moves on without spending an attempt.
                () = backend.liveness.wait_down() => None,
                () = self.cancel.cancelled() => return TurnOutcome::Cancelled,
            };
            let Some(result) = result else { continue };
            let reason = match result {
                Ok(completion) => {
                    backend.liveness.answered();
                    let output = completion.usage.as_ref().map_or(0, |u| u.completion_tokens);
                    // Only a tuner reads (and empties) the telemetry: with a fixed
                    // concurrency it would grow by a sample per request, forever.
                    if let Some(usage) = completion
                        .usage
                        .as_ref()
                        .filter(|_| backend.tuner.is_some())
                    {
                        backend
                            .telemetry
                            .finished(usage.prompt_tokens, usage.completion_tokens);
                    }
                    backend.finished(output);
                    return TurnOutcome::Answered(completion, attempt + 1);
                }
                Err(RequestError::Fatal(message)) => return TurnOutcome::Fatal(message),
                Err(RequestError::Rejected(reason)) => {
                    // A larger budget after a cut answer is this prompt's own business.
                    if max_tokens != self.max_tokens {
                        return TurnOutcome::GaveUp(RejectKind::Rejected, reason, attempt + 1);
                    }
                    let judged = self.refusals.judge(&reason, &backend.client, max_tokens);
                    let Some(judgement) = self.unless_cancelled(judged).await else {
                        return TurnOutcome::Cancelled;
                    };
                    match judgement {
                        Some(Judgement::Prompt) => {
                            return TurnOutcome::GaveUp(RejectKind::Rejected, reason, attempt + 1);
                        }
                        Some(Judgement::Config(message)) => return TurnOutcome::Fatal(message),
                        None => {
                            if self.pause(backoff(1, id)).await.is_err() {
                                return TurnOutcome::Cancelled;
                            }
                            continue;
                        }
                    }
                }
                Err(RequestError::ServerDown(reason)) => {
                    let busy = reason.starts_with("HTTP 503");
                    if busy {
                        backend.telemetry.overloaded();
                    }
                    if backend.liveness.confirm_down(&reason).await {
                        crashes += 1;
                        if crashes > MAX_CRASHES {
                            let reason = format!(
                                "the server went down {crashes} times while answering this prompt; last: {reason}"
                            );
                            return TurnOutcome::GaveUp(RejectKind::Exhausted, reason, attempt);
                        }
                        continue;
                    }
                    if busy {
                        // Alive but busy (a full queue): not this prompt's fault; ask again
                        // a little later rather than hammering it.
                        let failed = backend.liveness.failed(id, &reason, &backend.client);
                        if self.unless_cancelled(failed).await.is_none() {
                            return TurnOutcome::Cancelled;
                        }
                        if self.pause(backoff(2, id)).await.is_err() {
                            return TurnOutcome::Cancelled;
                        }
                        continue;
                    }
                    format!("{reason}, while the server answered /health")
                }
                Err(RequestError::Transient(reason)) => {
                    backend.telemetry.retryable_error();
                    reason
                }
            };
            let failed = backend.liveness.failed(id, &reason, &backend.client);
            let Some(failing) = self.unless_cancelled(failed).await else {
                return TurnOutcome::Cancelled;
            };
            if failing {
                // Part of a run of failures across prompts: the server is failing.
                forgive(&mut attempt, &mut since, false);
                continue;
            }
            attempt += 1;
            if since
                .as_ref()
                .is_none_or(|(server, _)| !Arc::ptr_eq(server, &backend))
            {
                since = Some((backend.clone(), backend.liveness.answers_so_far()));
            }
            if attempt >= self.max_attempts {
                let answered_before = since.as_ref().map_or(0, |(_, answered)| *answered);
                let evidence = if backend.liveness.answers_so_far() > answered_before {
                    "the server answered other requests meanwhile"
                } else {
                    let test = Liveness::answers_briefly(&backend.client);
                    let Some(test) = self.unless_cancelled(test).await else {
                        return TurnOutcome::Cancelled;
                    };
                    match test {
                        Ok(()) => {
                            backend.liveness.answered();
                            "the server answers a test request"
                        }
                        Err(e) => {
                            // Nothing else is answered either: the server's fault.
                            backend.liveness.report_failing(
                                &format!("{reason}; a test request failed too: {e}"),
                                &backend.client,
                            );
                            forgive(&mut attempt, &mut since, true);
                            continue;
                        }
                    }
                };
                let reason = format!("{reason} ({attempt} attempts; {evidence})");
                return TurnOutcome::GaveUp(RejectKind::Exhausted, reason, attempt);
            }
            tracing::debug!(%id, attempt, %reason, "retrying");
            tokio::select! {
                () = tokio::time::sleep(backoff(attempt, id)) => {}
                // An outage declared meanwhile: the failure was the server's.
                () = backend.liveness.wait_down() => forgive(&mut attempt, &mut since, true),
                () = self.cancel.cancelled() => return TurnOutcome::Cancelled,
            }
        }
    }

    /// The output of `future`, or `None` when the run is cancelled first.
    async fn unless_cancelled<T>(&self, future: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            output = future => Some(output),
            () = self.cancel.cancelled() => None,
        }
    }

    /// Waits `delay`; `Err` when the run is cancelled meanwhile.
    async fn pause(&self, delay: Duration) -> Result<(), ()> {
        tokio::select! {
            () = tokio::time::sleep(delay) => Ok(()),
            () = self.cancel.cancelled() => Err(()),
        }
    }

    fn give_up(
        &self,
        source: usize,
        id: String,
        kind: RejectKind,
        reason: String,
        attempts: u32,
    ) -> DispatchEvent {
        // A refusal holds only under the settings it was refused with.
        let settings = (kind == RejectKind::Rejected).then(|| self.settings.to_string());
        DispatchEvent::GaveUp {
            source,
            record: RejectedRecord {
                id,
                kind,
                reason,
                attempts,
                created_unix_ms: unix_ms(),
                settings,
            },
        }
    }
}

/// The server turned out failing (or down) after this prompt's failures: those were its
/// fault. When it answered nothing since this prompt's first charged failure, all of them are
/// forgiven; otherwise only the last, when it was charged (`charged_now`).
fn forgive(attempt: &mut u32, since: &mut Option<(Arc<Backend>, u64)>, charged_now: bool) {
    match since {
        Some((server, answered)) if server.liveness.answers_so_far() > *answered => {
            if charged_now {
                *attempt = attempt.saturating_sub(1);
            }
        }
        _ => {
            *attempt = 0;
            *since = None;
        }
    }
}

fn total_usage(turns: &[TurnRecord]) -> Option<Usage> {
    let mut total: Option<Usage> = None;
    for usage in turns.iter().filter_map(|t| t.usage.as_ref()) {
        let sum = total.get_or_insert_with(Usage::default);
        sum.prompt_tokens += usage.prompt_tokens;
        sum.completion_tokens += usage.completion_tokens;
        sum.total_tokens += usage.total_tokens;
    }
    total
}

/// Exponential backoff (0.5 s, 1 s, 2 s, …) with ±25% jitter derived from the prompt id, so
/// retries of many prompts do not arrive together.
pub fn backoff(attempt: u32, id: &str) -> Duration {
    let base = Duration::from_millis(500).saturating_mul(1 << attempt.saturating_sub(1).min(10));
    let base = base.min(MAX_BACKOFF);
    let factor = 0.75 + 0.5 * jitter(id, attempt);
    base.mul_f64(factor)
}

/// A deterministic value in [0, 1) per (id, attempt), without a random-number generator.
fn jitter(id: &str, attempt: u32) -> f64 {
    let hash = xxh3_64_with_seed(id.as_bytes(), u64::from(attempt));
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

impl From<Completion> for TurnRecord {
    fn from(c: Completion) -> TurnRecord {
        TurnRecord {
            content: c.content,
            reasoning_content: c.reasoning_content,
            finish_reason: c.finish_reason,
            usage: c.usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_bounded_and_jittered() {
        let first = backoff(1, "a");
        assert!(
            first >= Duration::from_millis(375) && first <= Duration::from_millis(625),
            "{first:?}"
        );
        let tenth = backoff(10, "a");
        assert!(tenth <= MAX_BACKOFF.mul_f64(1.25));
        assert_ne!(backoff(3, "a"), backoff(3, "b"));
        assert_eq!(backoff(3, "a"), backoff(3, "a"));
    }
}
