//! The id index: a zstd *skippable frame* written right after each data frame of a
//! completions file, holding the `id`s of that frame's records, so the done-set is rebuilt on
//! start without decompressing anything.
//!
//! Every zstd decoder skips such frames (`zstd -d`, the `zstd` crate's streaming decoder,
//! Python's `zstandard`), so the file stays plain zstd JSONL to every other reader. The entry
//! is trusted only if its checksum — xxh3-64 over the entry *and the compressed bytes of the
//! data frame before it* — matches: then that data frame is byte for byte the one the writer
//! produced, which decoded with its own checksum and held exactly these ids. Otherwise (an old
//! file without entries, a torn write, a data frame replaced or damaged) the reader decodes the
//! data frame as before; an entry never makes a frame valid that decoding would reject.
//!
//! The format tag also says what the writer vouched for: `gid2` entries are written only
//! after every record of the frame was checked to be an answer (a finish reason, some content
//! or reasoning: `records`' check). Entries of the earlier format `gid1` were written
//! before answers were checked, so their frames are decoded and their records checked.
//!
//! Layout of an entry (little-endian):
//!
//! ```text
//! u32 0x184D2A5E   skippable frame magic        ┐ zstd frame header
//! u32 N            bytes that follow             ┘
//! [u8; 4] "gid2"   this format (the same layout as "gid1", which is no longer trusted)
//! u32              compressed length of the data frame before this entry
//! u32              number of ids, then per id: u32 length + UTF-8 bytes
//! u64              xxh3-64 of everything above from the tag on, then the data frame's bytes
//! ```

use std::io;

use serde::Deserialize;
use xxhash_rust::xxh3::Xxh3;

/// The skippable-frame magic of an entry (zstd reserves 0x184D2A50..=0x184D2A5F).
const MAGIC: u32 = 0x184D_2A5E;
const TAG: &[u8; 4] = b"gid2";
/// The earlier format: the same layout, written before records were checked to be answers.
const LEGACY_TAG: &[u8; 4] = b"gid1";
const HEADER: usize = 8;
const CHECKSUM: usize = 8;

/// The entry for one data frame: `text` is its uncompressed JSONL, `frame` its compressed
/// bytes. `None` when a line has no readable `id`: no entry is written, and the reader decodes
/// the frame (and reports that line) as it always did.
pub fn entry(text: &[u8], frame: &[u8]) -> Option<Vec<u8>> {
    let mut payload = Vec::with_capacity(64 + text.len() / 32);
    payload.extend_from_slice(TAG);
    payload.extend_from_slice(&u32::try_from(frame.len()).ok()?.to_le_bytes());
    payload.extend_from_slice(&[0; 4]);
    let mut count = 0u32;
    for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let id = record_id(line).ok()?;
        payload.extend_from_slice(&u32::try_from(id.len()).ok()?.to_le_bytes());
        payload.extend_from_slice(id.as_bytes());
        count += 1;
    }
    payload[8..12].copy_from_slice(&count.to_le_bytes());
    let checksum = checksum(&payload, frame);
    payload.extend_from_slice(&checksum.to_le_bytes());
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&u32::try_from(payload.len()).ok()?.to_le_bytes());
    out.extend_from_slice(&payload);
    Some(out)
}

/// Whether a whole frame (as `find_frame_compressed_size` delimits it) is an id index entry.
pub fn is_entry(frame: &[u8]) -> bool {
    frame.len() >= HEADER + TAG.len() && frame[..4] == MAGIC.to_le_bytes()
}

/// What an intact entry says of its data frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vouched<'a> {
    pub ids: Vec<&'a str>,
    /// Its writer checked that every record is an answer (format `gid2`).
    pub checked: bool,
}

/// The ids of `data` (a whole data frame's compressed bytes) if `entry` (the whole frame right
/// after it) is an intact id index entry for exactly those bytes, and whether it is of this
/// format (`checked`) or the legacy one; `None` otherwise.
pub fn vouched<'a>(entry: &'a [u8], data: &[u8]) -> Option<Vouched<'a>> {
    if !is_entry(entry) {
        return None;
    }
    let payload = &entry[HEADER..];
    let declared = u32::from_le_bytes(entry[4..8].try_into().ok()?) as usize;
    if declared != payload.len() || payload.len() < TAG.len() + 8 + CHECKSUM {
        return None;
    }
    let (body, stored) = payload.split_at(payload.len() - CHECKSUM);
    let checked = &body[..4] == TAG;
    if !(checked || &body[..4] == LEGACY_TAG)
        || read_u32(body, 4)? as usize != data.len()
        || u64::from_le_bytes(stored.try_into().ok()?) != checksum(body, data)
    {
        return None;
    }
    let count = read_u32(body, 8)? as usize;
    let mut ids = Vec::with_capacity(count);
    let mut at = 12;
    for _ in 0..count {
        let len = read_u32(body, at)? as usize;
        let id = body.get(at + 4..at + 4 + len)?;
        ids.push(std::str::from_utf8(id).ok()?);
        at += 4 + len;
    }
    (at == body.len()).then_some(Vouched { ids, checked })
}

/// An entry of the earlier format `gid1` for `frame`, as an older `gen` wrote it.
#[cfg(test)]
pub(crate) fn legacy_entry(text: &[u8], frame: &[u8]) -> Option<Vec<u8>> {
    let mut entry = entry(text, frame)?;
    entry[HEADER..HEADER + 4].copy_from_slice(LEGACY_TAG);
    let body_end = entry.len() - CHECKSUM;
    let checksum = checksum(&entry[HEADER..body_end], frame);
    entry[body_end..].copy_from_slice(&checksum.to_le_bytes());
    Some(entry)
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn checksum(body: &[u8], data: &[u8]) -> u64 {
    let mut hasher = Xxh3::new();
    hasher.update(body);
    hasher.update(data);
    hasher.digest()
}

const FAST_PREFIX: &[u8] = br#"{"id":""#;

#[derive(Deserialize)]
struct IdOnly {
    id: String,
}

/// The `id` of one JSON record. `CompletionRecord` serializes `id` first, so a line starts
/// with `{"id":"` and the id runs to the next quote unless it holds an escape; any other line
/// (escapes, another key order) is parsed as JSON, so the fast path only skips work, never
/// changes the answer.
pub fn record_id(line: &[u8]) -> io::Result<String> {
    if let Some(rest) = line.strip_prefix(FAST_PREFIX)
        && let Some(end) = memchr::memchr2(b'"', b'\\', rest)
        && rest[end] == b'"'
        && let Ok(id) = std::str::from_utf8(&rest[..end])
        && !id.bytes().any(|b| b < 0x20)
    {
        return Ok(id.to_owned());
    }
    let record: IdOnly = serde_json::from_slice(line).map_err(io::Error::other)?;
    Ok(record.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(text: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(text, 3).expect("encode")
    }

    /// The ids an entry of this format vouches for.
    fn verified_ids<'a>(entry: &'a [u8], data: &[u8]) -> Option<Vec<&'a str>> {
        vouched(entry, data).filter(|v| v.checked).map(|v| v.ids)
    }

    #[test]
    fn ids_are_read_fast_or_by_parsing_with_the_same_answer() {
        for (line, id) in [
            (r#"{"id":"alpha-00ff","source":"alpha"}"#, "alpha-00ff"),
            (r#"{"id":"a\"b","x":1}"#, "a\"b"),
            (r#"{"id":"caf\u00e9"}"#, "café"),
            (r#"{"id":"café"}"#, "café"),
            (r#"{"source":"s","id":"later"}"#, "later"),
            (r#"{ "id" : "spaced" }"#, "spaced"),
        ] {
            assert_eq!(record_id(line.as_bytes()).expect(line), id, "{line}");
        }
        for bad in [r#"{"source":"no id"}"#, r#"{"id":3}"#, "not json"] {
            assert!(record_id(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_entry_vouches_for_exactly_its_own_data_frame() {
        let text = b"{\"id\":\"a\"}\n{\"id\":\"b\\\"c\"}\n{\"x\":1,\"id\":\"d\"}\n";
        let data = frame(text);
        let entry = entry(text, &data).expect("entry");
        assert_eq!(
            zstd::zstd_safe::find_frame_compressed_size(&entry),
            Ok(entry.len())
        );
        assert_eq!(verified_ids(&entry, &data), Some(vec!["a", "b\"c", "d"]));

        // Another data frame, even of the same length, is not vouched for.
        let other = frame(b"{\"id\":\"z\"}\n{\"id\":\"b\\\"c\"}\n{\"x\":1,\"id\":\"d\"}\n");
        assert_eq!(verified_ids(&entry, &other), None);
        // Any flipped byte of the entry or the data frame breaks the match.
        for at in 0..entry.len() {
            let mut bad = entry.clone();
            bad[at] ^= 0x01;
            assert_eq!(verified_ids(&bad, &data), None, "entry byte {at}");
        }
        for at in 0..data.len() {
            let mut bad = data.clone();
            bad[at] ^= 0x01;
            assert_eq!(verified_ids(&entry, &bad), None, "data byte {at}");
        }
        // A torn entry is not an entry.
        for cut in 0..entry.len() {
            assert_eq!(verified_ids(&entry[..cut], &data), None, "cut {cut}");
        }
    }

    /// An entry of the earlier format vouches for nothing: its writer did not check that the
    /// records were answers, so its frame is decoded and checked.
    #[test]
    fn an_entry_of_the_earlier_format_is_not_trusted() {
        let text = b"{\"id\":\"a\"}\n";
        let data = frame(text);
        assert!(verified_ids(&entry(text, &data).expect("entry"), &data).is_some());
        let entry = legacy_entry(text, &data).expect("entry");
        assert!(is_entry(&entry));
        assert_eq!(verified_ids(&entry, &data), None);
        // It still proves the frame's bytes intact.
        assert_eq!(
            vouched(&entry, &data),
            Some(Vouched {
                ids: vec!["a"],
                checked: false
            })
        );
    }

    #[test]
    fn a_frame_with_a_record_without_id_gets_no_entry() {
        let text = b"{\"id\":\"a\"}\n{\"no\":\"id\"}\n";
        assert_eq!(entry(text, &frame(text)), None);
    }
}
