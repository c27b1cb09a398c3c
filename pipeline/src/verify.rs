//! `gen verify`: audits a run directory — every prompt id has exactly one completion or one
//! recorded rejection, counts add up per source, no duplicate ids, every output file decodes.

pub fn verify(_target: &std::path::Path, _json: bool) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("`gen verify` is not implemented yet")
}
