//! The requests a bench sends: read from the prepared sources of the config's run directory,
//! each prompt made into the requests `gen run` would send for it (one per sample, back to back,
//! with the source's settings and each sample's drawn values and seed), interleaved round-robin
//! by prompt, and cut into one slice per round of levels. Each round gets requests no earlier
//! round sent, so a server's prefix cache cannot flatter the later levels; every server measured
//! in a round gets the same slice. Only when the prepared prompts run out do rounds wrap around
//! and reuse them ([`RoundPrompts::reused`]).
//!
//! It never prepares a source itself; that is `gen prepare`'s (or `gen run`'s) job.

use std::sync::Arc;

use gen_sources::prompt::answer_points;
use gen_sources::{Message, Prompt};
use serde_json::{Map, Value};

use crate::config::Plan;
use crate::config::settings::Settings;
use crate::store::RunDir;

/// One request of a bench: what `gen run` sends for one sample of one prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRequest {
    /// Shared by a prompt's samples.
    pub messages: Arc<[Message]>,
    /// The prompt's tool definitions, when its conversation has tool turns.
    pub tools: Option<Arc<Value>>,
    pub max_tokens: u32,
    /// The source's settings, with the sample's drawn values and seed (and `token-ids`).
    pub params: Map<String, Value>,
}

/// The requests of a bench.
#[derive(Debug, Clone)]
pub struct BenchPrompts {
    /// The prepared sources they came from, in config order, with their settings.
    pub sources: Vec<(String, Settings)>,
    /// The prompts the requests are made of (fewer than the requests with `samples`).
    pub prompts: usize,
    pub requests: Vec<BenchRequest>,
}

/// The requests of one round: what every server measured at that round's level is sent.
#[derive(Debug, Clone)]
pub struct RoundPrompts {
    pub requests: Arc<Vec<BenchRequest>>,
    /// Some of them were sent before in this bench (by an earlier round, or earlier in this
    /// one): the prepared prompts ran out.
    pub reused: bool,
}

impl BenchPrompts {
    /// The `per_level` requests of round `round` (from 0): the slice after the earlier rounds'
    /// slices, wrapping around to the first request once every request has been sent.
    pub fn round(&self, round: usize, per_level: usize) -> RoundPrompts {
        let pool = self.requests.len();
        let start = round.saturating_mul(per_level);
        let reused = start.saturating_add(per_level) > pool;
        let requests = (0..per_level)
            .filter_map(|i| {
                let index = start.wrapping_add(i).checked_rem(pool)?;
                self.requests.get(index).cloned()
            })
            .collect();
        RoundPrompts {
            requests: Arc::new(requests),
            reused,
        }
    }
}

/// Makes at most `limit` requests, round-robin by prompt over the prepared sources of `plan`.
pub fn load(plan: &Plan, limit: usize) -> anyhow::Result<BenchPrompts> {
    let run_dir = RunDir::new(plan.run_dir.clone());
    let mut sources = Vec::new();
    let mut per_source = Vec::new();
    for source in &plan.sources {
        let dir = run_dir.source(source.name());
        if !dir.manifest().is_file() || !dir.prompts().is_file() {
            continue;
        }
        let prompts = crate::store::prompts::read_prompts(&dir.prompts())?;
        if !prompts.is_empty() {
            sources.push((source.name().to_owned(), source.settings.clone()));
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
    let per_source = per_source
        .into_iter()
        .zip(&sources)
        .map(|(prompts, (_, settings))| prompts.into_iter().map(|p| samples(p, settings)));
    let per_prompt = round_robin(per_source.collect(), limit);
    let prompts = per_prompt.len();
    let mut requests: Vec<BenchRequest> = per_prompt.into_iter().flatten().collect();
    requests.truncate(limit);
    Ok(BenchPrompts {
        sources,
        prompts,
        requests,
    })
}

/// The requests of `prompt`'s samples, in sample order: its first request's messages each,
/// under the sample's own settings.
fn samples(prompt: Prompt, settings: &Settings) -> Vec<BenchRequest> {
    let messages: Arc<[Message]> = first_turn(prompt.messages).into();
    let tools = prompt.tools.map(Arc::new);
    (0..settings.samples.get())
        .map(|sample| BenchRequest {
            messages: Arc::clone(&messages),
            tools: tools.clone(),
            max_tokens: settings.max_tokens,
            params: settings.request(&prompt.id, sample).params,
        })
        .collect()
}

/// The first prompt's requests of each source, then the second's of each, …, until `limit`
/// requests (the last prompt's samples may pass it).
fn round_robin<I>(mut per_source: Vec<I>, limit: usize) -> Vec<Vec<BenchRequest>>
where
    I: Iterator<Item = Vec<BenchRequest>>,
{
    let mut out = Vec::new();
    let mut count = 0;
    while count < limit {
        let before = out.len();
        for requests in per_source.iter_mut().filter_map(Iterator::next) {
            if count < limit {
                count += requests.len();
                out.push(requests);
            }
        }
        if out.len() == before {
            break;
        }
    }
    out
}

/// The messages of one request: `gen run` answers a prompt where the model answers
/// ([`answer_points`]: each user turn and the tool exchange after it, or with the dataset's own
/// answers as history, the end) one point at a time, so a bench sends what its first request
/// would.
fn first_turn(mut messages: Vec<Message>) -> Vec<Message> {
    let end = answer_points(&messages).next();
    if let Some(end) = end {
        messages.truncate(end + 1);
    }
    messages
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use gen_sources::Role;

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

    fn settings(max_tokens: u32, samples: u32) -> Settings {
        Settings {
            max_tokens,
            samples: std::num::NonZeroU32::new(samples).expect("positive"),
            params: Map::from_iter([("temperature".to_owned(), Value::from(0.6))]),
            drawn: Default::default(),
        }
    }

    /// The text of each request, with its sample's seed when it has one.
    fn sent(requests: &[BenchRequest]) -> Vec<String> {
        requests
            .iter()
            .map(|r| match r.params.get("seed") {
                Some(seed) => format!("{} seed {seed}", r.messages[0].content),
                None => r.messages[0].content.clone(),
            })
            .collect()
    }

    /// A source's requests, prompt by prompt.
    fn source(prompts: &[Prompt], settings: &Settings) -> std::vec::IntoIter<Vec<BenchRequest>> {
        let requests: Vec<_> = prompts
            .iter()
            .map(|p| samples(p.clone(), settings))
            .collect();
        requests.into_iter()
    }

    #[test]
    fn sources_are_interleaved_by_prompt_until_the_limit() {
        let a = [prompt("a", "a1"), prompt("a", "a2"), prompt("a", "a3")];
        let b = [prompt("b", "b1")];
        let one = settings(16, 1);
        let make = |prompts: &[Prompt]| source(prompts, &one);
        let all: Vec<BenchRequest> = round_robin(vec![make(&a), make(&b)], 10)
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(sent(&all), ["a1", "b1", "a2", "a3"]);
        assert_eq!(round_robin(vec![make(&a), make(&b)], 2).len(), 2);
    }

    /// What `gen run` sends for a prompt is what a bench sends: the source's budget and
    /// parameters, and with `samples = k` the k requests back to back, each with its seed.
    #[test]
    fn a_prompt_is_sent_as_its_samples_under_its_sources_settings() {
        let math = settings(512, 3);
        let requests = samples(prompt("m", "m1"), &math);
        assert_eq!(requests.len(), 3);
        assert!(requests.iter().all(|r| r.max_tokens == 512));
        assert!(requests.iter().all(|r| r.params["temperature"] == 0.6));
        let seeds: BTreeSet<String> = requests
            .iter()
            .map(|r| r.params["seed"].to_string())
            .collect();
        assert_eq!(
            seeds.len(),
            3,
            "a seed of its own each: {:?}",
            sent(&requests)
        );
        for (sample, request) in requests.iter().enumerate() {
            let run = math.request("m-m1", sample as u32);
            assert_eq!(
                request.params, run.params,
                "sample {sample} as `gen run` sends it"
            );
        }
        // Siblings stay together when sources are interleaved; the limit counts requests.
        let chat = settings(16, 1);
        let all: Vec<BenchRequest> = round_robin(
            vec![
                source(&[prompt("m", "m1"), prompt("m", "m2")], &math),
                source(&[prompt("c", "c1")], &chat),
            ],
            4,
        )
        .into_iter()
        .flatten()
        .collect();
        let texts: Vec<&str> = all.iter().map(|r| &*r.messages[0].content).collect();
        assert_eq!(texts, ["m1", "m1", "m1", "c1"]);
        assert_eq!(all[3].max_tokens, 16);
    }

    fn pool(n: usize) -> BenchPrompts {
        BenchPrompts {
            sources: vec![("a".to_owned(), settings(16, 1))],
            prompts: n,
            requests: (0..n)
                .flat_map(|i| samples(prompt("a", &i.to_string()), &settings(16, 1)))
                .collect(),
        }
    }

    fn texts(round: &RoundPrompts) -> Vec<String> {
        sent(&round.requests)
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
        // With the dataset's own answers as history, the one answer is at the end.
        let history = vec![user("one"), answer.clone(), user("two")];
        assert_eq!(first_turn(history.clone()), history);
        // The first answer follows the tool exchange after the first user turn, as in a run.
        let call = Message::new(Role::Assistant, r#"{"name": "weather"}"#);
        let result = Message::new(Role::Tool, "18 degrees");
        let tools = vec![user("one"), call.clone(), result.clone(), user("two")];
        assert_eq!(first_turn(tools), [user("one"), call, result]);
    }
}
