//! The semantic checks of one `[[source]]` entry: every problem at once, each pointing at the
//! key it is about (or at `name` when a key is missing).

use super::{SourceSpec, SpecProblem, SystemPolicy};

/// Whether `id` looks like a Hub repository id (`owner/name`).
fn valid_repo_id(id: &str) -> bool {
    let parts: Vec<&str> = id.split('/').collect();
    let valid_part = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    parts.len() == 2 && parts.iter().all(|p| valid_part(p))
}

/// Longest accepted source name.
const MAX_NAME_CHARS: usize = 64;

/// Whether `name` is safe as a directory name, in prompt ids and as a command-line argument:
/// ASCII letters, digits, `-`, `_` and `.`; never `-` first (it would read as a flag), never `.`
/// first (`.` and `..` are directories already, and a hidden one is easily missed).
pub(super) fn valid_name(name: &str) -> Result<(), String> {
    let shown: String = name.chars().take(MAX_NAME_CHARS).collect();
    let shown = if shown.len() < name.len() {
        format!("{shown}…")
    } else {
        shown
    };
    let rule = "use only letters, digits, `-`, `_` and `.`";
    if name.is_empty() {
        return Err(format!("source name is empty: {rule}"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "source name `{shown}` has {}: {rule}",
            match bad {
                '/' | '\\' => format!("`{bad}` (a name is a directory of the run, not a path)"),
                c if c.is_whitespace() => "whitespace".to_owned(),
                c if c.is_control() => "a control character".to_owned(),
                c => format!("`{c}`"),
            }
        ));
    }
    if name.starts_with('-') {
        return Err(format!(
            "source name `{shown}` starts with `-`: it would be read as an option; start it with a letter or digit"
        ));
    }
    if name.starts_with('.') {
        return Err(format!(
            "source name `{shown}` starts with `.`: start it with a letter or digit"
        ));
    }
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(format!(
            "source name `{shown}` has {chars} characters, at most {MAX_NAME_CHARS} are allowed"
        ));
    }
    Ok(())
}

/// Whether `revision` can name a branch, tag or commit: git's own rules for ref names
/// (`git check-ref-format`), which the Hub's revisions follow. `refs/convert/parquet` and
/// `refs/pr/1` pass; `v1 final`, `main..dev` and `feature/` do not.
pub(super) fn valid_revision(revision: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "`{revision}` cannot be a branch, tag or commit: {why}"
        ))
    };
    if revision.is_empty() {
        return Err("is empty (leave it out for `main`)".to_owned());
    }
    if let Some(c) = revision.chars().find(|c| c.is_whitespace()) {
        return bad(&format!("it has whitespace ({c:?})"));
    }
    if let Some(c) = revision
        .chars()
        .find(|c| c.is_control() || matches!(c, '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
    {
        return bad(&format!("it has `{c}`"));
    }
    if revision.contains("..") || revision.contains("@{") || revision == "@" {
        return bad("it has `..`, `@{` or is `@`");
    }
    if revision.starts_with('/') || revision.ends_with('/') || revision.contains("//") {
        return bad("a `/` starts or ends it, or two follow each other");
    }
    if revision.ends_with('.') || revision.ends_with(".lock") {
        return bad("it ends with `.` or `.lock`");
    }
    if revision.split('/').any(|part| part.starts_with('.')) {
        return bad("a part of it starts with `.`");
    }
    Ok(())
}

pub(super) fn check(spec: &SourceSpec) -> Vec<SpecProblem> {
    let mut problems = Vec::new();
    let name = spec.name.get_ref();
    if let Err(message) = valid_name(name) {
        problems.push(SpecProblem {
            span: spec.name.span(),
            message,
        });
    }
    if spec.path.is_none() && spec.repo.is_none() {
        problems.push(SpecProblem {
            span: spec.name.span(),
            message: format!(
                "source `{name}` needs `path` (a local file or glob) or `repo` (a Hub dataset)"
            ),
        });
    }
    // Every other problem names its source first.
    let mut push = |span: std::ops::Range<usize>, what: &str| {
        let message = format!("source `{name}`: {what}");
        problems.push(SpecProblem { span, message });
    };
    match (&spec.path, &spec.repo) {
        (Some(_), Some(repo)) => push(repo.span(), "`path` and `repo` exclude each other"),
        (Some(path), None) if path.get_ref().trim().is_empty() => {
            push(path.span(), "`path` is empty");
        }
        _ => {}
    }
    if spec.repo.is_none() {
        let hub_only = [
            ("revision", spec.revision.as_ref().map(|r| r.span())),
            ("files", spec.files.as_ref().map(|f| f.span())),
        ];
        for (key, span) in hub_only {
            if let Some(span) = span {
                push(span, &format!("`{key}` is only used with `repo`"));
            }
        }
    }
    if let Some(repo) = &spec.repo {
        let id = repo.get_ref();
        if !valid_repo_id(id) {
            push(
                repo.span(),
                &format!("`repo` must look like `owner/name`, not `{id}`"),
            );
        }
        match &spec.files {
            None => push(
                repo.span(),
                "`repo` needs `files` (glob patterns of the files to read)",
            ),
            Some(files) if files.get_ref().is_empty() => {
                push(files.span(), "`files` is empty");
            }
            Some(files) => {
                for pattern in files.get_ref() {
                    for (placeholder, value) in
                        [("{config}", &spec.config), ("{split}", &spec.split)]
                    {
                        if pattern.contains(placeholder) && value.is_none() {
                            push(
                                files.span(),
                                &format!(
                                    "`{pattern}` uses `{placeholder}` but `{}` is not set",
                                    &placeholder[1..placeholder.len() - 1]
                                ),
                            );
                        }
                    }
                    if let Err(e) = glob::Pattern::new(pattern) {
                        push(files.span(), &format!("invalid glob `{pattern}`: {e}"));
                    }
                }
            }
        }
        if let Some(revision) = &spec.revision
            && let Err(why) = valid_revision(revision.get_ref())
        {
            push(revision.span(), &format!("`revision` {why}"));
        }
    }
    if let Some(limit) = &spec.limit
        && *limit.get_ref() < 1
    {
        push(limit.span(), "`limit` must be at least 1");
    }
    if let Some(max_turns) = &spec.max_turns
        && *max_turns.get_ref() < 1
    {
        push(max_turns.span(), "`max-turns` must be at least 1");
    }
    for field in [&spec.min_chars, &spec.max_chars].into_iter().flatten() {
        if *field.get_ref() < 0 {
            push(field.span(), "character bounds must not be negative");
        }
    }
    if let (Some(min), Some(max)) = (&spec.min_chars, &spec.max_chars)
        && min.get_ref() > max.get_ref()
    {
        push(max.span(), "`max-chars` is below `min-chars`");
    }
    for field in [&spec.min_prompt_tokens, &spec.max_prompt_tokens]
        .into_iter()
        .flatten()
    {
        if *field.get_ref() < 0 {
            push(field.span(), "token bounds must not be negative");
        }
    }
    if let (Some(min), Some(max)) = (&spec.min_prompt_tokens, &spec.max_prompt_tokens)
        && min.get_ref() > max.get_ref()
    {
        push(
            max.span(),
            "`max-prompt-tokens` is below `min-prompt-tokens`",
        );
    }
    let token_bounds = spec
        .min_prompt_tokens
        .as_ref()
        .or(spec.max_prompt_tokens.as_ref());
    match (&spec.tokenizer, token_bounds) {
        (None, Some(bound)) => push(
            bound.span(),
            "`min-prompt-tokens`/`max-prompt-tokens` need `tokenizer` (a tokenizer.json file)",
        ),
        (Some(tokenizer), None) => push(
            tokenizer.span(),
            "`tokenizer` is only used with `min-prompt-tokens` or `max-prompt-tokens`",
        ),
        (Some(tokenizer), Some(_)) if tokenizer.get_ref().trim().is_empty() => {
            push(tokenizer.span(), "`tokenizer` is empty");
        }
        _ => {}
    }
    if let Some(resolve) = &spec.resolve {
        if spec.prompt_field.is_none() {
            push(
                resolve.span(),
                "`resolve` needs `prompt-field` (the field it fills in)",
            );
        }
        for (dataset, entry) in resolve.get_ref() {
            if !valid_repo_id(&entry.repo) {
                push(
                    resolve.span(),
                    &format!(
                        "`resolve.{dataset}.repo` must look like `owner/name`, not `{}`",
                        entry.repo
                    ),
                );
            }
            if let Some(revision) = &entry.revision
                && let Err(why) = valid_revision(revision)
            {
                push(
                    resolve.span(),
                    &format!("`resolve.{dataset}.revision` {why}"),
                );
            }
            if entry.files.is_empty() {
                push(
                    resolve.span(),
                    &format!("`resolve.{dataset}.files` is empty"),
                );
            }
            for pattern in &entry.files {
                if let Err(e) = glob::Pattern::new(&pattern.replace("{split}", "split")) {
                    push(
                        resolve.span(),
                        &format!("invalid glob `{pattern}` in `resolve.{dataset}`: {e}"),
                    );
                }
            }
        }
    }
    match (spec.system_prompt, &spec.system_prompt_text) {
        (SystemPolicy::Replace, None) => push(
            spec.name.span(),
            "`system-prompt = \"replace\"` needs `system-prompt-text`",
        ),
        (SystemPolicy::Keep | SystemPolicy::Drop, Some(text)) => push(
            text.span(),
            "`system-prompt-text` is only used with `system-prompt = \"replace\"`",
        ),
        _ => {}
    }
    if let Some(template) = &spec.prompt_template
        && !template.get_ref().contains("{prompt}")
    {
        push(template.span(), "`prompt-template` must contain `{prompt}`");
    }
    if let Some(languages) = &spec.languages
        && languages.get_ref().is_empty()
    {
        push(
            languages.span(),
            "`languages` is empty (it would drop every row)",
        );
    }
    if let Some(include) = &spec.include
        && include.get_ref().values().any(Vec::is_empty)
    {
        push(
            include.span(),
            "an `include` list is empty (it would drop every row)",
        );
    }
    problems
}

#[cfg(test)]
mod tests {
    use crate::spec::SourceSpec;

    fn problems(toml_text: &str) -> Vec<String> {
        let spec: SourceSpec = toml::from_str(toml_text).expect("spec parses");
        spec.check().into_iter().map(|p| p.message).collect()
    }

    #[test]
    fn table() {
        let cases: &[(&str, &str, &[&str])] = &[
            ("local path", "name = \"a\"\npath = \"x.jsonl\"", &[]),
            (
                "hub source",
                "name = \"a\"\nrepo = \"o/n\"\nconfig = \"c\"\nsplit = \"train\"\nfiles = [\"{config}/{split}-*.parquet\"]",
                &[],
            ),
            ("neither", "name = \"a\"", &["needs `path`"]),
            (
                "both",
                "name = \"a\"\npath = \"x\"\nrepo = \"o/n\"\nfiles = [\"*\"]",
                &["exclude each other"],
            ),
            (
                "repo without files",
                "name = \"a\"\nrepo = \"o/n\"",
                &["needs `files`"],
            ),
            (
                "bad repo id",
                "name = \"a\"\nrepo = \"nope\"\nfiles = [\"*\"]",
                &["owner/name"],
            ),
            (
                "missing placeholder value",
                "name = \"a\"\nrepo = \"o/n\"\nfiles = [\"{split}/*\"]",
                &["`split` is not set"],
            ),
            (
                "hub keys on a local source",
                "name = \"a\"\npath = \"x\"\nrevision = \"v1\"\nfiles = [\"*\"]",
                &["`revision` is only used", "`files` is only used"],
            ),
            (
                "limit",
                "name = \"a\"\npath = \"x\"\nlimit = 0",
                &["at least 1"],
            ),
            (
                "max turns",
                "name = \"a\"\npath = \"x\"\nmax-turns = 0",
                &["`max-turns`"],
            ),
            (
                "template without placeholder",
                "name = \"a\"\npath = \"x\"\nprompt-template = \"fix it\"",
                &["must contain `{prompt}`"],
            ),
            (
                "no languages",
                "name = \"a\"\npath = \"x\"\nlanguages = []",
                &["`languages` is empty"],
            ),
            (
                "empty include",
                "name = \"a\"\npath = \"x\"\ninclude = { lang = [] }",
                &["`include` list is empty"],
            ),
            (
                "token bounds without a tokenizer",
                "name = \"a\"\npath = \"x\"\nmax-prompt-tokens = 10",
                &["need `tokenizer`"],
            ),
            (
                "tokenizer without bounds",
                "name = \"a\"\npath = \"x\"\ntokenizer = \"t.json\"",
                &["only used with `min-prompt-tokens`"],
            ),
            (
                "token bounds",
                "name = \"a\"\npath = \"x\"\ntokenizer = \"t.json\"\nmin-prompt-tokens = 20\nmax-prompt-tokens = -1",
                &["must not be negative", "below `min-prompt-tokens`"],
            ),
            (
                "empty tokenizer",
                "name = \"a\"\npath = \"x\"\ntokenizer = \" \"\nmin-prompt-tokens = 1",
                &["`tokenizer` is empty"],
            ),
            (
                "tokenizer and bounds",
                "name = \"a\"\npath = \"x\"\ntokenizer = \"t.json\"\nmin-prompt-tokens = 1\nmax-prompt-tokens = 1",
                &[],
            ),
            (
                "resolve",
                "name = \"a\"\npath = \"x\"\nprompt-field = \"input\"\nresolve = { taco = { repo = \"BAAI/TACO\", files = [\"ALL/{split}-*.parquet\"] } }",
                &[],
            ),
            (
                "resolve without a prompt field, bad repo, no files",
                "name = \"a\"\npath = \"x\"\nresolve = { taco = { repo = \"TACO\", files = [] } }",
                &[
                    "needs `prompt-field`",
                    "`resolve.taco.repo`",
                    "`resolve.taco.files` is empty",
                ],
            ),
            (
                "bad name",
                "name = \"a b\"\npath = \"x\"",
                &["letters, digits"],
            ),
            (
                "a revision with a space",
                "name = \"a\"\nrepo = \"o/n\"\nfiles = [\"*\"]\nrevision = \"v1 final\"",
                &["`revision` `v1 final` cannot be a branch, tag or commit: it has whitespace"],
            ),
            (
                "a resolve revision with `..`",
                "name = \"a\"\npath = \"x\"\nprompt-field = \"input\"\nresolve = { taco = { repo = \"BAAI/TACO\", revision = \"main..dev\", files = [\"*\"] } }",
                &["`resolve.taco.revision` `main..dev` cannot be"],
            ),
            (
                "the parquet branch and a pull request are revisions",
                "name = \"a\"\nrepo = \"o/n\"\nfiles = [\"*\"]\nrevision = \"refs/convert/parquet\"",
                &[],
            ),
        ];
        for (case, text, expected) in cases {
            let found = problems(text);
            assert_eq!(found.len(), expected.len(), "case `{case}`: {found:?}");
            for (message, fragment) in found.iter().zip(expected.iter()) {
                assert!(message.contains(fragment), "case `{case}`: {message}");
            }
        }
    }

    #[test]
    fn names_are_safe_as_directories_and_arguments() {
        for good in ["sharegpt", "open-r1.math_v2", "A1", &"n".repeat(64)] {
            assert_eq!(super::valid_name(good), Ok(()), "{good}");
        }
        let cases = [
            ("-x", "starts with `-`"),
            ("--help", "starts with `-`"),
            ("..", "starts with `.`"),
            (".hidden", "starts with `.`"),
            ("a/b", "`/` (a name is a directory of the run, not a path)"),
            ("a b", "has whitespace"),
            ("", "source name is empty"),
            ("é", "has `é`"),
        ];
        for (name, expected) in cases {
            let why = super::valid_name(name).expect_err(name);
            assert!(why.contains(expected), "{name}: {why}");
        }
        let long = "n".repeat(300);
        let why = super::valid_name(&long).expect_err("300 characters");
        assert!(why.contains("has 300 characters, at most 64"), "{why}");
        assert!(
            why.len() < 200,
            "the name is shortened in the message: {why}"
        );
    }

    #[test]
    fn revisions_follow_git_ref_rules() {
        for good in [
            "main",
            "v1.0",
            "refs/convert/parquet",
            "refs/pr/12",
            &"a".repeat(40),
        ] {
            assert_eq!(super::valid_revision(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "v1 final",
            "main..dev",
            "a~1",
            "a^",
            "x:y",
            "f*",
            "[x]",
            "/main",
            "main/",
            "a//b",
            "v1.",
            "x.lock",
            ".hidden",
            "a/.b",
            "@",
            "a@{1}",
            "tab\there",
        ] {
            assert!(super::valid_revision(bad).is_err(), "`{bad}` passed");
        }
    }

    #[test]
    fn patterns_fill_config_and_split() {
        let spec: SourceSpec = toml::from_str(
            "name = \"a\"\nrepo = \"o/n\"\nconfig = \"split_0\"\nsplit = \"split_0\"\nfiles = [\"{config}/{split}-*.parquet\"]",
        )
        .expect("spec");
        assert_eq!(spec.file_patterns(), ["split_0/split_0-*.parquet"]);
        assert_eq!(spec.revision(), "main");
    }
}
