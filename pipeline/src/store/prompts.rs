//! A source's prepared prompts file (`prompts.jsonl.zst`, zstd frames of JSON lines, written
//! by the preparation worker): read streaming, line by line ([`for_each_record`]), each line
//! parsed only on demand. A prompt's id is read from the start of its line
//! ([`Record::peek_id`]: `gen` writes prompts with their `id` first), so a resumed run need not
//! parse the prompts it already has. What to do with each prompt is the caller's business
//! (`run::feed` decides what is sent).

use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;

use anyhow::Context as _;
use gen_sources::Prompt;
use gen_sources::prompt::dedup_hash;
use serde::{Deserialize, Serialize};

/// What identifies the ids of a prepared prompts file without reading it: its size, its
/// number of prompts and the [`IdSet::digest`](super::ids::IdSet::digest) of their ids (repeats summed as often as they
/// occur, so a file with a repeated id matches no set).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptIds {
    pub bytes: u64,
    pub prompts: u64,
    /// 32 hex digits.
    pub digest: String,
    /// The file's size and modification time when it was counted: a file written since (a
    /// damaged or replaced one) is read again. Not recorded by older `gen`s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stat: Option<super::manifest::FileStat>,
    /// With several samples per prompt: the digest of every sample's id, so a source whose
    /// every sample is done is told without reading its prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<SampleIds>,
}

/// The ids of `samples` samples of every prompt, summed as [`PromptIds::digest`] is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleIds {
    pub samples: u32,
    /// 32 hex digits.
    pub digest: String,
}

/// One line of a prepared prompts file, parsed only on demand.
pub struct Record<'a> {
    line: &'a [u8],
    row: u64,
    path: &'a Path,
}

impl Record<'_> {
    /// The prompt's id read from the start of the line, without parsing it: `gen` writes
    /// prompts with their `id` first and compactly. `None` when the line does not start that
    /// way or the id holds an escape (then [`Record::parse`] reads it).
    pub fn peek_id(&self) -> Option<&str> {
        let rest = self.line.strip_prefix(br#"{"id":""#)?;
        let end = memchr::memchr2(b'"', b'\\', rest)?;
        (rest[end] == b'"')
            .then(|| std::str::from_utf8(&rest[..end]).ok())
            .flatten()
    }

    pub fn parse(&self) -> anyhow::Result<Prompt> {
        serde_json::from_slice(self.line).with_context(|| {
            format!(
                "prompt {} of `{}` is unreadable; the next `gen run` sets the file aside and prepares the source again, keeping its stored completions",
                self.row,
                self.path.display()
            )
        })
    }
}

/// Calls `each` for every prompt of a prepared prompts file, streaming (zstd frames one after
/// the other).
pub fn for_each_prompt(path: &Path, mut each: impl FnMut(Prompt)) -> anyhow::Result<()> {
    for_each_record(path, |record| {
        each(record.parse()?);
        Ok(())
    })
}

/// Calls `each` for every non-blank line of a prepared prompts file, unparsed.
pub fn for_each_record(
    path: &Path,
    mut each: impl FnMut(Record<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let file = fs_err::File::open(path)?;
    // A source that kept no prompt has an empty file (no frame at all), which the zstd decoder
    // calls an incomplete frame.
    if file.metadata()?.len() == 0 {
        return Ok(());
    }
    let decoder = zstd::stream::read::Decoder::new(file)
        .with_context(|| format!("cannot decode `{}`", path.display()))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, decoder);
    let mut line = Vec::new();
    let mut row = 0u64;
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line).with_context(|| {
            format!(
                "prompts file `{}` is damaged after {row} prompts; the next `gen run` sets it aside and prepares the source again, keeping its stored completions",
                path.display()
            )
        })?;
        if read == 0 {
            return Ok(());
        }
        row += 1;
        if line.trim_ascii().is_empty() {
            continue;
        }
        each(Record {
            line: &line,
            row,
            path,
        })?;
    }
}

/// The deduplication keys ([`gen_sources::prompt::dedup_hash`]) of every prompt of a
/// prepared prompts file.
pub fn content_hashes(path: &Path) -> anyhow::Result<HashSet<u64>> {
    let mut hashes = HashSet::new();
    for_each_prompt(path, |prompt| {
        hashes.insert(dedup_hash(&prompt.messages, prompt.tools.as_ref()));
    })?;
    Ok(hashes)
}

/// Loads the prepared prompts of a source (for `gen merge` and `gen bench`; `gen run` streams
/// them, see `run::feed`).
pub fn read_prompts(path: &Path) -> anyhow::Result<Vec<Prompt>> {
    let mut prompts = Vec::new();
    for_each_prompt(path, |prompt| prompts.push(prompt))?;
    Ok(prompts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(line: &str) -> Record<'_> {
        Record {
            line: line.as_bytes(),
            row: 3,
            path: Path::new("prompts.jsonl.zst"),
        }
    }

    #[test]
    fn an_id_is_peeked_only_from_a_compact_unescaped_start() {
        let peeked = |line| record(line).peek_id().map(str::to_owned);
        assert_eq!(
            peeked(r#"{"id":"abc","source":"s"}"#).as_deref(),
            Some("abc")
        );
        assert_eq!(peeked(r#"{"id":"a\"b","source":"s"}"#), None);
        assert_eq!(peeked(r#"{ "id": "abc", "source":"s"}"#), None);
        assert_eq!(peeked(r#"{"source":"s","id":"abc"}"#), None);
    }

    #[test]
    fn an_unreadable_prompt_is_named_by_row_and_file_with_what_to_do() {
        let error = record(r#"{"id":"abc""#).parse().expect_err("cut line");
        let text = format!("{error:#}");
        assert!(
            text.starts_with(
                "prompt 3 of `prompts.jsonl.zst` is unreadable; the next `gen run` sets the file aside"
            ),
            "{text}"
        );
    }
}
