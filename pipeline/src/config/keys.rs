//! The keys `datasets.toml` accepts, per table, read from the serde structs themselves so the
//! lists cannot drift from what parses: complete "expected one of" lists, "did you mean"
//! suggestions, and [`accepted_keys`] for code that names keys in advice or docs.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde::de::{self, Visitor};

use super::file::{
    GenerationTable, RunTable, ServerTable, SettingsTable, TOP_LEVEL_KEYS, WorkerTable,
};

/// A table of the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    TopLevel,
    Run,
    Server,
    Generation,
    /// One `[[source]]`: the data keys of `gen_sources::SourceSpec`, the worker keys and
    /// `generation`.
    Source,
    /// A source's `[source.generation]`: the request settings of `[generation]`.
    SourceGeneration,
    /// One dataset of a source's `resolve`.
    Resolve,
}

impl Table {
    /// Every key this table accepts, in declaration order.
    pub fn keys(self) -> Vec<&'static str> {
        match self {
            Table::TopLevel => TOP_LEVEL_KEYS.to_vec(),
            Table::Run => fields_of::<RunTable>().to_vec(),
            Table::Server => fields_of::<ServerTable>().to_vec(),
            Table::Generation => {
                let mut keys = fields_of::<GenerationTable>().to_vec();
                keys.extend(settings_keys());
                keys
            }
            Table::Source => {
                let mut keys = fields_of::<gen_sources::SourceSpec>().to_vec();
                keys.extend(worker_keys());
                keys.push(SOURCE_GENERATION);
                keys
            }
            Table::SourceGeneration => settings_keys().to_vec(),
            Table::Resolve => fields_of::<gen_sources::spec::ResolveSpec>().to_vec(),
        }
    }

    /// Where a key of this table is, for messages: `in [server]`, `at the top level`.
    pub fn place(self) -> &'static str {
        match self {
            Table::TopLevel => "at the top level",
            Table::Run => "in `[run]`",
            Table::Server => "in `[server]`",
            Table::Generation => "in `[generation]`",
            Table::Source => "in `[[source]]`",
            Table::SourceGeneration => "in `[source.generation]`",
            Table::Resolve => "in a `resolve` dataset",
        }
    }
}

/// The keys of a `[[source]]` that say how its worker runs ([`WorkerTable`]); the rest
/// describe its data.
pub fn worker_keys() -> &'static [&'static str] {
    fields_of::<WorkerTable>()
}

/// The key of a `[[source]]` that holds its `[source.generation]` table.
pub const SOURCE_GENERATION: &str = "generation";

/// The keys of `[generation]` that say what a request asks for ([`SettingsTable`]); a
/// `[source.generation]` takes these only.
pub fn settings_keys() -> &'static [&'static str] {
    fields_of::<SettingsTable>()
}

/// Every key accepted anywhere in a config file. Advice that names a setting (`gen diagnose`,
/// `gen doctor`, error hints) must name one of these.
pub fn accepted_keys() -> BTreeSet<&'static str> {
    [
        Table::TopLevel,
        Table::Run,
        Table::Server,
        Table::Generation,
        Table::Source,
        Table::SourceGeneration,
        Table::Resolve,
    ]
    .into_iter()
    .flat_map(Table::keys)
    .collect()
}

/// The accepted key closest to `unknown`, when one is close enough to be what was meant:
/// the same key with `_` for `-` or in another case, or a typo a few letters off.
pub fn suggest(unknown: &str, accepted: &[&'static str]) -> Option<&'static str> {
    let normalized = unknown.trim().to_ascii_lowercase().replace(['_', ' '], "-");
    if let Some(same) = accepted.iter().find(|k| **k == normalized) {
        return Some(same);
    }
    let allowed = (normalized.chars().count() / 3).clamp(1, 3);
    accepted
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&normalized, k), *k))
        .filter(|(distance, _)| *distance <= allowed)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

/// The field names (as written in the file) of a `#[derive(Deserialize)]` struct: serde hands
/// them to `deserialize_struct`, which [`FieldNames`] records before refusing to go on.
fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // The refusal is the point: only the names were wanted.
    T::deserialize(FieldNames(&mut fields)).ok();
    fields
}

struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> de::Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("only structs have field names"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("field names recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_lists_the_keys_serde_accepts() {
        let source = Table::Source.keys();
        for key in [
            "name",
            "path",
            "messages-field",
            "memory-limit",
            "command",
            "expected-prompts",
            "on-length",
            "order",
        ] {
            assert!(source.contains(&key), "{key} in {source:?}");
        }
        assert!(Table::Server.keys().contains(&"max-outage-secs"));
        assert!(Table::Generation.keys().contains(&"max-tokens"));
        assert!(Table::Generation.keys().contains(&"concurrency"));
        assert!(source.contains(&"generation"));
        let per_source = Table::SourceGeneration.keys();
        for key in [
            "temperature",
            "top-p",
            "top-k",
            "min-p",
            "reasoning-effort",
            "samples",
        ] {
            assert!(per_source.contains(&key), "{key} in {per_source:?}");
        }
        assert!(!per_source.contains(&"concurrency"));
        assert!(Table::Run.keys().contains(&"max-parallel-prep"));
        assert!(Table::Resolve.keys().contains(&"field"));
        let all = accepted_keys();
        assert!(all.contains("memory-limit") && all.contains("source"));
        assert!(!all.contains("memory_limit"));
    }

    /// `docs/config.md`, the user's key reference, documents exactly the keys each table
    /// accepts: a key added to a config struct fails here until it is documented.
    #[test]
    fn the_key_reference_documents_every_key_and_no_other() {
        let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/config.md"));
        let sections = [
            ("## `[run]`", Table::Run),
            ("## `[server]`", Table::Server),
            ("## `[generation]`", Table::Generation),
            ("## `[[source]]`", Table::Source),
            ("## `[source.generation]`", Table::SourceGeneration),
            ("## `resolve` datasets", Table::Resolve),
        ];
        for (heading, table) in sections {
            let start = doc
                .find(&format!("{heading}\n"))
                .unwrap_or_else(|| panic!("docs/config.md has no `{heading}` section"));
            let body = &doc[start + heading.len()..];
            let body = &body[..body.find("\n## ").unwrap_or(body.len())];
            let documented: BTreeSet<&str> = body
                .lines()
                .filter_map(|l| l.strip_prefix("| `")?.split_once('`'))
                .map(|(key, _)| key)
                .collect();
            let accepted: BTreeSet<&str> = table.keys().into_iter().collect();
            assert_eq!(
                documented, accepted,
                "docs/config.md, {heading}: left are documented, right are accepted"
            );
        }
    }

    #[test]
    fn suggestions_catch_underscores_case_and_typos_only() {
        let source = Table::Source.keys();
        assert_eq!(suggest("memory_limit", &source), Some("memory-limit"));
        assert_eq!(suggest("Messages_Field", &source), Some("messages-field"));
        assert_eq!(suggest("paht", &source), Some("path"));
        assert_eq!(suggest("limt", &source), Some("limit"));
        assert_eq!(
            suggest("max_token", &Table::Generation.keys()),
            Some("max-tokens")
        );
        assert_eq!(suggest("completely-unrelated", &source), None);
    }
}
