//! The fingerprint of a `[[source]]`: xxh3 of a canonical JSON rendering of its settings, so
//! formatting, key order and comments in `datasets.toml` do not change it.

use serde_json::{Value, json};
use xxhash_rust::xxh3::xxh3_64;

use super::{DEFAULT_RESOLVE_FIELD, DEFAULT_RESOLVE_PLACEHOLDER, SourceSpec};

pub(super) fn fingerprint(spec: &SourceSpec, tokenizer_checksum: Option<&str>) -> String {
    // `json!` objects are sorted maps, so the rendering is canonical.
    let canonical = canonical(spec, tokenizer_checksum);
    format!("{:016x}", xxh3_64(canonical.to_string().as_bytes()))
}

/// Every setting that shapes the source's prompts, by name, defaults written out.
pub(super) fn canonical(spec: &SourceSpec, tokenizer_checksum: Option<&str>) -> Value {
    let get = |v: &Option<toml::Spanned<String>>| v.as_ref().map(|v| v.get_ref().clone());
    let number = |v: &Option<toml::Spanned<i64>>| v.as_ref().map(|v| *v.get_ref());
    // Every field, by name: a new field must be added here, or reruns would miss its changes.
    let mut canonical = json!({
        "name": spec.name.get_ref(),
        "path": get(&spec.path),
        "repo": get(&spec.repo),
        "revision": spec.repo.as_ref().map(|_| spec.revision()),
        "config": spec.config,
        "split": spec.split,
        "files": spec.files.as_ref().map(|f| f.get_ref()),
        "format": spec.format,
        "limit": spec.limit(),
        "seed": spec.seed(),
        "prompt_field": get(&spec.prompt_field),
        "messages_field": get(&spec.messages_field),
        "role_key": spec.role_key,
        "content_key": spec.content_key,
        "id_field": spec.id_field,
        "turns": spec.turns,
        "max_turns": number(&spec.max_turns),
        "system_prompt": spec.system_prompt,
        "system_prompt_text": get(&spec.system_prompt_text),
        "prompt_template": get(&spec.prompt_template),
        "strip_tags": spec.strip_tags,
        "include": spec.include.as_ref().map(|m| m.get_ref()),
        "exclude": spec.exclude.as_ref().map(|m| m.get_ref()),
        "languages": spec.languages.as_ref().map(|l| l.get_ref()),
        "language_field": spec.language_field,
        "dedup": spec.dedup(),
        "min_chars": number(&spec.min_chars),
        "max_chars": number(&spec.max_chars),
    });
    // Where `-` prompts come from, defaults written out.
    let resolve = spec.resolve.as_ref().map(|datasets| {
        let datasets: serde_json::Map<String, Value> = datasets
            .get_ref()
            .iter()
            .map(|(name, dataset)| {
                let rendered = json!({
                    "repo": dataset.repo,
                    "revision": dataset.revision.as_deref().unwrap_or("main"),
                    "files": dataset.files,
                    "field": dataset.field.as_deref().unwrap_or(DEFAULT_RESOLVE_FIELD),
                });
                (name.clone(), rendered)
            })
            .collect();
        Value::Object(datasets)
    });
    let placeholder = spec.resolve.as_ref().map(|_| {
        Value::from(
            spec.resolve_placeholder
                .as_deref()
                .unwrap_or(DEFAULT_RESOLVE_PLACEHOLDER),
        )
    });
    // Added later: only when set, so the fingerprints of sources without them stay as they were.
    let cut_tools = (spec.tool_turns == super::ToolTurns::Cut).then(|| json!(spec.tool_turns));
    let later = [
        ("tool_turns", cut_tools),
        ("resolve", resolve),
        ("resolve_placeholder", placeholder),
        ("tokenizer", get(&spec.tokenizer).map(Value::from)),
        ("tokenizer_checksum", tokenizer_checksum.map(Value::from)),
        (
            "min_prompt_tokens",
            number(&spec.min_prompt_tokens).map(Value::from),
        ),
        (
            "max_prompt_tokens",
            number(&spec.max_prompt_tokens).map(Value::from),
        ),
    ];
    if let Value::Object(map) = &mut canonical {
        for (key, value) in later {
            if let Some(value) = value {
                map.insert(key.to_owned(), value);
            }
        }
    }
    canonical
}

#[cfg(test)]
mod tests {
    use crate::spec::SourceSpec;

    fn fingerprint(text: &str) -> String {
        toml::from_str::<SourceSpec>(text)
            .expect("spec")
            .fingerprint()
    }

    #[test]
    fn layout_does_not_matter_settings_do() {
        let a = fingerprint("name = \"a\"\npath = \"x.jsonl\"\nlimit = 5");
        let b = fingerprint("limit   = 5 # five\n\npath = \"x.jsonl\"\nname = \"a\"");
        assert_eq!(a, b);
        assert_ne!(
            a,
            fingerprint("name = \"a\"\npath = \"x.jsonl\"\nlimit = 6")
        );
        assert_ne!(
            a,
            fingerprint("name = \"a\"\npath = \"x.jsonl\"\nlimit = 5\nturns = \"all\"")
        );
        // Defaults written out are the same settings.
        assert_eq!(
            fingerprint("name = \"a\"\npath = \"x.jsonl\""),
            fingerprint("name = \"a\"\npath = \"x.jsonl\"\nlimit = 10000\nseed = 0\ndedup = true")
        );
        // Pinned: keys added later leave the fingerprints of sources without them alone.
        assert_eq!(a, "e85339bd4ec044d5");
    }

    #[test]
    fn the_tokenizer_file_counts() {
        let spec: SourceSpec = toml::from_str(
            "name = \"a\"\npath = \"x.jsonl\"\ntokenizer = \"t.json\"\nmax-prompt-tokens = 10",
        )
        .expect("spec");
        let plain = fingerprint("name = \"a\"\npath = \"x.jsonl\"");
        assert_ne!(spec.fingerprint(), plain);
        assert_ne!(
            spec.fingerprint_with_tokenizer(Some("xxh3-128:1")),
            spec.fingerprint_with_tokenizer(Some("xxh3-128:2"))
        );
        assert_eq!(spec.fingerprint_with_tokenizer(None), spec.fingerprint());
    }

    #[test]
    fn where_placeholder_prompts_come_from_counts() {
        let base = "name = \"a\"\npath = \"x.jsonl\"\n";
        let taco = |extra: &str| {
            fingerprint(&format!(
                "{base}{extra}[resolve.taco]\nrepo = \"BAAI/TACO\"\nfiles = [\"ALL/{{split}}-*.parquet\"]\n"
            ))
        };
        let plain = fingerprint(base);
        let resolved = taco("");
        assert_ne!(resolved, plain);
        assert_ne!(resolved, taco("resolve-placeholder = \"?\"\n"));
        assert_eq!(
            resolved,
            taco("resolve-placeholder = \"-\"\n"),
            "the default"
        );
        assert_ne!(
            resolved,
            fingerprint(&format!(
                "{base}[resolve.taco]\nrepo = \"BAAI/TACO\"\nfiles = [\"ALL/{{split}}-*.parquet\"]\nrevision = \"abc\"\n"
            ))
        );
        assert_eq!(
            resolved,
            fingerprint(&format!(
                "{base}[resolve.taco]\nrepo = \"BAAI/TACO\"\nfiles = [\"ALL/{{split}}-*.parquet\"]\nrevision = \"main\"\nfield = \"question\"\n"
            )),
            "defaults written out"
        );
    }
}
