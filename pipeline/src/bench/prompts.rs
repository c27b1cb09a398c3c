//! The prompts a bench sends: read from the prepared sources of the config's run directory
//! and interleaved round-robin, so every level and every server gets the same sequence.
//!
//! It never prepares a source itself; that is `gen run`'s (or `gen prep`'s) job.

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
        let prompts = crate::prep::read_prompts(&dir.prompts())?;
        if !prompts.is_empty() {
            sources.push(spec.name().to_owned());
            per_source.push(prompts);
        }
    }
    anyhow::ensure!(
        !per_source.is_empty(),
        "no prepared prompts in `{}`: none of the {} source(s) of `{}` is prepared; run `gen run {}` (or `gen prep {} --source NAME`) first",
        run_dir.root().display(),
        plan.sources.len(),
        plan.config_path.display(),
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
