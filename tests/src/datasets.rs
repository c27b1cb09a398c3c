//! Fixtures for the ten datasets of `datasets.toml`: each repository's real file layout
//! (including files the source must not read) and schema, with invented content and the awkward
//! rows seen in the real datasets (leading assistant turns, empty and non-string turns, split
//! rows that point into another dataset), plus the exact prompts each source must extract.

mod agentic;
mod chat;
mod reasoning;

pub use agentic::{deepswe, nemotron};
pub use chat::{magpie, sharegpt, ultrachat, wildchat};
pub use reasoning::{
    mixture_of_thoughts, numinamath, opencodereasoning, openthoughts, resolve_repos,
};

use serde_json::Value;

use crate::fake_hub::FakeRepo;

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

const CONTENT_ROLE: &[&str] = &["content", "role"];
const FROM_VALUE: &[&str] = &["from", "value"];

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
