//! `run.json`: what the completions of a run were generated with — model, `max_tokens`,
//! sampling parameters and template kwargs. Resuming under different settings would mix two
//! datasets in one output, so it is refused unless the user says so explicitly.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::store::{RunDir, atomic};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPin {
    pub layout: u32,
    /// The model id as the server lists it at `/v1/models` (a configured `model` the server
    /// does not list is refused before anything is sent).
    pub model: String,
    pub max_tokens: u32,
    /// Everything else sent in each request body (temperature, top_p, chat_template_kwargs, …).
    pub params: Map<String, Value>,
    /// The share of prompts this run directory holds (`--shard i/n`).
    #[serde(default)]
    pub shard: Option<String>,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "this run was generated with different settings:\n{}\nresuming would mix two datasets in `{}`; use another run directory, or pass `--allow-config-change` to continue anyway",
    differences.join("\n"),
    run_dir
)]
pub struct PinMismatch {
    pub run_dir: String,
    pub differences: Vec<String>,
}

impl RunPin {
    /// The differences between the stored pin and `self`, one line each.
    fn differences(&self, stored: &RunPin) -> Vec<String> {
        let mut out = Vec::new();
        if self.model != stored.model {
            out.push(format!(
                "  model: was `{}`, now `{}`",
                stored.model, self.model
            ));
        }
        if self.shard != stored.shard {
            let show = |s: &Option<String>| s.clone().unwrap_or_else(|| "all prompts".to_owned());
            out.push(format!(
                "  shard: was {}, now {}",
                show(&stored.shard),
                show(&self.shard)
            ));
        }
        if self.max_tokens != stored.max_tokens {
            out.push(format!(
                "  max-tokens: was {}, now {}",
                stored.max_tokens, self.max_tokens
            ));
        }
        let keys: std::collections::BTreeSet<&String> =
            self.params.keys().chain(stored.params.keys()).collect();
        for key in keys {
            let (was, now) = (stored.params.get(key), self.params.get(key));
            if was != now {
                let show =
                    |v: Option<&Value>| v.map_or_else(|| "unset".to_owned(), Value::to_string);
                out.push(format!("  {key}: was {}, now {}", show(was), show(now)));
            }
        }
        out
    }

    /// Records the pin on the first run; on later runs refuses a different one unless `allow`.
    pub fn check_or_record(
        &self,
        run_dir: &RunDir,
        allow: bool,
        reporter: &crate::report::RunReporter,
    ) -> anyhow::Result<()> {
        let path = run_dir.root().join("run.json");
        let stored = match atomic::read_json::<RunPin>(&path) {
            Ok(stored) => stored,
            Err(e) if allow => {
                reporter.say(format!(
                    "gen: warning: `run.json` does not decode ({e}); recording this run's \
                     settings in it again"
                ));
                None
            }
            Err(e) => anyhow::bail!(
                "`{}` does not decode ({e}), so the settings the stored completions were \
                 generated with are unknown; if they were this config's, pass \
                 `--allow-config-change` to record them again, else use another run directory",
                path.display()
            ),
        };
        match stored {
            Some(stored) if stored != *self => {
                let differences = self.differences(&stored);
                if !allow {
                    return Err(PinMismatch {
                        run_dir: run_dir.root().display().to_string(),
                        differences,
                    }
                    .into());
                }
                reporter.say(format!(
                    "gen: continuing with changed settings (--allow-config-change):\n{}",
                    differences.join("\n")
                ));
                atomic::write_json(&path, self)?;
            }
            Some(_) => {}
            None => atomic::write_json(&path, self)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_setting() {
        let mut params = Map::new();
        params.insert("temperature".into(), Value::from(0.6));
        let stored = RunPin {
            layout: 1,
            model: "a".into(),
            max_tokens: 100,
            params: params.clone(),
            shard: None,
        };
        params.insert("temperature".into(), Value::from(1.0));
        params.insert("top_p".into(), Value::from(0.9));
        let now = RunPin {
            layout: 1,
            model: "b".into(),
            max_tokens: 100,
            params,
            shard: None,
        };
        assert_eq!(
            now.differences(&stored),
            [
                "  model: was `a`, now `b`",
                "  temperature: was 0.6, now 1.0",
                "  top_p: was unset, now 0.9"
            ]
        );
    }
}
