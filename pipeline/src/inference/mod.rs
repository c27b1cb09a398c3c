//! Talking to the inference server: what each kind of server answers where ([`kinds`]), the
//! streaming chat client ([`client`]), server discovery and probes ([`probe`]), the checks of
//! what a server serves and answers ([`checks`], for `gen doctor` and `gen run`) and a server
//! `gen` launches itself ([`managed`]).

pub mod checks;
pub mod client;
pub mod controller;
pub mod kinds;
pub mod liveness;
pub mod managed;
pub mod probe;
pub mod signals;

pub use client::{ChatClient, Completion, RequestError};
