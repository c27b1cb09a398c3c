//! Whose fault a refused request (HTTP 400 and kin) is: the prompt's, or the run's settings'.
//!
//! A refusal that is the prompt's own (too long for the context, a template the server
//! rejects) is recorded in `rejected.jsonl` and the run goes on. One that every request gets —
//! `max-tokens` beyond the model's context, a sampling parameter the server does not accept —
//! is a configuration problem: recording it against every prompt would "finish" a run that
//! generated nothing. The first time a refusal of a given shape (its text with numbers masked:
//! vLLM's context message quotes each prompt's own token count) comes back, the same server is
//! asked a one-line test prompt with the run's own settings. Refused too: the settings are at
//! fault, and the run stops with the server's reason and what to change, its prompts left
//! pending. Answered: the refusal singles out the prompt.
//!
//! Tool turns are judged apart, once per run: the first refusal of a conversation with tool
//! turns whose words name tools, roles or Jinja ([`heuristic_tools_refusal`]) means the
//! servers do not take tool turns (llama-server without `--jinja` answers `tools` with HTTP
//! 500 "tools param requires --jinja flag", a chat template without a `tool` role refuses
//! the messages). Conversations then end before their first tool turn instead
//! (`run::dispatch`), even on a server that would have taken some of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::inference::RequestError;
use crate::inference::client::ChatClient;
use crate::inference::kinds::ServerKind;
use crate::inference::liveness::Liveness;

/// Refusal shapes judged per run, at most; past that, refusals are taken as the prompts' own
/// (a server that words each refusal differently must not get a test request per prompt).
const MAX_JUDGED: usize = 16;

/// What a refusal of one shape means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// The test prompt was answered: the refusal is the prompt's own.
    Prompt,
    /// The test prompt was refused too: the run's settings are wrong; the message says what
    /// the server said and what to change.
    Config(String),
}

/// The judgements of one run, shared by every request.
#[derive(Debug, Default)]
pub struct Refusals {
    /// By refusal shape ([`heuristic_shape`]). Requests refused the same way wait for the
    /// first one's test instead of each sending their own.
    judged: tokio::sync::Mutex<HashMap<String, Judgement>>,
    /// The servers refuse tool turns.
    tools_refused: AtomicBool,
}

impl Refusals {
    /// Whether the servers were found to refuse tool turns.
    pub fn tools_refused(&self) -> bool {
        self.tools_refused.load(Ordering::Relaxed)
    }

    /// Judges `reason`, a failure (4xx or 5xx) of a conversation with tool turns: whether it
    /// is the tool turns' (`Some(first)`, `first` for the one call that found it out), or a
    /// failure like any other (`None`).
    pub fn tool_turns_refused(&self, reason: &str) -> Option<bool> {
        if !heuristic_tools_refusal(reason) {
            return None;
        }
        Some(!self.tools_refused.swap(true, Ordering::Relaxed))
    }

    /// Judges a refusal `reason` of a request with `max_tokens` and `params`, sent through
    /// `client`, whose source's settings have fingerprint `settings` (sources with other
    /// settings are judged apart: one may be refused for its own); `None` when the test
    /// request neither was answered nor refused (the server is away or failing): the caller
    /// asks again later.
    pub async fn judge(
        &self,
        reason: &str,
        client: &ChatClient,
        max_tokens: u32,
        (params, settings): (&serde_json::Map<String, serde_json::Value>, &str),
    ) -> Option<Judgement> {
        let shape = format!("{settings} {}", heuristic_shape(reason));
        let mut judged = self.judged.lock().await;
        if let Some(judgement) = judged.get(&shape) {
            return Some(judgement.clone());
        }
        if judged.len() >= MAX_JUDGED {
            return Some(Judgement::Prompt);
        }
        let judgement = match Liveness::answers_with(client, max_tokens, params).await {
            Ok(()) => Judgement::Prompt,
            Err(RequestError::Rejected(test)) => {
                Judgement::Config(config_message(&test, max_tokens))
            }
            Err(e) => {
                tracing::debug!(%reason, error = %e, "the test request for a refusal was inconclusive");
                return None;
            }
        };
        judged.insert(shape, judgement.clone());
        Some(judgement)
    }
}

/// Whether a refusal's words blame tool turns: llama-server without `--jinja` ("tools param
/// requires --jinja flag"), a template that knows no `tool` role ("Conversation roles must
/// alternate…"), a server without tool support.
fn heuristic_tools_refusal(reason: &str) -> bool {
    let text = reason.to_lowercase();
    ["tool", "jinja", "role"]
        .iter()
        .any(|word| text.contains(word))
}

/// A refusal's text with every run of digits replaced by `#`: two prompts refused for the same
/// cause then give the same shape.
fn heuristic_shape(reason: &str) -> String {
    let mut shape = String::with_capacity(reason.len());
    let mut in_number = false;
    for c in reason.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                shape.push('#');
            }
            in_number = true;
        } else {
            shape.push(c);
            in_number = false;
        }
    }
    shape
}

/// The message of a run stopped because its settings are refused.
fn config_message(refusal: &str, max_tokens: u32) -> String {
    format!(
        "the server refuses every request, even a one-line test prompt with the run's settings: \
         {refusal}. That is the configuration, not the prompts: {}. No prompt was marked \
         rejected; they stay pending for the next run",
        heuristic_advice(refusal, max_tokens)
    )
}

/// What to change, guessed from the refusal's words; a context refusal names each kind's
/// flag for it (`KindSpec::context_flag`).
pub fn heuristic_advice(refusal: &str, max_tokens: u32) -> String {
    let text = refusal.to_lowercase();
    if text.contains("context") || text.contains("max_tokens") || text.contains("max_completion") {
        let flags = ServerKind::ALL
            .iter()
            .map(|kind| (kind.name(), kind.spec().context_flag));
        let flags: Vec<String> = flags
            .filter_map(|(name, flag)| Some(format!("{name} `{}`", flag?)))
            .collect();
        format!(
            "lower `max-tokens` in `[generation]` (now {max_tokens}) below the model's context \
             length, or start the server with a longer context ({})",
            flags.join(", ")
        )
    } else if [
        "temperature",
        "top_p",
        "top-p",
        "parameter",
        "kwargs",
        "template",
    ]
    .iter()
    .any(|word| text.contains(word))
    {
        "check the sampling settings and `chat-template-kwargs` in `[generation]` against what \
         the server accepts"
            .to_owned()
    } else {
        "check `[generation]` (`max-tokens`, sampling settings, `chat-template-kwargs`) and \
         `[server] model` against what the server accepts"
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vLLM's context refusal quotes each prompt's own numbers; the shape is the same.
    #[test]
    fn refusals_for_one_cause_have_one_shape() {
        let a = "HTTP 400: This model's maximum context length is 6048 tokens. However, you \
                 requested 6616 tokens (568 in the messages, 6048 in the completion).";
        let b = "HTTP 400: This model's maximum context length is 6048 tokens. However, you \
                 requested 7003 tokens (955 in the messages, 6048 in the completion).";
        assert_eq!(heuristic_shape(a), heuristic_shape(b));
        assert_eq!(heuristic_shape("HTTP 400: 12 in 3.5"), "HTTP #: # in #.#");
        assert_ne!(
            heuristic_shape(a),
            heuristic_shape("HTTP 400: prompt too long")
        );
    }

    #[test]
    fn the_advice_names_what_to_change() {
        let context = heuristic_advice(
            "HTTP 400: This model's maximum context length is 4096 tokens.",
            8192,
        );
        assert!(
            context.contains("`max-tokens` in `[generation]` (now 8192)"),
            "{context}"
        );
        assert!(
            context
                .ends_with("(vLLM `--max-model-len`, SGLang `--context-length`, llama.cpp `-c`)"),
            "{context}"
        );
        let sampling = heuristic_advice("HTTP 400: temperature must be at most 2", 8);
        assert!(sampling.contains("sampling settings"), "{sampling}");
        let other = heuristic_advice("HTTP 400: bad request", 8);
        assert!(other.contains("`[server] model`"), "{other}");
    }
}
