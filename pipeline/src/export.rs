//! `gen export`: a run's completions as a training-ready dataset (JSONL or Parquet).

pub fn export(_args: &crate::cli::ExportArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("`gen export` is not implemented yet")
}
