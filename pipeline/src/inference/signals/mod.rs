//! What a server tells about its own load and capacity, whichever server it is: SGLang
//! (`/server_info`, `/v1/loads`, `sglang:*` metrics), vLLM (`vllm:*` metrics, with
//! `cache_config_info` for the KV capacity) and llama.cpp (`/props`, `/slots`, `llamacpp:*`
//! metrics). [`parse`] turns each endpoint's body into a [`Reading`] (pure, tested on the real
//! formats), [`reader`] fetches them; [`launch`] reads the running cap from the arguments of a
//! server `gen` launches. Everything is optional: the concurrency controller must work without
//! any of it.

pub mod launch;
pub mod parse;
pub mod prometheus;
pub mod reader;

pub use parse::{Load, Reading, ServerKind};
pub use reader::{Endpoints, SignalReader, load};
