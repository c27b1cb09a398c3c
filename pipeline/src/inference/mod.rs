//! Talking to the inference server: the streaming chat client ([`client`]), server discovery
//! and probes ([`probe`]) and a server `gen` launches itself ([`managed`]).

pub mod client;
pub mod controller;
pub mod liveness;
pub mod managed;
pub mod probe;
pub mod signals;

pub use client::{ChatClient, Completion, RequestError};
