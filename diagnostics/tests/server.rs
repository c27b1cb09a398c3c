//! Server-log table tests: SGLang, vLLM, llama.cpp and a plain traceback.

mod common;

use common::fixture;
use gen_diagnostics::{Class, Subtype, classify_server_log};

#[test]
fn server_logs() {
    // (fixture, class, subtype, headline)
    let table: &[(&str, Class, Option<Subtype>, &str)] = &[
        (
            "server_sglang_cuda_graph_oom_reconstructed.txt",
            Class::Oom,
            Some(Subtype::CudaGraphCapture),
            "oom (cuda graph capture): CUDA OOM in graph capture",
        ),
        (
            "server_sglang_capture_gloo_reconstructed.txt",
            Class::Other,
            Some(Subtype::CudaGraphCapture),
            "cuda graph capture: gloo error: Connection closed by peer […",
        ),
        (
            "server_vllm_kv_cache_reconstructed.txt",
            Class::Oom,
            Some(Subtype::KvCache),
            "oom (kv cache): no memory left for the KV cache",
        ),
        (
            "server_vllm_free_memory_reconstructed.txt",
            Class::Oom,
            Some(Subtype::GpuMemoryInUse),
            "oom (gpu in use): GPU memory held by another process",
        ),
        (
            "server_vllm_engine_dead_reconstructed.txt",
            Class::Traceback,
            Some(Subtype::Python),
            "traceback: AssertionError",
        ),
        (
            "server_llama_cpp_cuda_alloc_reconstructed.txt",
            Class::Oom,
            Some(Subtype::GpuAllocation),
            "oom (allocation): buffer allocation failed",
        ),
        (
            "server_llama_cpp_kv_alloc_reconstructed.txt",
            Class::Oom,
            Some(Subtype::GpuAllocation),
            "oom (allocation): buffer allocation failed",
        ),
        (
            "server_llama_cpp_missing_model_reconstructed.txt",
            Class::Other,
            Some(Subtype::ModelLoad),
            "model load: failed to open GGUF file '/models/missing.gguf'",
        ),
        (
            "server_llama_cpp_port_in_use_reconstructed.txt",
            Class::Other,
            Some(Subtype::PortInUse),
            "port in use: port already in use",
        ),
        (
            "server_python_traceback_reconstructed.txt",
            Class::Traceback,
            Some(Subtype::Python),
            "traceback: OSError: /models/qwen does not appear to have a …",
        ),
    ];
    for &(name, class, subtype, headline) in table {
        let verdict = classify_server_log(&fixture(name));
        assert_eq!(
            (verdict.class, verdict.subtype),
            (class, subtype),
            "{name}: {verdict:#?}"
        );
        assert_eq!(verdict.headline(), headline, "{name}");
        assert!(!verdict.advice.is_empty(), "{name}");
    }
}

#[test]
fn sglang_capture_oom_advice_quotes_avail_mem_and_lowers_the_fraction() {
    let verdict = classify_server_log(&fixture("server_sglang_cuda_graph_oom_reconstructed.txt"));
    assert_eq!(
        verdict.advice,
        [
            "the model fits; the static fraction left too little memory for CUDA graph capture (avail mem 1.12 GB at capture)",
            "lower --mem-fraction-static (0.92 → 0.85)",
            "if that is not enough, lower --cuda-graph-max-bs (e.g. 16)",
            "last resort: --disable-cuda-graph (much slower decoding)",
        ]
    );
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| e.starts_with("Load weight end.") && e.contains("avail mem=62.34 GB"))
    );
    assert_eq!(
        verdict.next_action(),
        "lower --mem-fraction-static (e.g. 0.85)"
    );
}

#[test]
fn gloo_capture_failure_is_not_called_oom() {
    let verdict = classify_server_log(&fixture("server_sglang_capture_gloo_reconstructed.txt"));
    assert_ne!(verdict.class, Class::Oom);
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| e.contains("no `CUDA out of memory`"))
    );
}

/// An SGLang capture failure says which it is: CUDA memory (also when NCCL reports it), a
/// gloo collective that lost its peer rank, or an NCCL error — and only memory gets memory
/// advice (issue 24, item 14).
#[test]
fn capture_failures_say_whether_memory_gloo_or_nccl() {
    // sgl-project/sglang#4205: a rank crashed inside `ncclAllReduce`, the other rank's gloo
    // connection closed.
    let verdict = classify_server_log(&fixture(
        "server_sglang_capture_gloo_after_nccl_crash_4205.txt",
    ));
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Other, Some(Subtype::CudaGraphCapture)),
        "{verdict:#?}"
    );
    assert_eq!(
        verdict.headline(),
        "cuda graph capture: gloo error: Connection closed by peer"
    );
    let evidence = verdict.evidence.join("\n");
    assert!(
        evidence.contains("a gloo (CPU, TCP) collective between the tensor-parallel ranks failed")
            && evidence.contains("a rank crashed inside an NCCL collective: File \"/usr/local/lib/python3.10/dist-packages/sglang/srt/distributed/device_communicators/pynccl_wrapper.py\", line 373 in ncclAllReduce"),
        "{evidence}"
    );
    assert!(
        verdict.advice[0].starts_with("find the first error of the other ranks"),
        "{:?}",
        verdict.advice
    );

    // NCCL reporting a failed CUDA allocation during capture is memory.
    let verdict = classify_server_log(&fixture(
        "server_sglang_capture_nccl_cuda_oom_reconstructed.txt",
    ));
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::CudaGraphCapture)),
        "{verdict:#?}"
    );
    assert_eq!(
        verdict.next_action(),
        "lower --mem-fraction-static (e.g. 0.85)"
    );

    // Any other NCCL error during capture is NCCL's, not memory.
    let verdict = classify_server_log(&fixture(
        "server_sglang_capture_nccl_capture_error_reconstructed.txt",
    ));
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Other, Some(Subtype::CudaGraphCapture)),
        "{verdict:#?}"
    );
    assert!(
        verdict
            .headline()
            .starts_with("cuda graph capture: NCCL error: unhandled cuda error"),
        "{}",
        verdict.headline()
    );
    assert!(
        verdict
            .evidence
            .iter()
            .any(|e| e.contains("an NCCL collective between the GPUs failed during capture")),
        "{:?}",
        verdict.evidence
    );
    assert!(
        verdict.advice.iter().any(|a| a.contains("does not help")),
        "{:?}",
        verdict.advice
    );
}

#[test]
fn vllm_wrappers_are_classified_by_what_precedes_them() {
    let verdict = classify_server_log(&fixture("server_vllm_kv_cache_reconstructed.txt"));
    assert_eq!(verdict.evidence[0], "Available KV cache memory: -0.31 GiB");
    assert_eq!(
        verdict.evidence[1],
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    );
    assert!(verdict.evidence.iter().any(|e| {
        e.starts_with("wrapper, classified by what precedes it: RuntimeError: Engine core")
    }));
    let verdict = classify_server_log(&fixture("server_vllm_engine_dead_reconstructed.txt"));
    let error = verdict.error.expect("traceback");
    assert_eq!(error.exception.exception_type, "AssertionError");
    assert_eq!(
        error.exception.location.expect("location").to_string(),
        "backend_xgrammar.py:160 in accept_tokens"
    );
    let verdict = classify_server_log(&fixture("server_vllm_free_memory_reconstructed.txt"));
    assert_eq!(
        verdict.advice[0],
        "another process holds GPU memory: free the GPU (nvidia-smi) or lower --gpu-memory-utilization (free 13% → at most 0.11)"
    );
}

#[test]
fn llama_cpp_kv_failure_advises_context_and_kv_quantization() {
    let verdict = classify_server_log(&fixture("server_llama_cpp_kv_alloc_reconstructed.txt"));
    assert!(verdict.advice[0].contains("-ctk q8_0 -ctv q8_0"));
    let verdict = classify_server_log(&fixture("server_llama_cpp_cuda_alloc_reconstructed.txt"));
    assert!(verdict.advice[0].contains("-ngl"));
    assert_eq!(
        verdict.evidence[0],
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 8192.00 MiB on device 0: cudaMalloc failed: out of memory"
    );
}

#[test]
fn vllm_v0_capture_oom_and_runtime_cuda_oom() {
    let log = "INFO 05-01 10:00:00 [model_runner.py:1500] Capturing cudagraphs for decoding. This may lead to unexpected consequences if the model is not static.\n\
               ERROR 05-01 10:00:05 [engine.py:400] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.54 GiB of which 512.00 MiB is free.\n\
               INFO 05-01 10:00:05 vllm.entrypoints: shutting down\n";
    let verdict = classify_server_log(log);
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::CudaGraphCapture))
    );
    assert!(verdict.advice[0].contains("--enforce-eager"));
    let verdict = classify_server_log(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
    );
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Oom, Some(Subtype::GpuAllocation))
    );
}

#[test]
fn unknown_log_names_its_last_line() {
    let verdict = classify_server_log("starting\nsomething odd happened\n");
    assert_eq!((verdict.class, verdict.subtype), (Class::Other, None));
    assert_eq!(verdict.headline(), "failed: something odd happened");
}
