//! `gen status --remote` against a real OpenSSH server (Debian `openssh-server`) that the test
//! starts on 127.0.0.1 with a throwaway host key and a throwaway client key. Skips with a
//! printed reason when `sshd` cannot be found or started, unless `GEN_REQUIRE_SSHD=1`
//! (`scripts/test.sh` installs `openssh-server` and sets it).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use gen_tests::fake_openai::{FakeOpenAi, Knobs};
use support::{Config, GEN_BIN, Output, Project, free_port};
use tokio::io::{AsyncBufReadExt as _, BufReader};

const SSHD: &str = "/usr/sbin/sshd";

/// A running `sshd -D` on a free port; killed when dropped.
struct Sshd {
    _child: tokio::process::Child,
    port: u16,
    user: String,
    dir: tempfile::TempDir,
}

impl Sshd {
    fn key(&self) -> PathBuf {
        self.dir.path().join("client_key")
    }

    /// `GEN_SSH_OPTS` for a client key, against this server.
    fn opts(&self, key: &Path, port: u16) -> String {
        format!(
            "-i {} -p {port} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o IdentitiesOnly=yes",
            key.display()
        )
    }
}

/// Says why sshd is unavailable: a skip, or a failure under `GEN_REQUIRE_SSHD=1`.
fn unavailable(reason: &str) -> Option<Sshd> {
    if std::env::var("GEN_REQUIRE_SSHD").as_deref() == Ok("1") {
        panic!("GEN_REQUIRE_SSHD=1 but {reason}");
    }
    eprintln!("skipping the remote status test: {reason}");
    None
}

fn keygen(path: &Path) -> Result<(), String> {
    let status = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "gen-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run `ssh-keygen`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`ssh-keygen` failed: {status}"))
    }
}

async fn start_sshd() -> Option<Sshd> {
    if !Path::new(SSHD).exists() {
        return unavailable(&format!(
            "`{SSHD}` is missing (apt-get install openssh-server)"
        ));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for key in ["host_key", "client_key", "stranger_key"] {
        if let Err(reason) = keygen(&dir.path().join(key)) {
            return unavailable(&reason);
        }
    }
    std::fs::copy(
        dir.path().join("client_key.pub"),
        dir.path().join("authorized_keys"),
    )
    .expect("authorized_keys");
    // sshd refuses to start without its privilege separation directory, which a container
    // that never booted the service has not created.
    if let Err(e) = std::fs::create_dir_all("/run/sshd") {
        return unavailable(&format!("cannot create `/run/sshd`: {e}"));
    }
    let user = std::process::Command::new("id")
        .arg("-un")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .expect("id -un");
    let port = free_port();
    let config = dir.path().join("sshd_config");
    let d = dir.path().display();
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nPidFile none\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             PermitRootLogin prohibit-password\nAllowUsers {user}\nLogLevel INFO\n"
        ),
    )
    .expect("sshd_config");
    let mut child = match tokio::process::Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return unavailable(&format!("cannot start `{SSHD}`: {e}")),
    };
    // `sshd -e` logs to stderr; it says when it listens, or why it exits.
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let ready = format!("Server listening on 127.0.0.1 port {port}");
    let mut log = Vec::new();
    let listening = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(line)) = lines.next_line().await {
            let found = line.contains(&ready);
            log.push(line);
            if found {
                return true;
            }
        }
        false
    })
    .await;
    if listening != Ok(true) {
        return unavailable(&format!(
            "`{SSHD}` did not start listening on port {port}: {}",
            log.join(" | ")
        ));
    }
    // Keep draining its log so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Some(Sshd {
        _child: child,
        port,
        user,
        dir,
    })
}

/// Runs `gen ARGS` in the project directory with only `env`'s remote settings.
async fn gen_with_env(gen_: &Project, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = gen_
        .command(args)
        .env_remove("GEN_SSH_OPTS")
        .env_remove("GEN_REMOTE_GEN");
    for (key, value) in env {
        command = command.env(key, value);
    }
    command.output().await
}

/// `finished 3s ago` and `finished 4s ago` are the same table a second apart.
fn without_seconds(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<String> = line
            .split(' ')
            .map(|w| match w.strip_suffix('s') {
                Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => "Ns".into(),
                _ => w.to_owned(),
            })
            .collect();
        out.push_str(&words.join(" "));
        out.push('\n');
    }
    out
}

#[tokio::test]
async fn remote_status_over_a_real_sshd_matches_local_status_and_failures_are_named() {
    let Some(sshd) = start_sshd().await else {
        return;
    };
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n",
    );
    let config = gen_.config(&Config::new(&server.url()).source("alpha", "data/a.jsonl"));
    let run = gen_.run(&["run", &config]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);

    let run_dir = gen_.run_path("");
    let target = format!("{}@127.0.0.1:{}", sshd.user, run_dir.display());
    let opts = sshd.opts(&sshd.key(), sshd.port);
    let gen_bin = GEN_BIN;
    let env = [("GEN_SSH_OPTS", opts.as_str()), ("GEN_REMOTE_GEN", gen_bin)];

    let local = gen_.run(&["status", &gen_.run_dir()]).await;
    assert_eq!(local.code, Some(0), "{}", local.stderr);
    let remote = gen_with_env(&gen_, &["status", "--remote", &target], &env).await;
    assert_eq!(remote.code, Some(0), "{}", remote.stderr);
    assert!(remote.stdout.contains("alpha"), "{}", remote.stdout);
    assert_eq!(
        without_seconds(&remote.stdout),
        without_seconds(&local.stdout)
    );

    let local_json = gen_.run(&["status", &gen_.run_dir(), "--json"]).await;
    let remote_json = gen_with_env(&gen_, &["status", "--remote", &target, "--json"], &env).await;
    assert_eq!(remote_json.code, Some(0), "{}", remote_json.stderr);
    assert_eq!(remote_json.stdout, local_json.stdout);

    // The ssh:// form with the port in the URL.
    let url = format!(
        "ssh://{}@127.0.0.1:{}{}",
        sshd.user,
        sshd.port,
        run_dir.display()
    );
    let no_port_opts = opts.replace(&format!("-p {}", sshd.port), "");
    let by_url = gen_with_env(
        &gen_,
        &["status", "--remote", &url],
        &[
            ("GEN_SSH_OPTS", no_port_opts.as_str()),
            ("GEN_REMOTE_GEN", gen_bin),
        ],
    )
    .await;
    assert_eq!(by_url.code, Some(0), "{}", by_url.stderr);
    assert_eq!(
        without_seconds(&by_url.stdout),
        without_seconds(&local.stdout)
    );

    // No run at that path: the remote gen's own message comes back.
    let empty = gen_.path("data");
    let no_run = gen_with_env(
        &gen_,
        &[
            "status",
            "--remote",
            &format!("{}@127.0.0.1:{}", sshd.user, empty.display()),
        ],
        &env,
    )
    .await;
    assert_eq!(no_run.code, Some(1), "{}", no_run.stderr);
    assert!(
        no_run.stderr.contains(&format!(
            "status` on `127.0.0.1` failed (exit code 1): no run found at `{}` (no `status.json`)",
            empty.display()
        )),
        "{}",
        no_run.stderr
    );

    // `gen` missing on the remote host.
    let missing = gen_with_env(
        &gen_,
        &["status", "--remote", &target],
        &[
            ("GEN_SSH_OPTS", opts.as_str()),
            ("GEN_REMOTE_GEN", "/nonexistent/bin/gen"),
        ],
    )
    .await;
    assert_eq!(missing.code, Some(1), "{}", missing.stderr);
    assert!(
        missing.stderr.contains(
            "error: `/nonexistent/bin/gen` (GEN_REMOTE_GEN) was not found on `127.0.0.1`"
        ),
        "{}",
        missing.stderr
    );
    let on_path = ["/usr/local/bin/gen", "/usr/bin/gen", "/bin/gen"]
        .iter()
        .any(|p| Path::new(p).exists());
    if !on_path {
        let default = gen_with_env(
            &gen_,
            &["status", "--remote", &target],
            &[("GEN_SSH_OPTS", opts.as_str())],
        )
        .await;
        assert_eq!(default.code, Some(1), "{}", default.stderr);
        assert!(
            default.stderr.contains(
                "error: gen is not installed on `127.0.0.1` (or not on PATH for non-interactive shells); set GEN_REMOTE_GEN"
            ),
            "{}",
            default.stderr
        );
    }

    // Nothing listens on the port: ssh's own reason is quoted.
    let closed = free_port();
    let closed_opts = sshd.opts(&sshd.key(), closed);
    let unreachable = gen_with_env(
        &gen_,
        &["status", "--remote", &target],
        &[
            ("GEN_SSH_OPTS", closed_opts.as_str()),
            ("GEN_REMOTE_GEN", gen_bin),
        ],
    )
    .await;
    assert_eq!(unreachable.code, Some(1), "{}", unreachable.stderr);
    assert!(
        unreachable.stderr.contains(&format!(
            "error: cannot reach `{}@127.0.0.1` over ssh (host unreachable or authentication refused): ssh: connect to host 127.0.0.1 port {closed}: Connection refused",
            sshd.user
        )),
        "{}",
        unreachable.stderr
    );

    // A key the server does not know: batch mode fails at once instead of prompting.
    let stranger_opts = sshd.opts(&sshd.dir.path().join("stranger_key"), sshd.port);
    let refused = gen_with_env(
        &gen_,
        &["status", "--remote", &target],
        &[
            ("GEN_SSH_OPTS", stranger_opts.as_str()),
            ("GEN_REMOTE_GEN", gen_bin),
        ],
    )
    .await;
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("over ssh (host unreachable or authentication refused)")
            && refused.stderr.contains("Permission denied (publickey)"),
        "{}",
        refused.stderr
    );
}

/// Issue 29 item 8: plain SSH boxes, no scheduler: `--remote` given for each host shows one
/// view of the fleet — every source summed over the hosts, a line per host — and a host that
/// cannot be read is a failed line with why, not the end of the view (before: `--remote`
/// once only).
#[tokio::test]
async fn status_over_several_remote_hosts_is_one_fleet_view() {
    let Some(sshd) = start_sshd().await else {
        return;
    };
    let server = FakeOpenAi::start(Knobs::default()).await;
    let gen_ = Project::new();
    gen_.write(
        "data/a.jsonl",
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n{\"prompt\": \"three\"}\n",
    );
    let config = gen_.config(&Config::new(&server.url()).source("alpha", "data/a.jsonl"));
    for (shard, dir) in [("0/2", "runs/box-0"), ("1/2", "runs/box-1")] {
        let run = gen_
            .run(&["run", &config, "--shard", shard, "--run-dir", dir])
            .await;
        assert_eq!(run.code, Some(0), "{}", run.stderr);
    }
    let target = |dir: &str| format!("{}@127.0.0.1:{}", sshd.user, gen_.path(dir).display());
    let opts = sshd.opts(&sshd.key(), sshd.port);
    let env = [("GEN_SSH_OPTS", opts.as_str()), ("GEN_REMOTE_GEN", GEN_BIN)];
    let (box0, box1) = (target("runs/box-0"), target("runs/box-1"));
    let args = ["status", "--remote", &box0, "--remote", &box1];
    let fleet = gen_with_env(&gen_, &args, &env).await;
    assert_eq!(fleet.code, Some(0), "{}{}", fleet.stdout, fleet.stderr);
    for line in ["fleet  2 hosts over ssh", "hosts  2 done"] {
        assert!(fleet.stdout.contains(line), "{line}:\n{}", fleet.stdout);
    }
    let json = gen_with_env(&gen_, &[&args[..], &["--json"]].concat(), &env).await;
    let view: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(view["sources"][0]["name"], "alpha", "{view}");
    assert_eq!(
        view["sources"][0]["done"], 3,
        "every prompt, summed: {view}"
    );
    assert_eq!(view["shards"][1]["dir"], box1.as_str(), "{view}");

    let gone = target("runs/box-9");
    let args = ["status", "--remote", &box0, "--remote", &gone];
    let partial = gen_with_env(&gen_, &args, &env).await;
    assert_eq!(
        partial.code,
        Some(1),
        "{}{}",
        partial.stdout,
        partial.stderr
    );
    let text = partial.stdout.replace('\n', " ");
    assert!(
        partial.stdout.contains("hosts  1 done, 1 failed")
            && text.contains("stopped by: `")
            && text.contains("runs/box-9")
            && partial.stdout.contains("rerun  on hosts 1: `gen run "),
        "{}",
        partial.stdout
    );
}
