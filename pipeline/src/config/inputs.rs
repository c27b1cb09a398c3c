//! The config against this machine, before anything runs: the `${VAR}`s and the program of
//! `[server] launch`, and the files each source's `path` names. These need the environment
//! and the file system, so they are not part of resolution ([`super::plan`], which reads only
//! the file); `gen check`, `gen doctor` and `gen run` (before it starts anything) report them,
//! each at `file:line:column`.

use std::path::Path;

use super::Plan;
use super::launch::{expand, variables};
use super::problem::{ConfigError, Problem};

impl Plan {
    /// Every problem of this config on this machine: `env` reads a variable; the files of
    /// sources for which `skip` is true are not checked (prepared already, or not in this
    /// run).
    pub fn input_problems(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        skip: &dyn Fn(&str) -> bool,
    ) -> Vec<Problem> {
        self.inputs().problems(env, skip)
    }

    /// What may work against intent on this machine without stopping a run: an
    /// `api-key-env` naming a variable that is not set (requests then go without a key).
    pub fn input_warnings(&self, env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
        let unset = |name: &&String| env(name).is_none_or(|v| v.is_empty());
        self.server
            .api_key_env
            .iter()
            .filter(unset)
            .map(|name| {
                format!(
                    "`[server] api-key-env` names `{name}`, which is not set here: requests go without an API key"
                )
            })
            .collect()
    }

    /// What the checks against this machine read.
    fn inputs(&self) -> Inputs<'_> {
        Inputs {
            text: &self.config_text,
            base_dir: &self.base_dir,
            launch: self.server.launch.as_deref().unwrap_or_default(),
            launch_spans: &self.launch_spans,
            sources: &self.sources,
        }
    }

    /// [`Plan::input_problems`] in the process environment, as one error.
    pub fn check_inputs(&self, skip: &dyn Fn(&str) -> bool) -> Result<(), ConfigError> {
        let env = |name: &str| std::env::var(name).ok();
        let mut problems = self.input_problems(&env, skip);
        if problems.is_empty() {
            return Ok(());
        }
        problems.sort_by_key(|p| (p.line, p.column));
        Err(ConfigError::Invalid {
            path: self.config_path.clone(),
            problems,
        })
    }
}

/// What the checks against this machine read: a whole plan's, or, when the file has
/// problems, the parts of it that resolved (so that a missing data file is reported together
/// with a misspelt key, not after it is fixed).
pub(super) struct Inputs<'p> {
    pub(super) text: &'p str,
    pub(super) base_dir: &'p Path,
    pub(super) launch: &'p [String],
    pub(super) launch_spans: &'p [std::ops::Range<usize>],
    pub(super) sources: &'p [super::plan::SourcePlan],
}

impl Inputs<'_> {
    pub(super) fn problems(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
        skip: &dyn Fn(&str) -> bool,
    ) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut push = |span: std::ops::Range<usize>, message: String| {
            problems.push(Problem::at(self.text, Some(span), message));
        };
        for (i, (arg, span)) in self.launch.iter().zip(self.launch_spans).enumerate() {
            let unset: Vec<&str> = variables(arg)
                .into_iter()
                .filter(|(name, default)| !default && env(name).is_none_or(|v| v.is_empty()))
                .map(|(name, _)| name)
                .collect();
            for name in &unset {
                push(
                    span.clone(),
                    format!(
                        "`launch` uses `${{{name}}}`, which is not set here: export it, or give a default with `${{{name}:-…}}`"
                    ),
                );
            }
            if i == 0
                && unset.is_empty()
                && let Ok(program) = expand(arg, 0, env)
                && let Err(why) = find_program(&program, env)
            {
                let from = if program == *arg {
                    String::new()
                } else {
                    format!(" (from `{arg}`)")
                };
                push(span.clone(), format!("`launch` program{from} {why}"));
            }
        }
        for super::plan::SourcePlan { spec, worker, .. } in self.sources {
            let Some(path) = &spec.path else { continue };
            if worker.command.is_some() || skip(spec.name()) {
                continue;
            }
            if let Err(e) = gen_sources::prepare::resolve_files(spec, self.base_dir) {
                push(path.span(), e.to_string());
            }
        }
        problems
    }
}

/// Where `program` would be run from: a path (relative to the current directory) must be an
/// executable file; a bare name must be one in a `PATH` directory.
fn find_program(program: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    if program.contains('/') {
        return match executable(Path::new(program)) {
            true => Ok(()),
            false if Path::new(program).exists() => Err(format!("`{program}` is not executable")),
            false => Err(format!("`{program}` does not exist")),
        };
    }
    let path = env("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|dir| executable(&dir.join(program))) {
        return Ok(());
    }
    Err(format!(
        "`{program}` is not on `PATH`: install it, or write its full path"
    ))
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn plan(dir: &Path, launch: &str, path: &str) -> Plan {
        let text = format!(
            "[server]\nurl = \"http://127.0.0.1:{{port}}\"\nlaunch = {launch}\n\n[generation]\nmax-tokens = 8\n\n[[source]]\nname = \"a\"\npath = \"{path}\"\n"
        );
        Plan::from_text(&dir.join("gen.toml"), &text).expect("valid config")
    }

    fn problems(plan: &Plan, env: &[(&str, &str)]) -> Vec<String> {
        let env = |name: &str| {
            env.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        };
        plan.input_problems(&env, &|_| false)
            .into_iter()
            .map(|p| format!("{}:{} {}", p.line, p.column, p.message))
            .collect()
    }

    #[test]
    fn unset_variables_a_missing_program_and_unmatched_paths_are_each_located() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plan = plan(
            dir.path(),
            r#"["${GEN_TEST_BIN}", "-m", "${GEN_TEST_MODEL}", "-t", "${THREADS:-2}"]"#,
            "data/*.jsonl",
        );
        let found = problems(&plan, &[("PATH", "/nonexistent")]);
        assert_eq!(
            found,
            [
                "3:11 `launch` uses `${GEN_TEST_BIN}`, which is not set here: export it, or give a default with `${GEN_TEST_BIN:-…}`",
                "3:36 `launch` uses `${GEN_TEST_MODEL}`, which is not set here: export it, or give a default with `${GEN_TEST_MODEL:-…}`",
                &format!(
                    "10:8 source `a`: `{}` matches no file",
                    dir.path().join("data/*.jsonl").display()
                ),
            ]
        );
        let found = problems(
            &plan,
            &[
                ("PATH", "/nonexistent"),
                ("GEN_TEST_BIN", "llama-server"),
                ("GEN_TEST_MODEL", "m.gguf"),
            ],
        );
        assert_eq!(
            found[0],
            "3:11 `launch` program (from `${GEN_TEST_BIN}`) `llama-server` is not on `PATH`: install it, or write its full path"
        );
    }

    #[test]
    fn a_program_on_path_or_by_full_path_and_a_matched_glob_pass() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = dir.path().join("bin");
        fs_err::create_dir_all(&bin).expect("bin");
        let program: PathBuf = bin.join("serve");
        fs_err::write(&program, "#!/bin/sh\n").expect("program");
        use std::os::unix::fs::PermissionsExt as _;
        fs_err::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("mode");
        fs_err::create_dir_all(dir.path().join("data")).expect("data");
        fs_err::write(dir.path().join("data/a.jsonl"), "{}\n").expect("data file");
        let path = bin.to_string_lossy().into_owned();
        let by_name = plan(
            dir.path(),
            r#"["serve", "--port", "{port}"]"#,
            "data/*.jsonl",
        );
        assert_eq!(problems(&by_name, &[("PATH", &path)]), Vec::<String>::new());
        let full = format!(r#"["{}"]"#, program.display());
        let by_path = plan(dir.path(), &full, "data/a.jsonl");
        assert_eq!(problems(&by_path, &[]), Vec::<String>::new());
        let missing = format!(r#"["{}/nope"]"#, bin.display());
        let found = problems(&plan(dir.path(), &missing, "data/a.jsonl"), &[]);
        assert!(found[0].ends_with("/nope` does not exist"), "{found:?}");
    }
}
