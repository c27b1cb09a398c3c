//! `gen run` at its edges, where it must not report success for work that was misrouted,
//! mislabelled, leaked or lost:
//!
//! - a `model` the server does not list: refused, naming what it serves ([`wrong_model`]);
//! - a gateway quoting the API key in its errors: the key is in no output ([`echoed_key`]);
//! - a source's input file or settings changed after it was prepared ([`changed_inputs`]);
//! - SIGHUP with the terminal gone, two quick SIGTERMs, a signal with every server down
//!   ([`signals`]);
//! - a stream busy without tokens, answers naming another model ([`streams`]);
//! - the disk full while a source is prepared ([`disk_in_preparation`]).

mod changed_inputs;
mod disk_in_preparation;
mod echoed_key;
mod signals;
mod streams;
mod wrong_model;

/// How many times `needle` occurs in `text`.
pub(super) fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}
