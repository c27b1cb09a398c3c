//! `gen doctor` and the preflight of `gen run`: reads the real machine (RAM, cgroup limit,
//! CPUs, disk, GPU memory) and the server, compares them with the plan, and refuses a plan
//! that cannot fit, with the numbers.

pub fn doctor(_config: &std::path::Path) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("`gen doctor` is not implemented yet")
}
