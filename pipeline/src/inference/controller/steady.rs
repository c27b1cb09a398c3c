//! Steady state: creep toward the ceiling, and now and then a ±10% probe whose verdict is the
//! throughput of its window against the one before.

use super::state::{Controller, Direction, Probe};
use super::types::ControllerPhase;
use super::words::gain;

impl Controller {
    pub(super) fn steady_step(&mut self, throughput: f64) {
        let s = &self.settings;
        let ceiling = self.ceiling();
        self.steady_windows += 1;
        if self.steady_windows >= s.probe_every_windows {
            self.steady_windows = 0;
            let up = ((f64::from(self.limit) * (1.0 + s.probe_step)).ceil() as u32).min(ceiling);
            let down = ((f64::from(self.limit) * (1.0 - s.probe_step)).floor() as u32).max(1);
            let want_up = self.next_probe_up;
            self.next_probe_up = !self.next_probe_up;
            // At the ceiling an up-probe has nowhere to go: its turn is skipped (a down-probe
            // there would only measure a loss we already expect).
            let (direction, to) = if want_up && up > self.limit {
                (Direction::Up, up)
            } else if !want_up && down < self.limit {
                (Direction::Down, down)
            } else {
                self.reason = format!("steady, no probe at {}", self.ceiling_reason());
                return;
            };
            self.probe = Some(Probe {
                direction,
                from: self.limit,
                baseline: throughput,
            });
            self.phase = ControllerPhase::Probing;
            self.reason = format!(
                "trying {to} instead of {} to see whether it pays",
                self.limit
            );
            self.limit = to;
            return;
        }
        // Under a KV ceiling, close part of the gap: after a preemption cut L comes back within
        // minutes, and `u` (learnt from preemptions) keeps it from overshooting.
        let gap = match self.kv_limit() {
            Some(kv) if kv <= ceiling => {
                (s.creep_gap * f64::from(kv.saturating_sub(self.limit))).floor() as u32
            }
            _ => 0,
        };
        let creep = (self.limit / s.creep_divisor.max(1)).max(1).max(gap);
        let next = self.limit.saturating_add(creep).min(ceiling);
        if next > self.limit {
            self.reason = format!("creep {} → {next} ({})", self.limit, self.ceiling_reason());
            self.limit = next;
        } else {
            self.reason = format!("steady at {}", self.ceiling_reason());
        }
    }

    pub(super) fn finish_probe(&mut self, throughput: f64) {
        self.phase = ControllerPhase::Steady;
        let Some(probe) = self.probe.take() else {
            return;
        };
        let change = gain(throughput, probe.baseline);
        let s = &self.settings;
        let keep = match probe.direction {
            Direction::Up => throughput >= probe.baseline * (1.0 + s.keep_up_gain),
            Direction::Down => throughput > probe.baseline * (1.0 - s.revert_down_loss),
        };
        if keep {
            self.reason = format!(
                "kept {} instead of {} ({change:+.1}% throughput)",
                self.limit, probe.from
            );
        } else {
            self.reason = format!(
                "back to {} from {} ({change:+.1}% throughput)",
                probe.from, self.limit
            );
            self.limit = probe.from;
        }
    }
}
