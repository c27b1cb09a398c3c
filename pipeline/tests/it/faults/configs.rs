//! Bad configs: every one is refused with exit 2 and each problem located at
//! `file:line:column`; the first lines of several are pinned exactly.

use crate::support::Project;

/// `text` with every run of whitespace one space: `gen doctor` wraps its lines to the terminal.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

const SOURCE: &str = "\n[[source]]\nname = \"a\"\npath = \"a.jsonl\"\n";

/// (name, config text, the exact problem line when pinned; every case has one problem)
fn cases() -> Vec<(&'static str, String, Option<&'static str>)> {
    let server = "[server]\nurl = \"http://127.0.0.1:9\"\n";
    let generation = "\n[generation]\nmax-tokens = 16\n";
    let base = format!("{server}{generation}");
    let case = |name, text: String| (name, text, None);
    let pin = |name: &'static str, text: String, line: &'static str| (name, text, Some(line));
    vec![
        pin(
            "syntax_error",
            format!("{server}[generation\n{SOURCE}"),
            "  syntax_error.toml:3:12  unclosed table, expected `]`",
        ),
        case(
            "unterminated_string",
            format!("[server]\nurl = \"http://127.0.0.1:9\n{generation}{SOURCE}"),
        ),
        pin(
            "duplicate_key",
            format!("{server}url = \"http://127.0.0.1:8\"\n{generation}{SOURCE}"),
            "  duplicate_key.toml:3:1  duplicate key",
        ),
        pin(
            "missing_generation",
            format!("{server}{SOURCE}"),
            "  missing_generation.toml:1:1  missing `[generation]` table (at least `max-tokens = …`)",
        ),
        case(
            "unknown_top_table",
            format!("{base}[servers]\nurl = \"x\"\n{SOURCE}"),
        ),
        pin(
            "unknown_server_key",
            format!("{server}colour = 1\n{generation}{SOURCE}"),
            "  unknown_server_key.toml:3:1  unknown key `colour` in `[server]`, expected one of `url`, `urls`, `model`, `api-key-env`, `launch`, `health-timeout-secs`, `max-restarts`, `log`, `host-memory`, `max-outage-secs`, `startup-timeout-secs`, `stall-secs`",
        ),
        pin(
            "worker_key_with_underscore",
            format!("{base}{SOURCE}memory_limit = \"8G\"\n"),
            "  worker_key_with_underscore.toml:10:1  unknown key `memory_limit` in `[[source]]`: did you mean `memory-limit`?",
        ),
        pin(
            "weight_not_a_number",
            format!(
                "{base}{SOURCE}[source.generation]\ntemperature = [{{ value = 0.6, weight = \"three\" }}]\n"
            ),
            "  weight_not_a_number.toml:11:40  invalid type: string \"three\", expected f64",
        ),
        pin(
            "samples_zero",
            format!("{base}samples = 0\n{SOURCE}"),
            "  samples_zero.toml:6:11  `samples` must be at least 1",
        ),
        pin(
            "distribution_on_seed",
            format!("{base}{SOURCE}[source.generation]\nseed = [{{ value = 1, weight = 1 }}]\n"),
            "  distribution_on_seed.toml:11:8  `seed` takes one value, not a weighted list (only `temperature`, `top-p`, `top-k`, `min-p` and `reasoning-effort` are drawn per request)",
        ),
        pin(
            "name_starts_with_a_dash",
            format!("{base}\n[[source]]\nname = \"-x\"\npath = \"a.jsonl\"\n"),
            "  name_starts_with_a_dash.toml:8:8  source name `-x` starts with `-`: it would be read as an option; start it with a letter or digit",
        ),
        case(
            "name_is_an_option",
            format!("{base}\n[[source]]\nname = \"--help\"\npath = \"a.jsonl\"\n"),
        ),
        pin(
            "name_too_long",
            format!(
                "{base}\n[[source]]\nname = \"{}\"\npath = \"a.jsonl\"\n",
                "n".repeat(300)
            ),
            "  name_too_long.toml:8:8  source name `nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn…` has 300 characters, at most 64 are allowed",
        ),
        pin(
            "name_with_a_slash",
            format!("{base}\n[[source]]\nname = \"a/b\"\npath = \"a.jsonl\"\n"),
            "  name_with_a_slash.toml:8:8  source name `a/b` has `/` (a name is a directory of the run, not a path): use only letters, digits, `-`, `_` and `.`",
        ),
        pin(
            "revision_with_a_space",
            format!(
                "{base}\n[[source]]\nname = \"a\"\nrepo = \"o/n\"\nfiles = [\"*.parquet\"]\nrevision = \"v1 final\"\n"
            ),
            "  revision_with_a_space.toml:11:12  source `a`: `revision` `v1 final` cannot be a branch, tag or commit: it has whitespace (' ')",
        ),
        case(
            "unknown_source_key",
            format!("{base}{SOURCE}promt-field = \"q\"\n"),
        ),
        pin(
            "url_not_http",
            format!("[server]\nurl = \"ftp://127.0.0.1:9\"\n{generation}{SOURCE}"),
            "  url_not_http.toml:2:7  `url` must be an http(s) URL such as `http://127.0.0.1:30000`, got `ftp://127.0.0.1:9`",
        ),
        case(
            "url_wrong_type",
            format!("[server]\nurl = 30000\n{generation}{SOURCE}"),
        ),
        case(
            "zero_max_tokens",
            format!("{server}\n[generation]\nmax-tokens = 0\n{SOURCE}"),
        ),
        pin(
            "negative_concurrency",
            format!("{base}concurrency = -4\n{SOURCE}"),
            "  negative_concurrency.toml:6:15  `concurrency` must be at least 1, or \"auto\"",
        ),
        case(
            "temperature_out_of_range",
            format!("{base}temperature = 99.0\n{SOURCE}"),
        ),
        case("top_p_zero", format!("{base}top-p = 0.0\n{SOURCE}")),
        case("no_sources", base.clone()),
        case(
            "source_not_array",
            format!("{base}[source]\nname = \"a\"\npath = \"a.jsonl\"\n"),
        ),
        case(
            "bad_source_name",
            format!("{base}\n[[source]]\nname = \"a b\"\npath = \"a.jsonl\"\n"),
        ),
        pin(
            "duplicate_source",
            format!("{base}{SOURCE}{SOURCE}"),
            "  duplicate_source.toml:12:8  source `a` is listed twice (first at 8:8)",
        ),
        case("limit_zero", format!("{base}{SOURCE}limit = 0\n")),
        case(
            "no_path_or_repo",
            format!("{base}\n[[source]]\nname = \"a\"\n"),
        ),
        pin(
            "bad_turns_value",
            format!("{base}{SOURCE}turns = \"some\"\n"),
            "  bad_turns_value.toml:10:9  unknown variant `some`, expected one of `first`, `all`, `history`",
        ),
        pin(
            "bad_tool_turns_value",
            format!("{base}{SOURCE}tool-turns = \"drop\"\n"),
            "  bad_tool_turns_value.toml:10:14  unknown variant `drop`, expected `keep` or `cut`",
        ),
        case(
            "bad_memory_limit",
            format!("{base}{SOURCE}memory-limit = \"lots\"\n"),
        ),
        case(
            "empty_launch",
            format!("{server}launch = []\n{generation}{SOURCE}"),
        ),
        pin(
            "zero_parallel_prep",
            format!("[run]\nmax-parallel-prep = 0\n\n{base}{SOURCE}"),
            "  zero_parallel_prep.toml:2:21  `max-parallel-prep` must be at least 1",
        ),
    ]
}

/// Several problems of different kinds in one file, a source among them with four (its data
/// file misspelt too): all are reported by one `gen check`, none waits for another to be
/// fixed, and each unknown key is one line saying what was meant.
#[tokio::test]
async fn every_problem_is_reported_in_one_pass() {
    let project = Project::new();
    project.write("data.jsonl", "{\"prompt\": \"hi\"}\n");
    project.write(
        "many.toml",
        "[server]\nurl = \"http://127.0.0.1:9\"\nstall-secs = \"long\"\n\n[generation]\nmax-tokens = 16\ntemperatur = 0.5\n\n[[source]]\nname = \"a\"\npath = \"dtaa.jsonl\"\nlimt = 5\nlimit = 0\nturns = \"some\"\nmemory_limit = \"8G\"\n",
    );
    let out = project.run(&["check", "many.toml"]).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    // `gen run` refuses it with the same list.
    let run = project.run(&["run", "many.toml"]).await;
    assert_eq!((run.code, &run.stderr), (Some(2), &out.stderr));
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines[0], "error: `many.toml` has 7 problems",
        "{}",
        out.stderr
    );
    let located: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.trim_start().split("  ").next().unwrap_or(""))
        .collect();
    assert_eq!(
        located,
        [
            "many.toml:3:14",
            "many.toml:7:1",
            "many.toml:11:8",
            "many.toml:12:1",
            "many.toml:13:9",
            "many.toml:14:9",
            "many.toml:15:1"
        ],
        "{}",
        out.stderr
    );
    assert_eq!(
        lines[2],
        "  many.toml:7:1  unknown key `temperatur` in `[generation]`: did you mean `temperature`?",
        "{}",
        out.stderr
    );
    assert!(
        lines[3].ends_with("dtaa.jsonl` matches no file"),
        "{}",
        out.stderr
    );
    assert_eq!(
        lines[4], "  many.toml:12:1  unknown key `limt` in `[[source]]`: did you mean `limit`?",
        "{}",
        out.stderr
    );
    assert!(
        lines[6].contains("unknown variant `some`"),
        "{}",
        out.stderr
    );
}

/// `api-key-env` naming a variable that is not set passes, with a warning from `gen check`
/// and from `gen doctor`: requests would go without a key.
#[tokio::test]
async fn an_unset_api_key_variable_is_a_warning() {
    let project = Project::new();
    project.write("a.jsonl", "{\"prompt\": \"hi\"}\n");
    project.write(
        "key.toml",
        format!("[server]\nurl = \"http://127.0.0.1:9\"\napi-key-env = \"GEN_TEST_UNSET_KEY\"\n\n[generation]\nmax-tokens = 16\n{SOURCE}"),
    );
    let warning = "`[server] api-key-env` names `GEN_TEST_UNSET_KEY`, which is not set here: requests go without an API key";
    let out = project.run(&["check", "key.toml"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stderr.lines().next(),
        Some(format!("warning: {warning}").as_str()),
        "{}",
        out.stderr
    );
    let out = project.run(&["doctor", "key.toml"]).await;
    assert!(
        words(&out.stdout).contains(&words(warning)),
        "{}",
        out.stdout
    );
    let set = project
        .run_with_env(&["check", "key.toml"], &[("GEN_TEST_UNSET_KEY", "k")])
        .await;
    assert_eq!((set.code, set.stderr.as_str()), (Some(0), ""));
}

/// A file that is not TOML at all (here JSON lines) stops after a few errors, saying so.
#[tokio::test]
async fn a_file_that_is_not_toml_stops_after_a_few_errors() {
    let project = Project::new();
    let rows: String = (0..500)
        .map(|i| format!("{{\"prompt\": \"question {i}\"}}\n"))
        .collect();
    project.write("data.jsonl", &rows);
    let out = project.run(&["check", "data.jsonl"]).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(lines.len() <= 6, "{}", out.stderr);
    assert!(
        lines
            .last()
            .is_some_and(|l| l.contains("this is not a TOML config: ")),
        "{}",
        out.stderr
    );
}

/// What the run would trip on, found before it starts: an unset `${VAR}` in `launch`, a
/// launch program that does not exist, a `path` that matches nothing. `gen check`, `gen
/// doctor` and `gen run` each report them at `file:line:column`.
#[tokio::test]
async fn preflight_finds_unset_variables_missing_programs_and_paths_matching_nothing() {
    let project = Project::new();
    project.write("a.jsonl", "{\"prompt\": \"hi\"}\n");
    let text = "[server]\nurl = \"http://127.0.0.1:{port}\"\nlaunch = [\"./no-such-server\", \"-m\", \"${GEN_TEST_UNSET_MODEL}\", \"--port\", \"{port}\"]\n\n[generation]\nmax-tokens = 16\n\n[[source]]\nname = \"a\"\npath = \"a.jsonl\"\n\n[[source]]\nname = \"b\"\npath = \"data/*.jsonl\"\n";
    project.write("pre.toml", text);
    project.use_config("pre.toml");
    let expected = [
        "pre.toml:3:11  `launch` program `./no-such-server` does not exist",
        "pre.toml:3:37  `launch` uses `${GEN_TEST_UNSET_MODEL}`, which is not set here",
        "pre.toml:14:8  source `b`: `",
    ];
    for command in ["check", "run"] {
        let out = project.run(&[command, "pre.toml"]).await;
        assert_eq!(out.code, Some(2), "{command}: {}", out.stderr);
        for line in expected {
            assert!(
                out.stderr.contains(line),
                "{command}: {line}\n{}",
                out.stderr
            );
        }
        assert!(
            out.stderr.contains("data/*.jsonl` matches no file"),
            "{}",
            out.stderr
        );
        assert!(!project.run_path("").exists(), "{command} started a run");
    }
    let out = project.run(&["doctor", "pre.toml"]).await;
    for line in expected {
        assert!(
            words(&out.stdout).contains(&words(line)),
            "doctor: {line}\n{}",
            out.stdout
        );
    }
    assert_eq!(out.code, Some(1), "{}", out.stdout);
}

/// The quickstart re-run as a newcomer types it, in a new shell after `./scripts/quickstart.sh`
/// (`LLAMA_SERVER_BIN` and `GEN_TEST_MODEL` gone): its launch line finds the server and model
/// where the install script caches them (was: "`${GEN_TEST_MODEL}` … is not set here").
#[tokio::test]
async fn the_quickstart_finds_the_cached_server_and_model_without_the_scripts_environment() {
    let project = Project::new();
    crate::support::copy_examples(&project);
    project.write(".cache/gen/models/SmolLM2-135M-Instruct.Q4_1.gguf", "gguf");
    let server = project.path(".cache/gen/llama/bin/llama-server");
    project.write(".cache/gen/llama/bin/llama-server", "#!/bin/sh\n");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let home = project.path("");
    let out = project
        .command(&["check", "examples/quickstart.toml"])
        .env_remove("LLAMA_SERVER_BIN")
        .env_remove("GEN_TEST_MODEL")
        .env("HOME", &home.to_string_lossy())
        .output()
        .await;
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
}

#[tokio::test]
async fn bad_configs_exit_2_with_file_line_column() {
    let project = Project::new();
    project.write("a.jsonl", "{\"prompt\": \"hi\"}\n");
    let cases = cases();
    assert!(cases.len() >= 15);
    assert!(cases.iter().filter(|c| c.2.is_some()).count() >= 8);
    let mut failures = Vec::new();
    let mut seen = String::new();
    for (name, text, pinned) in &cases {
        let file = format!("{name}.toml");
        project.write(&file, text);
        let out = project.run(&["check", &file]).await;
        let lines: Vec<&str> = out.stderr.lines().collect();
        seen.push_str(&format!("{name}: {:?}\n", &lines[..lines.len().min(3)]));
        let located = lines.iter().skip(1).any(|l| {
            l.trim_start()
                .strip_prefix(&format!("{file}:"))
                .and_then(|rest| rest.split_once(' '))
                .is_some_and(|(at, _)| {
                    let mut parts = at.split(':');
                    parts.next().is_some_and(|l| l.parse::<usize>().is_ok())
                        && parts.next().is_some_and(|c| c.parse::<usize>().is_ok())
                })
        });
        let first_ok = lines
            .first()
            .is_some_and(|l| l.starts_with(&format!("error: `{file}` has ")));
        let pinned_ok = pinned
            .is_none_or(|p| lines[..] == [format!("error: `{file}` has 1 problem").as_str(), p]);
        if out.code != Some(2) || !located || !first_ok || !pinned_ok {
            failures.push(format!("{name}: code {:?}\n{}", out.code, out.stderr));
        }
    }
    eprintln!("{seen}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
