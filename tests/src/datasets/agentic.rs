//! R2E-Gym (agent system prompt + issue template) and Llama-Nemotron (JSONL, `input` history).

use serde_json::{Value, json};

use super::{Expected, Fixture, a, jsonl, s, u};
use crate::fake_hub::FakeRepo;
use crate::parquet_fixture::{Col, parquet};

/// The R2E-Gym first turn around an issue, as `datasets.toml` writes it.
pub(super) fn r2e_user_turn(issue: &str) -> String {
    format!(
        "Repository root: /testbed\n\n<github_issue>\n{issue}\n</github_issue>\n\nConstraints:\n- Do not modify existing test files.\n- Prefer minimal, targeted edits.\n- Use small file views and avoid large command outputs.\n- After edits, run the relevant tests (prefer the provided selected tests)."
    )
}

/// R2E-Gym's agent system prompt, as `datasets.toml` writes it.
pub(super) const R2E_SYSTEM: &str =
    "You are a programming agent operating in a repository mounted at /testbed.
Goal: make minimal changes to non-test files to fix the GitHub issue.

Token-efficiency rules:
- Keep reasoning brief (1-2 sentences).
- Avoid large directory listings and long file views.
- Prefer search/grep and narrow file_editor view_range (e.g. [1, 120]).
- Prefer concise=true for file_editor view unless you need exact lines.
- After making an edit, run the relevant tests (prefer the provided selected tests).

OUTPUT PROTOCOL (STRICT):
- The last thing you output MUST be exactly one tool call block in this XML format:
  <function=TOOL_NAME>
    <parameter=KEY>VALUE</parameter>
    ...
  </function>
- Allowed TOOL_NAME: file_editor, search, execute_bash, finish
- Only call one tool at a time.
- Allowed parameter keys:
  - execute_bash: cmd
  - search: search_term, path
  - file_editor: command, path, file_text, old_str, new_str, insert_line, view_range, concise
  - finish: command, result";

fn nemotron_row(input: Value, system_prompt: &str, used: &str) -> Value {
    json!({
        "input": input,
        "output": "<think>\n...\n</think>\nanswer",
        "category": "chat",
        "license": "cc-by-4.0",
        "reasoning": if system_prompt.ends_with("on") { "on" } else { "off" },
        "generator": "DeepSeek-R1",
        "used_in_training": used,
        "version": "v1",
        "system_prompt": system_prompt,
    })
}

pub fn deepswe() -> Fixture {
    let n = 5;
    let file = parquet(vec![
        (
            "repo_name",
            Col::Str(vec![
                Some("aiohttp"),
                Some("pandas"),
                Some("numpy"),
                Some("tornado"),
                Some("pillow"),
            ]),
        ),
        (
            "docker_image",
            Col::Str(vec![
                Some("namanjain12/aiohttp_final:abc"),
                Some("namanjain12/pandas_final:def"),
                Some("namanjain12/numpy_final:123"),
                Some("namanjain12/tornado_final:456"),
                Some("namanjain12/pillow_final:789"),
            ]),
        ),
        (
            "commit_hash",
            Col::Str(vec![
                Some("abc"),
                Some("def"),
                Some("123"),
                Some("456"),
                Some("789"),
            ]),
        ),
        (
            "prompt",
            Col::Str(vec![
                Some(
                    "You are an expert software engineer. Write a GitHub issue for this commit..."
                );
                n
            ]),
        ),
        (
            "problem_statement",
            Col::Str(vec![
                Some(
                    "[ISSUE]\nTitle: ClientSession.close() leaks connectors\n\nSteps to reproduce...\n[/ISSUE]",
                ),
                Some("`DataFrame.rename` ignores `errors=\"raise\"` for missing labels."),
                Some(""),
                None,
                Some("[ISSUE]\n\n[/ISSUE]"),
            ]),
        ),
        (
            "parsed_commit_content",
            Col::Str(vec![Some("{\"file_diffs\": []}"); n]),
        ),
        (
            "execution_result_content",
            Col::Str(vec![Some("{\"test_results\": {}}"); n]),
        ),
        (
            "modified_files",
            Col::Str(vec![Some("[\"aiohttp/client.py\"]"); n]),
        ),
    ]);
    let repo = FakeRepo::new(
        "R2E-Gym/R2E-Gym-Subset",
        vec![("data/train-00000-of-00001.parquet", file)],
    );
    let system = R2E_SYSTEM;
    Fixture {
        repo,
        expected: Expected {
            source: "deepswe",
            prompts: vec![
                vec![
                    s(system),
                    u(&r2e_user_turn(
                        "Title: ClientSession.close() leaks connectors\n\nSteps to reproduce...",
                    )),
                ],
                vec![
                    s(system),
                    u(&r2e_user_turn(
                        "`DataFrame.rename` ignores `errors=\"raise\"` for missing labels.",
                    )),
                ],
            ],
            keys: Some(vec![
                "namanjain12/aiohttp_final:abc",
                "namanjain12/pandas_final:def",
            ]),
            dropped: vec![("no_user_turn", 3)],
            duplicates: 0,
            rows_read: 5,
        },
    }
}

pub fn nemotron() -> Fixture {
    let on = "detailed thinking on";
    let off = "detailed thinking off";
    let chat = jsonl(
        &[
            nemotron_row(
                json!([{"role": "user", "content": "Plan a 3-day trip to Kyoto."}, {"role": "assistant", "content": "Day 1: temples."},
                       {"role": "user", "content": "Make day 2 about food."}]),
                off,
                "yes",
            ),
            nemotron_row(
                json!([{"role": "system", "content": on}, {"role": "user", "content": "Is a tomato a fruit?"}]),
                on,
                "no",
            ),
            nemotron_row(json!([]), on, "yes"),
        ],
        &["{\"input\": [{\"role\": \"user\", \"content\": \"trunc"],
    );
    let code = jsonl(
        &[nemotron_row(
            json!([{"role": "user", "content": "Write a Python function to check for primes."}]),
            on,
            "yes",
        )],
        &[],
    );
    let math = jsonl(
        &[
            nemotron_row(
                json!([{"role": "user", "content": "Solve for x: 2x + 3 = 11."}]),
                on,
                "yes",
            ),
            nemotron_row(
                json!([{"role": "user", "content": "Write a Python function to check for primes."}]),
                off,
                "yes",
            ),
        ],
        &[],
    );
    let science = jsonl(
        &[nemotron_row(
            json!([{"role": "user", "content": "Why do ice cubes float?"}, {"role": "assistant", "content": ""}]),
            on,
            "yes",
        )],
        &[],
    );
    let safety = jsonl(
        &[nemotron_row(
            json!([{"role": "user", "content": "How do I pick a strong password?"}]),
            off,
            "yes",
        )],
        &[],
    );
    let rl = jsonl(
        &[nemotron_row(
            json!([{"role": "user", "content": "from RL, never read"}]),
            on,
            "yes",
        )],
        &[],
    );
    let repo = FakeRepo::new(
        "nvidia/Llama-Nemotron-Post-Training-Dataset",
        vec![
            ("SFT/chat/chat.jsonl", chat),
            ("SFT/code/code_v1.jsonl", code),
            ("SFT/math/math_v1.1.jsonl", math),
            ("SFT/science/science.jsonl", science),
            ("SFT/safety/safety.jsonl", safety),
            ("RL/instruction_following/if.jsonl", rl),
        ],
    );
    Fixture {
        repo,
        expected: Expected {
            source: "nemotron",
            prompts: vec![
                vec![
                    u("Plan a 3-day trip to Kyoto."),
                    a("Day 1: temples."),
                    u("Make day 2 about food."),
                ],
                vec![u("Is a tomato a fruit?")],
                vec![u("Write a Python function to check for primes.")],
                vec![u("Solve for x: 2x + 3 = 11.")],
                vec![u("How do I pick a strong password?")],
                vec![u("Why do ice cubes float?")],
            ],
            keys: None,
            dropped: vec![("bad_json", 1), ("no_user_turn", 1)],
            duplicates: 1,
            rows_read: 9,
        },
    }
}
