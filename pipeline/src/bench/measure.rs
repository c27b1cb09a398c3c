//! One concurrency level against one server: exactly `level` requests in flight until
//! `requests` have finished, then throughput and latency percentiles from what came back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::task::JoinSet;

use super::prompts::BenchRequest;
use crate::inference::RequestError;
use crate::inference::client::{ChatClient, TimedCompletion};

/// What one level measured. Times are in seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LevelResult {
    pub concurrency: usize,
    /// Requests that finished with `[DONE]`.
    pub completed: usize,
    pub failed: usize,
    /// Requests asked again once after an error `gen run` retries too (the server was not
    /// there for it, or erred inside): a keep-alive connection the server had just closed
    /// (llama-server, now and then) is not a failure of the level. Its latency is the second
    /// request's.
    pub retried: usize,
    /// From the first request sent to the last one finished.
    pub wall_s: f64,
    /// Sum of `usage.completion_tokens` over the completed requests.
    pub output_tokens: u64,
    pub output_tokens_per_s: f64,
    pub latency_p50_s: Option<f64>,
    pub latency_p95_s: Option<f64>,
    /// Median time to the first generated token.
    pub ttft_p50_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

/// One finished request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub latency: Duration,
    pub first_token: Option<Duration>,
    pub output_tokens: u64,
}

impl From<&TimedCompletion> for Sample {
    fn from(timed: &TimedCompletion) -> Sample {
        Sample {
            latency: timed.total,
            first_token: timed.first_token,
            output_tokens: timed
                .completion
                .usage
                .as_ref()
                .map_or(0, |u| u.completion_tokens),
        }
    }
}

/// Runs one level: `level` requests in flight (fewer only at the tail, once every request has
/// been sent), requests taken in order from `prompts` (the level's own slice; wrapping around
/// if it is shorter than `requests`). A request error
/// counts as a failure; a [`RequestError::Fatal`] (bad key, model or path) ends the bench.
/// `progress` advances by one per finished request.
pub async fn run_level(
    client: &ChatClient,
    prompts: &Arc<Vec<BenchRequest>>,
    level: usize,
    requests: usize,
    progress: &indicatif::ProgressBar,
) -> Result<LevelResult, RequestError> {
    let mut in_flight = JoinSet::new();
    let mut sent = 0;
    let mut send = |in_flight: &mut JoinSet<_>| {
        let client = client.clone();
        let prompts = Arc::clone(prompts);
        let index = sent % prompts.len().max(1);
        sent += 1;
        in_flight.spawn(async move {
            let Some(request) = prompts.get(index) else {
                return Err(RequestError::Fatal(
                    "the bench has no prompts to send".into(),
                ));
            };
            let chat = (&request.messages[..], request.tools.as_deref());
            let ask = || client.timed(chat, request.max_tokens, &request.params);
            match ask().await {
                Err(RequestError::ServerDown(_) | RequestError::Transient(_)) => {
                    Ok((ask().await?, true))
                }
                answered => answered.map(|timed| (timed, false)),
            }
        });
    };
    let started = Instant::now();
    for _ in 0..level.min(requests) {
        send(&mut in_flight);
    }
    let mut samples = Vec::with_capacity(requests);
    let mut failures = Vec::new();
    let mut retried = 0;
    while let Some(joined) = in_flight.join_next().await {
        match joined {
            Ok(Ok((timed, again))) => {
                samples.push(Sample::from(&timed));
                retried += usize::from(again);
            }
            Ok(Err(RequestError::Fatal(message))) => {
                in_flight.abort_all();
                return Err(RequestError::Fatal(message));
            }
            Ok(Err(error)) => failures.push(error.to_string()),
            Err(join) => failures.push(format!("request task ended: {join}")),
        }
        progress.inc(1);
        if samples.len() + failures.len() + in_flight.len() < requests {
            send(&mut in_flight);
        }
    }
    let mut result = summarize(level, started.elapsed(), &samples, &failures);
    result.retried = retried;
    Ok(result)
}

/// The level's numbers from its samples; percentiles by nearest rank.
pub fn summarize(
    level: usize,
    wall: Duration,
    samples: &[Sample],
    failures: &[String],
) -> LevelResult {
    let output_tokens: u64 = samples.iter().map(|s| s.output_tokens).sum();
    let wall_s = wall.as_secs_f64();
    let mut latencies: Vec<f64> = samples.iter().map(|s| s.latency.as_secs_f64()).collect();
    latencies.sort_by(f64::total_cmp);
    let mut first_tokens: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.first_token.map(|d| d.as_secs_f64()))
        .collect();
    first_tokens.sort_by(f64::total_cmp);
    LevelResult {
        concurrency: level,
        completed: samples.len(),
        failed: failures.len(),
        retried: 0,
        wall_s,
        output_tokens,
        output_tokens_per_s: if wall_s > 0.0 {
            output_tokens as f64 / wall_s
        } else {
            0.0
        },
        latency_p50_s: percentile(&latencies, 50),
        latency_p95_s: percentile(&latencies, 95),
        ttft_p50_s: percentile(&first_tokens, 50),
        first_error: failures.first().cloned(),
    }
}

/// The nearest-rank `p`-th percentile of `sorted` (ascending); `None` when empty.
pub fn percentile(sorted: &[f64], p: usize) -> Option<f64> {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&values, 50), Some(10.0));
        assert_eq!(percentile(&values, 95), Some(19.0));
        assert_eq!(percentile(&[3.0], 95), Some(3.0));
        assert_eq!(percentile(&[], 50), None);
    }

    #[test]
    fn a_level_sums_tokens_over_wall_time() {
        let sample = |ms: u64, tokens: u64| Sample {
            latency: Duration::from_millis(ms),
            first_token: Some(Duration::from_millis(ms / 2)),
            output_tokens: tokens,
        };
        let result = summarize(
            2,
            Duration::from_secs(2),
            &[sample(100, 10), sample(300, 30), sample(200, 20)],
            &["HTTP 500: boom".to_owned()],
        );
        assert_eq!(result.completed, 3);
        assert_eq!(result.failed, 1);
        assert_eq!(result.output_tokens, 60);
        assert!((result.output_tokens_per_s - 30.0).abs() < 1e-9);
        assert_eq!(result.latency_p50_s, Some(0.2));
        assert_eq!(result.latency_p95_s, Some(0.3));
        assert_eq!(result.ttft_p50_s, Some(0.1));
        assert_eq!(result.first_error.as_deref(), Some("HTTP 500: boom"));
    }
}
