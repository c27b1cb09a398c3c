//! The pipeline's integration tests, one binary: `gen` end to end against fake servers, the
//! real llama-server, sshd and Slurm, and the library's parts driven from outside. Each module
//! is one area; `support` holds what they share.
//!
//! Which tests the quick profile leaves out (the slow end-to-end ones) is decided by
//! `.config/nextest.toml`, not here.

mod support;

mod advice_keys;
mod bench;
mod controller_http;
mod controller_sim;
mod datasets;
mod diagnose_offline;
mod diagnostics;
mod doctor;
mod export;
mod faults;
mod llama;
mod llama_ops;
mod notice;
mod protocol;
mod remote;
mod run;
mod sampling;
mod scale_scripts;
mod server_kinds;
mod servers;
mod slurm;
mod token_ids;
mod tool_turns;
mod vllm;
