//! Chat datasets: ShareGPT (one JSON array), UltraChat, WildChat, Magpie.

use serde_json::{Value, json};

use super::{CONTENT_ROLE, Expected, FROM_VALUE, Fixture, s, turns, u};
use crate::fake_hub::FakeRepo;
use crate::parquet_fixture::{Col, parquet};

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
            // u2's empty user turn cuts its conversation before it (what follows answered a
            // message we do not have), so u4 is not its duplicate.
            prompts: vec![
                vec![u("How do tides work?"), u("Why twice a day?"), u("Thanks!")],
                vec![u("Name a prime.")],
                vec![u("Name a prime."), u("Another one?")],
                vec![u("Write a haiku about rain.")],
            ],
            keys: Some(vec!["u1", "u2", "u4", "u5"]),
            dropped: vec![("no_user_turn", 1)],
            duplicates: 0,
            rows_read: 5,
        },
    }
}

pub fn wildchat() -> Fixture {
    // The string fields of a real turn; `TurnsWithMeta` adds the others (a `header` struct, a
    // timestamp, booleans, an integer), which the reader must step over.
    const KEYS: &[&str] = &[
        "content",
        "country",
        "hashed_ip",
        "language",
        "role",
        "state",
    ];
    let turn = |content: &'static str, role: &'static str| {
        vec![content, "Germany", "5f0c9a7e", "English", role, "Bavaria"]
    };
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
        // The same prompt as a ShareGPT row: in a run of datasets.toml, sharegpt answers it.
        Some(vec![
            turn("Only a question, no answer", "user"),
            turn("Sure.", "assistant"),
        ]),
    ];
    let file = parquet(vec![
        (
            "conversation_hash",
            Col::Str(vec![
                Some("h1"),
                Some("h2"),
                Some("h3"),
                Some("h4"),
                Some("h5"),
            ]),
        ),
        ("model", Col::Str(vec![Some("gpt-3.5-turbo-0301"); 5])),
        (
            "timestamp",
            Col::Time(vec![
                1_680_998_573_000_000,
                1_681_000_000_123_456,
                1_681_000_100_000_000,
                1_681_000_200_000_000,
                1_681_000_300_000_000,
            ]),
        ),
        ("conversation", Col::TurnsWithMeta { keys: KEYS, rows }),
        (
            "turn",
            Col::Int(vec![Some(2), Some(2), Some(1), Some(2), Some(1)]),
        ),
        (
            "language",
            Col::Str(vec![
                Some("English"),
                Some("French"),
                Some("English"),
                Some("English"),
                Some("English"),
            ]),
        ),
        ("toxic", Col::Bool(vec![false; 5])),
        (
            "redacted",
            Col::Bool(vec![false, true, false, false, false]),
        ),
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
                vec![u("Only a question, no answer")],
            ],
            keys: Some(vec!["h1", "h2", "h5"]),
            dropped: vec![("no_user_turn", 1)],
            duplicates: 1,
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
