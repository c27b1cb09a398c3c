//! Feeds one source's pending prompts to the servers of the run ([`Fleet`]): each
//! conversation takes a [`Lease`] on the least-loaded healthy server and keeps it (its turns
//! reuse that server's prefix cache) unless the server goes down. Results go back to the
//! orchestrator as [`DispatchEvent`]s; nothing here writes files or status.
//!
//! Error handling per prompt: a server that is down ([`RequestError::ServerDown`], or marked
//! down while the request streams) costs the prompt no attempt: its lease is returned and the
//! request goes to another server, or waits until one answers (see [`Liveness`]) — only after
//! [`MAX_CRASHES`] outages during one prompt is it set aside; transient errors are retried
//! with backoff and jitter up to `max_attempts`; a rejection (400) is final;
//! `finish_reason = length` follows the source's [`LengthPolicy`].
//!
//! A prompt with several user turns is regenerated turn by turn: each turn is answered on the
//! model's own earlier answers (their reasoning stripped from the history), and the whole
//! conversation is one record.
//!
//! [`Liveness`]: crate::inference::liveness::Liveness

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::feed::Prompts;
use super::fleet::{Fleet, Lease};
use super::record::{CompletionRecord, RejectKind, RejectedRecord, TurnRecord};
use crate::inference::RequestError;
use crate::inference::client::{Completion, Usage};
use crate::inference::liveness::Health;
use crate::status::state::unix_ms;
use gen_sources::{Message, Prompt, Role};

/// Longest wait between two attempts of one prompt.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Finished conversations that may wait to report, beyond those holding a place.
const REPORT_BACKLOG: usize = 256;
/// Server outages one prompt may live through before it is set aside (a prompt that keeps
/// crashing the server must not take it down forever).
pub const MAX_CRASHES: u32 = 3;

/// What to do with an answer cut by `max-tokens` (`finish_reason = "length"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LengthPolicy {
    /// Keep it (flagged by its finish reason; counted in the truncation rate).
    #[default]
    Keep,
    /// Do not store it; the prompt is recorded as rejected (`truncated`), not retried.
    Drop,
    /// Ask once more with twice the token budget, then keep whatever comes back.
    Retry,
}

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
            let mut retried_length = false;
            let completion = loop {
                match self.turn(&mut lease, &prompt.id, &history, budget).await {
                    TurnOutcome::Answered(completion, used) => {
                        attempts += used;
                        let truncated = completion.finish_reason.as_deref() == Some("length");
                        match length {
                            LengthPolicy::Retry if truncated && !retried_length => {
                                retried_length = true;
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

    /// One request, retried: transient errors with backoff on the same server, outages by
    /// moving to another server or waiting until one answers. `lease` is `None` only between
    /// giving a down server's place back and getting the next one.
    async fn turn(
        &self,
        lease: &mut Option<Lease>,
        id: &str,
        messages: &[Message],
        max_tokens: u32,
    ) -> TurnOutcome {
        let mut attempt = 0u32;
        let mut crashes = 0u32;
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
            attempt += 1;
            backend.touch();
            let result = tokio::select! {
                result = backend.client.complete(messages, max_tokens) => result,
                // Another request found the server down (or the stall watchdog did): this
                // stream is lost with it; the prompt moves on without spending an attempt.
                () = backend.liveness.wait_down() => Err(RequestError::ServerDown(
                    "the server was found down while this request streamed".into(),
                )),
                () = self.cancel.cancelled() => return TurnOutcome::Cancelled,
            };
            let reason = match result {
                Ok(completion) => {
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
                    return TurnOutcome::Answered(completion, attempt);
                }
                Err(RequestError::Fatal(message)) => return TurnOutcome::Fatal(message),
                Err(RequestError::Rejected(reason)) => {
                    return TurnOutcome::GaveUp(RejectKind::Rejected, reason, attempt);
                }
                Err(RequestError::ServerDown(reason)) => {
                    if reason.starts_with("HTTP 503") {
                        backend.telemetry.overloaded();
                    }
                    // An outage is not this prompt's attempt.
                    attempt -= 1;
                    crashes += 1;
                    if crashes > MAX_CRASHES {
                        let reason = format!(
                            "the server went down {crashes} times while answering this prompt; last: {reason}"
                        );
                        return TurnOutcome::GaveUp(RejectKind::Exhausted, reason, attempt);
                    }
                    backend.liveness.confirm_down(&reason).await;
                    if backend.liveness.health() == Health::Up {
                        // It answers `/health` (a full queue, a stale connection): wait a
                        // little before asking it again rather than hammering it.
                        tokio::select! {
                            () = tokio::time::sleep(backoff(crashes, id)) => {}
                            () = self.cancel.cancelled() => return TurnOutcome::Cancelled,
                        }
                    }
                    continue;
                }
                Err(RequestError::Transient(reason)) => {
                    backend.telemetry.retryable_error();
                    reason
                }
            };
            if attempt >= self.max_attempts {
                return TurnOutcome::GaveUp(RejectKind::Exhausted, reason, attempt);
            }
            tracing::debug!(%id, attempt, %reason, "retrying");
            tokio::select! {
                () = tokio::time::sleep(backoff(attempt, id)) => {}
                () = self.cancel.cancelled() => return TurnOutcome::Cancelled,
            }
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
        DispatchEvent::GaveUp {
            source,
            record: RejectedRecord {
                id,
                kind,
                reason,
                attempts,
                created_unix_ms: unix_ms(),
            },
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
