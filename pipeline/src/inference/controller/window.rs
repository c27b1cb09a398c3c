//! The accumulators of one decision window: counts, sums and means of the ticks folded in.

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Mean {
    sum: f64,
    count: u32,
}

impl Mean {
    pub(super) fn add(&mut self, value: Option<f64>) {
        if let Some(value) = value {
            self.sum += value;
            self.count += 1;
        }
    }

    pub(super) fn get(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / f64::from(self.count))
    }
}

/// Accumulators of the current window.
#[derive(Debug, Clone, Default)]
pub(super) struct Window {
    pub(super) ticks: u32,
    pub(super) measured_ticks: u32,
    pub(super) measured_tokens: u64,
    pub(super) finishes: u32,
    pub(super) retryable: u32,
    pub(super) overloaded: u32,
    pub(super) stalls: u32,
    pub(super) preemptions: u64,
    /// Preemptions seen while more requests were in flight than the limit: an earlier cut is
    /// still draining, so they say nothing about the current limit.
    pub(super) lagging_preemptions: u64,
    pub(super) preemption_metric: bool,
    pub(super) running: Mean,
    pub(super) queued: Mean,
    pub(super) in_flight: Mean,
    pub(super) tick_cut: bool,
}

impl Window {
    /// Output tokens per tick over the measured (settled) ticks.
    pub(super) fn throughput(&self) -> f64 {
        if self.measured_ticks == 0 {
            0.0
        } else {
            self.measured_tokens as f64 / f64::from(self.measured_ticks)
        }
    }
}
