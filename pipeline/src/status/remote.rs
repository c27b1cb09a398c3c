//! `gen status --remote user@host:RUN_DIR`: runs the system `ssh` client (batch mode, the
//! user's own keys and config) to fetch the remote `gen status --json` and renders it here.
//!
//! Targets: `user@host:RUN_DIR`, `host:RUN_DIR`, `[v6::addr]:RUN_DIR` and
//! `ssh://[user@]host[:port]/RUN_DIR`. Environment:
//! - `GEN_SSH_OPTS`: extra `ssh` options, split on whitespace (e.g. `-i KEY -p 2222`);
//! - `GEN_REMOTE_GEN`: the remote command to run instead of `gen` (e.g. `~/.cargo/bin/gen`);
//!   it is passed to the remote shell as written.
//!
//! `ssh` exits 255 for its own failures (unreachable host, refused authentication) and a
//! shell exits 127 for a command it cannot find; both get their own message, so "the host is
//! down" never reads like "there is no run".

use std::process::{Command, Stdio};

use anyhow::Context as _;

use crate::status::RunStatus;

/// Environment variable with extra options for `ssh`, split on whitespace.
pub const SSH_OPTS_ENV: &str = "GEN_SSH_OPTS";
/// Environment variable naming the `gen` command on the remote host.
pub const REMOTE_GEN_ENV: &str = "GEN_REMOTE_GEN";

/// A parsed `--remote` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteTarget {
    /// What `ssh` connects to: `user@host` or `host`.
    pub destination: String,
    /// The host alone, for messages.
    pub host: String,
    pub port: Option<u16>,
    pub run_dir: String,
}

fn usage(target: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "`{target}` is not a remote run: expected `user@host:RUN_DIR`, `host:RUN_DIR` or `ssh://user@host:port/RUN_DIR`"
    )
}

/// Parses `user@host:RUN_DIR`, `host:RUN_DIR` or `ssh://[user@]host[:port]/RUN_DIR`.
pub fn parse_target(target: &str) -> anyhow::Result<RemoteTarget> {
    if let Some(rest) = target.strip_prefix("ssh://") {
        let (authority, path) = rest.split_once('/').ok_or_else(|| usage(target))?;
        let (user, host_port) = match authority.rsplit_once('@') {
            Some((user, host_port)) => (Some(user), host_port),
            None => (None, authority),
        };
        let (host, port) = split_host_port(host_port).ok_or_else(|| usage(target))?;
        // `ssh://host/~/runs/x` names a path under the home directory, as scp does.
        let run_dir = if path.starts_with('~') {
            path.to_owned()
        } else {
            format!("/{path}")
        };
        return build(target, user, host, port, run_dir);
    }
    let (user, rest) = match target.split_once('@') {
        Some((user, rest)) if !user.contains(':') => (Some(user), rest),
        _ => (None, target),
    };
    let (host, run_dir) = if let Some(bracketed) = rest.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or_else(|| usage(target))?;
        (host, after.strip_prefix(':').ok_or_else(|| usage(target))?)
    } else {
        rest.split_once(':').ok_or_else(|| usage(target))?
    };
    build(target, user, host, None, run_dir.to_owned())
}

fn split_host_port(host_port: &str) -> Option<(&str, Option<u16>)> {
    if let Some(bracketed) = host_port.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match host_port.split_once(':') {
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((host_port, None)),
    }
}

fn build(
    target: &str,
    user: Option<&str>,
    host: &str,
    port: Option<u16>,
    run_dir: String,
) -> anyhow::Result<RemoteTarget> {
    let bad = |s: &str| s.is_empty() || s.starts_with('-') || s.chars().any(char::is_whitespace);
    if bad(host) || user.is_some_and(bad) || run_dir.is_empty() || run_dir == "/" {
        return Err(usage(target));
    }
    let destination = match user {
        Some(user) => format!("{user}@{host}"),
        None => host.to_owned(),
    };
    Ok(RemoteTarget {
        destination,
        host: host.to_owned(),
        port,
        run_dir,
    })
}

/// Quotes `word` for a POSIX shell; a leading `~/` stays unquoted so the remote shell expands
/// it.
fn shell_quote(word: &str) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    match word.strip_prefix("~/") {
        Some(rest) => format!("~/{}", quote(rest)),
        None if word == "~" => "~".to_owned(),
        None => quote(word),
    }
}

/// The command line the remote shell runs.
fn remote_command(remote_gen: &str, run_dir: &str) -> String {
    format!("{remote_gen} status --json {}", shell_quote(run_dir))
}

/// The `ssh` arguments for `target`.
pub fn ssh_args(target: &RemoteTarget, extra: &str, remote_gen: &str) -> Vec<String> {
    let mut args: Vec<String> = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-T"]
        .map(str::to_owned)
        .to_vec();
    args.extend(extra.split_whitespace().map(str::to_owned));
    if let Some(port) = target.port {
        args.extend(["-p".to_owned(), port.to_string()]);
    }
    args.push("--".to_owned());
    args.push(target.destination.clone());
    args.push(remote_command(remote_gen, &target.run_dir));
    args
}

/// Fetches the status of the run at `target` (`user@host:RUN_DIR`).
pub fn fetch(target: &str) -> anyhow::Result<RunStatus> {
    let parsed = parse_target(target)?;
    let extra = std::env::var(SSH_OPTS_ENV).unwrap_or_default();
    let custom_gen = std::env::var(REMOTE_GEN_ENV)
        .ok()
        .filter(|g| !g.trim().is_empty());
    let remote_gen = custom_gen.clone().unwrap_or_else(|| "gen".to_owned());
    let output = Command::new("ssh")
        .args(ssh_args(&parsed, &extra, &remote_gen))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                anyhow::anyhow!("the `ssh` client is not installed here (needed for `--remote`)")
            }
            _ => anyhow::anyhow!("cannot start `ssh`: {e}"),
        })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stderr = stderr.trim();
    let host = &parsed.host;
    match output.status.code() {
        Some(0) => serde_json::from_slice(&output.stdout).with_context(|| {
            format!(
                "`{remote_gen} status --json` on `{host}` printed something that is not a run status (is the remote `gen` a different version?)"
            )
        }),
        Some(255) => Err(anyhow::anyhow!(
            "cannot reach `{}` over ssh (host unreachable or authentication refused): {}",
            parsed.destination,
            if stderr.is_empty() { "ssh gave no reason" } else { stderr }
        )),
        Some(127) => Err(match custom_gen {
            Some(custom) => anyhow::anyhow!(
                "`{custom}` ({REMOTE_GEN_ENV}) was not found on `{host}`: {}",
                stderr.lines().last().unwrap_or("command not found")
            ),
            None => anyhow::anyhow!(
                "gen is not installed on `{host}` (or not on PATH for non-interactive shells); set {REMOTE_GEN_ENV} to its path, e.g. {REMOTE_GEN_ENV}=~/.cargo/bin/gen"
            ),
        }),
        code => {
            // The remote `gen` explains itself on stderr as `error: …` / `  caused by: …`.
            let reason: Vec<&str> = stderr
                .lines()
                .map(|l| l.trim().trim_start_matches("error: "))
                .filter(|l| !l.is_empty())
                .collect();
            let code = code.map_or_else(|| "a signal".to_owned(), |c| format!("exit code {c}"));
            Err(anyhow::anyhow!(
                "`{remote_gen} status` on `{host}` failed ({code}): {}",
                if reason.is_empty() {
                    "no message".to_owned()
                } else {
                    reason.join("; ")
                }
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(destination: &str, host: &str, port: Option<u16>, run_dir: &str) -> RemoteTarget {
        RemoteTarget {
            destination: destination.into(),
            host: host.into(),
            port,
            run_dir: run_dir.into(),
        }
    }

    #[test]
    fn targets_parse() {
        let cases = [
            (
                "me@gpu1:/data/runs/x",
                target("me@gpu1", "gpu1", None, "/data/runs/x"),
            ),
            ("gpu1:runs/x", target("gpu1", "gpu1", None, "runs/x")),
            ("me@[::1]:/r", target("me@::1", "::1", None, "/r")),
            (
                "ssh://me@gpu1:2222/data/r",
                target("me@gpu1", "gpu1", Some(2222), "/data/r"),
            ),
            ("ssh://gpu1/~/r", target("gpu1", "gpu1", None, "~/r")),
            ("ssh://[::1]:22/r", target("::1", "::1", Some(22), "/r")),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_target(text).expect(text), expected, "{text}");
        }
        for bad in [
            "gpu1",
            "me@gpu1",
            ":/r",
            "gpu1:",
            "-oProxyCommand=x:/r",
            "ssh://gpu1",
            "ssh://gpu1:port/r",
            "[::1/r",
        ] {
            let error = parse_target(bad).expect_err(bad).to_string();
            assert!(
                error.contains("expected `user@host:RUN_DIR`"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_remote_command_is_quoted_for_the_shell() {
        assert_eq!(
            remote_command("gen", "/runs/it's here"),
            r"gen status --json '/runs/it'\''s here'"
        );
        assert_eq!(
            remote_command("~/bin/gen", "~/runs/x"),
            "~/bin/gen status --json ~/'runs/x'"
        );
    }

    #[test]
    fn ssh_runs_in_batch_mode_with_extra_options_before_the_destination() {
        let args = ssh_args(
            &target("me@h", "h", Some(2222), "/r"),
            " -i /k  -o StrictHostKeyChecking=no ",
            "gen",
        );
        assert_eq!(
            args,
            [
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
                "-T",
                "-i",
                "/k",
                "-o",
                "StrictHostKeyChecking=no",
                "-p",
                "2222",
                "--",
                "me@h",
                "gen status --json '/r'"
            ]
        );
    }
}
