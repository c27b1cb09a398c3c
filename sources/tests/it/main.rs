//! Integration tests of `gen-sources`: the real `datasets.toml` against a fake Hub, Hub errors,
//! the cache shared with Python, offline mode, and the readers on generated Parquet files.
//! Nothing here reaches beyond 127.0.0.1.

#![expect(
    unreachable_pub,
    reason = "a test binary has no public API; its modules share helpers"
)]

/// The fake hub and the ten datasets' fixtures, shared with the pipeline's end-to-end tests.
mod support {
    pub use gen_tests::{datasets, fake_hub, parquet_fixture as parquet};
}

mod conformance;
mod contract;
mod hub;
mod python;
mod readers;
