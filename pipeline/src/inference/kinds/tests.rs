//! Each kind's parsers on bodies as the real servers send them. Where a sample comes from a
//! public report, the test says where; they are trimmed to the fields that matter.

use serde_json::json;

use super::llama_cpp::{props, slots};
use super::sglang::{loads, server_info};
use super::*;

#[test]
fn sglang_server_info_prefers_the_effective_running_cap() {
    // The shape of `/server_info` in SGLang's own docs notebook (sgl-project native API
    // page, 2026-03): CLI args at the top, then status, pool size, and one internal state
    // per scheduler.
    let info = json!({
        "model_path": "qwen/qwen2.5-0.5b-instruct", "mem_fraction_static": 0.836,
        "max_running_requests": 128, "max_queued_requests": null, "max_total_tokens": 20480,
        "tp_size": 1, "dp_size": 1, "status": "ready", "max_total_num_tokens": 20480,
        "max_req_input_len": 20474,
        "internal_states": [{"max_running_requests": 128, "last_gen_throughput": 357.2,
            "memory_usage": {"weight": 0.98, "kvcache": 0.23, "token_capacity": 20480, "graph": 0.57},
            "effective_max_running_requests_per_dp": 128}],
        "version": "0.0.0.dev1+g11b76d24d"
    });
    let reading = server_info(&info).expect("SGLang");
    assert_eq!(
        (reading.max_running, reading.kv_tokens),
        (Some(128), Some(20480))
    );

    // A hybrid model: the CLI says 32, the mamba state cache caps it at 9
    // (sgl-project/sglang#38846); `null` CLI value when SGLang decides at start.
    let hybrid = json!({"max_running_requests": 32, "max_total_num_tokens": 500000,
        "internal_states": [{"max_running_requests": 32, "effective_max_running_requests_per_dp": 9}]});
    assert_eq!(server_info(&hybrid).and_then(|r| r.max_running), Some(9));
    let auto = json!({"max_running_requests": null, "max_total_num_tokens": 400000});
    let reading = server_info(&auto).expect("SGLang");
    assert_eq!(
        (reading.max_running, reading.kv_tokens),
        (None, Some(400_000))
    );
    let data_parallel = json!({"dp_size": 2, "max_total_num_tokens": 100000,
        "internal_states": [{"effective_max_running_requests_per_dp": 64},
                            {"effective_max_running_requests_per_dp": 64}]});
    let reading = server_info(&data_parallel).expect("SGLang");
    assert_eq!(
        (reading.max_running, reading.kv_tokens),
        (Some(128), Some(200_000))
    );
    // vLLM's dev-mode `/server_info` is something else entirely.
    assert_eq!(server_info(&json!({"vllm_config": "model='m'"})), None);
}

#[test]
fn sglang_loads_add_up_per_rank() {
    // Fields of `GetLoadsReqOutput` (sgl-project/sglang io_struct.py), one entry per DP rank.
    let body = json!({"timestamp": "2026-03-09T14:46:35+00:00", "version": "0.5.9",
        "accelerator": "NVIDIA H100", "num_accelerators": 1, "loads": [
        {"dp_rank": 0, "num_running_reqs": 10, "num_waiting_reqs": 2, "num_used_tokens": 50000,
         "num_total_tokens": 52000, "max_total_num_tokens": 100000, "token_usage": 0.5,
         "gen_throughput": 812.5, "cache_hit_rate": 0.1, "utilization": 0.9, "max_running_requests": 48,
         "queues": {"waiting": 2, "grammar": 0, "paused": 0, "retracted": 1}},
        {"dp_rank": 1, "num_running_reqs": 12, "num_waiting_reqs": 0, "num_used_tokens": 70000,
         "num_total_tokens": 70000, "max_total_num_tokens": 100000, "token_usage": 0.7,
         "gen_throughput": 790.0, "cache_hit_rate": 0.1, "utilization": 0.9, "max_running_requests": 48}]});
    let reading = loads(&body).expect("SGLang");
    assert_eq!(
        (reading.max_running, reading.kv_tokens),
        (Some(96), Some(200_000))
    );
    assert_eq!(
        (reading.load.running, reading.load.queued),
        (Some(22), Some(2))
    );
    assert!((reading.load.kv_usage.expect("usage") - 0.6).abs() < 1e-9);
    assert_eq!(loads(&json!({"detail": "Not Found"})), None);
}

#[test]
fn llama_cpp_props_and_slots() {
    let body = json!({"default_generation_settings": {"n_ctx": 1024, "params": {}},
        "total_slots": 4, "model_path": "m.gguf", "build_info": "b6000-0123abc"});
    let reading = props(&body).expect("llama.cpp");
    assert_eq!((reading.max_running, reading.kv_tokens), (Some(4), None));
    assert_eq!(props(&json!({"error": "x"})), None);

    let body = json!([
        {"id": 0, "n_ctx": 1024, "is_processing": true, "next_token": [{"n_remain": 10, "n_decoded": 5}]},
        {"id": 1, "n_ctx": 1024, "is_processing": false},
        {"id": 2, "n_ctx": 1024, "state": 1, "next_token": {"n_remain": 3, "n_decoded": 1}},
        {"id": 3, "n_ctx": 1024, "state": 0}
    ]);
    let reading = slots(&body).expect("llama.cpp");
    assert_eq!(
        (reading.max_running, reading.load.running),
        (Some(4), Some(2))
    );
}

#[test]
fn a_reading_fills_its_gaps_from_another() {
    let metrics = Reading {
        kind: Some(ServerKind::Sglang),
        load: Load {
            preemptions_total: Some(3),
            ..Load::default()
        },
        ..Reading::default()
    };
    let loads = Reading {
        kind: Some(ServerKind::Sglang),
        max_running: Some(8),
        kv_tokens: Some(100),
        load: Load {
            running: Some(2),
            queued: Some(0),
            kv_usage: Some(0.1),
            preemptions_total: None,
        },
    };
    let both = metrics.or(loads);
    assert_eq!(both.load.preemptions_total, Some(3));
    assert_eq!(both.load.running, Some(2));
    assert_eq!(both.max_running, Some(8));
}
