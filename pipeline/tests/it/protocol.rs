//! The streaming client against the ways real servers differ on the wire (reasoning field
//! names, where usage arrives, error shapes, keep-alives): each test starts the fake OpenAI server with one protocol variant and checks exactly
//! what the real `ChatClient` parsed — content, reasoning, finish reason, usage — or which error
//! class it returned, with which message.

use gen_pipeline::inference::client::{ChatClient, Completion, RequestError, Usage};
use gen_sources::{Message, Role};
use gen_tests::fake_openai::{
    ErrorShape, FailKind, FakeOpenAi, Knobs, ReasoningField, UsageMode, Writes,
};
use serde_json::Map;

/// Sends `prompt` to a fresh fake server configured by `knobs`.
async fn ask(knobs: Knobs, prompt: &str) -> Result<Completion, RequestError> {
    let server = FakeOpenAi::start(knobs).await;
    let client =
        ChatClient::new(&server.url(), "fake-model".into(), None, 64, Map::new()).expect("client");
    client
        .complete(&[Message::new(Role::User, prompt)], 64)
        .await
}

/// What the fake answers to `prompt` when nothing goes wrong.
fn expected(prompt: &str) -> Completion {
    let content = format!("echo: {prompt}");
    let words = content.split_whitespace().count() as u64;
    Completion {
        content,
        reasoning_content: Some("thinking".into()),
        finish_reason: Some("stop".into()),
        usage: Some(Usage {
            prompt_tokens: 5,
            completion_tokens: words,
            total_tokens: 5 + words,
        }),
        model: Some("fake-model".into()),
        token_ids: None,
    }
}

#[tokio::test]
async fn reasoning_is_read_from_reasoning_content_and_from_reasoning() {
    for field in [ReasoningField::ReasoningContent, ReasoningField::Reasoning] {
        let knobs = Knobs {
            reasoning_field: field,
            ..Knobs::default()
        };
        let got = ask(knobs, "why is the sky blue").await;
        assert_eq!(got, Ok(expected("why is the sky blue")), "{field:?}");
    }
}

#[tokio::test]
async fn usage_in_the_last_chunk_or_in_every_chunk_gives_the_final_counts() {
    for usage in [UsageMode::LastChunk, UsageMode::Continuous] {
        let knobs = Knobs {
            usage,
            ..Knobs::default()
        };
        let got = ask(knobs, "count these four words").await;
        assert_eq!(got, Ok(expected("count these four words")), "{usage:?}");
    }
    // Without any usage the answer still stands; the usage is simply unknown.
    let knobs = Knobs {
        usage: UsageMode::Absent,
        ..Knobs::default()
    };
    let got = ask(knobs, "no usage").await;
    assert_eq!(
        got,
        Ok(Completion {
            usage: None,
            ..expected("no usage")
        })
    );
}

const SHAPES: [ErrorShape; 3] = [
    ErrorShape::Nested,
    ErrorShape::FlatMessage,
    ErrorShape::FlatString,
];

#[tokio::test]
async fn http_error_bodies_flat_and_nested_give_the_message_and_the_class() {
    // (requests failed first, their status, prompt, expected error)
    let cases = [
        (
            0,
            None,
            "REJECT me",
            RequestError::Rejected("HTTP 400: prompt too long".into()),
        ),
        (
            1,
            Some(500),
            "hello",
            RequestError::Transient("HTTP 500: Loading model".into()),
        ),
    ];
    for shape in SHAPES {
        for (fail_first, fail_status, prompt, error) in &cases {
            let knobs = Knobs {
                error_shape: shape,
                fail_first: *fail_first,
                fail_status: *fail_status,
                ..Knobs::default()
            };
            assert_eq!(ask(knobs, prompt).await, Err(error.clone()), "{shape:?}");
        }
    }
}

#[tokio::test]
async fn slow_start_and_queue_full_503s_mean_the_server_is_not_ready() {
    for (kind, message) in [
        (FailKind::Loading, "HTTP 503: Loading model"),
        (FailKind::QueueFull, "HTTP 503: The request queue is full."),
    ] {
        for shape in SHAPES {
            let knobs = Knobs {
                fail_first: 1,
                fail_kind: kind,
                error_shape: shape,
                ..Knobs::default()
            };
            let server = FakeOpenAi::start(knobs).await;
            let client = ChatClient::new(&server.url(), "fake-model".into(), None, 64, Map::new())
                .expect("client");
            let messages = [Message::new(Role::User, "hello")];
            assert_eq!(
                client.complete(&messages, 64).await,
                Err(RequestError::ServerDown(message.into())),
                "{kind:?} {shape:?}"
            );
            // Once it is ready, the same client gets the answer.
            assert_eq!(client.complete(&messages, 64).await, Ok(expected("hello")));
            assert_eq!(server.chat_requests(), 2);
        }
    }
}

#[tokio::test]
async fn error_events_flat_and_nested_inside_the_stream_are_transient() {
    for shape in SHAPES {
        for (code, message) in [
            (500, "Context size has been exceeded."),
            (503, "The request queue is full."),
        ] {
            let knobs = Knobs {
                error_shape: shape,
                error_event: Some((code, message.into())),
                ..Knobs::default()
            };
            let got = ask(knobs, "hello there").await;
            assert_eq!(
                got,
                Err(RequestError::Transient(format!(
                    "error event in stream: {message}"
                ))),
                "{shape:?} {code}"
            );
        }
    }
}

#[tokio::test]
async fn multi_byte_characters_split_across_writes_are_decoded_whole() {
    let prompt = "héllo wörld 🦀 — ñandú 日本語";
    for writes in [Writes::InsideChar, Writes::Bytes(1), Writes::Bytes(3)] {
        let knobs = Knobs {
            writes,
            ..Knobs::default()
        };
        assert_eq!(ask(knobs, prompt).await, Ok(expected(prompt)), "{writes:?}");
    }
}

/// The fake really cuts inside a character: the client side sees a first piece that is not
/// valid UTF-8 on its own (otherwise the test above would prove nothing).
#[tokio::test]
async fn the_fake_splits_a_character_across_two_body_chunks() {
    use futures_util::StreamExt as _;
    let server = FakeOpenAi::start(Knobs {
        writes: Writes::InsideChar,
        ..Knobs::default()
    })
    .await;
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.url()))
        .json(&serde_json::json!({"messages": [{"role": "user", "content": "é"}]}))
        .send()
        .await
        .expect("send");
    let chunks: Vec<_> = response
        .bytes_stream()
        .map(|c| c.expect("chunk"))
        .collect()
        .await;
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    assert!(std::str::from_utf8(&chunks[0]).is_err());
    assert!(std::str::from_utf8(&chunks[1]).is_err());
    assert!(String::from_utf8(chunks.concat()).is_ok());
}

#[tokio::test]
async fn sse_variants_comments_compact_data_crlf_and_any_write_boundaries() {
    let variants = [
        Knobs {
            keep_alive_comments: true,
            ..Knobs::default()
        },
        Knobs {
            data_without_space: true,
            ..Knobs::default()
        },
        Knobs {
            crlf: true,
            ..Knobs::default()
        },
        Knobs {
            writes: Writes::PerEvent,
            ..Knobs::default()
        },
        Knobs {
            writes: Writes::Bytes(7),
            ..Knobs::default()
        },
        // Everything at once, with `\r` and `\n` of one line ending in different writes.
        Knobs {
            keep_alive_comments: true,
            data_without_space: true,
            crlf: true,
            usage: UsageMode::Continuous,
            reasoning_field: ReasoningField::Reasoning,
            writes: Writes::Bytes(1),
            ..Knobs::default()
        },
    ];
    for knobs in variants {
        let label = format!("{knobs:?}");
        assert_eq!(
            ask(knobs, "ünïcode and ascii").await,
            Ok(expected("ünïcode and ascii")),
            "{label}"
        );
    }
}

#[tokio::test]
async fn a_stream_without_done_is_never_success_whatever_the_framing() {
    for knobs in [
        Knobs::default(),
        Knobs {
            crlf: true,
            keep_alive_comments: true,
            writes: Writes::Bytes(1),
            ..Knobs::default()
        },
    ] {
        let label = format!("{knobs:?}");
        assert_eq!(
            ask(knobs, "CUT here").await,
            Err(RequestError::ServerDown(
                "stream ended without [DONE]".into()
            )),
            "{label}"
        );
    }
}
