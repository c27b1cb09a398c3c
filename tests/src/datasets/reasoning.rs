//! Reasoning datasets: Mixture-of-Thoughts, OpenThoughts3, OpenCodeReasoning, NuminaMath.

use super::{CONTENT_ROLE, Expected, FROM_VALUE, Fixture, turns, u};
use crate::fake_hub::FakeRepo;
use crate::parquet_fixture::{Col, parquet};

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
    // split_1 as on the Hub: every `input` is `-`, `index` a numeric string into the source
    // dataset's split, which the source resolves by reading that dataset.
    let split_1 = parquet(vec![
        (
            "id",
            Col::Str(vec![
                Some("d1"),
                Some("d2"),
                Some("d3"),
                Some("d4"),
                Some("d5"),
                Some("d6"),
            ]),
        ),
        (
            "input",
            Col::Str(vec![
                Some("-"),
                Some("-"),
                Some("-"),
                Some("-"),
                Some("-"),
                Some("-"),
            ]),
        ),
        ("output", Col::Str(vec![Some("..."); 6])),
        (
            "dataset",
            Col::Str(vec![
                Some("taco"),
                Some("apps"),
                Some("taco"),
                Some("apps"),
                Some("code_contests"),
                Some("taco"),
            ]),
        ),
        (
            "split",
            Col::Str(vec![
                Some("train"),
                Some("test"),
                Some("test"),
                Some("train"),
                Some("train"),
                Some("train"),
            ]),
        ),
        (
            "index",
            Col::Str(vec![
                Some("3"),
                Some("1"),
                Some("0"),
                Some("99"),
                Some("0"),
                Some("0"),
            ]),
        ),
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
            prompts: vec![
                vec![u(a_question)],
                vec![u(b_question)],
                vec![u(TACO_TRAIN_3)],
                vec![u(APPS_TEST_1)],
                vec![u(TACO_TEST_0)],
            ],
            keys: Some(vec!["c1", "c4", "d1", "d2", "d3"]),
            // c3 (a `-` in split_0, which has no `index`), d4 (past the end of APPS train), d5
            // (a dataset `resolve` does not list).
            dropped: vec![("unresolved", 3)],
            // c2, c5 repeat c1; d6 (TACO train row 0) repeats c1's question too.
            duplicates: 3,
            rows_read: 11,
        },
    }
}

const TACO_TRAIN_3: &str = "Chef has N coins. Print the number of ways to split them.";
const APPS_TEST_1: &str = "Polycarp has n binary words. Reorder them so a game can be played.";
const TACO_TEST_0: &str =
    "Given a tree with N nodes, find its diameter.\n\n-----Input-----\nN, then N-1 edges.";

/// The datasets OpenCodeReasoning's split_1 points into, in their real layouts: BAAI/TACO's
/// Parquet conversion in `ALL/` next to its original Arrow files and loading script (the card's
/// `configs` name `ALL/train-*` and `ALL/test-*`, as on the Hub since "Convert dataset to
/// Parquet (#2)", commit 1257571; shard names follow the conversion's
/// `{split}-NNNNN-of-NNNNN.parquet`), and codeparrot/apps's `train.jsonl`/`test.jsonl` next to
/// its script. `it::python` checks that gen takes the row Python's `datasets` gives.
pub fn resolve_repos() -> Vec<FakeRepo> {
    let a_question = "Given an array of n integers, print the maximum subarray sum.\n\nInput\nThe first line contains n.\n\nOutput\nPrint one integer.";
    let taco = |questions: Vec<Option<&'static str>>| {
        let n = questions.len();
        let text = |value: &'static str| Col::Str(vec![Some(value); n]);
        parquet(vec![
            ("question", Col::Str(questions)),
            ("solutions", text("[\"print(1)\"]")),
            ("starter_code", text("")),
            (
                "input_output",
                text("{\"inputs\": [\"1\\n\"], \"outputs\": [\"1\\n\"]}"),
            ),
            ("difficulty", text("EASY")),
            ("raw_tags", text("['Math']")),
            ("name", text("")),
            ("source", text("codechef")),
            ("tags", text("['Mathematics']")),
            ("skill_types", text("[]")),
            ("url", text("https://www.codechef.com/problems/X")),
            ("Expected Auxiliary Space", text("")),
            ("time_limit", text("1 seconds")),
            ("date", text("2021-01-01")),
            ("picture_num", text("0")),
            ("memory_limit", text("256 megabytes")),
            ("Expected Time Complexity", text("")),
        ])
    };
    let taco_repo = FakeRepo::new(
        "BAAI/TACO",
        vec![
            (
                "ALL/train-00000-of-00002.parquet",
                taco(vec![
                    Some(a_question),
                    Some("taco train 1"),
                    Some("taco train 2"),
                ]),
            ),
            (
                "ALL/train-00001-of-00002.parquet",
                taco(vec![Some(TACO_TRAIN_3), Some("taco train 4")]),
            ),
            (
                "ALL/test-00000-of-00001.parquet",
                taco(vec![Some(TACO_TEST_0)]),
            ),
            ("train/data-00000-of-00009.arrow", b"not read".to_vec()),
            ("train/dataset_info.json", b"{}".to_vec()),
            ("train/state.json", b"{}".to_vec()),
            ("test/data-00000-of-00001.arrow", b"not read".to_vec()),
            ("TACO.py", b"# dataset script, not read\n".to_vec()),
            // The card's `configs`, as the Hub's Parquet conversion wrote them: what tells
            // Python's `load_dataset("BAAI/TACO")` which files make each split.
            (
                "README.md",
                b"---\nconfigs:\n- config_name: ALL\n  data_files:\n  - split: train\n    path: ALL/train-*\n  - split: test\n    path: ALL/test-*\n---\n# TACO\n".to_vec(),
            ),
        ],
    );
    let apps_row = |id: u64, question: &str| {
        serde_json::json!({
            "problem_id": id,
            "question": question,
            "solutions": "[\"print(1)\"]",
            "input_output": "{\"inputs\": [], \"outputs\": []}",
            "difficulty": "interview",
            "url": "https://codeforces.com/problemset/problem/1/A",
            "starter_code": "",
        })
        .to_string()
    };
    let apps_repo = FakeRepo::new(
        "codeparrot/apps",
        vec![
            (
                "train.jsonl",
                format!(
                    "{}\n{}\n",
                    apps_row(0, "apps train 0"),
                    apps_row(1, "apps train 1")
                )
                .into_bytes(),
            ),
            (
                "test.jsonl",
                format!(
                    "{}\n{}\n",
                    apps_row(0, "apps test 0"),
                    apps_row(1, APPS_TEST_1)
                )
                .into_bytes(),
            ),
            ("apps.py", b"# dataset script, not read\n".to_vec()),
            ("README.md", b"# APPS\n".to_vec()),
        ],
    );
    vec![taco_repo, apps_repo]
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
