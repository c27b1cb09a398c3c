//! The `${NAME}`, `${NAME:-default}`, `~/` and `{port}` syntax of `[server] launch`, `url` and
//! a worker's `command`: the variables an argument names ([`variables`], for checking the config
//! before a run) and the argument with them filled in ([`expand`], when starting a process);
//! which launched server cannot return token ids ([`without_token_ids`]); the launch checked
//! against the nodes it spans ([`Plan::set_nodes`]; the per-node placeholders are
//! `crate::scale::nodes`'s).

use super::Plan;
use super::problem::{ConfigError, Problem};
use crate::inference::kinds::ServerKind;
use crate::scale::nodes;

/// A launch argument names a variable that is not set and has no default.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("launch argument `{arg}` uses `${{{var}}}`, which is not set")]
pub struct UnsetVariable {
    pub arg: String,
    pub var: String,
}

/// Expands `${VAR}`, `${VAR:-default}` and `{port}` in one launch argument, then a leading
/// `~/` (also from a default: `${MODEL:-~/models/m.gguf}`) to `$HOME/`, as a shell would.
pub fn expand(
    arg: &str,
    port: u16,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, UnsetVariable> {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        match (env(name).filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(UnsetVariable {
                    arg: arg.to_owned(),
                    var: name.to_owned(),
                });
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if let Some(under_home) = out.strip_prefix("~/")
        && let Some(home) = env("HOME").filter(|h| !h.is_empty())
    {
        out = format!("{}/{under_home}", home.trim_end_matches('/'));
    }
    Ok(out.replace("{port}", &port.to_string()))
}

impl Plan {
    /// Sets the nodes the launched server spans (`--nodes-per-shard`) after checking the
    /// launch against them ([`nodes::launch_problems`]): a launch from the file is reported at
    /// its arguments, one from `--server-launch` (which has no place in the file) by that name.
    pub fn set_nodes(&mut self, count: u32) -> Result<(), ConfigError> {
        let launch = self.server.launch.as_deref();
        let problems = nodes::launch_problems(launch, count);
        if problems.is_empty() {
            self.server.nodes = count;
            return Ok(());
        }
        let messages = || problems.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>();
        match launch {
            None => Err(ConfigError::Flag {
                flag: format!("--nodes-per-shard {count}"),
                message: messages().join("; "),
            }),
            Some(launch) if launch.len() != self.launch_spans.len() => Err(ConfigError::Flag {
                flag: "--server-launch".to_owned(),
                message: messages().join("; "),
            }),
            Some(_) => Err(ConfigError::Invalid {
                path: self.config_path.clone(),
                problems: problems
                    .iter()
                    .map(|(index, message)| {
                        let span = self.launch_spans.get(index.unwrap_or(0)).cloned();
                        Problem::at(&self.config_text, span, message.clone())
                    })
                    .collect(),
            }),
        }
    }
}

/// The `${NAME}` and `${NAME:-default}` references in a launch argument, with whether each
/// has a default (the syntax [`expand`] fills in).
pub fn variables(arg: &str) -> Vec<(&str, bool)> {
    let mut found = Vec::new();
    let mut rest = arg;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        let inner = &after[..end];
        found.push(match inner.split_once(":-") {
            Some((name, _)) => (name, true),
            None => (inner, false),
        });
        rest = &after[end + 1..];
    }
    found
}

/// The server a launch command starts when it is a kind that returns no token ids on a
/// streamed chat completion (no `KindSpec::token_id_flags`): llama.cpp's `llama-server`.
pub fn without_token_ids(args: &[String]) -> Option<String> {
    let program = args.first()?;
    let program = program.rsplit('/').next().unwrap_or(program);
    let specs = ServerKind::ALL.iter().map(|kind| kind.spec());
    specs
        .filter(|spec| spec.token_id_flags.is_empty())
        .find_map(|spec| {
            let starts = spec.programs.iter().find(|p| program.contains(*p))?;
            Some(format!("{}'s `{starts}`", spec.name))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_variables_defaults_and_port() {
        let env = |name: &str| (name == "MODEL").then(|| "/m.gguf".to_owned());
        assert_eq!(expand("${MODEL}", 9, &env).expect("set"), "/m.gguf");
        assert_eq!(
            expand("${BIN:-llama-server}", 9, &env).expect("default"),
            "llama-server"
        );
        assert_eq!(
            expand("http://127.0.0.1:{port}/x", 8080, &env).expect("port"),
            "http://127.0.0.1:8080/x"
        );
        let err = expand("-m=${NOPE}", 9, &env).expect_err("unset");
        assert_eq!(
            err.to_string(),
            "launch argument `-m=${NOPE}` uses `${NOPE}`, which is not set"
        );
    }

    /// `{node_rank}` & co. only with `--nodes-per-shard` above 1, and several nodes only with
    /// a launch that says which node is which: at the argument in the file, or naming the flag.
    #[test]
    fn a_launch_is_checked_against_the_nodes_it_spans() {
        let text = "[server]\nurl = \"http://127.0.0.1:{port}\"\nlaunch = [\"sglang\", \
                    \"--port\", \"{port}\", \"--node-rank\", \"{node_rank}\"]\n\n\
                    [generation]\nmax-tokens = 8\n\n[[source]]\nname = \"a\"\npath = \"a.jsonl\"\n";
        let plan = Plan::from_text(std::path::Path::new("cfg.toml"), text).expect("plan");
        let error = plan.clone().set_nodes(1).expect_err("one node");
        insta::assert_snapshot!(error.to_string(), @r"
        `cfg.toml` has 1 problem
          cfg.toml:3:56  `launch` uses `{node_rank}`, which only a server across several nodes has: give `--nodes-per-shard N` (N > 1) to `gen slurm` (or `gen run` in an allocation of N nodes), or take it out
        ");
        let mut across = plan.clone();
        across.set_nodes(2).expect("two nodes");
        assert_eq!(across.server.nodes, 2);

        // As `--server-launch` leaves it: a launch with no place in the file.
        let mut flag = plan.clone();
        flag.server.launch = Some(
            ["llama-server", "--port", "{port}"]
                .map(String::from)
                .into(),
        );
        flag.launch_spans.clear();
        let error = flag.set_nodes(2).expect_err("no rank");
        assert!(
            error
                .to_string()
                .starts_with("`--server-launch`: `launch` runs on each of the 2 nodes"),
            "{error}"
        );
        let mut none = plan;
        none.server.launch = None;
        let error = none.set_nodes(3).expect_err("nothing launched");
        assert!(
            error
                .to_string()
                .starts_with("`--nodes-per-shard 3`: no server is launched"),
            "{error}"
        );
    }

    #[test]
    fn a_leading_tilde_is_the_home_folder_also_from_a_default() {
        let env = |name: &str| (name == "HOME").then(|| "/home/me/".to_owned());
        assert_eq!(
            expand("${MODEL:-~/m.gguf}", 9, &env).expect("default"),
            "/home/me/m.gguf"
        );
        assert_eq!(expand("~/bin/x", 9, &env).expect("plain"), "/home/me/bin/x");
        assert_eq!(expand("a~/b", 9, &env).expect("inside"), "a~/b");
        assert_eq!(expand("~/x", 9, &|_| None).expect("no HOME"), "~/x");
    }
}
