//! `gen doctor` and the preflight of `gen run`: reads the real machine (RAM, cgroup limit,
//! CPUs, disk, GPU memory) and the server, compares them with the plan, and refuses a plan
//! that cannot fit, with the numbers.
//!
//! Three layers, so the arithmetic is testable with plain numbers:
//! - [`read_machine`] reads `/proc`, cgroups, the disk, `nvidia-smi` and what earlier runs
//!   left in the run directory into a [`Machine`];
//! - [`assess`] compares a [`Plan`] with a [`Machine`] (pure);
//! - [`preflight`] does both, with [`Overrides`] (`GEN_TEST_MEM_AVAILABLE`, `--run-dir`).
//!
//! `gen doctor` adds the server checks ([`crate::inference::checks`]: the model is served, the
//! context covers `max-tokens`), which need the network; the preflight does not contact the
//! server.
//!
//! Memory demand: `max-parallel-prep` (at most the number of sources) × the largest
//! per-source worker demand — its `memory-limit`, else the peak RSS its last worker reached
//! (`worker.json`), else [`DEFAULT_WORKER_MEMORY`] — plus `[server] host-memory`. It is
//! refused above what is available (`MemAvailable`, or less when a memory cgroup limits this
//! process) and warned about above [`WARN_FRACTION`] of it. Disk demand: every prompt
//! answered at full `max-tokens`, [`BYTES_PER_TOKEN`] bytes a token, divided by
//! [`COMPRESSION`] (zstd on text) — an upper bound.

mod duration;
mod machine;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use machine::{CgroupMemory, Disk, Gpu, Machine, read_machine};

use crate::config::{Plan, SourcePlan};
use crate::inference::checks::{Check, Level};

/// Memory assumed for a worker with no `memory-limit` and no earlier run.
pub const DEFAULT_WORKER_MEMORY: u64 = 2 << 30;
/// Above this share of what is available, a check warns.
pub const WARN_FRACTION: f64 = 0.8;
/// Bytes of JSON a generated token takes, before compression.
pub const BYTES_PER_TOKEN: u64 = 4;
/// What zstd divides generated text by.
pub const COMPRESSION: u64 = 3;
/// Test hook: bytes to use instead of `MemAvailable` (e.g. a small budget).
pub const MEM_AVAILABLE_ENV: &str = "GEN_TEST_MEM_AVAILABLE";

/// The outcome of the preflight: every check, in report order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preflight {
    pub checks: Vec<Check>,
}

impl Preflight {
    /// Nothing failed: the plan fits (warnings allowed).
    pub fn fits(&self) -> bool {
        self.checks.iter().all(|c| c.level != Level::Fail)
    }

    /// Why the plan cannot run here (the failed checks), or `None` when it fits.
    pub fn refusal(&self) -> Option<String> {
        let failed: Vec<&str> = self
            .checks
            .iter()
            .filter(|c| c.level == Level::Fail)
            .map(|c| c.message.as_str())
            .collect();
        (!failed.is_empty()).then(|| failed.join("; "))
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.level == Level::Warn)
    }

    /// A line per check, `ok    memory   needs …`, its message wrapped at word boundaries to
    /// the terminal's width (80 when piped) under its start.
    pub fn render(&self) -> String {
        let width = crate::status::render::width();
        let mut out = String::new();
        for check in &self.checks {
            let head = format!("{:<5} {:<8} ", check.level.label(), check.name);
            let indent = " ".repeat(head.len());
            for line in crate::status::render::wrap(&check.message, width, &head, &indent) {
                out.push_str(line.trim_end());
                out.push('\n');
            }
        }
        out
    }
}

/// What replaces a reading of the machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// The run directory when not the plan's (`gen run --run-dir`).
    pub run_dir: Option<PathBuf>,
    /// Bytes to use instead of `MemAvailable`.
    pub mem_available: Option<u64>,
}

impl Overrides {
    /// [`MEM_AVAILABLE_ENV`] when set (bytes, or a size such as `512M`).
    pub fn from_env() -> Overrides {
        Overrides {
            run_dir: None,
            mem_available: std::env::var(MEM_AVAILABLE_ENV)
                .ok()
                .and_then(|v| crate::config::values::parse_size(&v)),
        }
    }
}

/// Reads the machine and assesses `plan` against it. For `gen run`, before anything starts:
///
/// ```ignore
/// let preflight = doctor::preflight(&plan, &Overrides { run_dir: Some(dir), ..Overrides::from_env() });
/// for warning in preflight.warnings() { eprintln!("gen: warning: {}", warning.message); }
/// if let Some(why) = preflight.refusal() { bail!("the plan does not fit this machine: {why}"); }
/// ```
///
/// It only reads local files and runs `nvidia-smi`; it does not contact the server.
pub fn preflight(plan: &Plan, overrides: &Overrides) -> Preflight {
    assess(plan, &machine_of(plan, overrides))
}

/// The machine as [`preflight`] reads it, `overrides` applied.
fn machine_of(plan: &Plan, overrides: &Overrides) -> Machine {
    let run_dir = overrides.run_dir.as_deref().unwrap_or(&plan.run_dir);
    let mut machine = read_machine(run_dir);
    if let Some(available) = overrides.mem_available {
        machine.mem_available = Some(available);
    }
    machine
}

/// Formats bytes for people: `540 GiB`, `2.2 GiB`, `512 MiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size {
            let value = bytes as f64 / size as f64;
            return if bytes.is_multiple_of(size) || value >= 100.0 {
                format!("{value:.0} {unit}")
            } else {
                format!("{value:.1} {unit}")
            };
        }
    }
    format!("{bytes} B")
}

fn percent(part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return 100;
    }
    (part as f64 * 100.0 / whole as f64).round() as u64
}

/// Where a worker's memory figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Basis {
    Limit,
    Measured,
    Assumed,
}

/// Compares `plan` with `machine`: memory, CPUs, disk, GPUs. Pure.
pub fn assess(plan: &Plan, machine: &Machine) -> Preflight {
    let mut checks = vec![host(machine), memory(plan, machine), cpus(plan, machine)];
    checks.push(disk(plan, machine));
    checks.extend(hub(plan, machine));
    checks.push(gpus(plan, machine));
    Preflight { checks }
}

/// The tightest of `MemAvailable` and the cgroup's headroom, and whether the cgroup binds.
fn available(machine: &Machine) -> Option<(u64, bool)> {
    let headroom = machine
        .cgroup
        .as_ref()
        .map(|c| c.limit.saturating_sub(c.usage));
    match (machine.mem_available, headroom) {
        (Some(ram), Some(cgroup)) if cgroup < ram => Some((cgroup, true)),
        (Some(ram), _) => Some((ram, false)),
        (None, Some(cgroup)) => Some((cgroup, true)),
        (None, None) => None,
    }
}

fn host(machine: &Machine) -> Check {
    let ram = match (machine.mem_total, machine.mem_available) {
        (Some(total), Some(available)) => {
            format!("{} RAM, {} available", human(total), human(available))
        }
        _ => "RAM unknown (`/proc/meminfo` unreadable)".to_owned(),
    };
    let cgroup = match &machine.cgroup {
        Some(c) => format!(
            "cgroup limit {} ({} in use) at `{}`",
            human(c.limit),
            human(c.usage),
            c.path.display()
        ),
        None => "no cgroup memory limit".to_owned(),
    };
    Check::new(
        "host",
        Level::Ok,
        format!("{ram}, {cgroup}, {} CPUs", machine.cpus),
    )
}

fn memory(plan: &Plan, machine: &Machine) -> Check {
    let demand = MemoryDemand::of(plan, machine);
    let (bytes, parts) = (demand.bytes, demand.parts.join(" + "));
    let Some((available, cgroup_binds)) = available(machine) else {
        return Check::new(
            "memory",
            Level::Warn,
            format!(
                "needs {} host RAM, available RAM unknown: {parts}",
                human(bytes)
            ),
        );
    };
    let mut available_text = human(available);
    if cgroup_binds {
        available_text.push_str(" (under the cgroup limit)");
    }
    let needs = human(bytes);
    let (level, message) = if bytes > available {
        let why = format!("needs {needs} host RAM, {available_text} available: {parts}");
        (Level::Fail, why)
    } else if bytes as f64 > WARN_FRACTION * available as f64 {
        let share = percent(bytes, available);
        let why =
            format!("needs {needs} host RAM, {share}% of the {available_text} available: {parts}");
        (Level::Warn, why)
    } else {
        let why = format!("needs {needs} host RAM of {available_text} available: {parts}");
        (Level::Ok, why)
    };
    Check::new("memory", level, message)
}

/// The host RAM a run needs at most: the preparation workers running at once, each counted at
/// the largest source's demand, and the server's `host-memory`.
struct MemoryDemand {
    bytes: u64,
    /// What it is made of, in words (`2 workers × 1.0 GiB memory-limit`, …).
    parts: Vec<String>,
}

impl MemoryDemand {
    fn of(plan: &Plan, machine: &Machine) -> MemoryDemand {
        let workers = plan.max_parallel_prep.get().min(plan.sources.len());
        // The largest per-source demand, with where it comes from.
        let largest = plan
            .sources
            .iter()
            .map(|source| {
                let name = source.name();
                match (source.worker.memory_limit, machine.peak_rss.get(name)) {
                    (Some(limit), _) => (limit, Basis::Limit, name),
                    (None, Some(peak)) => (*peak, Basis::Measured, name),
                    (None, None) => (DEFAULT_WORKER_MEMORY, Basis::Assumed, name),
                }
            })
            .max_by_key(|(bytes, _, _)| *bytes);
        let mut demand = MemoryDemand {
            bytes: 0,
            parts: Vec::new(),
        };
        if let Some((bytes, basis, name)) = largest
            && workers > 0
        {
            let count = crate::status::render::plural(workers as u64, "worker");
            let what = match basis {
                Basis::Limit => "memory-limit".to_owned(),
                Basis::Measured => format!("peak RSS measured for `{name}`"),
                Basis::Assumed => "assumed per worker (no memory-limit, no earlier run)".to_owned(),
            };
            demand
                .parts
                .push(format!("{count} × {} {what}", human(bytes)));
            demand.bytes = demand
                .bytes
                .saturating_add(bytes.saturating_mul(workers as u64));
        }
        if let Some(server) = plan.server_host_memory {
            demand
                .parts
                .push(format!("{} server host-memory", human(server)));
            demand.bytes = demand.bytes.saturating_add(server);
        }
        demand
    }
}

fn cpus(plan: &Plan, machine: &Machine) -> Check {
    let workers = plan.max_parallel_prep.get().min(plan.sources.len());
    let message = format!(
        "{} CPUs for {workers} preparation worker(s) at once",
        machine.cpus
    );
    if workers > machine.cpus {
        Check::new(
            "cpus",
            Level::Warn,
            format!("{message}: more workers than CPUs, they will take turns"),
        )
    } else {
        Check::new("cpus", Level::Ok, message)
    }
}

/// The output's size at full length: from the prompts of prepared sources, and from `limit`
/// for the others, whose prompts are not known yet. Only the prepared sources' part can refuse
/// the run: a `limit` is an upper bound ("keep every row" is often spelled as a huge one), so
/// beyond the known part it warns, and is sized again from the prompts once they are prepared.
/// Local files of unprepared sources are counted up to this size in all (a few seconds).
const COUNTED_BYTES: u64 = 256 << 20;

/// The rows of each source (not in `prepared`) whose `path` names local files of at most
/// [`COUNTED_BYTES`] together: a bound on its prompts tighter than `limit` (34 rows, not the
/// default 10,000). Unreadable files are left to the run to report.
pub fn local_rows(plan: &Plan, prepared: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut rows = BTreeMap::new();
    for SourcePlan { spec, worker, .. } in &plan.sources {
        if spec.path.is_none() || worker.command.is_some() || prepared.contains_key(spec.name()) {
            continue;
        }
        let Ok(files) = gen_sources::prepare::resolve_files(spec, &plan.base_dir) else {
            continue;
        };
        let bytes: u64 = files
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        if files.is_empty() || bytes > COUNTED_BYTES {
            continue;
        }
        let mut count = 0u64;
        let counted = files.iter().all(|file| {
            let format = gen_sources::read::format_of(spec.format, file);
            gen_sources::read::for_each_row(file, format, None, &mut |_| count += 1).is_ok()
        });
        if counted {
            rows.insert(spec.name().to_owned(), count);
        }
    }
    rows
}

/// At most how many prompts `spec` gives when it is not prepared yet: its `limit`, or fewer
/// when its local files hold fewer rows.
fn unprepared_bound(spec: &gen_sources::SourceSpec, local_rows: &BTreeMap<String, u64>) -> u64 {
    local_rows
        .get(spec.name())
        .map_or(spec.limit(), |rows| (*rows).min(spec.limit()))
}

/// Free space below which the Hub cache is a warning when sources still download and their
/// sizes are not known.
const HUB_FREE_WARN: u64 = 50 << 30;

/// The sources of `plan` that download from the Hub: those not prepared yet.
fn hub_pending<'p>(
    plan: &'p Plan,
    prepared: &BTreeMap<String, u64>,
) -> Vec<&'p gen_sources::SourceSpec> {
    plan.sources
        .iter()
        .map(|s| &s.spec)
        .filter(|s| s.repo.is_some() && !prepared.contains_key(s.name()))
        .collect()
}

/// What the sources not prepared yet download: their selected files' sizes as the Hub lists
/// them (one request per source), less what the cache holds. `None` when none downloads.
pub fn hub_download(
    plan: &Plan,
    prepared: &BTreeMap<String, u64>,
) -> Option<Result<gen_sources::hub::ListedSize, String>> {
    let pending = hub_pending(plan, prepared);
    if pending.is_empty() {
        return None;
    }
    let settings = gen_sources::hub::HubSettings::from_env();
    let mut sum = gen_sources::hub::ListedSize {
        bytes: 0,
        cached: 0,
        files: 0,
    };
    for spec in pending {
        let Some(repo) = &spec.repo else { continue };
        let listed = gen_sources::hub::listed_size(
            repo.get_ref(),
            spec.revision(),
            &spec.file_patterns(),
            &settings,
        );
        match listed {
            Ok(size) => {
                sum.bytes += size.bytes;
                sum.cached += size.cached;
                sum.files += size.files;
            }
            Err(unknown) => return Some(Err(unknown.to_string())),
        }
    }
    Some(Ok(sum))
}

/// Where the sources not prepared yet download from the Hub, how much when `gen doctor`
/// listed it ([`hub_download`]), and the room there.
fn hub(plan: &Plan, machine: &Machine) -> Option<Check> {
    let pending = hub_pending(plan, &machine.prepared);
    if pending.is_empty() {
        return None;
    }
    let names: Vec<&str> = pending.iter().map(|s| s.name()).collect();
    let cache = gen_sources::hub::HubSettings::from_env().cache_dir;
    let (what, to_download) = match &machine.hub_download {
        Some(Ok(size)) => {
            let left = size.bytes.saturating_sub(size.cached);
            let already = if size.cached > 0 {
                format!("; {} already there", human(size.cached))
            } else {
                String::new()
            };
            (
                format!(
                    "{} source(s) download {} from the Hub into `{}` ({}{already})",
                    pending.len(),
                    human(left),
                    cache.display(),
                    names.join(", ")
                ),
                Some(left),
            )
        }
        listed => {
            let why = match listed {
                Some(Err(unknown)) => format!("size unknown: {unknown}"),
                _ => "sizes are known only once listed: OpenThoughts3 alone is ~28 GB".to_owned(),
            };
            (
                format!(
                    "{} source(s) download their files from the Hub into `{}` ({}; files \
                     already there are not downloaded again; {why})",
                    pending.len(),
                    cache.display(),
                    names.join(", ")
                ),
                None,
            )
        }
    };
    Some(match machine::disk_of(&cache) {
        None => Check::new(
            "hub",
            Level::Warn,
            format!("{what}; free space there unknown"),
        ),
        Some(disk) => {
            let short = match to_download {
                Some(bytes) => disk.free < bytes,
                None => disk.free < HUB_FREE_WARN,
            };
            let level = if short { Level::Warn } else { Level::Ok };
            let free = format!(
                "{} free on `{}`",
                human(disk.free),
                disk.mount_point.display()
            );
            let hint = if short {
                "; point HF_HOME at a bigger disk"
            } else {
                ""
            };
            Check::new("hub", level, format!("{what}, {free}{hint}"))
        }
    })
}

fn disk(plan: &Plan, machine: &Machine) -> Check {
    // Prompts, answers (× `samples`) and tokens at each source's own `max-tokens`: of the
    // prepared sources, and bounded for the others.
    let (mut prompts, mut answers) = (0u64, 0u64);
    let (mut known_tokens, mut tokens, mut bound) = (0u64, 0u64, 0u64);
    for SourcePlan { spec, settings, .. } in &plan.sources {
        let (n, prepared) = match machine.prepared.get(spec.name()) {
            Some(prompts) => (*prompts, true),
            None => (unprepared_bound(spec, &machine.local_rows), false),
        };
        let its_answers = n.saturating_mul(u64::from(settings.samples.get()));
        let its_tokens = its_answers.saturating_mul(u64::from(settings.max_tokens));
        prompts = prompts.saturating_add(n);
        answers = answers.saturating_add(its_answers);
        tokens = tokens.saturating_add(its_tokens);
        if prepared {
            known_tokens = known_tokens.saturating_add(its_tokens);
        } else {
            bound = bound.saturating_add(n);
        }
    }
    let size = |tokens: u64| tokens.saturating_mul(BYTES_PER_TOKEN) / COMPRESSION;
    let (estimate, known_estimate) = (size(tokens), size(known_tokens));
    let uniform = (plan.sources.iter().map(|s| &s.settings))
        .all(|s| s.samples.get() == 1 && s.max_tokens == plan.generation.max_tokens);
    let basis = if uniform {
        format!(
            "{prompts} prompts × {} max-tokens × ~{BYTES_PER_TOKEN} bytes/token ÷ {COMPRESSION} (zstd)",
            plan.generation.max_tokens
        )
    } else {
        format!(
            "{prompts} prompts, {answers} answers with `samples` × each source's max-tokens = \
             {tokens} tokens × ~{BYTES_PER_TOKEN} bytes/token ÷ {COMPRESSION} (zstd)"
        )
    };
    let unknown = if bound > 0 {
        format!(
            "; {bound} of the prompts are the `limit` (or the rows of the local files) of \
             sources not prepared yet, sized again once prepared"
        )
    } else {
        String::new()
    };
    let Some(disk) = &machine.disk else {
        return Check::new(
            "disk",
            Level::Warn,
            format!(
                "output up to {} ({basis}); free space of the run directory unknown",
                human(estimate)
            ),
        );
    };
    let free = format!(
        "{} free on `{}`",
        human(disk.free),
        disk.mount_point.display()
    );
    let up_to = human(estimate);
    let (level, message) = if known_estimate > disk.free {
        let why = format!("output needs up to {up_to} ({basis}), {free}");
        (Level::Fail, why)
    } else if estimate > disk.free {
        let why = format!("output may need up to {up_to} ({basis}{unknown}), {free}");
        (Level::Warn, why)
    } else if estimate as f64 > WARN_FRACTION * disk.free as f64 {
        let share = percent(estimate, disk.free);
        let why = format!("output needs up to {up_to} ({basis}), {share}% of the {free}");
        (Level::Warn, why)
    } else {
        (Level::Ok, format!("output up to {up_to} ({basis}), {free}"))
    };
    Check::new("disk", level, message)
}

fn gpus(plan: &Plan, machine: &Machine) -> Check {
    let Some(gpus) = &machine.gpus else {
        return Check::new("gpu", Level::Ok, "no `nvidia-smi`: GPU memory not checked");
    };
    if gpus.is_empty() {
        return Check::new("gpu", Level::Ok, "`nvidia-smi` lists no GPU");
    }
    let listed: Vec<String> = gpus
        .iter()
        .enumerate()
        .map(|(i, g)| format!("GPU {i} {} of {} used", human(g.used), human(g.total)))
        .collect();
    let busy: Vec<String> = gpus
        .iter()
        .enumerate()
        .filter(|(_, g)| g.used as f64 > WARN_FRACTION * g.total as f64)
        .map(|(i, _)| i.to_string())
        .collect();
    if plan.server.launch.is_some() && !busy.is_empty() {
        Check::new(
            "gpu",
            Level::Warn,
            format!(
                "{}: GPU {} over {:.0}% used before `gen` launches its server",
                listed.join(", "),
                busy.join(", "),
                WARN_FRACTION * 100.0
            ),
        )
    } else {
        Check::new("gpu", Level::Ok, listed.join(", "))
    }
}

/// `gen doctor CONFIG`: the preflight plus the server checks, one line each; exit 1 when
/// something cannot fit.
pub fn doctor(config: &Path, nodes: u32) -> anyhow::Result<ExitCode> {
    let env = |name: &str| std::env::var(name).ok();
    // A file with problems: those on this machine too, in the same list (`gen check`'s).
    let mut plan = Plan::load(config).or_else(|_| Plan::load_checked(config, &env, &|_| false))?;
    // A launch across nodes is refused by `gen run` without them: so here.
    plan.set_nodes(nodes)?;
    // Only `gen doctor` counts the rows of local files (bounds for its estimates); `gen run`'s
    // preflight refuses on what is known and is not slowed by it.
    let mut machine = machine_of(&plan, &Overrides::from_env());
    machine.local_rows = local_rows(&plan, &machine.prepared);
    machine.hub_download = hub_download(&plan, &machine.prepared);
    let mut report = assess(&plan, &machine);
    if nodes > 1 {
        report.checks.push(Check::new(
            "nodes",
            Level::Ok,
            format!(
                "the server starts across {nodes} nodes (one `srun` part each; `gen` and rank \
                 0 on the first): host, memory and GPU above are this machine's, so run `gen \
                 doctor` on one of the job's nodes for theirs"
            ),
        ));
    }
    let inputs = plan.input_problems(&env, &|_| false);
    if inputs.is_empty() {
        report.checks.push(Check::new(
            "inputs",
            Level::Ok,
            "launch variables and program, and every source's files, are there",
        ));
    }
    for warning in plan.input_warnings(&env) {
        report
            .checks
            .push(Check::new("inputs", Level::Warn, warning));
    }
    for problem in inputs {
        report.checks.push(Check::new(
            "inputs",
            Level::Fail,
            format!(
                "{}:{}:{}  {}",
                config.display(),
                problem.line,
                problem.column,
                problem.message
            ),
        ));
    }
    report.checks.extend(crate::inference::checks::probe(&plan));
    report
        .checks
        .push(duration::check(&plan, &machine.local_rows));
    println!(
        "gen doctor: `{}`, run directory `{}`",
        config.display(),
        plan.run_dir.display()
    );
    // The server checks quote the server's answers.
    print!("{}", crate::secrets::redact(&report.render()));
    let failed = report
        .checks
        .iter()
        .filter(|c| c.level == Level::Fail)
        .count();
    if failed > 0 {
        println!("the plan does not fit: {failed} problem(s) marked FAIL above");
        return Ok(ExitCode::from(crate::exit::FAILED));
    }
    match report.warnings().count() {
        0 => println!("the plan fits"),
        n => println!("the plan fits, with {n} warning(s)"),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn plan(parallel: usize, limits: &[Option<&str>], server: &str, max_tokens: u32) -> Plan {
        let mut text = format!(
            "[run]\nmax-parallel-prep = {parallel}\n\n[server]\nurl = \"http://127.0.0.1:9\"\n{server}\n\n[generation]\nmax-tokens = {max_tokens}\n"
        );
        for (i, limit) in limits.iter().enumerate() {
            text.push_str(&format!(
                "\n[[source]]\nname = \"s{i}\"\npath = \"data/s{i}.jsonl\"\nlimit = 1000\n"
            ));
            if let Some(limit) = limit {
                text.push_str(&format!("memory-limit = \"{limit}\"\n"));
            }
        }
        Plan::from_text(Path::new("/tmp/doctor-test/cfg.toml"), &text)
            .unwrap_or_else(|e| panic!("{e:?}\n{text}"))
    }

    fn machine(available: u64) -> Machine {
        Machine {
            mem_total: Some(available * 2),
            mem_available: Some(available),
            cgroup: None,
            cpus: 8,
            disk: Some(Disk {
                mount_point: "/".into(),
                free: 1 << 40,
                total: 2 << 40,
            }),
            gpus: None,
            peak_rss: BTreeMap::new(),
            prepared: BTreeMap::new(),
            local_rows: BTreeMap::new(),
            hub_download: None,
        }
    }

    fn check<'p>(preflight: &'p Preflight, name: &str) -> &'p Check {
        preflight
            .checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} check"))
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human(540 * GIB), "540 GiB");
        assert_eq!(human(2 * GIB + GIB / 5), "2.2 GiB");
        assert_eq!(human(512 << 20), "512 MiB");
        assert_eq!(human(100 * GIB + 7), "100 GiB");
        assert_eq!(human(12), "12 B");
    }

    #[test]
    fn a_plan_that_fits_is_ok() {
        let preflight = assess(
            &plan(2, &[Some("1G"), Some("1G")], "", 100),
            &machine(16 * GIB),
        );
        let memory = check(&preflight, "memory");
        assert_eq!(memory.level, Level::Ok);
        assert_eq!(
            memory.message,
            "needs 2 GiB host RAM of 16 GiB available: 2 workers × 1 GiB memory-limit"
        );
        assert!(preflight.fits());
        assert_eq!(preflight.refusal(), None);
    }

    #[test]
    fn above_eighty_percent_warns() {
        let preflight = assess(
            &plan(2, &[Some("1G"), Some("1G")], "", 100),
            &machine(2 * GIB + GIB / 5),
        );
        let memory = check(&preflight, "memory");
        assert_eq!(memory.level, Level::Warn);
        assert_eq!(
            memory.message,
            "needs 2 GiB host RAM, 91% of the 2.2 GiB available: 2 workers × 1 GiB memory-limit"
        );
        assert!(preflight.fits());
    }

    #[test]
    fn a_plan_over_the_budget_is_refused_with_the_numbers() {
        let plan = plan(
            4,
            &[Some("128G"), Some("64G"), None, None, None],
            "host-memory = \"28G\"",
            100,
        );
        assert_eq!(plan.server_host_memory, Some(28 * GIB));
        let preflight = assess(&plan, &machine(201 * GIB));
        assert!(!preflight.fits());
        assert_eq!(
            preflight.refusal().as_deref(),
            Some(
                "needs 540 GiB host RAM, 201 GiB available: 4 workers × 128 GiB memory-limit + 28 GiB server host-memory"
            )
        );
        assert!(preflight.render().contains(
            "FAIL  memory   needs 540 GiB host RAM, 201 GiB available: 4 workers × 128 GiB"
        ));
    }

    #[test]
    fn measured_peaks_stand_in_for_missing_limits_and_else_a_default() {
        let mut host = machine(64 * GIB);
        let plan = plan(3, &[None, None], "", 100);
        let assumed = assess(&plan, &host);
        assert_eq!(
            check(&assumed, "memory").message,
            "needs 4 GiB host RAM of 64 GiB available: 2 workers × 2 GiB assumed per worker (no memory-limit, no earlier run)"
        );
        host.peak_rss.insert("s1".into(), 3 * GIB);
        host.peak_rss.insert("s0".into(), GIB);
        let measured = assess(&plan, &host);
        assert_eq!(
            check(&measured, "memory").message,
            "needs 6 GiB host RAM of 64 GiB available: 2 workers × 3 GiB peak RSS measured for `s1`"
        );
    }

    #[test]
    fn a_cgroup_limit_below_available_ram_binds() {
        let mut host = machine(64 * GIB);
        host.cgroup = Some(CgroupMemory {
            path: "/sys/fs/cgroup/memory/job".into(),
            limit: 4 * GIB,
            usage: GIB,
        });
        let preflight = assess(&plan(2, &[Some("2G"), Some("2G")], "", 100), &host);
        assert_eq!(
            check(&preflight, "memory").message,
            "needs 4 GiB host RAM, 3 GiB (under the cgroup limit) available: 2 workers × 2 GiB memory-limit"
        );
        assert!(!preflight.fits());
    }

    #[test]
    fn disk_is_checked_against_every_prompt_at_full_length() {
        let mut host = machine(64 * GIB);
        host.prepared.insert("s0".into(), 3000);
        host.disk = Some(Disk {
            mount_point: "/data".into(),
            free: 10 << 20,
            total: 1 << 40,
        });
        // (3000 prepared + 1000 limit) × 8192 × 4 / 3 = 41.7 MiB.
        let preflight = assess(&plan(1, &[None, None], "", 8192), &host);
        let disk = check(&preflight, "disk");
        assert_eq!(disk.level, Level::Fail);
        assert_eq!(
            disk.message,
            "output needs up to 41.7 MiB (4000 prompts × 8192 max-tokens × ~4 bytes/token ÷ 3 (zstd)), 10 MiB free on `/data`"
        );
    }

    /// Each source is sized at its own `max-tokens` and `samples` (before: every source at
    /// `[generation]`'s, one answer per prompt: 16.0 MiB here, and 1,000 prompts to go).
    #[test]
    fn disk_and_duration_size_each_source_at_its_own_budget_and_samples() {
        let text = "[server]\nurl = \"http://127.0.0.1:9\"\n\n[generation]\nmax-tokens = 4096\n\n\
            [[source]]\nname = \"chat\"\npath = \"a.jsonl\"\nlimit = 1000\n\n\
            [[source]]\nname = \"math\"\npath = \"b.jsonl\"\nlimit = 1000\n\
            [source.generation]\nmax-tokens = 32768\nsamples = 4\n";
        let plan = Plan::from_text(Path::new("cfg.toml"), text).expect("plan");
        let preflight = assess(&plan, &machine(64 * GIB));
        // 1,000 × 4,096 + 4,000 × 32,768 = 135,168,000 tokens × 4 ÷ 3 = 172 MiB.
        let disk = check(&preflight, "disk");
        assert!(
            disk.message.starts_with(
                "output up to 172 MiB (2000 prompts, 5000 answers with `samples` × each \
                 source's max-tokens = 135168000 tokens"
            ),
            "{}",
            disk.message
        );
        let duration = duration::check(&plan, &BTreeMap::new());
        assert!(
            duration.message.starts_with(
                "up to 5,000 answers (`samples` per prompt) to go × at most 27,033 output tokens \
                 (each source's `max-tokens`, weighted by its prompts) = ≤ 135.2M tokens"
            ),
            "{}",
            duration.message
        );
    }

    /// A huge `limit` ("keep every row") of a source not prepared yet is an upper bound: it
    /// warns, it does not refuse; once prepared, its prompts count. (Before: refused with
    /// "output needs up to 19.4 TiB (1000000000000 prompts …)".)
    #[test]
    fn a_huge_limit_of_an_unprepared_source_warns_and_its_prompts_count_once_prepared() {
        let mut host = machine(64 * GIB);
        host.disk = Some(Disk {
            mount_point: "/data".into(),
            free: 10 << 30,
            total: 1 << 40,
        });
        let text = "[server]\nurl = \"http://127.0.0.1:9\"\n\n[generation]\nmax-tokens = 16\n\n[[source]]\nname = \"s0\"\npath = \"a.jsonl\"\nlimit = 1000000000000\n";
        let plan = Plan::from_text(Path::new("cfg.toml"), text).expect("plan");
        let preflight = assess(&plan, &host);
        let disk = check(&preflight, "disk");
        assert_eq!(disk.level, Level::Warn, "{}", disk.message);
        assert!(
            disk.message.contains(
                "1000000000000 of the prompts are the `limit` (or the rows of the local files) of \
                 sources not prepared yet"
            ),
            "{}",
            disk.message
        );
        assert!(preflight.fits());
        host.prepared.insert("s0".into(), 5000);
        let prepared = assess(&plan, &host);
        let disk = check(&prepared, "disk");
        assert_eq!(disk.level, Level::Ok, "{}", disk.message);
        assert!(disk.message.contains("(5000 prompts"), "{}", disk.message);
    }

    #[test]
    fn busy_gpus_warn_only_when_gen_launches_the_server() {
        let mut host = machine(64 * GIB);
        host.gpus = Some(vec![Gpu {
            total: 80 * GIB,
            used: 79 * GIB,
        }]);
        let external = assess(&plan(1, &[None], "", 100), &host);
        assert_eq!(check(&external, "gpu").level, Level::Ok);
        let launched = assess(&plan(1, &[None], "launch = [\"llama-server\"]", 100), &host);
        assert_eq!(
            check(&launched, "gpu").message,
            "GPU 0 79 GiB of 80 GiB used: GPU 0 over 80% used before `gen` launches its server"
        );
    }

    #[test]
    fn a_bad_host_memory_is_a_located_config_problem() {
        let text = "[server]\nurl = \"http://127.0.0.1:9\"\nhost-memory = \"lots\"\n\n[generation]\nmax-tokens = 8\n\n[[source]]\nname = \"a\"\npath = \"a.jsonl\"\n";
        let error = Plan::from_text(Path::new("cfg.toml"), text).expect_err("bad size");
        assert_eq!(
            error.to_string(),
            "`cfg.toml` has 1 problem\n  cfg.toml:3:15  `host-memory` must be a size such as \"150G\" or \"512M\""
        );
    }
}
