//! Bad configs: every one is refused with exit 2 and each problem located at
//! `file:line:column`; the first lines of several are pinned exactly.

use crate::harness::Project;

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
            "  unknown_server_key.toml:3:1  unknown field `colour`, expected one of `url`, `urls`, `model`, `api-key-env`, `launch`, `health-timeout-secs`, `max-restarts`, `log`, `host-memory`, `max-outage-secs`, `stall-secs`",
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

#[tokio::test]
async fn bad_configs_exit_2_with_file_line_column() {
    let project = Project::new();
    let cases = cases();
    assert!(cases.len() >= 15);
    assert!(cases.iter().filter(|c| c.2.is_some()).count() >= 8);
    let mut failures = Vec::new();
    let mut seen = String::new();
    for (name, text, pinned) in &cases {
        let file = format!("{name}.toml");
        project.write(&file, text);
        let out = project.run_gen(&["check", &file]).await;
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
