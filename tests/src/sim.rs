//! A simulated continuous-batching inference server on virtual time, for testing concurrency
//! control without sockets or sleeps: each step costs time per resident KV token, prefill costs
//! per prompt token, and a KV cache too full for the next step preempts requests.
//!
//! The model follows vLLM V1's scheduler: running requests are served first; when the KV cache
//! cannot hold the next step's tokens the **newest** running request is preempted (its KV is
//! dropped, it goes back to the front of the queue and is recomputed as a prefill when it is
//! readmitted); queued requests are admitted only in steps without a preemption, while the
//! running cap and the free KV allow. One engine step decodes `tokens_per_step` tokens for every
//! running request and takes
//! `tokens_per_step × (step_base + step_per_seq·batch + step_per_kv_token·kv_used)
//! + prefill_per_token·prefilled`.
//!
//! It knows nothing about any controller: a driver submits requests ([`SimServer::submit`]),
//! advances the engine ([`SimServer::step`]), reads what a real server exposes
//! ([`SimServer::metrics`], [`SimServer::caps`], or the endpoints of a real server's
//! [`Flavour`] with [`SimServer::endpoint`]) and may crash it ([`SimServer::restart`]).
//! [`Workload`] draws reasoning-length requests (long lognormal outputs) from a seeded generator.

use std::collections::VecDeque;

/// Engine shape and cost model.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// KV cache capacity in tokens.
    pub kv_tokens: u64,
    /// Most requests running at once (`max_running_requests`, slots).
    pub max_running: u32,
    /// Tokens decoded per running request per engine step.
    pub tokens_per_step: u32,
    /// Fixed seconds per decoded token position.
    pub step_base: f64,
    /// Seconds per decoded token position per running request.
    pub step_per_seq: f64,
    /// Seconds per decoded token position per resident KV token.
    pub step_per_kv_token: f64,
    /// Seconds per prefilled token (new prompts and recomputed preempted requests). The
    /// default 3·10⁻⁵ gives a fixed-limit curve where 96 and more in flight run about 2% under
    /// the knee; 1.5·10⁻⁴ makes recomputing a preempted request expensive.
    pub prefill_per_token: f64,
    /// Virtual seconds an idle engine waits before looking at its queue again.
    pub idle_step: f64,
}

impl ServerConfig {
    /// Field-notes' engine with the given KV capacity and running cap.
    pub fn new(kv_tokens: u64, max_running: u32) -> ServerConfig {
        ServerConfig {
            kv_tokens,
            max_running,
            tokens_per_step: 8,
            step_base: 0.011,
            step_per_seq: 0.000_05,
            step_per_kv_token: 3e-8,
            prefill_per_token: 3e-5,
            idle_step: 0.01,
        }
    }

    /// KV-bound: 400k KV tokens, cap 256.
    pub fn kv_bound() -> ServerConfig {
        ServerConfig::new(400_000, 256)
    }

    /// Cap-bound: 5M KV tokens, cap 128.
    pub fn cap_bound() -> ServerConfig {
        ServerConfig::new(5_000_000, 128)
    }
}

/// What a server reports about its limits (SGLang `max_running_requests` and
/// `max_total_num_tokens`, llama.cpp `total_slots`, vLLM `num_gpu_blocks × block_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimCaps {
    pub max_running: u32,
    pub kv_tokens: u64,
}

/// What a server's metrics endpoint reports at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimMetrics {
    pub running: u32,
    pub queued: u32,
    /// KV cache usage, 0–1.
    pub kv_usage: f64,
    /// Cumulative preemptions since the process started.
    pub preemptions_total: u64,
    /// Cumulative decoded tokens since the process started.
    pub output_tokens_total: u64,
}

/// One request's lengths. The server decodes exactly `output_tokens` (it "hits EOS" there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestSpec {
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

/// A request that finished during a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    pub id: u64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

/// What one [`SimServer::step`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutcome {
    /// Virtual seconds the step took.
    pub elapsed: f64,
    /// Tokens streamed to clients in this step.
    pub output_tokens: u64,
    pub finished: Vec<Finished>,
    /// Requests preempted in this step.
    pub preempted: u32,
}

/// The server is down (crashed, restarting): the connection is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

#[derive(Debug, Clone, Copy)]
struct Seq {
    id: u64,
    prompt: u32,
    target: u32,
    generated: u32,
}

impl Seq {
    fn resident(&self) -> u64 {
        u64::from(self.prompt) + u64::from(self.generated)
    }

    fn remaining(&self) -> u32 {
        self.target - self.generated
    }
}

/// The simulated server. Virtual time starts at 0 and only [`SimServer::step`] advances it.
#[derive(Debug, Clone)]
pub struct SimServer {
    config: ServerConfig,
    now: f64,
    up_at: f64,
    running: Vec<Seq>,
    waiting: VecDeque<Seq>,
    kv_used: u64,
    preemptions_total: u64,
    output_tokens_total: u64,
    next_id: u64,
}

impl SimServer {
    pub fn new(config: ServerConfig) -> SimServer {
        SimServer {
            config,
            now: 0.0,
            up_at: 0.0,
            running: Vec::new(),
            waiting: VecDeque::new(),
            kv_used: 0,
            preemptions_total: 0,
            output_tokens_total: 0,
            next_id: 0,
        }
    }

    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Virtual seconds since the simulation started.
    pub fn now(&self) -> f64 {
        self.now
    }

    pub fn is_up(&self) -> bool {
        self.now >= self.up_at
    }

    pub fn caps(&self) -> SimCaps {
        SimCaps {
            max_running: self.config.max_running,
            kv_tokens: self.config.kv_tokens,
        }
    }

    pub fn metrics(&self) -> SimMetrics {
        SimMetrics {
            running: self.running.len() as u32,
            queued: self.waiting.len() as u32,
            kv_usage: self.kv_used as f64 / self.config.kv_tokens as f64,
            preemptions_total: self.preemptions_total,
            output_tokens_total: self.output_tokens_total,
        }
    }

    /// Queues a request; its id comes back in a [`Finished`] when it is done.
    pub fn submit(&mut self, spec: RequestSpec) -> Result<u64, Refused> {
        if !self.is_up() {
            return Err(Refused);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back(Seq {
            id,
            prompt: spec.prompt_tokens,
            target: spec.output_tokens.max(1),
            generated: 0,
        });
        Ok(id)
    }

    /// Kills the process: every running and queued request is lost (their ids are returned,
    /// the client sees its streams cut), counters restart at 0, and the server refuses
    /// submissions for `downtime` virtual seconds.
    pub fn restart(&mut self, downtime: f64) -> Vec<u64> {
        let lost = self
            .running
            .drain(..)
            .chain(self.waiting.drain(..))
            .map(|seq| seq.id)
            .collect();
        self.kv_used = 0;
        self.preemptions_total = 0;
        self.output_tokens_total = 0;
        self.up_at = self.now + downtime;
        lost
    }

    /// Drops request `id` wherever it is (its client went away); its KV is freed.
    pub fn abort(&mut self, id: u64) {
        if let Some(at) = self.running.iter().position(|seq| seq.id == id) {
            let seq = self.running.remove(at);
            self.kv_used -= seq.resident();
        } else {
            self.waiting.retain(|seq| seq.id != id);
        }
    }

    /// Output tokens generated so far by each running request.
    pub fn progress(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.running.iter().map(|seq| (seq.id, seq.generated))
    }

    /// Runs one engine step (or idles when there is nothing to do).
    pub fn step(&mut self) -> StepOutcome {
        if self.running.is_empty() && self.waiting.is_empty() || !self.is_up() {
            let elapsed = if self.is_up() {
                self.config.idle_step
            } else {
                (self.up_at - self.now).min(self.config.idle_step.max(1.0))
            };
            self.now += elapsed;
            return StepOutcome {
                elapsed,
                ..StepOutcome::default()
            };
        }
        let per_step = self.config.tokens_per_step;
        let capacity = self.config.kv_tokens;

        // Make room for this step's tokens by preempting the newest running requests.
        let mut need: u64 = self
            .running
            .iter()
            .map(|seq| u64::from(seq.remaining().min(per_step)))
            .sum();
        let mut preempted = 0;
        while self.kv_used + need > capacity && self.running.len() > 1 {
            let Some(seq) = self.running.pop() else { break };
            need -= u64::from(seq.remaining().min(per_step));
            self.kv_used -= seq.resident();
            self.waiting.push_front(seq);
            preempted += 1;
        }
        self.preemptions_total += u64::from(preempted);

        // Admit queued requests (recomputing preempted ones) while they fit.
        let mut prefilled: u64 = 0;
        if preempted == 0 {
            while self.running.len() < self.config.max_running as usize {
                let Some(front) = self.waiting.front() else {
                    break;
                };
                let grow = u64::from(front.remaining().min(per_step));
                if self.kv_used + need + front.resident() + grow > capacity {
                    break;
                }
                let Some(seq) = self.waiting.pop_front() else {
                    break;
                };
                self.kv_used += seq.resident();
                prefilled += seq.resident();
                need += grow;
                self.running.push(seq);
            }
        }

        let batch = self.running.len() as f64;
        let elapsed = f64::from(per_step)
            * (self.config.step_base
                + self.config.step_per_seq * batch
                + self.config.step_per_kv_token * self.kv_used as f64)
            + self.config.prefill_per_token * prefilled as f64;

        let mut outcome = StepOutcome {
            elapsed,
            preempted,
            ..StepOutcome::default()
        };
        let mut freed = 0;
        for seq in &mut self.running {
            let tokens = seq.remaining().min(per_step);
            seq.generated += tokens;
            outcome.output_tokens += u64::from(tokens);
            if seq.remaining() == 0 {
                freed += seq.resident();
                outcome.finished.push(Finished {
                    id: seq.id,
                    prompt_tokens: seq.prompt,
                    output_tokens: seq.generated,
                });
            }
        }
        self.kv_used = self.kv_used + outcome.output_tokens - freed;
        if !outcome.finished.is_empty() {
            self.running.retain(|seq| seq.remaining() > 0);
        }
        self.output_tokens_total += outcome.output_tokens;
        self.now += elapsed;
        outcome
    }
}

/// Request lengths of a reasoning workload: prompts U[200, 2000], outputs
/// lognormal(ln 5000, 0.8) clipped to 1k–30k, from a seeded generator (the same seed gives the
/// same request sequence, so runs with different concurrency see the same work).
#[derive(Debug, Clone)]
pub struct Workload {
    rng: SplitMix64,
    pub prompt_min: u32,
    pub prompt_max: u32,
    /// Median output length before clipping.
    pub output_median: f64,
    pub output_sigma: f64,
    pub output_min: u32,
    /// Also the request's `max_tokens`.
    pub output_max: u32,
}

impl Workload {
    pub fn new(seed: u64) -> Workload {
        Workload {
            rng: SplitMix64(seed),
            prompt_min: 200,
            prompt_max: 2000,
            output_median: 5000.0,
            output_sigma: 0.8,
            output_min: 1000,
            output_max: 30_000,
        }
    }

    /// The same lengths from another seed.
    pub fn reseeded(&self, seed: u64) -> Workload {
        Workload {
            rng: SplitMix64(seed),
            ..self.clone()
        }
    }

    /// Short chat answers: prompts U[100, 300], outputs lognormal(ln 200, 0.8) clipped to
    /// 16–1024 (mean ≈ 270; `max_tokens` 1024).
    pub fn short(seed: u64) -> Workload {
        Workload {
            prompt_min: 100,
            prompt_max: 300,
            output_median: 200.0,
            output_min: 16,
            output_max: 1024,
            ..Workload::new(seed)
        }
    }

    /// Prefill-heavy: prompts U[1000, 3000], outputs lognormal(ln 150, 0.8) clipped to 16–512.
    pub fn prefill_heavy(seed: u64) -> Workload {
        Workload {
            prompt_min: 1000,
            prompt_max: 3000,
            output_median: 150.0,
            output_min: 16,
            output_max: 512,
            ..Workload::new(seed)
        }
    }

    /// Reasoning-length outputs of a small model: prompts U[100, 500], outputs
    /// lognormal(ln 1100, 0.8) clipped to 64–8192 (mean ≈ 1.5k; `max_tokens` 8192).
    pub fn long_outputs(seed: u64) -> Workload {
        Workload {
            prompt_min: 100,
            prompt_max: 500,
            output_median: 1100.0,
            output_min: 64,
            output_max: 8192,
            ..Workload::new(seed)
        }
    }

    pub fn next_request(&mut self) -> RequestSpec {
        let span = f64::from(self.prompt_max - self.prompt_min + 1);
        let prompt = self.prompt_min + (self.rng.uniform() * span) as u32;
        let output = (self.output_median.ln() + self.output_sigma * self.rng.normal()).exp();
        let output = output.clamp(f64::from(self.output_min), f64::from(self.output_max)) as u32;
        RequestSpec {
            prompt_tokens: prompt.min(self.prompt_max),
            output_tokens: output,
        }
    }
}

/// SplitMix64: small, fast, good enough for workload draws, and reproducible everywhere.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Which real server's endpoints a [`SimServer`] answers with: the same paths, JSON shapes,
/// metric names and label sets (`gen-pipeline`'s `signals::parse` documents where each was
/// seen). What a server does not expose, the flavour does not either: vLLM prints its KV
/// capacity (`cache_config_info`) but not its running cap; llama.cpp its slots but no KV pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// `/server_info`, `/get_server_info`, `/v1/loads`, `/metrics` (`sglang:*`).
    Sglang,
    /// `/metrics` (`vllm:*`, with `cache_config_info`).
    Vllm,
    /// `/props`, `/slots`, `/metrics` (`llamacpp:*`).
    LlamaCpp,
}

/// The served model's name in every endpoint.
pub const SIM_MODEL: &str = "sim-model";

/// vLLM's default block size.
const BLOCK_SIZE: u64 = 16;

impl SimServer {
    /// The body a `flavour` server answers `path` with, `None` where it answers 404.
    pub fn endpoint(&self, flavour: Flavour, path: &str) -> Option<String> {
        let m = self.metrics();
        let used = self.kv_used;
        let config = &self.config;
        let path = path.split('?').next().unwrap_or(path);
        match (flavour, path) {
            (Flavour::Sglang, "/server_info" | "/get_server_info") => Some(
                serde_json::json!({
                    "model_path": SIM_MODEL, "served_model_name": SIM_MODEL,
                    "max_running_requests": config.max_running, "max_queued_requests": null,
                    "tp_size": 1, "dp_size": 1, "status": "ready",
                    "max_total_num_tokens": config.kv_tokens, "max_req_input_len": config.kv_tokens,
                    "internal_states": [{
                        "max_running_requests": config.max_running,
                        "last_gen_throughput": 0.0,
                        "memory_usage": {"weight": 1.0, "kvcache": 1.0, "token_capacity": config.kv_tokens, "graph": 0.1},
                        "effective_max_running_requests_per_dp": config.max_running
                    }],
                    "version": "0.5.9-sim"
                })
                .to_string(),
            ),
            (Flavour::Sglang, "/v1/loads") => Some(
                serde_json::json!({
                    "timestamp": "1970-01-01T00:00:00+00:00", "version": "0.5.9-sim",
                    "accelerator": null, "num_accelerators": 1,
                    "loads": [{
                        "dp_rank": 0, "num_running_reqs": m.running, "num_waiting_reqs": m.queued,
                        "num_used_tokens": used, "num_total_tokens": used,
                        "max_total_num_tokens": config.kv_tokens, "token_usage": m.kv_usage,
                        "gen_throughput": 0.0, "cache_hit_rate": 0.0, "utilization": 1.0,
                        "max_running_requests": config.max_running
                    }]
                })
                .to_string(),
            ),
            (Flavour::Sglang, "/metrics") => {
                let labels = format!(
                    "engine_type=\"unified\",model_name=\"{SIM_MODEL}\",moe_ep_rank=\"0\",pp_rank=\"0\",tp_rank=\"0\""
                );
                let gauges: [(&str, String); 6] = [
                    ("num_running_reqs", m.running.to_string()),
                    ("num_queue_reqs", m.queued.to_string()),
                    ("token_usage", m.kv_usage.to_string()),
                    ("num_used_tokens", used.to_string()),
                    ("max_total_num_tokens", config.kv_tokens.to_string()),
                    ("num_retracted_reqs", "0".to_owned()),
                ];
                let mut text = String::new();
                for (name, value) in gauges {
                    text.push_str(&format!(
                        "# TYPE sglang:{name} gauge\nsglang:{name}{{{labels}}} {value}\n"
                    ));
                }
                for (name, value) in [
                    ("num_retracted_requests_total", m.preemptions_total),
                    ("generation_tokens_total", m.output_tokens_total),
                ] {
                    text.push_str(&format!(
                        "# TYPE sglang:{name} counter\nsglang:{name}{{{labels}}} {value}.0\n"
                    ));
                }
                Some(text)
            }
            (Flavour::Vllm, "/metrics") => {
                let labels = format!("engine=\"0\",model_name=\"{SIM_MODEL}\"");
                let blocks = config.kv_tokens / BLOCK_SIZE;
                Some(format!(
                    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
                     # TYPE vllm:num_requests_running gauge\n\
                     vllm:num_requests_running{{{labels}}} {}.0\n\
                     # TYPE vllm:num_requests_waiting gauge\n\
                     vllm:num_requests_waiting{{{labels}}} {}.0\n\
                     # TYPE vllm:kv_cache_usage_perc gauge\n\
                     vllm:kv_cache_usage_perc{{{labels}}} {}\n\
                     # TYPE vllm:num_preemptions_total counter\n\
                     vllm:num_preemptions_total{{{labels}}} {}.0\n\
                     # TYPE vllm:generation_tokens_total counter\n\
                     vllm:generation_tokens_total{{{labels}}} {}.0\n\
                     # HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n\
                     # TYPE vllm:cache_config_info gauge\n\
                     vllm:cache_config_info{{block_size=\"{BLOCK_SIZE}\",cache_dtype=\"auto\",calculate_kv_scales=\"False\",cpu_offload_gb=\"0.0\",enable_prefix_caching=\"True\",engine=\"0\",gpu_memory_utilization=\"0.9\",is_attention_free=\"False\",num_cpu_blocks=\"None\",num_gpu_blocks=\"{blocks}\",num_gpu_blocks_override=\"None\",prefix_caching_hash_algo=\"sha256\",sliding_window=\"None\",swap_space=\"0.0\",swap_space_bytes=\"0.0\"}} 1.0\n",
                    m.running, m.queued, m.kv_usage, m.preemptions_total, m.output_tokens_total,
                ))
            }
            (Flavour::LlamaCpp, "/props") => Some(
                serde_json::json!({
                    "default_generation_settings": {"n_ctx": config.kv_tokens / u64::from(config.max_running.max(1))},
                    "total_slots": config.max_running,
                    "model_path": format!("{SIM_MODEL}.gguf"),
                    "build_info": "b0000-sim"
                })
                .to_string(),
            ),
            (Flavour::LlamaCpp, "/slots") => {
                let slots: Vec<serde_json::Value> = (0..config.max_running)
                    .map(|id| {
                        serde_json::json!({
                            "id": id,
                            "n_ctx": config.kv_tokens / u64::from(config.max_running.max(1)),
                            "is_processing": id < m.running
                        })
                    })
                    .collect();
                Some(serde_json::Value::from(slots).to_string())
            }
            (Flavour::LlamaCpp, "/metrics") => Some(format!(
                "# HELP llamacpp:requests_processing Number of requests processing.\n\
                 # TYPE llamacpp:requests_processing gauge\n\
                 llamacpp:requests_processing {}\n\
                 # TYPE llamacpp:requests_deferred gauge\n\
                 llamacpp:requests_deferred {}\n\
                 # TYPE llamacpp:tokens_predicted_total counter\n\
                 llamacpp:tokens_predicted_total {}\n",
                m.running, m.queued, m.output_tokens_total
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep_in_flight(
        server: &mut SimServer,
        work: &mut Workload,
        limit: u32,
        seconds: f64,
    ) -> (u64, u64) {
        let mut in_flight = 0;
        let mut tokens = 0;
        let mut finished = 0;
        while server.now() < seconds {
            while in_flight < limit {
                server.submit(work.next_request()).expect("server is up");
                in_flight += 1;
            }
            let step = server.step();
            tokens += step.output_tokens;
            finished += step.finished.len() as u64;
            in_flight -= step.finished.len() as u32;
        }
        (tokens, finished)
    }

    #[test]
    fn workload_is_seeded_and_in_range() {
        let mut a = Workload::new(7);
        let mut b = Workload::new(7);
        let mut sum = 0.0;
        for _ in 0..10_000 {
            let r = a.next_request();
            assert_eq!(r, b.next_request());
            assert!((200..=2000).contains(&r.prompt_tokens));
            assert!((1000..=30_000).contains(&r.output_tokens));
            sum += f64::from(r.output_tokens);
        }
        // lognormal(ln 5000, 0.8) has mean ≈ 6.9k; clipping moves it a little.
        let mean = sum / 10_000.0;
        assert!((6300.0..7300.0).contains(&mean), "mean output {mean}");
    }

    #[test]
    fn running_cap_and_kv_capacity_hold() {
        let mut server = SimServer::new(ServerConfig::new(100_000, 16));
        let mut work = Workload::new(1);
        for _ in 0..40 {
            server.submit(work.next_request()).expect("up");
        }
        for _ in 0..5000 {
            server.step();
            let m = server.metrics();
            assert!(m.running <= 16);
            assert!(m.kv_usage <= 1.0, "kv usage {}", m.kv_usage);
        }
    }

    #[test]
    fn oversubscribed_kv_preempts_and_tokens_are_conserved() {
        let mut server = SimServer::new(ServerConfig::new(60_000, 256));
        let mut work = Workload::new(3);
        let (tokens, finished) = keep_in_flight(&mut server, &mut work, 64, 1800.0);
        let m = server.metrics();
        assert!(finished > 0);
        assert!(
            m.preemptions_total > 0,
            "64 requests cannot fit in 60k KV tokens"
        );
        assert_eq!(m.output_tokens_total, tokens);
    }

    #[test]
    fn cap_bound_server_never_preempts_and_queues_the_rest() {
        let mut server = SimServer::new(ServerConfig::cap_bound());
        let mut work = Workload::new(5);
        keep_in_flight(&mut server, &mut work, 160, 600.0);
        let m = server.metrics();
        assert_eq!(m.preemptions_total, 0);
        // A request that finished in the last step leaves its slot free until the next one.
        assert!((126..=128).contains(&m.running), "running {}", m.running);
        assert!((150..=160).contains(&(m.running + m.queued)));
        assert!(m.queued >= 22);
    }

    #[test]
    fn restart_loses_work_resets_counters_and_refuses_while_down() {
        let mut server = SimServer::new(ServerConfig::kv_bound());
        let mut work = Workload::new(9);
        keep_in_flight(&mut server, &mut work, 20, 100.0);
        let lost = server.restart(120.0);
        assert_eq!(lost.len(), 20);
        assert_eq!(server.metrics().output_tokens_total, 0);
        assert_eq!(server.submit(work.next_request()), Err(Refused));
        while !server.is_up() {
            server.step();
        }
        assert!(server.now() >= 220.0 - 1e-9);
        assert!(server.submit(work.next_request()).is_ok());
    }
}
