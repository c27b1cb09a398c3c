//! Reasoning datasets: Mixture-of-Thoughts, OpenThoughts3, OpenCodeReasoning, NuminaMath.

use super::{CONTENT_ROLE, Expected, FROM_VALUE, Fixture, turns, u};
use crate::support::fake_hub::FakeRepo;
use crate::support::parquet::{Col, parquet};

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
