//! Output-length statistics: what a running request holds in the KV cache on average.
//!
//! Decayed sums (factor `stats_decay` per completion) of the count, prompt tokens, output
//! tokens and squared output tokens, started from a prior of `prior_weight` pseudo-observations
//! with output ~ U(0, max_tokens): the first completions of a run are the short ones, and a
//! prior that assumes long outputs keeps the early ceiling conservative. The stats are
//! serializable so the dispatcher can keep them in the run directory and hand them back after a
//! restart.

use serde::{Deserialize, Serialize};

/// Decayed length sums. See the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthStats {
    /// Decayed count of completions (including the prior's pseudo-observations).
    weight: f64,
    prompt: f64,
    output: f64,
    output_sq: f64,
}

impl LengthStats {
    /// The prior: `weight` pseudo-observations of `prompt_tokens` prompts and outputs uniform
    /// on `[0, max_tokens]` (mean `M/2`, mean square `M²/3`).
    pub fn prior(max_tokens: u32, prompt_tokens: f64, weight: f64) -> LengthStats {
        let m = f64::from(max_tokens.max(1));
        let weight = weight.max(1e-9);
        LengthStats {
            weight,
            prompt: weight * prompt_tokens.max(0.0),
            output: weight * m / 2.0,
            output_sq: weight * m * m / 3.0,
        }
    }

    /// Makes `tokens` the mean prompt length of a prior (before any completion: the prompts
    /// being sent replace the prior's guess).
    pub fn set_mean_prompt(&mut self, tokens: f64) {
        self.prompt = self.weight * tokens.max(0.0);
    }

    /// Adds one completion after decaying the sums by `decay`.
    pub fn record(&mut self, prompt_tokens: u32, output_tokens: u32, decay: f64) {
        let out = f64::from(output_tokens);
        self.weight = self.weight * decay + 1.0;
        self.prompt = self.prompt * decay + f64::from(prompt_tokens);
        self.output = self.output * decay + out;
        self.output_sq = self.output_sq * decay + out * out;
    }

    /// Decayed number of observations, prior included.
    pub fn weight(&self) -> f64 {
        self.weight
    }

    pub fn mean_prompt(&self) -> f64 {
        self.prompt / self.weight
    }

    pub fn mean_output(&self) -> f64 {
        self.output / self.weight
    }

    /// `E_resident = E[prompt] + E[out²] / (2·E[out])`: the tokens a request that is running
    /// at a random instant holds (longer requests are running more often, hence the
    /// length-biased second term).
    pub fn expected_resident(&self) -> f64 {
        let out_term = if self.output > 0.0 {
            self.output_sq / (2.0 * self.output)
        } else {
            0.0
        };
        (self.mean_prompt() + out_term).max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prior_is_uniform_outputs() {
        let s = LengthStats::prior(30_000, 1000.0, 20.0);
        assert_eq!(s.weight(), 20.0);
        assert_eq!(s.mean_output(), 15_000.0);
        // E[out²]/(2E[out]) = (M²/3)/(M) = M/3 = 10k, plus the prompt.
        assert!((s.expected_resident() - 11_000.0).abs() < 1e-6);
    }

    #[test]
    fn completions_wash_out_the_prior() {
        let mut s = LengthStats::prior(30_000, 1000.0, 20.0);
        for _ in 0..5000 {
            s.record(500, 2000, 0.999);
        }
        // Prior weight left: 20·0.999^5000 ≈ 0.13 against ~1000 real ones.
        assert!(
            (s.mean_output() - 2000.0).abs() < 20.0,
            "{}",
            s.mean_output()
        );
        assert!(
            (s.expected_resident() - 1500.0).abs() < 50.0,
            "{}",
            s.expected_resident()
        );
        assert!((s.weight() - 1000.0).abs() < 10.0);
    }

    #[test]
    fn resident_is_length_biased() {
        let mut s = LengthStats::prior(10, 0.0, 1e-9);
        // Half the requests 1k, half 9k: mean 5k, but a running request holds on average
        // (1² + 9²)/(2·(1 + 9)) k = 4.1k — the long ones are running most of the time.
        for _ in 0..1000 {
            s.record(0, 1000, 1.0);
            s.record(0, 9000, 1.0);
        }
        assert!((s.expected_resident() - 4100.0).abs() < 1.0);
    }

    #[test]
    fn round_trips_through_json() {
        let mut s = LengthStats::prior(4096, 300.0, 20.0);
        s.record(120, 800, 0.999);
        let text = serde_json::to_string(&s).expect("serializes");
        let back: LengthStats = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(back, s);
    }
}
