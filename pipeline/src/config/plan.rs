//! Resolution of the raw file into a [`Plan`]: every problem is collected, each located, and
//! after resolution no code re-validates.
//!
//! Each top-level table and each `[[source]]` is deserialized on its own from toml's spanned
//! tree, so one bad key does not hide the problems in the rest of the file.

use std::num::{NonZeroU32, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::time::Duration;

use gen_sources::SourceSpec;
use serde::Serialize;
use serde::de::{Deserialize, IntoDeserializer};
use serde_json::{Map, Value};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::file::{
    Drawn, GenerationTable, RunTable, ServerTable, SettingsTable, TOP_LEVEL_KEYS, WorkerTable,
};
use super::keys::{self, Table};
use super::problem::{ConfigError, Problem};
use super::settings::{Settings, Weighted};

const DEFAULT_PARALLEL_PREP: usize = 2;
const DEFAULT_STALL_SECS: usize = 1800;
const DEFAULT_MAX_RESTARTS: u32 = 3;
const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(300);
const DEFAULT_MAX_ATTEMPTS: u32 = 4;
const DEFAULT_SERVER_STALL: Duration = Duration::from_secs(60);
/// How long a run waits for an external server to come up: SGLang or vLLM loading a large
/// model takes minutes.
const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A validated config, ready to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub config_path: PathBuf,
    /// The config file's text: the specs keep byte spans into it ([`Plan::locate`]).
    pub config_text: std::sync::Arc<str>,
    /// Where each argument of `[server] launch` is in the file.
    pub launch_spans: Vec<std::ops::Range<usize>>,
    /// Directory of the config file; relative paths resolve against it.
    pub base_dir: PathBuf,
    pub run_dir: PathBuf,
    pub max_parallel_prep: NonZeroUsize,
    pub stall_timeout: Duration,
    pub server: ServerPlan,
    /// `[server] host-memory`: host RAM the server takes, counted by the preflight.
    pub server_host_memory: Option<u64>,
    pub generation: GenerationPlan,
    pub sources: Vec<SourcePlan>,
}

/// One `[[source]]`: what it reads and how its preparation worker runs.
#[derive(Debug, Clone)]
pub struct SourcePlan {
    pub spec: SourceSpec,
    pub worker: WorkerPlan,
    /// What its requests ask for: `[generation]` with its own `[source.generation]` over it.
    pub settings: Settings,
}

impl SourcePlan {
    pub fn name(&self) -> &str {
        self.spec.name()
    }
}

/// How one source's preparation worker runs.
#[derive(Debug, Clone)]
pub struct WorkerPlan {
    /// Memory cap of the worker's own cgroup.
    pub memory_limit: Option<u64>,
    /// A custom worker (e.g. the user's Python script) instead of the built-in preparation.
    pub command: Option<Vec<String>>,
    /// With a custom worker: prompts it must write before it counts as complete (without it,
    /// the done marker alone decides).
    pub expected: Option<u64>,
    pub on_length: super::values::LengthPolicy,
    pub order: super::values::Order,
}

#[derive(Debug, Clone)]
pub struct ServerPlan {
    /// One URL, or several servers of the same model sharing one queue (at least one; only
    /// one when `gen` launches the server).
    pub urls: Vec<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub launch: Option<Vec<String>>,
    pub health_timeout: Duration,
    pub max_restarts: u32,
    /// An external server's log file, for a diagnosis when it goes down.
    pub log: Option<PathBuf>,
    /// Give up when every server has been down this long (`None`: wait forever).
    pub max_outage: Option<Duration>,
    /// How long a run waits for an external server that does not answer yet at its start.
    pub startup_timeout: Duration,
    /// No token on any stream of a server for this long → health probe (see `run::fleet`).
    pub stall_after: Duration,
    /// The nodes the launched server spans (`--nodes-per-shard`, set by [`Plan::set_nodes`]):
    /// above 1, `launch` runs on each node of the Slurm job (`scale::nodes`).
    pub nodes: u32,
}

impl ServerPlan {
    /// The first (with `launch`: the only) server URL.
    pub fn url(&self) -> &str {
        &self.urls[0]
    }

    /// The API key, read from the variable `api-key-env` names when it is set.
    pub fn api_key(&self) -> Option<String> {
        std::env::var(self.api_key_env.as_ref()?).ok()
    }
}

#[derive(Debug, Clone)]
pub struct GenerationPlan {
    /// `[generation]`'s: what a request outside any source (a test prompt, `gen bench`)
    /// asks for; each source's own are [`SourcePlan::settings`].
    pub max_tokens: u32,
    pub concurrency: Concurrency,
    pub max_attempts: u32,
    /// `[generation]`'s sampling parameters that are one value (drawn ones are left out).
    pub params: Map<String, Value>,
}

/// Requests in flight: fixed by the user, or tuned from the server's own signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Concurrency {
    Fixed(NonZeroUsize),
    Auto { max: Option<usize> },
}

impl Plan {
    /// Reads and resolves `path`.
    pub fn load(path: &Path) -> Result<Plan, ConfigError> {
        Plan::from_text(path, &read(path)?)
    }

    /// Resolves config `text` as if read from `path`.
    pub fn from_text(path: &Path, text: &str) -> Result<Plan, ConfigError> {
        Plan::resolve_text(path, text, None)
    }

    /// [`Plan::load`] and [`Plan::input_problems`] together: the problems of the config on
    /// this machine are reported with the file's own, in one list, also when the file has
    /// problems (for the parts of it that resolved).
    pub fn load_checked(
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
        skip: &dyn Fn(&str) -> bool,
    ) -> Result<Plan, ConfigError> {
        Plan::resolve_text(path, &read(path)?, Some((env, skip)))
    }

    fn resolve_text(
        path: &Path,
        text: &str,
        machine: Option<MachineChecks<'_>>,
    ) -> Result<Plan, ConfigError> {
        let mut resolver = PlanResolver {
            text,
            problems: Vec::new(),
            partial: false,
            syntax_errors: 0,
            launch_spans: Vec::new(),
            launch: Vec::new(),
            sources: Vec::new(),
            token_ids_at: Vec::new(),
            base_dir_hint: path
                .parent()
                .map(Path::to_path_buf)
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or_else(|| PathBuf::from(".")),
        };
        let plan = resolver.resolve(path);
        if let Some((env, skip)) = machine {
            let found = resolver.inputs().problems(env, skip);
            // A path the file's own checks refused (empty, say) is not looked for as well.
            let located: Vec<(usize, usize)> = resolver
                .problems
                .iter()
                .map(|p| (p.line, p.column))
                .collect();
            resolver.problems.extend(
                found
                    .into_iter()
                    .filter(|p| !located.contains(&(p.line, p.column))),
            );
        }
        match plan {
            Some(plan) if resolver.problems.is_empty() => {
                // Whatever reads the key, every text written from now on is cleaned of it.
                if let Some(var) = &plan.server.api_key_env {
                    crate::secrets::register_env(var);
                }
                Ok(plan)
            }
            _ => {
                let mut problems = resolver.problems;
                // What toml recovered around a syntax error is not what the user wrote: other
                // problems on those lines are its artifacts.
                let syntax = resolver.syntax_errors;
                let broken: Vec<usize> = problems[..syntax].iter().map(|p| p.line).collect();
                let mut index = 0;
                problems.retain(|p| {
                    index += 1;
                    index <= syntax || !broken.contains(&p.line)
                });
                problems.sort_by_key(|p| (p.line, p.column));
                problems.dedup();
                Err(ConfigError::Invalid {
                    path: path.to_path_buf(),
                    problems,
                })
            }
        }
    }

    /// `FILE:LINE:COLUMN` of a byte span of the config file.
    pub fn locate(&self, span: std::ops::Range<usize>) -> String {
        let at = Problem::at(&self.config_text, Some(span), "");
        format!("{}:{}:{}", self.config_path.display(), at.line, at.column)
    }

    pub fn source(&self, name: &str) -> Option<&SourcePlan> {
        self.sources.iter().find(|s| s.name() == name)
    }
}

/// The config file's text.
fn read(path: &Path) -> Result<String, ConfigError> {
    fs_err::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

struct PlanResolver<'t> {
    text: &'t str,
    problems: Vec<Problem>,
    /// The file has syntax errors: the tree is what toml recovered, so a table or key that
    /// seems missing may be in the broken part, and is not reported.
    partial: bool,
    /// How many of the first `problems` are syntax errors.
    syntax_errors: usize,
    /// Where each argument of `[server] launch` is, for the [`Plan`].
    launch_spans: Vec<std::ops::Range<usize>>,
    /// The config file's directory, for paths written relative to it.
    base_dir_hint: PathBuf,
    /// `[server] launch`, the sources and their workers as far as they resolved: what the
    /// checks against this machine read when the file has problems.
    launch: Vec<String>,
    sources: Vec<SourcePlan>,
    /// Where `token-ids = true` is written, for the check against the server `launch` starts.
    token_ids_at: Vec<std::ops::Range<usize>>,
}

/// How [`Plan::load_checked`] reads a variable and which sources' files it does not check.
type MachineChecks<'a> = (&'a dyn Fn(&str) -> Option<String>, &'a dyn Fn(&str) -> bool);

impl<'t> PlanResolver<'t> {
    fn inputs(&self) -> super::inputs::Inputs<'_> {
        super::inputs::Inputs {
            text: self.text,
            base_dir: &self.base_dir_hint,
            launch: &self.launch,
            launch_spans: &self.launch_spans,
            sources: &self.sources,
        }
    }

    fn problem(&mut self, span: Option<std::ops::Range<usize>>, message: impl Into<String>) {
        self.problems.push(Problem::at(self.text, span, message));
    }

    fn toml_error(&mut self, error: &toml::de::Error) {
        self.problem(error.span(), error.message().to_owned());
    }

    /// A required table or key that is absent, unless the syntax errors may have hidden it.
    fn missing(&mut self, span: Option<std::ops::Range<usize>>, message: impl Into<String>) {
        if !self.partial {
            self.problem(span, message);
        }
    }

    /// `entry` without the keys `table` does not accept, each reported.
    fn known_keys(&mut self, entry: Spanned<DeValue<'t>>, table: Table) -> Spanned<DeValue<'t>> {
        let span = entry.span();
        match entry.into_inner() {
            DeValue::Table(entries) => {
                let entries = self.without_unknown_keys(entries, table);
                Spanned::new(span, DeValue::Table(entries))
            }
            other => Spanned::new(span, other),
        }
    }

    fn without_unknown_keys(&mut self, entries: DeTable<'t>, table: Table) -> DeTable<'t> {
        let accepted = table.keys();
        entries
            .into_iter()
            .filter(|(key, _)| {
                let name = key.get_ref().as_ref();
                let known = accepted.contains(&name);
                if !known {
                    self.problem(Some(key.span()), unknown_key(name, table, &accepted));
                }
                known
            })
            .collect()
    }

    /// Deserializes one table, reporting every problem in it at once: each unknown key (with
    /// a suggestion and the complete list of accepted keys), then each key serde refuses, taken
    /// out in turn so that the next one is found too. `None` when what is left cannot be
    /// deserialized (a required key was refused or is missing).
    fn section<T: Deserialize<'t>>(
        &mut self,
        value: Spanned<DeValue<'t>>,
        table: Option<Table>,
    ) -> Option<T> {
        let span = value.span();
        let mut entries = match value.into_inner() {
            DeValue::Table(entries) => entries,
            other => {
                return T::deserialize(Spanned::new(span, other).into_deserializer())
                    .map_err(|error| self.toml_error(&error))
                    .ok();
            }
        };
        if let Some(table) = table {
            entries = self.without_unknown_keys(entries, table);
        }
        let mut refused: Vec<String> = Vec::new();
        for _ in 0..=entries.len() {
            let attempt = Spanned::new(span.clone(), DeValue::Table(entries.clone()));
            let error = match T::deserialize(attempt.into_deserializer()) {
                Ok(parsed) => return Some(parsed),
                Err(error) => error,
            };
            let missing = error.message().starts_with("missing field");
            let hidden = refused
                .iter()
                .any(|key| error.message().contains(&format!("`{key}`")));
            if missing && (hidden || self.partial) {
                return None;
            }
            self.toml_error(&error);
            let at = error.span()?;
            let inside =
                |span: std::ops::Range<usize>| span.start <= at.start && at.end <= span.end;
            let (culprit, _) = entries
                .iter()
                .find(|(key, value)| inside(key.span()) || inside(value.span()))?;
            let culprit = culprit.get_ref().to_string();
            entries = entries
                .into_iter()
                .filter(|(key, _)| key.get_ref().as_ref() != culprit)
                .collect();
            refused.push(culprit);
        }
        None
    }

    fn resolve(&mut self, path: &Path) -> Option<Plan> {
        let table = self.parse()?;
        let tables = self.read_tables(table);
        if tables.sources.is_empty() && tables.sources_ok {
            self.missing(None, "no sources: add at least one `[[source]]` table");
        }
        let defaults = match &tables.generation {
            Some(Some((_, settings, span))) => {
                if !tables.max_tokens_written {
                    self.missing(Some(span.clone()), "`[generation]` needs `max-tokens = …`");
                }
                settings.clone()
            }
            _ => SettingsTable::default(),
        };
        let sources = self.resolve_sources(tables.sources, &defaults);
        self.sources.clone_from(&sources);
        let mut server_host_memory = None;
        let server = match tables.server {
            None => {
                self.missing(
                    None,
                    "missing `[server]` table (at least `url = \"http://…\"`)",
                );
                None
            }
            Some(parsed) => parsed.map(|(s, span)| {
                server_host_memory = self.host_memory(&s);
                self.server(s, span)
            }),
        };
        let generation = match tables.generation {
            None => {
                self.missing(
                    None,
                    "missing `[generation]` table (at least `max-tokens = …`)",
                );
                None
            }
            Some(parsed) => parsed.map(|(g, _, _)| {
                let defaults = self.settings(&defaults);
                self.generation(g, defaults)
            }),
        };
        self.check_token_ids_server();
        let (run, server, generation) = (tables.run?, server?, generation?);
        let base_dir = self.base_dir_hint.clone();
        let run_dir = run_dir(path, &base_dir, &run);
        let max_parallel_prep = self.positive(
            &run.max_parallel_prep,
            "max-parallel-prep",
            DEFAULT_PARALLEL_PREP,
        );
        let stall_timeout = self.positive(
            &run.stall_timeout_secs,
            "stall-timeout-secs",
            DEFAULT_STALL_SECS,
        );
        let stall_timeout = Duration::from_secs(stall_timeout.get() as u64);
        Some(Plan {
            config_path: path.to_path_buf(),
            config_text: self.text.into(),
            launch_spans: self.launch_spans.clone(),
            base_dir,
            run_dir,
            max_parallel_prep,
            stall_timeout,
            server,
            server_host_memory,
            generation,
            sources,
        })
    }

    /// The file's tree as toml recovered it, each syntax error reported; `None` when there
    /// are so many that the file is not a config at all.
    fn parse(&mut self) -> Option<DeTable<'t>> {
        let (table, errors) = DeTable::parse_recoverable(self.text);
        if errors.len() > MAX_SYNTAX_ERRORS {
            for error in &errors[..SHOWN_SYNTAX_ERRORS] {
                self.toml_error(error);
            }
            self.problem(
                errors[SHOWN_SYNTAX_ERRORS].span(),
                format!(
                    "this is not a TOML config: {} syntax errors (the first {SHOWN_SYNTAX_ERRORS} above); a config looks like `examples/quickstart.toml`",
                    errors.len()
                ),
            );
            return None;
        }
        for error in &errors {
            self.toml_error(error);
        }
        // The rest of the file is checked too, as toml recovered it.
        self.syntax_errors = errors.len();
        self.partial = !errors.is_empty();
        Some(table.into_inner())
    }

    /// Deserializes each top-level table on its own, reporting unknown ones.
    fn read_tables(&mut self, table: DeTable<'t>) -> Tables {
        let mut tables = Tables {
            run: Some(RunTable::default()),
            server: None,
            generation: None,
            sources: Vec::new(),
            max_tokens_written: false,
            sources_ok: true,
        };
        for (key, value) in table {
            match key.get_ref().as_ref() {
                "run" => tables.run = self.section::<RunTable>(value, Some(Table::Run)),
                "server" => {
                    let span = value.span();
                    let parsed = self.section::<ServerTable>(value, Some(Table::Server));
                    tables.server = Some(parsed.map(|s| (s, span)));
                }
                "generation" => {
                    let span = value.span();
                    let value = self.known_keys(value, Table::Generation);
                    let (settings, rest) = split_keys(value, keys::settings_keys());
                    // Absent, not refused: a refused value is reported as such.
                    tables.max_tokens_written = matches!(
                        settings.get_ref(),
                        DeValue::Table(t) if t.iter().any(|(k, _)| k.get_ref() == "max-tokens")
                    );
                    let generation = self.section::<GenerationTable>(rest, None);
                    let settings = self.section::<SettingsTable>(settings, None);
                    tables.generation = Some(generation.zip(settings).map(|(g, s)| (g, s, span)));
                }
                "source" => tables.sources_ok &= self.read_sources(value, &mut tables.sources),
                other => {
                    let message = unknown_key(other, Table::TopLevel, &TOP_LEVEL_KEYS);
                    self.problem(Some(key.span()), message);
                }
            }
        }
        tables
    }

    /// Adds each `[[source]]` to `sources`, its worker keys split off; `false` when one does
    /// not deserialize or `source` is not an array of tables.
    fn read_sources(
        &mut self,
        value: Spanned<DeValue<'t>>,
        sources: &mut Vec<(SourceSpec, WorkerTable, SettingsTable)>,
    ) -> bool {
        let span = value.span();
        let DeValue::Array(entries) = value.into_inner() else {
            self.problem(
                Some(span),
                "`source` must be an array of tables: write `[[source]]`",
            );
            return false;
        };
        let mut all_ok = true;
        for entry in entries {
            let entry = self.known_keys(entry, Table::Source);
            let (generation, entry) = split_keys(entry, &[keys::SOURCE_GENERATION]);
            let settings = match generation.into_inner() {
                DeValue::Table(table) => match table.into_iter().next() {
                    Some((_, value)) => {
                        self.section::<SettingsTable>(value, Some(Table::SourceGeneration))
                    }
                    None => Some(SettingsTable::default()),
                },
                _ => Some(SettingsTable::default()),
            };
            let (worker, entry) = split_keys(entry, keys::worker_keys());
            let worker = self.section::<WorkerTable>(worker, None);
            match (self.section::<SourceSpec>(entry, None), worker, settings) {
                (Some(spec), Some(worker), Some(settings)) => {
                    sources.push((spec, worker, settings));
                }
                _ => all_ok = false,
            }
        }
        all_ok
    }

    /// The sources, checked together, their workers, and their request settings
    /// (`defaults`, `[generation]`'s, under each source's own).
    fn resolve_sources(
        &mut self,
        sources: Vec<(SourceSpec, WorkerTable, SettingsTable)>,
        defaults: &SettingsTable,
    ) -> Vec<SourcePlan> {
        self.check_sources(&sources);
        let mut plans = Vec::new();
        for (spec, worker, own) in sources {
            let worker = self.worker(&spec, worker);
            // A problem of `[generation]` is found again here, at the same place: the list
            // drops the repeats.
            let settings = self.settings(&own.or(defaults));
            plans.push(SourcePlan {
                spec,
                worker,
                settings,
            });
        }
        plans
    }

    fn check_sources(&mut self, sources: &[(SourceSpec, WorkerTable, SettingsTable)]) {
        for (i, (spec, worker, _)) in sources.iter().enumerate() {
            for problem in spec.check() {
                // A custom worker is where a `command` source's rows come from.
                if worker.command.is_some() && problem.message.contains("needs `path`") {
                    continue;
                }
                self.problem(Some(problem.span), problem.message);
            }
            if let Some((first, _, _)) = sources[..i]
                .iter()
                .find(|(s, _, _)| s.name() == spec.name())
            {
                let first = Problem::at(self.text, Some(first.name.span()), "");
                self.problem(
                    Some(spec.name.span()),
                    format!(
                        "source `{}` is listed twice (first at {}:{})",
                        spec.name(),
                        first.line,
                        first.column
                    ),
                );
            }
        }
    }

    fn positive(
        &mut self,
        value: &Option<Spanned<i64>>,
        key: &str,
        default: usize,
    ) -> NonZeroUsize {
        let fallback = NonZeroUsize::new(default).expect("defaults are non-zero");
        let Some(value) = value else { return fallback };
        match usize::try_from(*value.get_ref())
            .ok()
            .and_then(NonZeroUsize::new)
        {
            Some(n) => n,
            None => {
                self.problem(Some(value.span()), format!("`{key}` must be at least 1"));
                fallback
            }
        }
    }

    fn worker(&mut self, spec: &SourceSpec, worker: WorkerTable) -> WorkerPlan {
        let memory_limit = worker.memory_limit.as_ref().and_then(|limit| {
            let parsed = super::values::parse_size(limit.get_ref());
            if parsed.is_none_or(|b| b < 16 << 20) {
                self.problem(
                    Some(limit.span()),
                    format!("source `{}`: `memory-limit` must be a size of at least 16M, such as \"512M\" or \"8G\"", spec.name()),
                );
            }
            parsed
        });
        if let Some(command) = &worker.command
            && command.get_ref().is_empty()
        {
            self.problem(
                Some(command.span()),
                format!("source `{}`: `command` must name a program", spec.name()),
            );
        }
        let expected = worker.expected_prompts.as_ref().and_then(|n| {
            let value = u64::try_from(*n.get_ref()).ok().filter(|n| *n > 0);
            if value.is_none() {
                self.problem(
                    Some(n.span()),
                    format!(
                        "source `{}`: `expected-prompts` must be at least 1",
                        spec.name()
                    ),
                );
            }
            value
        });
        WorkerPlan {
            memory_limit,
            command: worker.command.map(Spanned::into_inner),
            expected,
            on_length: worker.on_length,
            order: worker.order,
        }
    }

    fn host_memory(&mut self, server: &ServerTable) -> Option<u64> {
        let size = server.host_memory.as_ref()?;
        let parsed = super::values::parse_size(size.get_ref());
        if parsed.is_none() {
            self.problem(
                Some(size.span()),
                "`host-memory` must be a size such as \"150G\" or \"512M\"",
            );
        }
        parsed
    }

    fn server(&mut self, server: ServerTable, table: std::ops::Range<usize>) -> ServerPlan {
        let urls = self.server_urls(&server, table);
        if let Some(launch) = &server.launch
            && launch.get_ref().is_empty()
        {
            self.problem(Some(launch.span()), "`launch` must name a program");
        }
        if let Some(env) = &server.api_key_env {
            let name = env.get_ref();
            let valid =
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                self.problem(
                    Some(env.span()),
                    "`api-key-env` is the NAME of an environment variable (the key itself never goes in a file)",
                );
            }
        }
        let health_timeout = self
            .seconds(&server.health_timeout_secs, "health-timeout-secs")
            .unwrap_or(DEFAULT_HEALTH_TIMEOUT);
        let max_outage = self.seconds(&server.max_outage_secs, "max-outage-secs");
        let startup_timeout = self
            .seconds(&server.startup_timeout_secs, "startup-timeout-secs")
            .unwrap_or(DEFAULT_STARTUP_TIMEOUT);
        let stall_after = self
            .seconds(&server.stall_secs, "stall-secs")
            .unwrap_or(DEFAULT_SERVER_STALL);
        let max_restarts = server
            .max_restarts
            .as_ref()
            .map_or(DEFAULT_MAX_RESTARTS, |n| {
                match u32::try_from(*n.get_ref()) {
                    Ok(n) => n,
                    Err(_) => {
                        self.problem(Some(n.span()), "`max-restarts` must be 0 or more");
                        0
                    }
                }
            });
        ServerPlan {
            urls,
            max_outage,
            startup_timeout,
            stall_after,
            model: server.model,
            api_key_env: server.api_key_env.map(Spanned::into_inner),
            launch: server.launch.map(|launch| {
                let args = launch.into_inner();
                self.launch_spans = args.iter().map(Spanned::span).collect();
                self.launch = args.iter().map(|a| a.get_ref().clone()).collect();
                self.launch.clone()
            }),
            health_timeout,
            max_restarts,
            log: server.log.map(|l| self.base_dir_hint.join(l)),
            nodes: 1,
        }
    }

    /// `token-ids = true` with a `[server] launch` that starts a server known to return no
    /// token ids on streamed chat completions: reported at each `token-ids`.
    fn check_token_ids_server(&mut self) {
        let Some(server) = super::launch::without_token_ids(&self.launch) else {
            return;
        };
        for span in self.token_ids_at.clone() {
            self.problem(
                Some(span),
                format!(
                    "`token-ids` needs a server that returns token ids, and `[server] launch` \
                     starts {server}, which does not: launch vLLM (it returns them with \
                     `return_token_ids`), or remove `token-ids`"
                ),
            );
        }
    }

    /// A duration in whole seconds of at least 1; `None` when absent or reported as invalid.
    fn seconds(&mut self, value: &Option<Spanned<i64>>, key: &str) -> Option<Duration> {
        let secs = value.as_ref()?;
        match u64::try_from(*secs.get_ref()) {
            Ok(s) if s > 0 => Some(Duration::from_secs(s)),
            _ => {
                self.problem(Some(secs.span()), format!("`{key}` must be at least 1"));
                None
            }
        }
    }

    /// `[server] url` or `urls`, each checked and without a trailing `/`. When none is usable
    /// (reported), a placeholder keeps the rest of the resolution going.
    fn server_urls(&mut self, server: &ServerTable, table: std::ops::Range<usize>) -> Vec<String> {
        let (urls, span, key) = match (&server.url, &server.urls) {
            (Some(url), None) => (vec![url.get_ref().clone()], url.span(), "url"),
            (None, Some(urls)) => (urls.get_ref().clone(), urls.span(), "urls"),
            (Some(url), Some(_)) => {
                self.problem(
                    Some(url.span()),
                    "`url` and `urls` are exclusive: one server in `url`, or several in `urls`",
                );
                (Vec::new(), url.span(), "url")
            }
            (None, None) => {
                self.missing(
                    Some(table.clone()),
                    "`[server]` needs `url = \"http://…\"` (or `urls = [\"http://…\", …]` for several servers)",
                );
                (Vec::new(), table, "url")
            }
        };
        let mut urls: Vec<String> = urls
            .iter()
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .collect();
        let launched = server.launch.is_some();
        self.check_urls(&urls, &span, key, launched);
        if key == "urls" && urls.is_empty() {
            self.problem(
                Some(span.clone()),
                "`urls` is empty: list at least one server",
            );
        }
        if key == "urls" && urls.len() > 1 && launched {
            self.problem(
                Some(span.clone()),
                "`gen` launches one server (`launch`); list several servers in `urls` only when they run on their own",
            );
        }
        if urls.is_empty() {
            // Reported above; a placeholder keeps the rest of the resolution going.
            urls.push("http://127.0.0.1".to_owned());
        }
        urls
    }

    /// Each URL of `key` (at `span`) is http(s), has `{port}` only for a server `gen`
    /// launches, and is listed once.
    fn check_urls(
        &mut self,
        urls: &[String],
        span: &std::ops::Range<usize>,
        key: &str,
        launched: bool,
    ) {
        let mut seen = std::collections::HashSet::new();
        for url in urls {
            let url_ok = (url.starts_with("http://") || url.starts_with("https://"))
                && reqwest::Url::parse(&url.replace("{port}", "1")).is_ok();
            if !url_ok {
                let what = if key == "url" {
                    "`url` must be an http(s) URL"
                } else {
                    "`urls` must hold http(s) URLs"
                };
                self.problem(
                    Some(span.clone()),
                    format!("{what} such as `http://127.0.0.1:30000`, got `{url}`"),
                );
            }
            if url.contains("{port}") && !launched {
                self.problem(
                    Some(span.clone()),
                    "`{port}` in `url` is only filled in when `gen` launches the server (`launch = [...]`)",
                );
            }
            if !seen.insert(url.clone()) {
                self.problem(
                    Some(span.clone()),
                    format!("`{url}` is listed twice in `urls`"),
                );
            }
        }
    }

    fn generation(&mut self, generation: GenerationTable, defaults: Settings) -> GenerationPlan {
        let concurrency = self.concurrency(&generation);
        let max_attempts = self.positive(
            &generation.max_attempts,
            "max-attempts",
            DEFAULT_MAX_ATTEMPTS as usize,
        );
        GenerationPlan {
            max_tokens: defaults.max_tokens,
            concurrency,
            max_attempts: u32::try_from(max_attempts.get()).unwrap_or(u32::MAX),
            params: defaults.params,
        }
    }

    /// `concurrency` (a number, or `"auto"` up to `max-concurrency`).
    fn concurrency(&mut self, generation: &GenerationTable) -> Concurrency {
        let max_concurrency = generation.max_concurrency.as_ref().map(|_| {
            self.positive(&generation.max_concurrency, "max-concurrency", 1)
                .get()
        });
        match generation
            .concurrency
            .as_ref()
            .filter(|c| c.get_ref().as_str() != Some("auto"))
            .map(|c| (c.get_ref(), c.span()))
        {
            None => Concurrency::Auto {
                max: max_concurrency,
            },
            Some((toml::Value::Integer(n), span)) => {
                match usize::try_from(*n).ok().and_then(NonZeroUsize::new) {
                    Some(n) => Concurrency::Fixed(n),
                    None => {
                        self.problem(Some(span), "`concurrency` must be at least 1, or \"auto\"");
                        Concurrency::Fixed(NonZeroUsize::MIN)
                    }
                }
            }
            Some((_, span)) => {
                self.problem(
                    Some(span),
                    "`concurrency` must be a number of requests or \"auto\"",
                );
                Concurrency::Auto { max: None }
            }
        }
    }

    /// Resolves request settings (a source's, `[generation]`'s under them): each key under
    /// its request name, the weighted lists apart. `max-tokens` absent is reported by the
    /// caller (`[generation]` needs it).
    fn settings(&mut self, table: &SettingsTable) -> Settings {
        let mut params = Map::new();
        if let Some(extra) = &table.extra_body {
            // The named keys below win over the same key here.
            let extra = serde_json::to_value(extra).expect("a toml table is valid JSON");
            if let Value::Object(extra) = extra {
                params.extend(extra);
            }
        }
        let mut drawn = std::collections::BTreeMap::new();
        let mut sampled = Sampled {
            resolver: self,
            params: &mut params,
            drawn: &mut drawn,
        };
        sampled.key(&table.temperature, "temperature", "between 0 and 10", |t| {
            (0.0..=10.0).contains(t)
        });
        sampled.key(&table.top_p, "top-p", "in (0, 1]", |p| {
            *p > 0.0 && *p <= 1.0
        });
        sampled.key(&table.top_k, "top-k", "-1 (off) or more", |k| *k >= -1);
        sampled.key(&table.min_p, "min-p", "between 0 and 1", |p| {
            (0.0..=1.0).contains(p)
        });
        sampled.key(
            &table.reasoning_effort,
            "reasoning-effort",
            "a level such as \"low\" or \"high\"",
            |e| !e.trim().is_empty(),
        );
        let max_tokens = self.one(&table.max_tokens, "max-tokens").map_or(1, |n| {
            u32::try_from(*n.get_ref())
                .ok()
                .filter(|n| *n > 0)
                .unwrap_or_else(|| {
                    self.problem(
                        Some(n.span()),
                        "`max-tokens` must be between 1 and 4294967295",
                    );
                    1
                })
        });
        let samples = self
            .one(&table.samples, "samples")
            .map_or(NonZeroU32::MIN, |n| {
                u32::try_from(*n.get_ref())
                    .ok()
                    .and_then(NonZeroU32::new)
                    .unwrap_or_else(|| {
                        self.problem(Some(n.span()), "`samples` must be at least 1");
                        NonZeroU32::MIN
                    })
            });
        if let Some(seed) = self.one(&table.seed, "seed") {
            params.insert("seed".into(), Value::from(seed.into_inner()));
        }
        if let Some(kwargs) = &table.chat_template_kwargs {
            let kwargs = serde_json::to_value(kwargs).expect("a toml table is valid JSON");
            params.insert("chat_template_kwargs".into(), kwargs);
        }
        if let Some(on) = self.one(&table.token_ids, "token-ids") {
            if *on.get_ref() {
                params.insert(super::settings::TOKEN_IDS.into(), Value::Bool(true));
                if !self.token_ids_at.contains(&on.span()) {
                    self.token_ids_at.push(on.span());
                }
            } else {
                params.remove(super::settings::TOKEN_IDS);
            }
        }
        Settings {
            max_tokens,
            samples,
            params,
            drawn,
        }
    }

    /// The value of `key`, which takes one value only: a weighted list is reported.
    fn one<T: Clone>(
        &mut self,
        value: &Option<Spanned<Drawn<T>>>,
        key: &str,
    ) -> Option<Spanned<T>> {
        let value = value.as_ref()?;
        match value.get_ref() {
            Drawn::One(one) => Some(Spanned::new(value.span(), one.clone())),
            Drawn::Weighted(_) => {
                self.problem(
                    Some(value.span()),
                    format!(
                        "`{key}` takes one value, not a weighted list (only `temperature`, \
                         `top-p`, `top-k`, `min-p` and `reasoning-effort` are drawn per request)"
                    ),
                );
                None
            }
        }
    }
}

/// Resolves the keys that may be a weighted list, into the request's parameters or its draws.
struct Sampled<'r, 't> {
    resolver: &'r mut PlanResolver<'t>,
    params: &'r mut Map<String, Value>,
    drawn: &'r mut std::collections::BTreeMap<String, Vec<Weighted>>,
}

impl Sampled<'_, '_> {
    /// `key` (a file name, sent as its request name), each value checked against `valid`
    /// (`rule` says what it must be), each weight positive.
    fn key<T: Serialize>(
        &mut self,
        value: &Option<Spanned<Drawn<T>>>,
        key: &str,
        rule: &str,
        valid: impl Fn(&T) -> bool,
    ) {
        let Some(value) = value else { return };
        let name = key.replace('-', "_");
        let check = |resolver: &mut PlanResolver<'_>, span: std::ops::Range<usize>, v: &T| {
            if !valid(v) {
                resolver.problem(Some(span), format!("`{key}` must be {rule}"));
            }
            serde_json::to_value(v).expect("a setting serializes")
        };
        match value.get_ref() {
            Drawn::One(one) => {
                let one = check(self.resolver, value.span(), one);
                self.params.insert(name, one);
            }
            Drawn::Weighted(choices) => {
                let mut list = Vec::new();
                for choice in choices {
                    let choice = choice.get_ref();
                    let value = check(self.resolver, choice.value.span(), choice.value.get_ref());
                    let weight = *choice.weight.get_ref();
                    if !(weight.is_finite() && weight > 0.0) {
                        let message = format!("a weight of `{key}` must be a positive number");
                        self.resolver.problem(Some(choice.weight.span()), message);
                    }
                    list.push(Weighted { value, weight });
                }
                if list.is_empty() {
                    let message = format!(
                        "`{key}` lists no choices: give one value, or at least one `{{ value = …, weight = … }}`"
                    );
                    self.resolver.problem(Some(value.span()), message);
                } else {
                    self.drawn.insert(name, list);
                }
            }
        }
    }
}

/// The top-level tables of the file, each deserialized on its own.
struct Tables {
    /// `None` when `[run]` does not deserialize (absent is the default).
    run: Option<RunTable>,
    /// `None` when absent, `Some(None)` when it does not deserialize; with its span.
    server: Option<Option<(ServerTable, std::ops::Range<usize>)>>,
    /// With `[generation]`'s request settings and its span.
    generation: Option<Option<(GenerationTable, SettingsTable, std::ops::Range<usize>)>>,
    sources: Vec<(SourceSpec, WorkerTable, SettingsTable)>,
    /// `[generation]` has a `max-tokens` key (its value may have been refused).
    max_tokens_written: bool,
    /// Every `[[source]]` deserialized: no source at all is then a problem of its own.
    sources_ok: bool,
}

/// The run directory: `[run] dir`, else `runs/<config name>`, relative to `base_dir`.
fn run_dir(path: &Path, base_dir: &Path, run: &RunTable) -> PathBuf {
    match &run.dir {
        Some(dir) => base_dir.join(dir.get_ref()),
        None => {
            let stem = path
                .file_stem()
                .map_or_else(|| "run".to_owned(), |s| s.to_string_lossy().into_owned());
            base_dir.join("runs").join(stem)
        }
    }
}

/// An unknown key and what was probably meant, on one line (as cargo does); a table of few
/// keys lists them when none is close.
fn unknown_key(key: &str, table: Table, accepted: &[&'static str]) -> String {
    let place = table.place();
    match keys::suggest(key, accepted) {
        Some(meant) => format!("unknown key `{key}` {place}: did you mean `{meant}`?"),
        None if accepted.len() <= LISTED_KEYS => {
            let listed: Vec<String> = accepted.iter().map(|k| format!("`{k}`")).collect();
            format!(
                "unknown key `{key}` {place}, expected one of {}",
                listed.join(", ")
            )
        }
        None => format!("unknown key `{key}` {place}"),
    }
}

/// Up to this many accepted keys are listed when an unknown key is like none of them.
const LISTED_KEYS: usize = 16;

/// Beyond this many syntax errors the file is not a config with typos but another kind of
/// file: the first few are shown, not thousands.
const MAX_SYNTAX_ERRORS: usize = 10;
const SHOWN_SYNTAX_ERRORS: usize = 3;

/// Splits the entries whose key is one of `keys` off a table entry: the worker keys of a
/// `[[source]]` (the pipeline's business; the rest is the sources crate's), its `generation`,
/// or the request settings of `[generation]`.
fn split_keys<'t>(
    entry: Spanned<DeValue<'t>>,
    keys: &[&str],
) -> (Spanned<DeValue<'t>>, Spanned<DeValue<'t>>) {
    let span = entry.span();
    match entry.into_inner() {
        DeValue::Table(table) => {
            let (matching, rest): (Vec<_>, Vec<_>) = table
                .into_iter()
                .partition(|(key, _)| keys.contains(&key.get_ref().as_ref()));
            (
                Spanned::new(span.clone(), DeValue::Table(matching.into_iter().collect())),
                Spanned::new(span, DeValue::Table(rest.into_iter().collect())),
            )
        }
        other => (
            Spanned::new(span.clone(), DeValue::Table(DeTable::new())),
            Spanned::new(span, other),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[server]
url = "http://127.0.0.1:8080"

[generation]
max-tokens = 64
chat-template-kwargs = { enable_thinking = false }

[[source]]
name = "a"
path = "a.jsonl"
"#;

    fn problems(text: &str) -> Vec<String> {
        match Plan::from_text(Path::new("cfg/x.toml"), text) {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid { problems, .. }) => problems
                .into_iter()
                .map(|p| format!("{}:{} {}", p.line, p.column, p.message))
                .collect(),
            Err(e) => vec![e.to_string()],
        }
    }

    #[test]
    fn resolves_defaults() {
        let plan = Plan::from_text(Path::new("cfg/x.toml"), GOOD).expect("valid");
        assert_eq!(plan.run_dir, Path::new("cfg/runs/x"));
        assert_eq!(plan.generation.concurrency, Concurrency::Auto { max: None });
        assert_eq!(
            plan.generation.params["chat_template_kwargs"]["enable_thinking"],
            false
        );
        assert_eq!(plan.sources.len(), 1);
    }

    #[test]
    fn reports_every_problem_with_position() {
        let text = format!(
            "{GOOD}\n[[source]]\nname = \"a\"\npath = \"b.jsonl\"\nlimit = 0\n\n[[source]]\nname = \"c\"\npaht = \"x\"\n"
        );
        let found = problems(&text.replace("max-tokens = 64", "max-tokens = \"many\""));
        assert_eq!(found.len(), 5, "{found:#?}");
        assert_eq!(found[0], "6:14 invalid type: string \"many\", expected i64");
        assert_eq!(found[1], "14:8 source `a` is listed twice (first at 10:8)");
        assert_eq!(found[2], "16:9 source `a`: `limit` must be at least 1");
        // The rest of a source with an unknown key is checked too.
        assert!(
            found[3].starts_with("19:8 source `c` needs `path`"),
            "{found:#?}"
        );
        // One line: what was meant, not every key a source accepts.
        assert_eq!(
            found[4], "20:1 unknown key `paht` in `[[source]]`: did you mean `path`?",
            "{found:#?}"
        );
    }

    #[test]
    fn syntax_errors_and_unknown_tables() {
        assert!(problems("[server\nurl=1")[0].starts_with("1:"));
        let found = problems(&format!("{GOOD}\n[servr]\nurl = \"x\"\n"));
        assert!(
            found[0].contains("unknown key `servr` at the top level: did you mean `server`?"),
            "{found:?}"
        );
        let found = problems("[generation]\nmax-tokens = 1\n[[source]]\nname=\"a\"\npath=\"a\"\n");
        assert!(found[0].contains("missing `[server]`"), "{found:?}");
        // A syntax error does not hide the problems elsewhere in the file.
        let text =
            format!("{GOOD}\n[[source]]\nname = \"b\"\npath = \"b.jsonl\"\nlimit = 0\nseed = \n");
        let found = problems(&text);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[0].contains("`limit` must be at least 1"), "{found:?}");
        assert!(found[1].starts_with("17:8 "), "{found:?}");
    }

    #[test]
    fn rejects_bad_urls_and_key_values() {
        let found = problems(&GOOD.replace("http://127.0.0.1:8080", "localhost:8080"));
        assert!(found[0].contains("must be an http(s) URL"), "{found:?}");
        let found = problems(&GOOD.replace("[server]", "[server]\napi-key-env = \"sk-abc def\""));
        assert!(
            found[0].contains("NAME of an environment variable"),
            "{found:?}"
        );
    }

    #[test]
    fn several_servers_in_urls_each_checked_and_exclusive_with_url() {
        let several = GOOD.replace(
            "url = \"http://127.0.0.1:8080\"",
            "urls = [\"http://127.0.0.1:8080/\", \"http://127.0.0.1:8081\"]",
        );
        let plan = Plan::from_text(Path::new("x.toml"), &several).expect("valid");
        assert_eq!(
            plan.server.urls,
            ["http://127.0.0.1:8080", "http://127.0.0.1:8081"]
        );
        let both = GOOD.replace("[server]", "[server]\nurls = [\"http://127.0.0.1:8081\"]");
        assert!(problems(&both)[0].contains("`url` and `urls` are exclusive"));
        let none = GOOD.replace("url = \"http://127.0.0.1:8080\"", "");
        assert!(problems(&none)[0].contains("`[server]` needs `url"));
        let twice = GOOD.replace(
            "url = \"http://127.0.0.1:8080\"",
            "urls = [\"http://127.0.0.1:8080\", \"http://127.0.0.1:8080/\"]",
        );
        assert!(problems(&twice)[0].contains("listed twice"));
        let empty = GOOD.replace("url = \"http://127.0.0.1:8080\"", "urls = []");
        assert!(problems(&empty)[0].contains("`urls` is empty"));
        let outage = GOOD.replace("[server]", "[server]\nmax-outage-secs = 0");
        assert!(problems(&outage)[0].contains("`max-outage-secs` must be at least 1"));
    }

    #[test]
    fn a_source_generation_overrides_generation_and_lists_are_drawn() {
        let text = GOOD.replace(
            "max-tokens = 64",
            "max-tokens = 64\ntemperature = 0.6\nseed = 7\nsamples = 2",
        ) + r#"
[[source]]
name = "math"
path = "m.jsonl"

[source.generation]
max-tokens = 512
temperature = [{ value = 0.6, weight = 3 }, { value = 1.0, weight = 1 }]
reasoning-effort = "high"
"#;
        let plan = Plan::from_text(Path::new("x.toml"), &text).expect("valid");
        let (a, math) = (&plan.sources[0].settings, &plan.sources[1].settings);
        assert_eq!((a.max_tokens, a.samples.get()), (64, 2));
        assert_eq!(a.params["temperature"], 0.6);
        assert_eq!((math.max_tokens, math.samples.get()), (512, 2));
        assert!(!math.params.contains_key("temperature"));
        assert_eq!(math.drawn["temperature"].len(), 2);
        assert_eq!(math.drawn["temperature"][0].weight, 3.0);
        assert_eq!(math.params["reasoning_effort"], "high");
        assert_eq!(math.params["seed"], 7);
        // Keys `[generation]` does not set stay unset for the other source.
        assert!(!a.params.contains_key("reasoning_effort"));
        assert_eq!(plan.generation.max_tokens, 64);
    }

    #[test]
    fn bad_weights_samples_and_lists_on_single_keys_are_located() {
        let text = GOOD.to_owned()
            + r#"
[source.generation]
temperature = [{ value = 0.6, weight = "three" }]
top-p = [{ value = 0.9, weight = 0 }]
samples = 0
seed = [{ value = 1, weight = 1 }]
min-p = []
colour = 1
"#;
        let found = problems(&text);
        assert_eq!(found.len(), 6, "{found:#?}");
        assert!(
            found[0].starts_with("14:40 invalid type: string \"three\", expected f64"),
            "{found:#?}"
        );
        assert_eq!(
            found[1],
            "15:34 a weight of `top-p` must be a positive number"
        );
        assert_eq!(found[2], "16:11 `samples` must be at least 1");
        assert!(
            found[3].starts_with("17:8 `seed` takes one value, not a weighted list"),
            "{found:#?}"
        );
        assert!(
            found[4].starts_with("18:9 `min-p` lists no choices"),
            "{found:#?}"
        );
        assert!(
            found[5].starts_with("19:1 unknown key `colour` in `[source.generation]`"),
            "{found:#?}"
        );
        // `[generation]` run knobs are not per source.
        let found = problems(&(GOOD.to_owned() + "[source.generation]\nconcurrency = 2\n"));
        assert!(found[0].contains("unknown key `concurrency`"), "{found:#?}");
        let found = problems(&GOOD.replace("max-tokens = 64", "top-k = 40"));
        assert!(
            found[0].contains("`[generation]` needs `max-tokens"),
            "{found:#?}"
        );
    }

    #[test]
    fn token_ids_is_one_bool_per_source_and_refused_with_a_server_that_cannot() {
        let text = GOOD.replace("max-tokens = 64", "max-tokens = 64\ntoken-ids = true")
            + "[source.generation]\ntoken-ids = false\n\n[[source]]\nname = \"b\"\npath = \"b.jsonl\"\n";
        let plan = Plan::from_text(Path::new("x.toml"), &text).expect("valid");
        let on: Vec<bool> = plan
            .sources
            .iter()
            .map(|s| s.settings.token_ids())
            .collect();
        assert_eq!(on, [false, true]);
        assert_eq!(plan.sources[1].settings.params["return_token_ids"], true);

        let bad = GOOD.to_owned()
            + "[source.generation]\ntoken-ids = \"yes\"\n\n[[source]]\nname = \"b\"\npath = \"b.jsonl\"\n\n[source.generation]\ntoken-ids = [{ value = true, weight = 1 }]\n";
        let found = problems(&bad);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(
            found[0] == "13:13 invalid type: string \"yes\", expected a boolean",
            "{found:#?}"
        );
        assert!(
            found[1].starts_with("20:13 `token-ids` takes one value, not a weighted list"),
            "{found:#?}"
        );

        {
            let launch = r#"launch = ["${LLAMA_SERVER_BIN:-llama-server}", "--port", "{port}"]"#;
            let text = GOOD
                .replace("[server]", &format!("[server]\n{launch}"))
                .replace("max-tokens = 64", "max-tokens = 64\ntoken-ids = true");
            let found = problems(&text);
            assert_eq!(found.len(), 1, "{found:#?}");
            assert!(
                found[0].starts_with("8:13 `token-ids` needs a server that returns token ids"),
                "{found:#?}"
            );
        }
        // vLLM and SGLang return them (SGLang in its `sglext` extension).
        for launch in [
            r#"launch = ["vllm", "serve", "m"]"#,
            r#"launch = ["python", "-m", "sglang.launch_server", "--port", "{port}"]"#,
        ] {
            let text = GOOD
                .replace("[server]", &format!("[server]\n{launch}"))
                .replace("max-tokens = 64", "max-tokens = 64\ntoken-ids = true");
            assert_eq!(problems(&text), Vec::<String>::new(), "{launch}");
        }
    }
}
