//! Choosing a repository's files with the `files` glob patterns.

use glob::{MatchOptions, Pattern};

/// `*` and `?` stay within one folder; `**` crosses folders.
const OPTIONS: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: true,
    require_literal_leading_dot: false,
};

/// The files among `available` (repository paths with `/`) matched by any of `patterns`,
/// sorted and without repeats. Invalid patterns match nothing (`SourceSpec::check` reports
/// them).
pub fn select_files<'a>(
    available: impl IntoIterator<Item = &'a str>,
    patterns: &[String],
) -> Vec<String> {
    let patterns: Vec<Pattern> = patterns
        .iter()
        .filter_map(|p| Pattern::new(p).ok())
        .collect();
    let mut selected: Vec<String> = available
        .into_iter()
        .filter(|file| patterns.iter().any(|p| p.matches_with(file, OPTIONS)))
        .map(str::to_owned)
        .collect();
    selected.sort();
    selected.dedup();
    selected
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_select_within_folders() {
        let available = [
            "README.md",
            "data/train_sft-00000-of-00002.parquet",
            "data/train_sft-00001-of-00002.parquet",
            "data/test_sft-00000-of-00001.parquet",
            "split_0/train-00000-of-00001.parquet",
            "split_1/train-00000-of-00001.parquet",
            "SFT/chat/chat.jsonl",
            "SFT/math/math_v1.1.jsonl",
        ];
        let pick = |patterns: &[&str]| {
            let patterns: Vec<String> = patterns.iter().map(|p| (*p).to_owned()).collect();
            select_files(available, &patterns)
        };
        assert_eq!(
            pick(&["data/train_sft-*.parquet"]),
            [
                "data/train_sft-00000-of-00002.parquet",
                "data/train_sft-00001-of-00002.parquet"
            ]
        );
        assert_eq!(
            pick(&["split_0/*.parquet"]),
            ["split_0/train-00000-of-00001.parquet"]
        );
        assert_eq!(pick(&["*.parquet"]), Vec::<String>::new());
        assert_eq!(pick(&["SFT/*/*.jsonl", "SFT/chat/*.jsonl"]).len(), 2);
        assert_eq!(pick(&["**/*.jsonl"]).len(), 2);
    }
}
