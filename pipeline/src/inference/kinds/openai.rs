//! A plain OpenAI-compatible server (OpenAI's own API, a gateway, a server without extras): it
//! says nothing about its caps, load, context or version, and returns no token ids. `gen` then
//! works on what its client measures alone.

use super::KindSpec;

pub(super) static SPEC: KindSpec = KindSpec {
    name: "OpenAI",
    ..KindSpec::EMPTY
};
