//! The controller in plain words, for `gen status` and the log: what bounds the limit, and the
//! one-line summary ("ramped 32 → 47 in 9 s; holding at 47: KV 91% full"). No internal
//! symbols reach the user.

use super::state::Controller;
use super::types::ControllerPhase;

/// The most limits of a ramp the summary lists.
const PATH_SHOWN: usize = 5;

impl Controller {
    /// What bounds the ceiling, e.g. "the KV cache fits about 46 requests of 7.9k tokens".
    pub(super) fn ceiling_reason(&self) -> String {
        let ceiling = self.ceiling();
        if self.caps.user_max == Some(ceiling) {
            return format!("your max-concurrency {ceiling}");
        }
        if let Some(kv) = self.kv_limit()
            && kv < ceiling
            && self.ramp.room == ceiling
            && self.phase == ControllerPhase::Startup
        {
            return format!(
                "the KV cache has room for about {ceiling} requests as they are now; about {kv} \
                 of {} tokens once they grow",
                kilo(self.stats.expected_resident())
            );
        }
        if self.kv_limit() == Some(ceiling) {
            return format!(
                "the KV cache fits about {ceiling} requests of {} tokens at {} use",
                kilo(self.stats.expected_resident()),
                percent(self.u)
            );
        }
        if let Some(running) = self.running_cap()
            && running.saturating_add(self.settings.headroom(running)) == ceiling
        {
            let waiting = ceiling - running;
            return format!("the server runs {running} at once, {waiting} more wait there");
        }
        format!("no known limit up to {ceiling}")
    }

    /// One line for `gen status`: how the limit got here, and what holds it now.
    pub fn summary(&self) -> String {
        let seconds = |ticks: u64| {
            let secs = self.settings.tick.as_secs_f64() * ticks as f64;
            if secs >= 120.0 {
                format!("{:.0} min", secs / 60.0)
            } else {
                format!("{secs:.0} s")
            }
        };
        let path = self.path_text();
        let ramp = match &self.ramp.ended {
            None => Some(format!(
                "ramping: {path} in {}",
                seconds(self.ticks - self.ramp.began_tick)
            )),
            Some((_, why)) if why == "resumed" => Some(format!("resumed at {}", self.limit)),
            Some((at, _)) if self.ramp.path.len() > 1 => Some(format!(
                "ramped {path} in {}",
                seconds(at - self.ramp.began_tick)
            )),
            Some(_) => None,
        };
        let now = match self.phase {
            ControllerPhase::Startup => self.load_text().unwrap_or_default(),
            ControllerPhase::Steady => match self.load_text() {
                Some(load) => format!("holding at {}: {load}", self.limit),
                None => format!("holding at {} ({})", self.limit, self.ceiling_reason()),
            },
            ControllerPhase::Probing => format!(
                "trying {} to see whether it pays{}",
                self.limit,
                self.load_text()
                    .map_or_else(String::new, |l| format!(": {l}"))
            ),
            ControllerPhase::Backoff => format!("lowered to {}: {}", self.limit, self.last_cut),
        };
        let summary = match (ramp, now.is_empty()) {
            (Some(ramp), true) => ramp,
            (Some(ramp), false) if self.phase == ControllerPhase::Startup => {
                format!("{ramp} ({now})")
            }
            (Some(ramp), false) => format!("{ramp}; {now}"),
            (None, _) => now,
        };
        if self.tail > self.limit {
            return format!("{summary}; the job's last prompts sent at {}", self.tail);
        }
        summary
    }

    /// "32 → 40 → 47", the middle elided when long.
    fn path_text(&self) -> String {
        let path = &self.ramp.path;
        let shown: Vec<String> = if path.len() <= PATH_SHOWN {
            path.iter().map(u32::to_string).collect()
        } else {
            let tail = &path[path.len() - (PATH_SHOWN - 2)..];
            std::iter::once(path[0].to_string())
                .chain(std::iter::once("…".to_owned()))
                .chain(tail.iter().map(u32::to_string))
                .collect()
        };
        shown.join(" → ")
    }

    /// "KV 91% full, 3 waiting at the server", from the last tick's signals.
    fn load_text(&self) -> Option<String> {
        let seen = self.last_seen;
        let mut parts = Vec::new();
        if let Some(kv) = seen.kv_usage {
            parts.push(format!("KV {} full", percent(kv)));
        }
        match seen.queued {
            Some(0) => parts.push("none waiting at the server".to_owned()),
            Some(q) => parts.push(format!("{q} waiting at the server")),
            None => {}
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// Relative change in percent.
pub(super) fn gain(now: f64, before: f64) -> f64 {
    if before > 0.0 {
        (now / before - 1.0) * 100.0
    } else {
        0.0
    }
}

/// Tokens in thousands with one decimal: 7900.0 → "7.9k".
pub(super) fn kilo(tokens: f64) -> String {
    format!("{:.1}k", tokens / 1000.0)
}

/// A 0–1 fraction as a whole percentage: 0.914 → "91%".
pub(super) fn percent(fraction: f64) -> String {
    format!("{:.0}%", fraction * 100.0)
}
