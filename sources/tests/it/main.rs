//! Integration tests of `gen-sources`: the real `datasets.toml` against a fake Hub, Hub errors,
//! the cache shared with Python, offline mode, and the readers on generated Parquet files.
//! Nothing here reaches beyond 127.0.0.1.

#![expect(
    unreachable_pub,
    reason = "a test binary has no public API; the support module is shared"
)]

#[path = "../support/mod.rs"]
mod support;

mod conformance;
mod hub;
mod python;
mod readers;
