//! The prompts a bench sends: read from the prepared sources of the config's run directory,
//! interleaved round-robin, and cut into one slice per round of levels. Each round gets prompts
//! no earlier round sent, so a server's prefix cache cannot flatter the later levels; every
//! server measured in a round gets the same slice. Only when the prepared prompts run out do
//! rounds wrap around and reuse them ([`RoundPrompts::reused`]).
//!
//! It never prepares a source itself; that is `gen prepare`'s (or `gen run`'s) job.

use std::sync::Arc;

use gen_sources::{Message, Prompt, Role};

use crate::config::Plan;
use crate::store::RunDir;

/// The prompts of a bench, as the messages to send.
#[derive(Debug, Clone)]
pub struct BenchPrompts {
    /// The prepared sources they came from, in config order.
    pub sources: Vec<String>,
    pub messages: Vec<Vec<Message>>,
}

/// The prompts of one round: what every server measured at that round's level is sent.
#[derive(Debug, Clone)]
pub struct RoundPrompts {
    pub messages: Arc<Vec<Vec<Message>>>,
    /// Some of them were sent before in this bench (by an earlier round, or earlier in this
    /// one): the prepared prompts ran out.
    pub reused: bool,
}

impl BenchPrompts {
    /// The `per_level` prompts of round `round` (from 0): the slice after the earlier rounds'
    /// slices, wrapping around to the first prompt once every prompt has been sent.
    pub fn round(&self, round: usize, per_level: usize) -> RoundPrompts {
        let pool = self.messages.len();
        let start = round.saturating_mul(per_level);
        let reused = start.saturating_add(per_level) > pool;
        let messages = (0..per_level)
            .filter_map(|i| {
                let index = start.wrapping_add(i).checked_rem(pool)?;
                self.messages.get(index).cloned()
            })
            .collect();
        RoundPrompts {
            messages: Arc::new(messages),
            reused,
        }
    }
}

/// Reads at most `limit` prompts, round-robin over the prepared sources of `plan`.
pub fn load(plan: &Plan, limit: usize) -> anyhow::Result<BenchPrompts> {
    let run_dir = RunDir::new(plan.run_dir.clone());
    let mut sources = Vec::new();
    let mut per_source = Vec::new();
    for spec in &plan.sources {
        let dir = run_dir.source(spec.name());
        if !dir.manifest().is_file() || !dir.prompts().is_file() {
            continue;
        }
        let prompts = crate::store::prompts::read_prompts(&dir.prompts())?;
        if !prompts.is_empty() {
            sources.push(spec.name().to_owned());
            per_source.push(prompts);
        }
    }
    anyhow::ensure!(
        !per_source.is_empty(),
        "no prepared prompts in `{}`: none of the {} source(s) of `{}` is prepared; run `gen prepare {}` first (it needs no server)",
        run_dir.root().display(),
        plan.sources.len(),
        plan.config_path.display(),
        plan.config_path.display(),
    );
    let messages = round_robin(per_source, limit)
        .into_iter()
        .map(|prompt| first_turn(prompt.messages))
        .collect();
    Ok(BenchPrompts { sources, messages })
}

/// The first prompt of each source, then the second of each, …, up to `limit`.
fn round_robin(per_source: Vec<Vec<Prompt>>, limit: usize) -> Vec<Prompt> {
    let mut iters: Vec<_> = per_source.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    while out.len() < limit {
        let before = out.len();
        for prompt in iters.iter_mut().filter_map(Iterator::next) {
            if out.len() < limit {
                out.push(prompt);
            }
        }
        if out.len() == before {
            break;
        }
    }
    out
}

/// The messages of one request: `gen run` answers a prompt of several user turns turn by turn,
/// so a bench sends what its first request would — up to the first user turn, or with the
/// dataset's own answers as history, up to the last.
fn first_turn(mut messages: Vec<Message>) -> Vec<Message> {
    let with_history = messages.iter().any(|m| m.role == Role::Assistant);
    let end = if with_history {
        messages.iter().rposition(|m| m.role == Role::User)
    } else {
        messages.iter().position(|m| m.role == Role::User)
    };
    if let Some(end) = end {
        messages.truncate(end + 1);
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt(source: &str, text: &str) -> Prompt {
        Prompt {
            id: format!("{source}-{text}"),
            source: source.to_owned(),
            messages: vec![Message::new(Role::User, text)],
            tools: None,
            source_key: None,
            row: 0,
        }
    }

    #[test]
    fn sources_are_interleaved_until_the_limit() {
        let a = vec![prompt("a", "1"), prompt("a", "2"), prompt("a", "3")];
        let b = vec![prompt("b", "1")];
        let ids: Vec<String> = round_robin(vec![a.clone(), b.clone()], 10)
            .into_iter()
            .map(|p| p.id)
            .collect();
        assert_eq!(ids, ["a-1", "b-1", "a-2", "a-3"]);
        assert_eq!(round_robin(vec![a, b], 2).len(), 2);
    }

    fn pool(n: usize) -> BenchPrompts {
        BenchPrompts {
            sources: vec!["a".to_owned()],
            messages: (0..n)
                .map(|i| vec![Message::new(Role::User, i.to_string())])
                .collect(),
        }
    }

    fn texts(round: &RoundPrompts) -> Vec<String> {
        round
            .messages
            .iter()
            .map(|m| m[0].content.clone())
            .collect()
    }

    #[test]
    fn rounds_take_disjoint_slices_until_the_prompts_run_out() {
        let prompts = pool(7);
        let first = prompts.round(0, 3);
        let second = prompts.round(1, 3);
        assert_eq!(texts(&first), ["0", "1", "2"]);
        assert_eq!(texts(&second), ["3", "4", "5"]);
        assert!(!first.reused && !second.reused);
        let third = prompts.round(2, 3);
        assert_eq!(texts(&third), ["6", "0", "1"], "wraps around");
        assert!(third.reused);
        let small = pool(2).round(0, 3);
        assert_eq!(texts(&small), ["0", "1", "0"]);
        assert!(
            small.reused,
            "fewer prompts than requests repeats within the level"
        );
    }

    #[test]
    fn a_multi_turn_prompt_is_cut_at_its_first_request() {
        let user = |t: &str| Message::new(Role::User, t);
        let system = Message::new(Role::System, "s");
        let turns = first_turn(vec![system.clone(), user("one"), user("two")]);
        assert_eq!(turns, [system.clone(), user("one")]);
        let answer = Message::new(Role::Assistant, "a");
        let history = vec![user("one"), answer.clone(), user("two"), answer.clone()];
        assert_eq!(first_turn(history), [user("one"), answer, user("two")]);
    }
}
