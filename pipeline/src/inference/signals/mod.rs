//! What a server tells about its own load and capacity, whichever kind it is
//! (`inference::kinds` says what each kind answers where). [`parse`] turns `/metrics` into a
//! [`Reading`] by every kind's metric names, [`reader`] fetches each kind's endpoints and reads
//! them with the kind's parsers; [`launch`] reads the running cap from the arguments of a server
//! `gen` launches, by each kind's flags. Everything is optional: the concurrency controller must
//! work without any of it.

pub mod launch;
pub mod parse;
pub mod prometheus;
pub mod reader;

pub use crate::inference::kinds::{Load, Reading, ServerKind};
pub use reader::{Endpoints, SignalReader, load};
