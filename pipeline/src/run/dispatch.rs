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
//! - `finish_reason = length` follows the source's [`LengthPolicy`] — but an answer the
//!   context cut ([`CutBy::Context`]) is never asked again with a larger budget, which cannot
//!   help: it is kept (or dropped, under `drop`) and counted apart.
//!
//! A prompt with several user turns is regenerated turn by turn: each turn is answered on the
//! model's own earlier answers (their reasoning stripped from the history), and the whole
//! conversation is one record.
//!
//! Tool turns. The model answers where [`answer_points`] says: after each user turn and the
//! tool exchange that follows it. The dataset's tool calls (assistant `tool_calls`, or a call
//! in the model's own syntax) and the tools' results are sent as they are, at their
//! positions: they are context, never regenerated, so each result answers exactly the call
//! before it. Only the assistant's answers in words are regenerated, with the prompt's
//! `tools` and `tool_choice = "none"` (where the model answers, the dataset answered in
//! words). vllm-project/speculators PR #750 regenerates the calls too and splices the i-th
//! cached result after the model's i-th call, cutting the conversation when the calls do
//! not pair up (another tool, several calls, results exhausted); that needs the server's
//! tool-call parser and gives results that answered other arguments. Keeping the dataset's
//! calls gives every answer a coherent context on any server that takes tool messages, at
//! the price of the calls' tokens being the dataset's, not the model's. A server that
//! refuses tool turns ([`Refusals::tool_turns_refused`]) is said once
//! ([`Notice::ToolTurnsRefused`]); from then on conversations end before their first tool
//! turn ([`before_first_tool_turn`]), as before tool turns were kept, and their records say
//! so (`tool_turns_cut`).
//!
//! [`Liveness`]: crate::inference::liveness::Liveness

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::feed::{Pending, Prompts};
use super::fleet::{Backend, Fleet, Lease};
use super::refusal::{Judgement, Refusals};
use crate::config::Settings;
use crate::config::values::LengthPolicy;
use crate::inference::RequestError;
use crate::inference::client::{Completion, Usage};
use crate::inference::liveness::{Health, Liveness};
use crate::notice::Notice;
use crate::store::records::{
    CompletionRecord, CutBy, RejectKind, RejectedRecord, TurnRecord, heuristic_cut_by,
};
use crate::sys::unix_ms;
use gen_sources::prompt::{answer_points, before_first_tool_turn};
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
    /// An answer named another model than the run's answers so far: the run stops, that answer
    /// unstored ([`Fleet::answered_as`]).
    ModelChanged(String),
    SourceFinished {
        source: usize,
    },
}

/// Shared by every source's dispatch task.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    pub fleet: Fleet,
    /// The model every server serves (recorded with each completion whose chunks name none).
    pub model: Arc<str>,
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
}

/// How one source's prompts are sent.
#[derive(Debug)]
pub struct SourceRequests {
    pub length: LengthPolicy,
    pub settings: Settings,
    /// `settings`' fingerprint, recorded with each refusal ([`Settings::fingerprint`]).
    fingerprint: String,
}

impl SourceRequests {
    pub fn new(length: LengthPolicy, settings: Settings) -> SourceRequests {
        SourceRequests {
            length,
            fingerprint: settings.fingerprint(),
            settings,
        }
    }
}

/// One request's identity and settings: a sample of a prompt, as its source asks for it.
struct Ask<'a> {
    /// The record's id (the sample's).
    id: &'a str,
    params: &'a serde_json::Map<String, serde_json::Value>,
    /// The prompt's tool definitions, sent with it.
    tools: Option<&'a serde_json::Value>,
    /// Whether the conversation carries tool turns or definitions (a refusal may be theirs).
    tool_turns: bool,
    /// The source's budget (a turn may ask for more under `on-length = "retry"`).
    max_tokens: u32,
    /// The fingerprint of the source's settings ([`Settings::fingerprint`]).
    settings: &'a str,
}

/// How one request for one turn ended, after retries: the answer, with what cut it short if
/// anything did, and the attempts it spent.
type TurnOutcome = Result<(Completion, Option<CutBy>, u32), Unanswered>;

/// Why a user turn went unanswered (its conversation ends there).
enum Unanswered {
    /// With the attempts spent.
    GaveUp(RejectKind, String, u32),
    Fatal(String),
    Cancelled,
    /// The server refuses tool turns: the conversation is asked again without them.
    ToolTurnsRefused,
}

/// What one failed request of a turn leads to.
enum Step {
    /// The turn ends.
    Done(TurnOutcome),
    /// Ask again without charging the prompt.
    Again,
    /// A failure that may be the prompt's, said this way.
    Charge(String),
}

/// What one turn's failures cost its prompt so far.
#[derive(Default)]
struct Charges {
    /// Failed requests charged to this prompt.
    attempt: u32,
    /// Outages this prompt's own requests found (a prompt that keeps crashing the server).
    crashes: u32,
    /// The server of this prompt's first charged failure, and how many requests it had
    /// answered by then: whether it answered others since tells whose fault the failures
    /// are.
    since: Option<(Arc<Backend>, u64)>,
}

impl Charges {
    /// Charges a failure on `backend`.
    fn charge(&mut self, backend: &Arc<Backend>) {
        self.attempt += 1;
        if self
            .since
            .as_ref()
            .is_none_or(|(server, _)| !Arc::ptr_eq(server, backend))
        {
            self.since = Some((backend.clone(), backend.liveness.answers_so_far()));
        }
    }

    /// Requests the server of the first charged failure had answered by then.
    fn answered_before(&self) -> u64 {
        self.since.as_ref().map_or(0, |(_, answered)| *answered)
    }

    /// The server turned out failing (or down) after this prompt's failures: those were its
    /// fault. When it answered nothing since this prompt's first charged failure, all of them
    /// are forgiven; otherwise only the last, when it was charged (`charged_now`).
    fn forgive(&mut self, charged_now: bool) {
        match &self.since {
            Some((server, answered)) if server.liveness.answers_so_far() > *answered => {
                if charged_now {
                    self.attempt = self.attempt.saturating_sub(1);
                }
            }
            _ => {
                self.attempt = 0;
                self.since = None;
            }
        }
    }
}

impl Dispatcher {
    /// Sends every prompt `feed` yields for `source`, a prompt's samples back to back (the
    /// server's prefix cache then serves the shared prompt), and reports
    /// [`DispatchEvent::SourceFinished`] at the end.
    pub async fn run_source(self, source: usize, mut feed: Prompts, requests: SourceRequests) {
        // One reference count per conversation instead of a clone of every field (the
        // cancellation tokens' clones take a lock).
        let this = Arc::new(self);
        let requests = Arc::new(requests);
        let mut in_flight = JoinSet::new();
        'admit: loop {
            let Pending { prompt, samples } = tokio::select! {
                pending = feed.recv() => match pending {
                    Some(pending) => pending,
                    None => break,
                },
                () = this.stop_admitting.cancelled() => break,
            };
            let prompt = Arc::new(prompt);
            for sample in samples {
                // A conversation gives its place back before it reports: when the
                // orchestrator is behind, finished ones wait here, each with its record; at
                // most REPORT_BACKLOG of them, then no new request starts.
                while in_flight.len() >= this.fleet.capacity() + REPORT_BACKLOG {
                    tokio::select! {
                        _ = in_flight.join_next() => {}
                        () = this.stop_admitting.cancelled() => break 'admit,
                    }
                }
                let lease = tokio::select! {
                    lease = this.fleet.acquire() => lease,
                    () = this.stop_admitting.cancelled() => break 'admit,
                };
                let (this, requests, prompt) = (this.clone(), requests.clone(), prompt.clone());
                in_flight.spawn(async move {
                    let event = this
                        .conversation(source, prompt, sample, &requests, lease)
                        .await;
                    if let Some(event) = event {
                        // A closed channel means the orchestrator is shutting down.
                        this.events.send(event).await.ok();
                    }
                });
                // Reaps finished conversations, so the set holds only those in flight.
                while in_flight.try_join_next().is_some() {}
            }
        }
        while in_flight.join_next().await.is_some() {}
        this.events
            .send(DispatchEvent::SourceFinished { source })
            .await
            .ok();
    }

    /// Answers every user turn of sample `sample` of `prompt` in order (see the module
    /// documentation for tool turns); `None` when cancelled.
    async fn conversation(
        &self,
        source: usize,
        prompt: Arc<Prompt>,
        sample: u32,
        requests: &SourceRequests,
        lease: Lease,
    ) -> Option<DispatchEvent> {
        let request = requests.settings.request(&prompt.id, sample);
        let length = requests.length;
        let mut lease = Some(lease);
        let started = Instant::now();
        let mut history: Vec<Message> = Vec::new();
        let mut turns: Vec<TurnRecord> = Vec::new();
        let mut attempts = 0;
        // The model the answers name (checked turn by turn: one model per run).
        let mut answered_by = self.model.to_string();
        let mut cut = prompt.has_tool_content() && self.refusals.tools_refused();
        'conversation: loop {
            let (messages, tools) = match cut {
                true => (before_first_tool_turn(&prompt.messages), None),
                false => (&prompt.messages[..], prompt.tools.as_ref()),
            };
            let ask = Ask {
                id: &request.id,
                params: &request.params,
                tools,
                tool_turns: !cut && prompt.has_tool_content(),
                max_tokens: requests.settings.max_tokens,
                settings: &requests.fingerprint,
            };
            history.clear();
            turns.clear();
            let mut points = answer_points(messages).peekable();
            for (index, message) in messages.iter().enumerate() {
                history.push(message.clone());
                if points.next_if_eq(&index).is_none() {
                    continue;
                }
                let answer = self.answer_turn(&mut lease, &ask, &history, length, &mut attempts);
                let (completion, cut_by) = match answer.await {
                    Ok(answer) => answer,
                    Err(Unanswered::GaveUp(kind, reason, _)) => {
                        let refused_under = &requests.fingerprint;
                        let record = give_up(ask.id, kind, reason, attempts, refused_under);
                        return Some(DispatchEvent::GaveUp { source, record });
                    }
                    Err(Unanswered::Fatal(message)) => {
                        return Some(DispatchEvent::Fatal(message));
                    }
                    Err(Unanswered::Cancelled) => return None,
                    Err(Unanswered::ToolTurnsRefused) => {
                        cut = true;
                        continue 'conversation;
                    }
                };
                let named = completion.model.as_deref().unwrap_or(&self.model);
                if let Some(lease) = &lease
                    && let Err(message) = self.check_model(&lease.backend, named)
                {
                    return Some(DispatchEvent::ModelChanged(message));
                }
                answered_by = named.to_owned();
                // The model's own answer becomes history; its reasoning does not.
                history.push(Message::new(Role::Assistant, completion.content.clone()));
                turns.push(TurnRecord {
                    cut_by,
                    ..TurnRecord::from(completion)
                });
            }
            break;
        }
        let mut settings = request.params;
        settings.insert("max_tokens".into(), requests.settings.max_tokens.into());
        let answered = Answered {
            model: answered_by,
            turns,
            attempts,
            started,
            tool_turns_cut: cut,
        };
        let record = completed(
            Arc::unwrap_or_clone(prompt),
            request.id,
            sample,
            settings,
            answered,
        );
        Some(DispatchEvent::Completed {
            source,
            record: Box::new(record),
        })
    }

    /// Whether an answer of `backend` naming `model` may be kept ([`Fleet::answered_as`]); the
    /// first that names another model than the run asked for is said loudly, once per server.
    fn check_model(&self, backend: &Backend, model: &str) -> Result<(), String> {
        if self.fleet.answered_as(backend, model)? {
            backend.liveness.reporter().notice(Notice::ModelMismatch {
                url: backend.liveness.shown(),
                named: model,
                asked: &self.model,
            });
        }
        Ok(())
    }

    /// Answers the last message of `history` under the source's [`LengthPolicy`]: an answer
    /// cut by `max-tokens` is asked again with twice the budget (`Retry`; kept when the larger
    /// budget is refused); a cut answer sets the prompt aside under `Drop`. An answer the
    /// context cut is never asked again: no budget makes room in the context. Adds the
    /// attempts spent to `attempts`.
    async fn answer_turn(
        &self,
        lease: &mut Option<Lease>,
        ask: &Ask<'_>,
        history: &[Message],
        length: LengthPolicy,
        attempts: &mut u32,
    ) -> Result<(Completion, Option<CutBy>), Unanswered> {
        let mut budget = ask.max_tokens;
        // The answer cut by `max-tokens`, while a larger budget is tried.
        let mut cut: Option<Completion> = None;
        loop {
            match self.turn(lease, ask, history, budget).await {
                Ok((completion, cut_by, used)) => {
                    *attempts += used;
                    match (length, cut_by) {
                        (LengthPolicy::Retry, Some(CutBy::MaxTokens)) if cut.is_none() => {
                            cut = Some(completion);
                            budget = budget.saturating_mul(2);
                        }
                        (LengthPolicy::Drop, Some(by)) => {
                            let reason = match by {
                                CutBy::MaxTokens => format!(
                                    "answer cut at {budget} tokens (finish_reason = length)"
                                ),
                                CutBy::Context => format!(
                                    "answer cut by the context before {budget} tokens \
                                     (finish_reason = length; {})",
                                    tokens(&completion)
                                ),
                            };
                            return Err(Unanswered::GaveUp(RejectKind::Truncated, reason, used));
                        }
                        _ => return Ok((completion, cut_by)),
                    }
                }
                // The larger budget is refused (beyond the context): keep the cut answer.
                Err(Unanswered::GaveUp(RejectKind::Rejected, _, used)) if cut.is_some() => {
                    *attempts += used;
                    let cut = cut.take().expect("checked by the guard");
                    return Ok((cut, Some(CutBy::MaxTokens)));
                }
                Err(gave_up @ Unanswered::GaveUp(.., used)) => {
                    *attempts += used;
                    return Err(gave_up);
                }
                Err(unanswered) => return Err(unanswered),
            }
        }
    }

    /// One request, retried: failures with backoff on the same server, outages by moving to
    /// another server or waiting until one answers (see the module documentation for what
    /// costs an attempt). `lease` is `None` only between giving a down server's place back and
    /// getting the next one.
    async fn turn(
        &self,
        lease: &mut Option<Lease>,
        ask: &Ask<'_>,
        messages: &[Message],
        max_tokens: u32,
    ) -> TurnOutcome {
        let id = ask.id;
        let mut charges = Charges::default();
        loop {
            let Some(backend) = self.healthy_backend(lease).await else {
                return Err(Unanswered::Cancelled);
            };
            backend.touch();
            if backend.tuner.is_some() {
                backend.telemetry.sent(messages);
            }
            let result = tokio::select! {
                result = backend.client.timed((messages, ask.tools), max_tokens, ask.params) => result.map(|timed| timed.completion),
                // Another request found the server down (or the stall watchdog did): this
                // stream is lost with it; the prompt moves on without spending an attempt.
                () = backend.liveness.wait_down() => continue,
                () = self.cancel.cancelled() => return Err(Unanswered::Cancelled),
            };
            let step = match result {
                Ok(completion) => {
                    answered(&backend, &completion);
                    let cut_by = heuristic_cut_by(
                        completion.finish_reason.as_deref(),
                        completion.usage.as_ref(),
                        max_tokens,
                        backend.context,
                    );
                    return Ok((completion, cut_by, charges.attempt + 1));
                }
                Err(RequestError::Fatal(message)) => return Err(Unanswered::Fatal(message)),
                Err(RequestError::Rejected(reason)) => {
                    self.rejected(&backend, ask, reason, max_tokens, charges.attempt)
                        .await
                }
                Err(RequestError::ServerDown(reason)) => {
                    self.server_down(&backend, id, reason, &mut charges).await
                }
                // llama-server without `--jinja` refuses `tools` with a 500.
                Err(RequestError::Transient(reason))
                    if self.tool_turns_refused(&backend, ask, &reason) =>
                {
                    Step::Done(Err(Unanswered::ToolTurnsRefused))
                }
                Err(RequestError::Transient(reason)) => {
                    backend.telemetry.retryable_error();
                    Step::Charge(reason)
                }
            };
            let reason = match step {
                Step::Done(outcome) => return outcome,
                Step::Again => continue,
                Step::Charge(reason) => reason,
            };
            if let Some(outcome) = self.after_failure(&backend, id, reason, &mut charges).await {
                return outcome;
            }
        }
    }

    /// The backend of `lease`, after trading a lease on a server that is not up for one on a
    /// server that is; `None` when cancelled meanwhile, or once the run stops admitting: a
    /// request waiting for a server has nothing in flight, so it ends at once (its prompt stays
    /// pending) instead of holding the run for the whole grace period.
    async fn healthy_backend(&self, lease: &mut Option<Lease>) -> Option<Arc<Backend>> {
        if lease
            .as_ref()
            .is_none_or(|l| l.backend.liveness.health() != Health::Up)
        {
            // Its place goes back first: with one server, it is the place to wait for.
            *lease = None;
            if self.stop_admitting.is_cancelled() {
                return None;
            }
            let acquired = tokio::select! {
                lease = self.fleet.acquire() => lease,
                () = self.cancel.cancelled() => return None,
                () = self.stop_admitting.cancelled() => return None,
            };
            *lease = Some(acquired);
        }
        Some(lease.as_ref().expect("leased above").backend.clone())
    }

    /// A refusal (400): final for this prompt when its kind is the prompt's fault (or it came
    /// for a larger budget after a cut answer), fatal when it is the settings', asked again
    /// while its kind is being judged.
    async fn rejected(
        &self,
        backend: &Backend,
        ask: &Ask<'_>,
        reason: String,
        max_tokens: u32,
        attempt: u32,
    ) -> Step {
        if self.tool_turns_refused(backend, ask, &reason) {
            return Step::Done(Err(Unanswered::ToolTurnsRefused));
        }
        // A larger budget after a cut answer is this prompt's own business.
        if max_tokens != ask.max_tokens {
            return Step::Done(Err(Unanswered::GaveUp(
                RejectKind::Rejected,
                reason,
                attempt + 1,
            )));
        }
        let judged = self.refusals.judge(
            &reason,
            &backend.client,
            max_tokens,
            (ask.params, ask.settings),
        );
        let Some(judgement) = self.unless_cancelled(judged).await else {
            return Step::Done(Err(Unanswered::Cancelled));
        };
        match judgement {
            Some(Judgement::Prompt) => Step::Done(Err(Unanswered::GaveUp(
                RejectKind::Rejected,
                reason,
                attempt + 1,
            ))),
            Some(Judgement::Config(message)) => Step::Done(Err(Unanswered::Fatal(message))),
            None => match self.pause(backoff(1, ask.id)).await {
                Ok(()) => Step::Again,
                Err(()) => Step::Done(Err(Unanswered::Cancelled)),
            },
        }
    }

    /// Whether `reason`, a failure of `ask` on `backend`, is the servers refusing tool turns
    /// ([`Refusals::tool_turns_refused`]); said once, by the request that found it out.
    fn tool_turns_refused(&self, backend: &Backend, ask: &Ask<'_>, reason: &str) -> bool {
        if !ask.tool_turns {
            return false;
        }
        match self.refusals.tool_turns_refused(reason) {
            None => false,
            Some(first) => {
                if first {
                    backend
                        .liveness
                        .reporter()
                        .notice(Notice::ToolTurnsRefused {
                            url: backend.liveness.shown(),
                            reason,
                        });
                }
                true
            }
        }
    }

    /// The server looked down: an outage confirmed by `/health` costs no attempt (but counts
    /// as one of this prompt's crashes); a busy server is asked again later; a server that
    /// answers `/health` failed this request, which may be charged.
    async fn server_down(
        &self,
        backend: &Backend,
        id: &str,
        reason: String,
        charges: &mut Charges,
    ) -> Step {
        let busy = reason.starts_with("HTTP 503");
        if busy {
            backend.telemetry.overloaded();
        }
        if backend.liveness.confirm_down(&reason).await {
            charges.crashes += 1;
            if charges.crashes > MAX_CRASHES {
                let crashes = charges.crashes;
                let reason = format!(
                    "the server went down {crashes} times while answering this prompt; last: {reason}"
                );
                return Step::Done(Err(Unanswered::GaveUp(
                    RejectKind::Exhausted,
                    reason,
                    charges.attempt,
                )));
            }
            return Step::Again;
        }
        if busy {
            // Alive but busy (a full queue): not this prompt's fault; ask again a little later
            // rather than hammering it.
            let failed = backend.liveness.failed(id, &reason, &backend.client);
            if self.unless_cancelled(failed).await.is_none() {
                return Step::Done(Err(Unanswered::Cancelled));
            }
            return match self.pause(backoff(2, id)).await {
                Ok(()) => Step::Again,
                Err(()) => Step::Done(Err(Unanswered::Cancelled)),
            };
        }
        Step::Charge(format!("{reason}, while the server answered /health"))
    }

    /// A failure that may be this prompt's: reported to the server's [`Liveness`], charged
    /// unless the server turns out failing, then waited out with backoff. `Some` when the turn
    /// ends (attempts spent, or cancelled); `None` to ask again.
    async fn after_failure(
        &self,
        backend: &Arc<Backend>,
        id: &str,
        reason: String,
        charges: &mut Charges,
    ) -> Option<TurnOutcome> {
        let failed = backend.liveness.failed(id, &reason, &backend.client);
        let Some(failing) = self.unless_cancelled(failed).await else {
            return Some(Err(Unanswered::Cancelled));
        };
        if failing {
            // Part of a run of failures across prompts: the server is failing.
            charges.forgive(false);
            return None;
        }
        charges.charge(backend);
        if charges.attempt >= self.max_attempts {
            return self.exhausted(backend, reason, charges).await;
        }
        let attempt = charges.attempt;
        tracing::debug!(%id, attempt, %reason, "retrying");
        tokio::select! {
            () = tokio::time::sleep(backoff(attempt, id)) => {}
            // An outage declared meanwhile: the failure was the server's.
            () = backend.liveness.wait_down() => charges.forgive(true),
            () = self.cancel.cancelled() => return Some(Err(Unanswered::Cancelled)),
        }
        None
    }

    /// The prompt's attempts are spent: it gives up when the failures single it out (the
    /// server answered other requests since its first one, or answers a test request now).
    /// Otherwise nothing is answered, the server is failing, and the failures are forgiven
    /// (`None`: ask again).
    async fn exhausted(
        &self,
        backend: &Backend,
        reason: String,
        charges: &mut Charges,
    ) -> Option<TurnOutcome> {
        let evidence = if backend.liveness.answers_so_far() > charges.answered_before() {
            "the server answered other requests meanwhile"
        } else {
            let test = Liveness::answers_briefly(&backend.client);
            let Some(test) = self.unless_cancelled(test).await else {
                return Some(Err(Unanswered::Cancelled));
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
                    charges.forgive(true);
                    return None;
                }
            }
        };
        let attempt = charges.attempt;
        let reason = format!("{reason} ({attempt} attempts; {evidence})");
        Some(Err(Unanswered::GaveUp(
            RejectKind::Exhausted,
            reason,
            attempt,
        )))
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
}

/// The record of a request given up on; a refusal holds only under the settings it was
/// refused with (`refused_under`).
fn give_up(
    id: &str,
    kind: RejectKind,
    reason: String,
    attempts: u32,
    refused_under: &str,
) -> RejectedRecord {
    let settings = (kind == RejectKind::Rejected).then(|| refused_under.to_owned());
    RejectedRecord {
        id: id.to_owned(),
        kind,
        reason,
        attempts,
        created_unix_ms: unix_ms(),
        settings,
    }
}

/// What a conversation whose every turn was answered brought back.
struct Answered {
    /// The model its answers name.
    model: String,
    turns: Vec<TurnRecord>,
    attempts: u32,
    started: Instant,
    /// The conversation was ended before its first tool turn: the server refused them.
    tool_turns_cut: bool,
}

/// The record of sample `sample` (id `id`) of `prompt`, answered with `settings`.
fn completed(
    prompt: Prompt,
    id: String,
    sample: u32,
    settings: serde_json::Map<String, serde_json::Value>,
    answered: Answered,
) -> CompletionRecord {
    let Answered {
        model,
        turns,
        attempts,
        started,
        tool_turns_cut,
    } = answered;
    let (messages, tools) = match tool_turns_cut {
        true => (before_first_tool_turn(&prompt.messages).to_vec(), None),
        false => (prompt.messages, prompt.tools),
    };
    let last = turns.last().cloned().unwrap_or_default();
    let usage = total_usage(&turns);
    CompletionRecord {
        id,
        source: prompt.source,
        source_key: prompt.source_key,
        model,
        messages,
        tools,
        tool_turns_cut,
        content: last.content,
        reasoning_content: last.reasoning_content,
        finish_reason: last.finish_reason,
        cut_by: last.cut_by,
        usage,
        turns: if turns.len() > 1 { turns } else { Vec::new() },
        attempts,
        latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        created_unix_ms: unix_ms(),
        sample,
        settings: Some(settings),
        token_ids: last.token_ids,
    }
}

/// Counts an answer on its server (and, for a tuner, in its telemetry).
fn answered(backend: &Backend, completion: &Completion) {
    backend.liveness.answered();
    let output = completion.usage.as_ref().map_or(0, |u| u.completion_tokens);
    // Only a tuner reads (and empties) the telemetry: with a fixed concurrency it would grow
    // by a sample per request, forever.
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
}

/// An answer's token counts, as the server reported them.
fn tokens(completion: &Completion) -> String {
    match &completion.usage {
        Some(u) => format!(
            "{} prompt + {} answer tokens",
            u.prompt_tokens, u.completion_tokens
        ),
        None => "no usage reported".to_owned(),
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
            cut_by: None,
            usage: c.usage,
            token_ids: c.token_ids,
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
