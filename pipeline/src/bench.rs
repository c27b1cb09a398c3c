//! `gen bench`: sweeps concurrency against one or more servers on prompts from the prepared
//! sources, and reports output tok/s, p50/p95 latency and time to first token per level.

/// Runs `gen bench`.
pub fn bench(_args: &crate::cli::BenchArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("`gen bench` is not implemented yet")
}
