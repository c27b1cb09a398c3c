//! Fixtures for the ten datasets of `datasets.toml`: each repository's real file layout
//! (including files the source must not read) and schema, with invented content and the awkward
//! rows of field notes §1.3, plus the exact prompts each source must extract.

use serde_json::{Value, json};

use super::fake_hub::FakeRepo;
use super::parquet::{Col, parquet};

/// What one source must produce from its fixture.
pub struct Expected {
    pub source: &'static str,
    /// Each prompt's turns as `(role, content)`, in output order.
    pub prompts: Vec<Vec<(&'static str, String)>>,
    /// Each prompt's `source_key`, when the source has an id field.
    pub keys: Option<Vec<&'static str>>,
    pub dropped: Vec<(&'static str, u64)>,
    pub duplicates: u64,
    pub rows_read: u64,
}

pub struct Fixture {
    pub repo: FakeRepo,
    pub expected: Expected,
}

fn u(text: &str) -> (&'static str, String) {
    ("user", text.to_owned())
}
fn a(text: &str) -> (&'static str, String) {
    ("assistant", text.to_owned())
}
fn s(text: &str) -> (&'static str, String) {
    ("system", text.to_owned())
}

fn jsonl(rows: &[Value], raw: &[&str]) -> Vec<u8> {
    let mut text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    for line in raw {
        text.push_str(line);
        text.push('\n');
    }
    text.into_bytes()
}

fn turns(pairs: &[(&'static str, &'static str)]) -> Vec<Vec<&'static str>> {
    pairs.iter().map(|(x, y)| vec![*x, *y]).collect()
}

pub fn sharegpt() -> Fixture {
    let conv = |id: &str, turns: Value| json!({ "id": id, "conversations": turns });
    let v43 = Value::Array(vec![
        conv(
            "a1_0",
            json!([{"from": "human", "value": "What is Rust?"}, {"from": "gpt", "value": "A language."},
                   {"from": "human", "value": "Show an example."}, {"from": "gpt", "value": "fn main() {}"}]),
        ),
        // The second chunk of a split chat starts with a gpt turn.
        conv(
            "a1_1",
            json!([{"from": "gpt", "value": "...continued"}, {"from": "human", "value": "And traits?"},
                   {"from": "gpt", "value": "Traits are interfaces."}]),
        ),
        conv("b2_0", json!([])),
        conv(
            "c3_0",
            json!([{"from": "human", "value": ""}, {"from": "gpt", "value": "?"}, {"from": "human", "value": "  "}]),
        ),
        conv(
            "d4_0",
            json!([{"from": "human", "value": "What is Rust?"}, {"from": "chatgpt", "value": "A language."},
                   {"from": "human", "value": "Show an example."}]),
        ),
        json!(42),
        conv("e5_0", json!([{"from": "wizard", "value": "?"}])),
        conv(
            "f6_0",
            json!([{"from": "system", "value": "You are a helpful assistant."}, {"from": "human", "value": "Hi!"},
                   {"from": "bard", "value": "Hello."}, {"from": "human", "value": "Tell me a joke."}]),
        ),
        conv(
            "g7_0",
            json!([{"from": "human", "value": "Only a question, no answer"}]),
        ),
    ]);
    let wasteland = json!([conv(
        "w1_0",
        json!([{"from": "human", "value": "from the Wasteland file"}])
    )]);
    let repo = FakeRepo::new(
        "Aeala/ShareGPT_Vicuna_unfiltered",
        vec![
            (
                "ShareGPT_V4.3_unfiltered_cleaned_split.json",
                serde_json::to_vec_pretty(&v43).expect("json"),
            ),
            (
                "ShareGPT_2023.05.04v0_Wasteland_Edition.json",
                serde_json::to_vec(&wasteland).expect("json"),
            ),
            ("README.md", b"# ShareGPT\n".to_vec()),
        ],
    );
    Fixture {
        repo,
        expected: Expected {
            source: "sharegpt",
            prompts: vec![
                vec![u("What is Rust?"), u("Show an example.")],
                vec![u("And traits?")],
                vec![
                    s("You are a helpful assistant."),
                    u("Hi!"),
                    u("Tell me a joke."),
                ],
                vec![u("Only a question, no answer")],
            ],
            keys: Some(vec!["a1_0", "a1_1", "f6_0", "g7_0"]),
            dropped: vec![
                ("no_user_turn", 2),
                ("not_an_object", 1),
                ("unknown_role", 1),
            ],
            duplicates: 1,
            rows_read: 9,
        },
    }
}

const CONTENT_ROLE: &[&str] = &["content", "role"];
const FROM_VALUE: &[&str] = &["from", "value"];

pub fn ultrachat() -> Fixture {
    let shard = |ids: Vec<Option<&'static str>>, rows: Vec<Option<Vec<Vec<&'static str>>>>| {
        let prompts = rows
            .iter()
            .map(|r| r.as_ref().and_then(|t| t.first()).map(|t| t[0]))
            .collect();
        parquet(vec![
            ("prompt", Col::Str(prompts)),
            ("prompt_id", Col::Str(ids)),
            (
                "messages",
                Col::Turns {
                    keys: CONTENT_ROLE,
                    rows,
                },
            ),
        ])
    };
    let first = shard(
        vec![Some("u1"), Some("u2"), Some("u3")],
        vec![
            Some(turns(&[
                ("How do tides work?", "user"),
                ("The moon.", "assistant"),
                ("Why twice a day?", "user"),
                ("Two bulges.", "assistant"),
                ("Thanks!", "user"),
            ])),
            Some(turns(&[
                ("Name a prime.", "user"),
                ("7", "assistant"),
                ("", "user"),
                ("?", "assistant"),
                ("Another one?", "user"),
            ])),
            None,
        ],
    );
    let second = shard(
        vec![Some("u4"), Some("u5")],
        vec![
            Some(turns(&[
                ("Name a prime.", "user"),
                ("7", "assistant"),
                ("Another one?", "user"),
            ])),
            Some(turns(&[
                ("I was saying", "assistant"),
                ("Write a haiku about rain.", "user"),
            ])),
        ],
    );
    let other = shard(
        vec![Some("t1")],
        vec![Some(turns(&[("from test_sft", "user")]))],
    );
    let repo = FakeRepo::new(
        "HuggingFaceH4/ultrachat_200k",
        vec![
            ("data/train_sft-00000-of-00002-4a1b.parquet", first),
            ("data/train_sft-00001-of-00002-5c2d.parquet", second),
            ("data/test_sft-00000-of-00001-6e3f.parquet", other.clone()),
            ("data/train_gen-00000-of-00001-7a4b.parquet", other),
        ],
    );
    Fixture {
        repo,
        expected: Expected {
            source: "ultrachat",
            prompts: vec![
                vec![u("How do tides work?"), u("Why twice a day?"), u("Thanks!")],
                vec![u("Name a prime."), u("Another one?")],
                vec![u("Write a haiku about rain.")],
            ],
            keys: Some(vec!["u1", "u2", "u5"]),
            dropped: vec![("no_user_turn", 1)],
            duplicates: 1,
            rows_read: 5,
        },
    }
}

pub fn mixture_of_thoughts() -> Fixture {
    let shard = |rows: Vec<Option<Vec<Vec<&'static str>>>>, source: &'static str| {
        let n = rows.len();
        parquet(vec![
            (
                "messages",
                Col::Turns {
                    keys: CONTENT_ROLE,
                    rows,
                },
            ),
            ("num_tokens", Col::Int(vec![Some(1234); n])),
            ("source", Col::Str(vec![Some(source); n])),
        ])
    };
    let first = shard(
        vec![
            Some(turns(&[
                ("Prove that sqrt(2) is irrational.", "user"),
                ("<think>...</think> Suppose...", "assistant"),
            ])),
            Some(turns(&[
                ("Write a function that reverses a list.", "user"),
                ("def rev(xs): ...", "assistant"),
            ])),
            Some(turns(&[("", "user"), ("<think>", "assistant")])),
        ],
        "open-r1/OpenR1-Math-220k",
    );
    let second = shard(
        vec![
            Some(turns(&[
                ("Write a function that reverses a list.", "user"),
                ("other answer", "assistant"),
            ])),
            Some(turns(&[
                ("Why is the sky blue?", "user"),
                ("Rayleigh", "assistant"),
                ("And sunsets?", "user"),
            ])),
        ],
        "codeforces-cots",
    );
    let math = shard(
        vec![Some(turns(&[("from the math config", "user")]))],
        "math",
    );
    let repo = FakeRepo::new(
        "open-r1/Mixture-of-Thoughts",
        vec![
            ("all/train-00000-of-00002.parquet", first),
            ("all/train-00001-of-00002.parquet", second),
            ("math/train-00000-of-00001.parquet", math),
        ],
    );
    Fixture {
        repo,
        expected: Expected {
            source: "mixture_of_thoughts",
            prompts: vec![
                vec![u("Prove that sqrt(2) is irrational.")],
                vec![u("Write a function that reverses a list.")],
                vec![u("Why is the sky blue?")],
            ],
            keys: None,
            dropped: vec![("no_user_turn", 1)],
            duplicates: 1,
            rows_read: 5,
        },
    }
}

pub fn openthoughts() -> Fixture {
    let question = "Find all integers n such that n^2 + 1 is divisible by n + 1.";
    let rows: Vec<Option<Vec<Vec<&'static str>>>> = vec![
        Some(turns(&[
            ("human", question),
            ("gpt", "<think>answer 1</think>"),
        ])),
        Some(turns(&[
            ("human", question),
            ("gpt", "<think>answer 2</think>"),
        ])),
        Some(turns(&[
            ("human", question),
            ("assistant", "<think>answer 3</think>"),
        ])),
        Some(turns(&[
            (
                "system",
                "Your role as an assistant involves thoroughly exploring questions through a systematic long thinking process <|begin_of_thought|>",
            ),
            ("user", "What is the boiling point of water at 2 atm?"),
            ("assistant", "About 120 C"),
        ])),
        Some(turns(&[
            ("human", "Implement Dijkstra's algorithm."),
            ("gpt", "..."),
        ])),
    ];
    let n = rows.len();
    let first = parquet(vec![
        (
            "difficulty",
            Col::Int(vec![None, None, Some(7), None, Some(5)]),
        ),
        (
            "source",
            Col::Str(vec![Some("ai2-adapt-dev/openmath-2-math"); n]),
        ),
        (
            "domain",
            Col::Str(vec![
                Some("math"),
                Some("math"),
                Some("math"),
                Some("science"),
                Some("code"),
            ]),
        ),
        (
            "conversations",
            Col::Turns {
                keys: FROM_VALUE,
                rows,
            },
        ),
    ]);
    let second = parquet(vec![
        ("difficulty", Col::Int(vec![None])),
        ("source", Col::Str(vec![Some("stackexchange-physics")])),
        ("domain", Col::Str(vec![Some("science")])),
        (
            "conversations",
            Col::Turns {
                keys: FROM_VALUE,
                rows: vec![Some(turns(&[("human", question), ("gpt", "answer 4")]))],
            },
        ),
    ]);
    let repo = FakeRepo::new(
        "open-thoughts/OpenThoughts3-1.2M",
        vec![
            ("data/train-00000-of-00002.parquet", first),
            ("data/train-00001-of-00002.parquet", second),
            ("README.md", b"# OpenThoughts3\n".to_vec()),
        ],
    );
    Fixture {
        repo,
        expected: Expected {
            source: "openthoughts",
            prompts: vec![
                vec![u(question)],
                vec![u("What is the boiling point of water at 2 atm?")],
                vec![u("Implement Dijkstra's algorithm.")],
            ],
            keys: None,
            dropped: vec![],
            duplicates: 3,
            rows_read: 6,
        },
    }
}

/// The R2E-Gym first turn around an issue, as `datasets.toml` writes it.
pub fn r2e_user_turn(issue: &str) -> String {
    format!(
        "Repository root: /testbed\n\n<github_issue>\n{issue}\n</github_issue>\n\nConstraints:\n- Do not modify existing test files.\n- Prefer minimal, targeted edits.\n- Use small file views and avoid large command outputs.\n- After edits, run the relevant tests (prefer the provided selected tests)."
    )
}

/// R2E-Gym's agent system prompt, as `datasets.toml` writes it.
pub const R2E_SYSTEM: &str =
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

pub fn magpie() -> Fixture {
    let instructions = vec![
        Some("Explain the difference between TCP and UDP."),
        Some("用Python写一个快速排序。"),
        Some("asdf"),
        Some("hi"),
        Some(""),
        Some("Explain the difference between TCP and UDP."),
        Some("Summarize the plot of Hamlet in three sentences."),
    ];
    let n = instructions.len();
    let file = parquet(vec![
        (
            "uuid",
            Col::Str(vec![
                Some("m1"),
                Some("m2"),
                Some("m3"),
                Some("m4"),
                Some("m5"),
                Some("m6"),
                Some("m7"),
            ]),
        ),
        ("instruction", Col::Str(instructions)),
        ("response", Col::Str(vec![Some("a response"); n])),
        (
            "conversations",
            Col::Turns {
                keys: FROM_VALUE,
                rows: vec![Some(turns(&[("human", "ignored"), ("gpt", "ignored")])); n],
            },
        ),
        (
            "input_quality",
            Col::Str(vec![
                Some("good"),
                Some("excellent"),
                Some("very poor"),
                Some("poor"),
                Some("average"),
                Some("good"),
                None,
            ]),
        ),
        (
            "repeat_count",
            Col::Int(vec![
                Some(2),
                Some(0),
                Some(0),
                Some(5),
                Some(0),
                Some(2),
                Some(0),
            ]),
        ),
        (
            "language",
            Col::Str(vec![
                Some("EN"),
                Some("ZH"),
                Some("EN"),
                Some("EN"),
                Some("EN"),
                Some("EN"),
                Some("EN"),
            ]),
        ),
    ]);
    let repo = FakeRepo::new(
        "Magpie-Align/Magpie-Qwen2.5-Pro-1M-v0.1",
        vec![("data/train-00000-of-00001.parquet", file)],
    );
    Fixture {
        repo,
        expected: Expected {
            source: "magpie",
            prompts: vec![
                vec![u("Explain the difference between TCP and UDP.")],
                vec![u("用Python写一个快速排序。")],
                vec![u("Summarize the plot of Hamlet in three sentences.")],
            ],
            keys: Some(vec!["m1", "m2", "m7"]),
            dropped: vec![("excluded:input_quality", 2), ("no_user_turn", 1)],
            duplicates: 1,
            rows_read: 7,
        },
    }
}

pub fn opencodereasoning() -> Fixture {
    let a_question = "Given an array of n integers, print the maximum subarray sum.\n\nInput\nThe first line contains n.\n\nOutput\nPrint one integer.";
    let b_question = "You are given a string s. Count its palindromic substrings.";
    let inputs = vec![
        Some(a_question),
        Some(a_question),
        Some("-"),
        Some(b_question),
        Some(a_question),
    ];
    let n = inputs.len();
    let split_0 = parquet(vec![
        (
            "id",
            Col::Str(vec![
                Some("c1"),
                Some("c2"),
                Some("c3"),
                Some("c4"),
                Some("c5"),
            ]),
        ),
        ("input", Col::Str(inputs)),
        (
            "output",
            Col::Str(vec![
                Some(
                    "<think>\nlong reasoning\n</think>\n```python\nprint(1)\n```"
                );
                n
            ]),
        ),
        ("source", Col::Str(vec![Some("codeforces"); n])),
        ("license", Col::Str(vec![Some("cc-by-4.0"); n])),
        (
            "dataset",
            Col::Str(vec![
                Some("code_contests"),
                Some("code_contests"),
                Some("taco"),
                Some("code_contests"),
                Some("code_contests"),
            ]),
        ),
        ("split", Col::Str(vec![Some("train"); n])),
        ("difficulty", Col::Str(vec![Some("EASY"); n])),
        ("solution", Col::Str(vec![Some("print(1)"); n])),
    ]);
    let split_1 = parquet(vec![
        ("id", Col::Str(vec![Some("d1"), Some("d2")])),
        (
            "input",
            Col::Str(vec![Some("-"), Some("from split_1, never read")]),
        ),
        ("output", Col::Str(vec![Some("..."), Some("...")])),
        ("dataset", Col::Str(vec![Some("taco"), Some("apps")])),
        ("split", Col::Str(vec![Some("train"), Some("test")])),
        ("index", Col::Str(vec![Some("17"), Some("42")])),
    ]);
    let repo = FakeRepo::new(
        "nvidia/OpenCodeReasoning",
        vec![
            ("split_0/train-00000-of-00001.parquet", split_0),
            ("split_1/train-00000-of-00001.parquet", split_1),
        ],
    );
    Fixture {
        repo,
        expected: Expected {
            source: "opencodereasoning",
            prompts: vec![vec![u(a_question)], vec![u(b_question)]],
            keys: Some(vec!["c1", "c4"]),
            dropped: vec![("excluded:input", 1)],
            duplicates: 2,
            rows_read: 5,
        },
    }
}

pub fn numinamath() -> Fixture {
    let shard = |problems: Vec<Option<&'static str>>| {
        let n = problems.len();
        parquet(vec![
            ("source", Col::Str(vec![Some("olympiads"); n])),
            ("problem", Col::Str(problems)),
            ("solution", Col::Str(vec![Some("\\boxed{4}"); n])),
            (
                "messages",
                Col::Turns {
                    keys: CONTENT_ROLE,
                    rows: vec![Some(turns(&[("ignored", "user"), ("ignored", "assistant")])); n],
                },
            ),
        ])
    };
    let repo = FakeRepo::new(
        "AI-MO/NuminaMath-CoT",
        vec![
            (
                "data/train-00000-of-00002.parquet",
                shard(vec![Some("Compute $\\int_0^1 x^2\\,dx$."), Some("")]),
            ),
            (
                "data/train-00001-of-00002.parquet",
                shard(vec![Some("Prove that there are infinitely many primes.")]),
            ),
            (
                "data/test-00000-of-00001.parquet",
                shard(vec![Some("from the test split")]),
            ),
        ],
    );
    Fixture {
        repo,
        expected: Expected {
            source: "numinamath",
            prompts: vec![
                vec![u("Compute $\\int_0^1 x^2\\,dx$.")],
                vec![u("Prove that there are infinitely many primes.")],
            ],
            keys: None,
            dropped: vec![("no_user_turn", 1)],
            duplicates: 0,
            rows_read: 3,
        },
    }
}

pub fn wildchat() -> Fixture {
    const KEYS: &[&str] = &["content", "role", "language"];
    let turn = |content: &'static str, role: &'static str| vec![content, role, "English"];
    let rows = vec![
        Some(vec![
            turn("Write a poem about the sea", "user"),
            turn("The sea...", "assistant"),
            turn("Make it rhyme", "user"),
            turn("", "assistant"),
        ]),
        Some(vec![
            turn("", "user"),
            turn("", "assistant"),
            turn("translate 'hello' to French", "user"),
            turn("bonjour", "assistant"),
        ]),
        Some(vec![turn("", "user"), turn("I can help.", "assistant")]),
        Some(vec![
            turn("Write a poem about the sea", "user"),
            turn("Waves...", "assistant"),
            turn("Make it rhyme", "user"),
        ]),
    ];
    let file = parquet(vec![
        (
            "conversation_hash",
            Col::Str(vec![Some("h1"), Some("h2"), Some("h3"), Some("h4")]),
        ),
        ("model", Col::Str(vec![Some("gpt-3.5-turbo-0301"); 4])),
        (
            "timestamp",
            Col::Time(vec![
                1_680_998_573_000_000,
                1_681_000_000_123_456,
                1_681_000_100_000_000,
                1_681_000_200_000_000,
            ]),
        ),
        ("conversation", Col::Turns { keys: KEYS, rows }),
        ("turn", Col::Int(vec![Some(2), Some(2), Some(1), Some(2)])),
        (
            "language",
            Col::Str(vec![
                Some("English"),
                Some("French"),
                Some("English"),
                Some("English"),
            ]),
        ),
        ("toxic", Col::Bool(vec![false, false, false, false])),
        ("redacted", Col::Bool(vec![false, true, false, false])),
    ]);
    let repo = FakeRepo::new(
        "allenai/WildChat-1M",
        vec![("data/train-00000-of-00001.parquet", file)],
    );
    Fixture {
        repo,
        expected: Expected {
            source: "wildchat",
            prompts: vec![
                vec![u("Write a poem about the sea"), u("Make it rhyme")],
                vec![u("translate 'hello' to French")],
            ],
            keys: Some(vec!["h1", "h2"]),
            dropped: vec![("no_user_turn", 1)],
            duplicates: 1,
            rows_read: 4,
        },
    }
}

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

/// All ten, in `datasets.toml` order.
pub fn all() -> Vec<Fixture> {
    vec![
        sharegpt(),
        ultrachat(),
        mixture_of_thoughts(),
        openthoughts(),
        deepswe(),
        magpie(),
        opencodereasoning(),
        numinamath(),
        wildchat(),
        nemotron(),
    ]
}
