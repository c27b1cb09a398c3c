//! Test support: the fake hub, Parquet fixture writing and the ten datasets' fixtures.

pub mod datasets;
pub mod fake_hub;
pub mod parquet;
