//! What one source's requests ask for ([`Settings`]: `[generation]` with the source's
//! `[source.generation]` over it), and what one request of it asks for ([`Settings::request`]):
//! the values drawn from weighted lists and the sample's seed, both derived from the request's
//! id alone, so a rerun (or another shard) sends exactly what the first run sent.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// The request key `token-ids = true` sends: vLLM (and SGLang, on non-streaming requests)
/// then return the prompt's token ids (`prompt_token_ids`) and the answer's (`token_ids`).
pub const TOKEN_IDS: &str = "return_token_ids";

/// One source's request settings, resolved. Recorded per source in `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub max_tokens: u32,
    /// Answers per prompt, each a record of its own ([`sample_id`]).
    pub samples: NonZeroU32,
    /// Sent as they are in every request, under their request names.
    pub params: Map<String, Value>,
    /// Drawn per request: request name → the choices.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drawn: BTreeMap<String, Vec<Weighted>>,
}

/// One choice of a weighted list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Weighted {
    pub value: Value,
    pub weight: f64,
}

/// What one request of a source is: the record's id and what the body carries besides the
/// messages and `max_tokens`.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: String,
    pub sample: u32,
    pub params: Map<String, Value>,
}

impl Settings {
    /// Sample `sample` of the prompt `prompt_id`: each drawn key drawn from the sample's id
    /// (one hash per key, so the keys are drawn independently), and with several samples a
    /// seed of its own: `seed + sample` when `seed` is set, else one derived from its id.
    pub fn request(&self, prompt_id: &str, sample: u32) -> Request {
        let id = sample_id(prompt_id, sample);
        let mut params = self.params.clone();
        for (key, choices) in &self.drawn {
            let at = unit(xxh3_64_with_seed(id.as_bytes(), xxh3_64(key.as_bytes())));
            params.insert(key.clone(), draw(choices, at).clone());
        }
        if self.samples.get() > 1 {
            let seed = match params.get("seed").and_then(Value::as_i64) {
                Some(seed) => seed.wrapping_add(i64::from(sample)),
                // 31 bits: llama.cpp reads the seed as an unsigned 32-bit number.
                None => (xxh3_64(id.as_bytes()) & 0x7fff_ffff) as i64,
            };
            params.insert("seed".into(), Value::from(seed));
        }
        Request { id, sample, params }
    }

    /// Whether this source's answers are stored with their token ids (`token-ids = true`).
    pub fn token_ids(&self) -> bool {
        self.params.get(TOKEN_IDS) == Some(&Value::Bool(true))
    }

    /// A fingerprint of what a refusal may be caused by: `max_tokens` and what is sent or
    /// drawn. Without drawn keys it is the fingerprint runs recorded before there were any,
    /// so their refusals stay settled.
    pub fn fingerprint(&self) -> String {
        if self.drawn.is_empty() {
            return crate::store::records::settings_fingerprint(self.max_tokens, &self.params);
        }
        let mut params = self.params.clone();
        let drawn = serde_json::to_value(&self.drawn).expect("settings serialize");
        params.insert("drawn".into(), drawn);
        crate::store::records::settings_fingerprint(self.max_tokens, &params)
    }
}

impl std::fmt::Display for Settings {
    /// One line, as `gen check` shows it: `max_tokens 64, samples 4, temperature 0.6 (3) or
    /// 1.0 (1), top_p 0.95`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "max_tokens {}", self.max_tokens)?;
        if self.samples.get() > 1 {
            write!(f, ", samples {}", self.samples)?;
        }
        let mut keys: Vec<&String> = self.params.keys().chain(self.drawn.keys()).collect();
        keys.sort();
        for key in keys {
            match (self.params.get(key), self.drawn.get(key)) {
                (_, Some(choices)) => {
                    let choices: Vec<String> = choices
                        .iter()
                        .map(|c| format!("{} ({})", c.value, c.weight))
                        .collect();
                    write!(f, ", {key} {}", choices.join(" or "))?;
                }
                (Some(value), None) => write!(f, ", {key} {value}")?,
                (None, None) => {}
            }
        }
        Ok(())
    }
}

/// The record id of sample `sample` of a prompt: the prompt's id for the first, so records
/// stored with one sample per prompt stay the first sample when `samples` grows.
pub fn sample_id(prompt_id: &str, sample: u32) -> String {
    if sample == 0 {
        prompt_id.to_owned()
    } else {
        format!("{prompt_id}#{sample}")
    }
}

/// A hash as a number in [0, 1).
fn unit(hash: u64) -> f64 {
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

/// The choice at `at` (in [0, 1)) of the cumulative weights.
fn draw(choices: &[Weighted], at: f64) -> &Value {
    let total: f64 = choices.iter().map(|c| c.weight).sum();
    let mut bound = 0.0;
    for choice in choices {
        bound += choice.weight / total;
        if at < bound {
            return &choice.value;
        }
    }
    &choices
        .last()
        .expect("resolution keeps lists non-empty")
        .value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(samples: u32, seed: Option<i64>) -> Settings {
        let mut params = Map::new();
        if let Some(seed) = seed {
            params.insert("seed".into(), Value::from(seed));
        }
        let choices = vec![
            Weighted {
                value: Value::from(0.6),
                weight: 3.0,
            },
            Weighted {
                value: Value::from(1.0),
                weight: 1.0,
            },
        ];
        Settings {
            max_tokens: 8,
            samples: NonZeroU32::new(samples).expect("non-zero"),
            params,
            drawn: BTreeMap::from([("temperature".to_owned(), choices)]),
        }
    }

    #[test]
    fn draws_follow_the_weights_and_the_id_alone() {
        let settings = settings(1, None);
        let drawn: Vec<f64> = (0..4000)
            .map(|i| settings.request(&format!("p-{i}"), 0).params["temperature"].as_f64())
            .map(|t| t.expect("a number"))
            .collect();
        let low = drawn.iter().filter(|t| **t == 0.6).count();
        assert!((2800..3200).contains(&low), "{low} of 4000 at weight 3:1");
        assert_eq!(settings.request("p-7", 0), settings.request("p-7", 0));
        assert!(!settings.request("p-7", 0).params.contains_key("seed"));
    }

    #[test]
    fn each_sample_has_its_own_id_and_seed() {
        let derived = settings(3, None);
        let requests: Vec<Request> = (0..3).map(|i| derived.request("p", i)).collect();
        let ids: Vec<&str> = requests.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["p", "p#1", "p#2"]);
        let seeds: std::collections::BTreeSet<i64> = requests
            .iter()
            .map(|r| r.params["seed"].as_i64().expect("a seed"))
            .collect();
        assert_eq!(seeds.len(), 3);
        let set = settings(3, Some(40));
        let seeds: Vec<i64> = (0..3)
            .map(|i| set.request("p", i).params["seed"].as_i64().expect("a seed"))
            .collect();
        assert_eq!(seeds, [40, 41, 42]);
    }
}
