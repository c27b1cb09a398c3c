//! `run.json` at the start of `gen run`: recorded on the first run, and a change of settings
//! that touches stored answers refused unless the user says so (the file and its rule are
//! [`crate::store::pin`]).

use std::collections::BTreeSet;

use crate::store::pin::{PinMismatch, RunPin, setting_differences};
use crate::store::{RunDir, atomic};

impl RunPin {
    /// Records the pin on the first run; on later runs refuses one whose differences touch
    /// what is stored (the sources in `stored_in` have completions) unless `allow`.
    pub fn check_or_record(
        &self,
        run_dir: &RunDir,
        allow: bool,
        stored_in: &BTreeSet<String>,
        reporter: &crate::report::RunReporter,
    ) -> anyhow::Result<()> {
        let path = run_dir.root().join("run.json");
        let stored = match atomic::read_json::<RunPin>(&path) {
            Ok(stored) => stored,
            Err(e) if allow => {
                let error = &e.to_string();
                reporter.notice(crate::notice::Notice::RunPinUnreadable { error });
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
                let differences = self.differences(&stored, stored_in);
                if differences.is_empty() {
                    atomic::write_json(&path, self)?;
                    return Ok(());
                }
                if !allow {
                    let shared = self.model != stored.model || self.shard != stored.shard;
                    let changed = self
                        .sources
                        .iter()
                        .filter(|(name, now)| {
                            !shared
                                && stored_in.contains(*name)
                                && !setting_differences(&stored.settings_of(name), now).is_empty()
                        })
                        .map(|(name, _)| name.clone())
                        .collect();
                    return Err(PinMismatch {
                        run_dir: run_dir.root().display().to_string(),
                        differences,
                        changed,
                    }
                    .into());
                }
                let differences = &differences;
                reporter.notice(crate::notice::Notice::SettingsChanged { differences });
                atomic::write_json(&path, self)?;
            }
            Some(_) => {}
            None => atomic::write_json(&path, self)?,
        }
        Ok(())
    }
}
