//! Feeds one source's pending prompts to the server at a fixed concurrency shared by all
//! sources, retrying transient errors with backoff. Results go back to the orchestrator as
//! [`DispatchEvent`]s; nothing here writes files or status.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::record::{CompletionRecord, RejectKind, RejectedRecord};
use crate::inference::{ChatClient, RequestError};
use crate::status::state::unix_ms;
use gen_sources::Prompt;

/// Longest wait between two attempts of one prompt.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

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
    pub client: Arc<ChatClient>,
    pub permits: Arc<Semaphore>,
    pub max_attempts: u32,
    pub events: mpsc::UnboundedSender<DispatchEvent>,
    pub cancel: CancellationToken,
}

impl Dispatcher {
    /// Sends every prompt of `source` and reports [`DispatchEvent::SourceFinished`] at the end.
    pub async fn run_source(self, source: usize, prompts: Vec<Prompt>) {
        let mut in_flight = JoinSet::new();
        for prompt in prompts {
            let permit = tokio::select! {
                permit = self.permits.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
                () = self.cancel.cancelled() => break,
            };
            let this = self.clone();
            in_flight.spawn(async move {
                let event = this.request(source, prompt).await;
                drop(permit);
                // A closed channel means the orchestrator is shutting down.
                this.events.send(event).ok();
            });
        }
        while in_flight.join_next().await.is_some() {}
        self.events
            .send(DispatchEvent::SourceFinished { source })
            .ok();
    }

    async fn request(&self, source: usize, prompt: Prompt) -> DispatchEvent {
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let result = tokio::select! {
                result = self.client.complete(&prompt.messages) => result,
                () = self.cancel.cancelled() => Err(RequestError::Transient("cancelled".into())),
            };
            let reason = match result {
                Ok(completion) => {
                    return DispatchEvent::Completed {
                        source,
                        record: Box::new(CompletionRecord {
                            id: prompt.id,
                            source: prompt.source,
                            model: self.client.model().to_owned(),
                            messages: prompt.messages,
                            content: completion.content,
                            reasoning_content: completion.reasoning_content,
                            finish_reason: completion.finish_reason,
                            usage: completion.usage,
                            attempts: attempt,
                            latency_ms: u64::try_from(started.elapsed().as_millis())
                                .unwrap_or(u64::MAX),
                            created_unix_ms: unix_ms(),
                        }),
                    };
                }
                Err(RequestError::Fatal(message)) => return DispatchEvent::Fatal(message),
                Err(RequestError::Rejected(reason)) => {
                    return self.give_up(source, prompt.id, RejectKind::Rejected, reason, attempt);
                }
                Err(RequestError::Transient(reason)) => reason,
            };
            if attempt >= self.max_attempts || self.cancel.is_cancelled() {
                return self.give_up(source, prompt.id, RejectKind::Exhausted, reason, attempt);
            }
            tracing::debug!(id = %prompt.id, attempt, %reason, "retrying");
            let backoff = backoff(attempt, &prompt.id);
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.cancel.cancelled() => {}
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
