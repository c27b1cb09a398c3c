//! `run.json`: what the completions of a run were generated with — the model, and each
//! source's settings (`max_tokens`, sampling parameters and what is drawn, template kwargs,
//! samples). Resuming under different settings would mix two datasets in one output, so it is
//! refused unless the user says so explicitly; the rule ([`RULE`]) is per source: only what
//! is stored is pinned.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::Settings;
use crate::scale::shard::Shard;
use crate::store::{RunDir, atomic};

/// What a changed setting does, as `gen check` and the refusal say it.
pub const RULE: &str = "settings are pinned per source in `run.json`: a source with stored \
    completions keeps the settings they were generated with (`samples` may grow: only the new \
    samples are generated); a source with none takes new settings; `gen run --regenerate \
    SOURCE` sets a source's answers aside and generates it again under the new settings";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPin {
    pub layout: u32,
    /// The model id as the server lists it at `/v1/models` (a configured `model` the server
    /// does not list is refused before anything is sent).
    pub model: String,
    pub max_tokens: u32,
    /// Everything else sent in each request body (temperature, top_p, chat_template_kwargs, …).
    pub params: Map<String, Value>,
    /// Each source's settings. A pin written before there were any has none: each source then
    /// had `max_tokens` and `params`, one sample per prompt.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, Settings>,
    /// The share of prompts this run directory holds (`--shard k/n`).
    #[serde(default, deserialize_with = "shard_either_way")]
    pub shard: Option<Shard>,
}

/// A pin's shard: `{"index": k, "count": n}`, or the text `"i/n"` a `gen` before 0-based
/// shards wrote, counted from 1 (so a run directory keeps the share it was made for).
fn shard_either_way<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Shard>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Shard(Shard),
        OneBased(String),
    }
    match Option::<Stored>::deserialize(d)? {
        None => Ok(None),
        Some(Stored::Shard(shard)) => Ok(Some(shard)),
        Some(Stored::OneBased(text)) => text
            .split_once('/')
            .and_then(|(i, n)| Some((i.parse::<u32>().ok()?, n.parse::<u32>().ok()?)))
            .filter(|&(i, n)| (1..=n).contains(&i))
            .map(|(i, n)| {
                Some(Shard {
                    index: i - 1,
                    count: n,
                })
            })
            .ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not a shard"))),
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "this run was generated with different settings:\n{}\nresuming would mix two datasets in `{}` ({RULE}); {}use another run directory, or pass `--allow-config-change` to continue anyway",
    differences.join("\n"),
    run_dir,
    regenerate(changed)
)]
pub struct PinMismatch {
    pub run_dir: String,
    pub differences: Vec<String>,
    /// The sources whose own settings changed, when nothing the whole run shares did (the
    /// model, the shard): `--regenerate` can take them one by one.
    pub changed: Vec<String>,
}

fn regenerate(changed: &[String]) -> String {
    if changed.is_empty() {
        return String::new();
    }
    let flags: Vec<String> = changed
        .iter()
        .map(|s| format!("--regenerate {s}"))
        .collect();
    format!(
        "pass `{}` to generate {} again under the new settings (stored answers set aside, not \
         deleted), ",
        flags.join(" "),
        if changed.len() == 1 { "it" } else { "them" }
    )
}

impl RunPin {
    /// `run_dir`'s `run.json`, once a run recorded it.
    pub fn read(run_dir: &RunDir) -> std::io::Result<Option<RunPin>> {
        atomic::read_json(&run_dir.pin())
    }

    /// The settings of source `name` as this pin has them (a pin without per-source settings:
    /// the run's).
    pub fn settings_of(&self, name: &str) -> Settings {
        self.sources.get(name).cloned().unwrap_or_else(|| Settings {
            max_tokens: self.max_tokens,
            samples: std::num::NonZeroU32::MIN,
            params: self.params.clone(),
            drawn: BTreeMap::new(),
        })
    }

    /// The differences between the stored pin and `self` that touch what is stored (sources
    /// in `stored_in`), one line each; the model and the shard touch every source.
    pub fn differences(&self, stored: &RunPin, stored_in: &BTreeSet<String>) -> Vec<String> {
        let mut out = Vec::new();
        if stored_in.is_empty() {
            return out;
        }
        if self.model != stored.model {
            out.push(format!(
                "  model: was `{}`, now `{}`",
                stored.model, self.model
            ));
        }
        if self.shard != stored.shard {
            let show =
                |s: &Option<Shard>| s.map_or_else(|| "all prompts".to_owned(), |s| s.to_string());
            out.push(format!(
                "  shard: was {}, now {}",
                show(&stored.shard),
                show(&self.shard)
            ));
        }
        for (name, now) in &self.sources {
            if !stored_in.contains(name) {
                continue;
            }
            let was = stored.settings_of(name);
            let prefix = if self.sources.len() > 1 {
                format!("source `{name}`: ")
            } else {
                String::new()
            };
            out.extend(
                setting_differences(&was, now)
                    .into_iter()
                    .map(|line| format!("  {prefix}{line}")),
            );
        }
        out
    }

    /// The sources in `stored_in` whose settings in `now` differ from those `run_dir`'s pin
    /// recorded, with how (nothing when there is no readable pin).
    pub fn changed_since(
        run_dir: &RunDir,
        now: &BTreeMap<String, Settings>,
        stored_in: &BTreeSet<String>,
    ) -> Vec<(String, Vec<String>)> {
        let Ok(Some(stored)) = RunPin::read(run_dir) else {
            return Vec::new();
        };
        now.iter()
            .filter(|(name, _)| stored_in.contains(*name))
            .map(|(name, now)| {
                let lines = setting_differences(&stored.settings_of(name), now);
                (name.clone(), lines)
            })
            .filter(|(_, lines)| !lines.is_empty())
            .collect()
    }
}

/// How the settings of one source changed, one line per setting; a larger `samples` alone is
/// no difference (its new samples are generated, the stored ones kept).
pub fn setting_differences(was: &Settings, now: &Settings) -> Vec<String> {
    let mut out = Vec::new();
    if now.max_tokens != was.max_tokens {
        out.push(format!(
            "max-tokens: was {}, now {}",
            was.max_tokens, now.max_tokens
        ));
    }
    if now.samples < was.samples {
        out.push(format!(
            "samples: was {}, now {} (fewer samples would leave stored ones out)",
            was.samples, now.samples
        ));
    }
    let show = |v: Option<Value>| v.map_or_else(|| "unset".to_owned(), |v| v.to_string());
    let value = |s: &Settings, key: &str| {
        s.params.get(key).cloned().or_else(|| {
            s.drawn
                .get(key)
                .map(|d| serde_json::to_value(d).expect("settings serialize"))
        })
    };
    let keys: BTreeSet<&String> = [was, now]
        .iter()
        .flat_map(|s| s.params.keys().chain(s.drawn.keys()))
        .collect();
    for key in keys {
        let (before, after) = (value(was, key), value(now, key));
        if before != after {
            out.push(format!("{key}: was {}, now {}", show(before), show(after)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(temperature: f64, samples: u32) -> Settings {
        let mut params = Map::new();
        params.insert("temperature".into(), Value::from(temperature));
        Settings {
            max_tokens: 100,
            samples: std::num::NonZeroU32::new(samples).expect("non-zero"),
            params,
            drawn: BTreeMap::new(),
        }
    }

    fn pin(model: &str, sources: &[(&str, Settings)]) -> RunPin {
        RunPin {
            layout: 1,
            model: model.into(),
            max_tokens: 100,
            params: settings(0.6, 1).params,
            sources: sources
                .iter()
                .map(|(name, s)| ((*name).to_owned(), s.clone()))
                .collect(),
            shard: None,
        }
    }

    /// A run directory made when shards counted from 1 keeps its share: its `"2/8"` is the
    /// share `--shard 1/8` names now, and a different share is named in the refusal.
    #[test]
    fn a_shard_pinned_counted_from_one_is_read_as_the_same_share() {
        let mut stored = serde_json::to_value(pin("m", &[])).expect("json");
        stored["shard"] = Value::from("2/8");
        let stored: RunPin = serde_json::from_value(stored).expect("a pin with a text shard");
        assert_eq!(stored.shard, Some(Shard { index: 1, count: 8 }));
        let stored_in = BTreeSet::from(["s".to_owned()]);
        let same = RunPin {
            shard: "1/8".parse().ok(),
            ..pin("m", &[])
        };
        assert!(same.differences(&stored, &stored_in).is_empty());
        let other = RunPin {
            shard: "2/8".parse().ok(),
            ..pin("m", &[])
        };
        assert_eq!(
            other.differences(&stored, &stored_in),
            ["  shard: was 1/8, now 2/8"]
        );
        let written = serde_json::to_value(&same).expect("json");
        assert_eq!(
            written["shard"],
            serde_json::json!({"index": 1, "count": 8})
        );
        let mut broken = written;
        broken["shard"] = Value::from("0/8");
        assert!(serde_json::from_value::<RunPin>(broken).is_err());
    }

    #[test]
    fn only_differences_touching_stored_completions_count() {
        // A pin of a `gen` without per-source settings: every source had the run's.
        let stored = pin("a", &[]);
        let mut top_p = settings(1.0, 1);
        top_p.params.insert("top_p".into(), Value::from(0.9));
        let now = pin("b", &[("math", top_p), ("chat", settings(0.7, 1))]);
        let stored_in = BTreeSet::from(["math".to_owned()]);
        assert_eq!(
            now.differences(&stored, &stored_in),
            [
                "  model: was `a`, now `b`",
                "  source `math`: temperature: was 0.6, now 1.0",
                "  source `math`: top_p: was unset, now 0.9"
            ]
        );
        // Nothing stored: nothing to mix.
        assert!(now.differences(&stored, &BTreeSet::new()).is_empty());
        // More samples add samples; fewer would leave stored ones out.
        let stored = pin("a", &[("math", settings(0.6, 2))]);
        let more = pin("a", &[("math", settings(0.6, 4))]);
        assert!(more.differences(&stored, &stored_in).is_empty());
        let fewer = pin("a", &[("math", settings(0.6, 1))]);
        assert_eq!(
            fewer.differences(&stored, &stored_in),
            ["  samples: was 2, now 1 (fewer samples would leave stored ones out)"]
        );
    }
}
