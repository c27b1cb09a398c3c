//! The done-set: the ids of the completions stored in a source's `completions.jsonl.zst`,
//! rebuilt on every start of `gen run` (a million records in well under a second), and the
//! file put right first.
//!
//! The file is read with [`frames::survey`] — frames checked in parallel, exactly the frames
//! [`frames::scan`] accepts. A data frame's ids come from the id index entry after it when
//! that entry matches the frame's bytes and vouches that its records were checked to be
//! answers ([`index`]), so nothing is decompressed; any other frame (files written before the
//! index or before answers were checked, a frame whose entry a crash cut off) is decoded, each
//! record's `id` read ([`index::record_id`]) and each record checked
//! ([`record::line_defect`]).
//!
//! What [`load`] puts right, so that the file holds whole frames of good answers only, each
//! prompt's once:
//! - a torn tail (a partial last frame, what a crash mid-write leaves) is cut off;
//! - damaged bytes (anything else that does not decode) are moved to
//!   `completions.damaged-<unix ms>.bin` and the intact frames around them kept;
//! - stored records that are not answers (aborted, empty, no finish reason: older `gen`s
//!   stored those) are moved to `completions.not-answers-<unix ms>.jsonl`;
//! - a prompt's records after its first (frames appended twice) are moved to
//!   `completions.repeated-<unix ms>.jsonl`;
//! - with [`set_aside_foreign`], records that are not of the source's prompts (another
//!   source's or another run's) are moved to `completions.foreign-<unix ms>.jsonl`.
//!
//! The prompts of lost or moved records are then simply not done, and are generated again.
//! The file is rewritten (temp + fsync + rename) only in the last four cases, after the
//! set-aside files are on disk, so no step loses a byte: a crash in between leaves the old file,
//! and the next start does it again.
//!
//! The set holds each id's 128-bit key ([`IdSet`]): a million done ids cost 16 MB.

use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::atomic::if_exists;
use super::frames::{self, FrameBody};
use super::ids::{self, IdSet};
use super::index;
use super::layout::SourceDir;
use super::private;
use super::records::{self as record, Defect};

/// What [`load`] found in a completions file.
#[derive(Debug, Default)]
pub struct Stored {
    /// Ids with a stored answer.
    pub ids: IdSet,
    /// What was wrong with the file and was put right; empty for a sound file.
    pub repairs: Vec<Repair>,
}

/// One thing [`load`] put right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// A partial last frame, cut off.
    TornTail { bytes: u64 },
    /// Bytes that did not decode, moved to `to`; every intact frame was kept.
    Damaged {
        ranges: Vec<Range<u64>>,
        to: PathBuf,
        /// Records in the intact frames (kept).
        kept: u64,
    },
    /// Stored records that are not answers, moved to `to`; their prompts are generated again.
    NotAnswers {
        records: u64,
        /// One of them: its id and what is wrong with it.
        example: (String, Defect),
        to: PathBuf,
    },
    /// Records of a prompt stored before (frames appended twice), moved to `to`; the first
    /// record of each prompt is kept.
    Repeated {
        records: u64,
        /// The id of one of them.
        example: String,
        to: PathBuf,
    },
    /// Records whose ids are not the source's prompts (another source's or another run's),
    /// moved to `to`.
    Foreign {
        records: u64,
        /// The id of one of them.
        example: String,
        to: PathBuf,
    },
}

impl Repair {
    /// Whether this lost or moved records (a torn tail is routine: its records were never
    /// acknowledged as stored).
    pub fn is_loud(&self) -> bool {
        !matches!(self, Repair::TornTail { .. })
    }
}

impl std::fmt::Display for Repair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Repair::TornTail { bytes } => write!(
                f,
                "cut a torn tail of {bytes} bytes (a write interrupted by a crash)"
            ),
            Repair::Damaged { ranges, to, kept } => {
                let bytes: u64 = ranges.iter().map(|r| r.end - r.start).sum();
                write!(
                    f,
                    "`completions.jsonl.zst` was damaged: {bytes} bytes (at {}) did not decode; \
                     moved them to `{}`, kept the {kept} completions of the intact frames; the \
                     prompts whose completions were in the damaged bytes are generated again",
                    super::frames::ranges(ranges),
                    file_name(to)
                )
            }
            Repair::NotAnswers {
                records,
                example,
                to,
            } => write!(
                f,
                "{records} stored completions were not answers (e.g. `{}`: {}); moved them to \
                 `{}`; their prompts are generated again",
                example.0,
                example.1,
                file_name(to)
            ),
            Repair::Repeated {
                records,
                example,
                to,
            } => write!(
                f,
                "{records} stored completions repeated a prompt stored before (e.g. `{example}`); \
                 kept the first of each, moved the others to `{}`",
                file_name(to)
            ),
            Repair::Foreign {
                records,
                example,
                to,
            } => write!(
                f,
                "{records} stored completions are not of this source's prompts (e.g. \
                 `{example}`: another source's or another run's); moved them to `{}`",
                file_name(to)
            ),
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Why a stored record is moved out of the completions file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aside {
    NotAnswer(Defect),
    Repeated,
    Foreign,
}

/// One valid data frame's records.
struct FrameRecords {
    /// The records' id keys ([`ids::key`]).
    ids: Vec<u128>,
    /// Indexes (in `ids`, ascending) of the records to move out, and why; a record that is not
    /// an answer also has its id, for the example.
    moved: Vec<(usize, Aside, Option<String>)>,
}

impl FrameRecords {
    /// The keys of the records that stay, with their indexes.
    fn kept(&self) -> impl Iterator<Item = (usize, u128)> + '_ {
        let mut moved = self.moved.iter().map(|(at, ..)| *at).peekable();
        self.ids
            .iter()
            .copied()
            .enumerate()
            .filter(move |(i, _)| moved.next_if_eq(i).is_none())
    }

    /// Moves the records at `indexes` (ascending, none moved yet) out for `why`.
    fn move_out(&mut self, indexes: &[usize], why: Aside) {
        if indexes.is_empty() {
            return;
        }
        self.moved.extend(indexes.iter().map(|&at| (at, why, None)));
        self.moved.sort_by_key(|(at, ..)| *at);
    }
}

/// Ids with a stored answer in the completions file `path`, after putting the file right
/// (see the module documentation); set-aside files go next to it. A missing file is empty.
pub fn load(path: &Path) -> io::Result<Stored> {
    let dir = SourceDir::new(path.parent().unwrap_or(Path::new(".")));
    load_at(path, &dir, crate::sys::unix_ms(), None)
}

/// [`load`], also moving out the records whose ids `foreign` holds (ids that are not the
/// source's prompts, found when its prompts were counted).
pub fn set_aside_foreign(path: &Path, foreign: &IdSet) -> io::Result<Stored> {
    let dir = SourceDir::new(path.parent().unwrap_or(Path::new(".")));
    load_at(path, &dir, crate::sys::unix_ms(), Some(foreign))
}

fn load_at(
    path: &Path,
    dir: &SourceDir,
    now_ms: u64,
    foreign: Option<&IdSet>,
) -> io::Result<Stored> {
    let path = path.to_path_buf();
    let marker = checked_marker(&path);
    let checked = read_checked(&marker, &path)?;
    let (mut frames, scan) = frames::survey(&path, checked, frame_records)?;
    if let Some(foreign) = foreign {
        for frame in &mut frames {
            let records = &mut frame.value;
            let found: Vec<usize> = records
                .kept()
                .filter(|(_, key)| foreign.contains_key(*key))
                .map(|(at, _)| at)
                .collect();
            records.move_out(&found, Aside::Foreign);
        }
    }
    mark_repeats(&mut frames);
    let mut answers = Answers::sort(&mut frames, scan.records as usize);
    let mut stored = Stored {
        ids: IdSet::from_keys(std::mem::take(&mut answers.keys)),
        repairs: Vec::new(),
    };
    if scan.torn_bytes > 0 {
        stored.repairs.push(Repair::TornTail {
            bytes: scan.torn_bytes,
        });
    }
    if scan.damaged.is_empty() && answers.moved == [0; 3] {
        frames::cut_torn_tail(&path, &scan)?;
        write_checked(&marker, checked, scan.intact_end())?;
        return Ok(stored);
    }
    let mut file = fs_err::File::open(&path)?;
    if !scan.damaged.is_empty() {
        let to = dir.damaged_completions(now_ms);
        copy_ranges(&mut file, &scan.damaged, &to)?;
        stored.repairs.push(Repair::Damaged {
            ranges: scan.damaged.clone(),
            to,
            kept: scan.records,
        });
    }
    let mut aside = AsideFiles::create(dir, now_ms, &answers.moved)?;
    rewrite_intact(&path, &mut file, &frames, &mut aside)?;
    stored.repairs.extend(aside.repairs(answers));
    write_checked(&marker, checked, fs_err::metadata(&path)?.len())?;
    Ok(stored)
}

/// Marks every record of a prompt after its first (in file order) as repeated. Only when
/// some key repeats (rare) is the file walked for them.
fn mark_repeats(frames: &mut [frames::Frame<FrameRecords>]) {
    let mut keys: Vec<u128> = frames
        .iter()
        .flat_map(|f| f.value.kept().map(|(_, key)| key))
        .collect();
    keys.sort_unstable();
    let repeating = ids::repeated(&keys);
    if repeating.is_empty() {
        return;
    }
    let mut seen = std::collections::HashSet::new();
    for frame in frames {
        let records = &mut frame.value;
        let again: Vec<usize> = records
            .kept()
            .filter(|(_, key)| repeating.contains_key(*key) && !seen.insert(*key))
            .map(|(at, _)| at)
            .collect();
        records.move_out(&again, Aside::Repeated);
    }
}

/// The records of the surveyed frames, told apart: answers and those moved out.
struct Answers {
    /// The answers' id keys.
    keys: Vec<u128>,
    /// Records moved out: not answers, repeated, foreign.
    moved: [u64; 3],
    /// The first record that is not an answer: its id and what is wrong with it.
    example: Option<(String, Defect)>,
}

impl Answers {
    /// Sorts the records of `frames` (about `records` of them), leaving in each frame only
    /// what is needed from then on: its records to move out.
    fn sort(frames: &mut [frames::Frame<FrameRecords>], records: usize) -> Answers {
        let mut answers = Answers {
            keys: Vec::with_capacity(records),
            moved: [0; 3],
            example: None,
        };
        for frame in frames {
            let records = &mut frame.value;
            answers.keys.extend(records.kept().map(|(_, key)| key));
            for (_, why, id) in &records.moved {
                answers.moved[kind(*why)] += 1;
                if let (Aside::NotAnswer(defect), Some(id)) = (why, id) {
                    answers.example.get_or_insert_with(|| (id.clone(), *defect));
                }
            }
            records.ids = Vec::new();
        }
        answers
    }
}

/// The index of `why` in [`Answers::moved`] and [`AsideFiles::files`].
fn kind(why: Aside) -> usize {
    match why {
        Aside::NotAnswer(_) => 0,
        Aside::Repeated => 1,
        Aside::Foreign => 2,
    }
}

/// The files records are moved to, one per reason (only those with records), and the first
/// id each received.
struct AsideFiles {
    files: [Option<(PathBuf, fs_err::File)>; 3],
    examples: [Option<String>; 3],
}

impl AsideFiles {
    fn create(dir: &SourceDir, now_ms: u64, moved: &[u64; 3]) -> io::Result<AsideFiles> {
        let paths = [
            dir.not_answers(now_ms),
            dir.repeated_completions(now_ms),
            dir.foreign_completions(now_ms),
        ];
        let mut files = [None, None, None];
        for ((slot, path), count) in files.iter_mut().zip(paths).zip(moved) {
            if *count > 0 {
                let file = private::create_private(&path)?;
                *slot = Some((path, file));
            }
        }
        Ok(AsideFiles {
            files,
            examples: [None, None, None],
        })
    }

    /// Writes `line` to the file for `why`.
    fn write(&mut self, why: Aside, line: &[u8]) -> io::Result<()> {
        let k = kind(why);
        let (_, file) = self.files[k]
            .as_mut()
            .expect("a record moved out has its file");
        file.write_all(line)?;
        file.write_all(b"\n")?;
        if self.examples[k].is_none() {
            self.examples[k] = Some(index::record_id(line)?);
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        for (_, file) in self.files.iter().flatten() {
            file.sync_all()?;
        }
        Ok(())
    }

    /// What was moved where.
    fn repairs(self, answers: Answers) -> Vec<Repair> {
        let [not_answers, repeated, foreign] = self.files;
        let [_, repeated_id, foreign_id] = self.examples;
        let [n_not, n_repeated, n_foreign] = answers.moved;
        let mut repairs = Vec::new();
        if let (Some((to, _)), Some(example)) = (not_answers, answers.example) {
            repairs.push(Repair::NotAnswers {
                records: n_not,
                example,
                to,
            });
        }
        if let Some((to, _)) = repeated {
            repairs.push(Repair::Repeated {
                records: n_repeated,
                example: repeated_id.unwrap_or_default(),
                to,
            });
        }
        if let Some((to, _)) = foreign {
            repairs.push(Repair::Foreign {
                records: n_foreign,
                example: foreign_id.unwrap_or_default(),
                to,
            });
        }
        repairs
    }
}

/// Copies the byte `ranges` of `file` into a new private file `to`, on disk when this returns.
fn copy_ranges(file: &mut fs_err::File, ranges: &[Range<u64>], to: &Path) -> io::Result<()> {
    let mut aside = private::create_private(to)?;
    for range in ranges {
        file.seek(SeekFrom::Start(range.start))?;
        io::copy(&mut (&mut *file).take(range.end - range.start), &mut aside)?;
    }
    aside.sync_all()
}

/// Writes the intact `frames` of `file`, without the records moved out (those go to
/// `aside`), into a new file that replaces `path`.
fn rewrite_intact(
    path: &Path,
    file: &mut fs_err::File,
    frames: &[frames::Frame<FrameRecords>],
    aside: &mut AsideFiles,
) -> io::Result<()> {
    let temp = path.with_extension("zst.salvage.tmp");
    let mut out = private::create_private(&temp)?;
    for frame in frames {
        let len = frame.bytes.end - frame.bytes.start;
        file.seek(SeekFrom::Start(frame.bytes.start))?;
        if frame.value.moved.is_empty() {
            io::copy(&mut (&mut *file).take(len), &mut out)?;
            continue;
        }
        let mut bytes = Vec::new();
        (&mut *file).take(len).read_to_end(&mut bytes)?;
        let kept = split_records(&bytes, &frame.value.moved, aside)?;
        if !kept.is_empty() {
            // Every kept record was checked above: the entry may vouch for it.
            out.write_all(&frames::encode_frame(&kept, true)?)?;
        }
    }
    aside.sync()?;
    out.sync_all()?;
    drop(out);
    fs_err::rename(&temp, path)?;
    if let Some(parent) = path.parent() {
        fs_err::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Decodes one data frame, writes its `moved` records (by index) to `aside` and returns the
/// others' lines.
fn split_records(
    frame: &[u8],
    moved: &[(usize, Aside, Option<String>)],
    aside: &mut AsideFiles,
) -> io::Result<Vec<u8>> {
    let text = zstd::stream::decode_all(frame)?;
    let mut kept = Vec::new();
    let mut out = moved.iter().peekable();
    for (i, line) in text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        if let Some((_, why, _)) = out.next_if(|(at, ..)| *at == i) {
            aside.write(*why, line)?;
        } else {
            kept.extend_from_slice(line);
            kept.push(b'\n');
        }
    }
    Ok(kept)
}

/// `NAME.checked` next to the completions file `NAME`: up to which byte its records were
/// checked to be answers, so frames an older `gen` indexed (`gid1` entries) are decoded and
/// checked once, not on every start. Their entries still prove each frame's bytes intact.
fn checked_marker(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".checked");
    path.with_file_name(name)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Checked {
    through: u64,
}

/// Where the checked part of `path` ends: 0 without a marker, or when the file is shorter
/// than it (replaced or cut: not the file that was checked).
fn read_checked(marker: &Path, path: &Path) -> io::Result<u64> {
    let through = match super::atomic::read_json::<Checked>(marker) {
        Ok(Some(checked)) => checked.through,
        // An unreadable marker only costs a slower start.
        Ok(None) | Err(_) => 0,
    };
    let len = if_exists(fs_err::metadata(path))?.map_or(0, |meta| meta.len());
    Ok(if through <= len { through } else { 0 })
}

/// Records that the records of `path` up to byte `through` were checked (when it moved).
fn write_checked(marker: &Path, before: u64, through: u64) -> io::Result<()> {
    if through == before || through == 0 {
        return Ok(());
    }
    super::atomic::write_json(marker, &Checked { through })
}

/// The ids of one frame's records, in order, and which are not answers.
fn frame_records(body: FrameBody<'_>) -> io::Result<FrameRecords> {
    match body {
        FrameBody::Ids(list) => Ok(FrameRecords {
            ids: list.into_iter().map(ids::key).collect(),
            moved: Vec::new(),
        }),
        FrameBody::Text(text) => {
            let mut records = FrameRecords {
                ids: Vec::new(),
                moved: Vec::new(),
            };
            for line in text.split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
                if let Some((id, defect)) = record::line_defect(line)? {
                    let at = records.ids.len();
                    records.moved.push((at, Aside::NotAnswer(defect), Some(id)));
                }
                records.ids.push(ids::key(&index::record_id(line)?));
            }
            Ok(records)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::io::Write as _;

    use serde_json::json;

    use super::*;
    use crate::store::frames::FrameWriter;
    use crate::store::private::open_private;

    fn answer(id: &str) -> serde_json::Value {
        json!({"id": id, "content": "an answer", "finish_reason": "stop"})
    }

    fn completed_ids(path: &Path) -> io::Result<IdSet> {
        load(path).map(|stored| stored.ids)
    }

    fn ids_of(ids: &HashSet<String>) -> IdSet {
        ids.iter().map(String::as_str).collect()
    }

    fn open(path: &Path, indexed: bool) -> FrameWriter {
        let (writer, _) = if indexed {
            FrameWriter::open_indexed(path)
        } else {
            FrameWriter::open(path)
        }
        .expect("open");
        writer
    }

    /// Writes frames of ids `{prefix}-{frame}-{i}`, `sizes[frame]` records each; returns them.
    fn write_frames(path: &Path, indexed: bool, prefix: &str, sizes: &[usize]) -> Vec<String> {
        let mut writer = open(path, indexed);
        let mut ids = Vec::new();
        for (frame, size) in sizes.iter().enumerate() {
            for i in 0..*size {
                let id = format!("{prefix}-{frame}-{i}");
                writer
                    .push(&json!({"id": id, "content": format!("a{}", "x".repeat(100 * i)), "finish_reason": "stop"}))
                    .expect("push");
                ids.push(id);
            }
            writer.flush().expect("flush");
        }
        ids
    }

    /// For each valid data frame: whether its ids came from its index entry (not decoding).
    fn from_index(path: &Path) -> Vec<bool> {
        let (per_frame, _) =
            frames::survey(path, 0, |body| Ok(matches!(body, FrameBody::Ids(_)))).expect("scan");
        per_frame.into_iter().map(|f| f.value).collect()
    }

    fn len(path: &Path) -> u64 {
        fs_err::metadata(path).expect("meta").len()
    }

    fn truncate(path: &Path, len: u64) {
        fs_err::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open")
            .set_len(len)
            .expect("truncate");
    }

    fn append(path: &Path, bytes: &[u8]) {
        let mut file = open_private(path).expect("append");
        file.write_all(bytes).expect("write");
    }

    /// One more flush as the writer makes it (data frame + entry when indexed), not appended.
    fn next_flush(ids: &[&str], indexed: bool) -> (Vec<u8>, usize) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("one.jsonl.zst");
        let mut writer = open(&path, indexed);
        for id in ids {
            writer.push(&answer(id)).expect("push");
        }
        writer.flush().expect("flush");
        let bytes = fs_err::read(&path).expect("read");
        let data = zstd::zstd_safe::find_frame_compressed_size(&bytes).expect("frame");
        (bytes, data)
    }

    /// A crash mid-flush leaves part of a data frame or of the index entry after it: the
    /// rebuild gives exactly the ids of the intact data frames and cuts the tail at the end of
    /// the last one, with or without an index, and a writer appends after it.
    #[test]
    fn a_torn_tail_leaves_exactly_the_ids_of_intact_frames() {
        for indexed in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("completions.jsonl.zst");
            let mut intact: HashSet<String> = write_frames(&path, indexed, "s", &[10; 5])
                .into_iter()
                .collect();
            assert_eq!(from_index(&path), [indexed; 5]);
            let good_len = len(&path);

            // The next flush, torn at every length: a torn data frame gives none of its ids and
            // is cut; a whole data frame with a torn entry is intact (decoded), only the entry
            // is cut.
            let (torn, data_len) = next_flush(&["torn-1", "torn-2"], indexed);
            assert_eq!(data_len < torn.len(), indexed);
            for cut in 1..torn.len() {
                append(&path, &torn[..cut]);
                let mut expected = intact.clone();
                let mut kept = good_len;
                if cut >= data_len {
                    expected.extend(["torn-1".to_owned(), "torn-2".to_owned()]);
                    kept += data_len as u64;
                }
                assert_eq!(
                    completed_ids(&path).expect("ids"),
                    ids_of(&expected),
                    "cut at {cut}"
                );
                assert_eq!(len(&path), kept, "cut at {cut}");
                truncate(&path, good_len);
            }

            // A whole data frame with a flipped byte, even with its entry intact, is damage:
            // the entry no longer matches and decoding fails the checksum. It is moved aside
            // (with its entry) and the whole frame after it is kept.
            let mut corrupt = torn.clone();
            corrupt[data_len - 1] ^= 0x55;
            append(&path, &corrupt);
            let (later, _) = next_flush(&["later-1"], indexed);
            append(&path, &later);
            let stored = load(&path).expect("load");
            let mut expected = intact.clone();
            expected.insert("later-1".into());
            assert_eq!(stored.ids, ids_of(&expected));
            let [Repair::Damaged { ranges, to, kept }] = &stored.repairs[..] else {
                panic!("{:?}", stored.repairs);
            };
            assert_eq!(*kept, 51);
            let corrupt_range = good_len..good_len + corrupt.len() as u64;
            assert_eq!(ranges, &vec![corrupt_range]);
            assert_eq!(fs_err::read(to).expect("set aside"), corrupt);
            assert_eq!(len(&path), good_len + later.len() as u64);
            assert_eq!(load(&path).expect("again").repairs, [], "sound now");
            fs_err::remove_file(to).expect("rm");
            truncate(&path, good_len);

            // Appending after the repair yields a readable file with the new id.
            let (mut writer, scan) = if indexed {
                FrameWriter::open_indexed(&path)
            } else {
                FrameWriter::open(&path)
            }
            .expect("reopen");
            assert_eq!(scan.records, 50);
            writer.push(&answer("after")).expect("push");
            writer.flush().expect("flush");
            intact.insert("after".into());
            assert_eq!(completed_ids(&path).expect("ids"), ids_of(&intact));
            assert_eq!(from_index(&path), [indexed; 6]);
        }
    }

    /// An entry vouches only for the exact bytes it was written after: a data frame replaced
    /// by another (here one of another flush, keeping the old entry) is decoded, and its own
    /// ids count, not the entry's.
    #[test]
    fn an_entry_that_does_not_match_its_data_frame_is_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("completions.jsonl.zst");
        write_frames(&path, true, "s", &[3, 3]);
        let bytes = fs_err::read(&path).expect("read");
        let first = zstd::zstd_safe::find_frame_compressed_size(&bytes).expect("frame");
        let (other, other_len) = next_flush(&["new-1", "new-2"], true);
        let mut replaced = other[..other_len].to_vec();
        replaced.extend_from_slice(&bytes[first..]);
        fs_err::write(&path, &replaced).expect("write");

        let mut expected: HashSet<String> = ["new-1", "new-2", "s-1-0", "s-1-1", "s-1-2"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(completed_ids(&path).expect("ids"), ids_of(&expected));
        assert_eq!(from_index(&path), [false, true]);
        assert_eq!(len(&path), replaced.len() as u64, "nothing is cut");

        // An entry moved after another data frame, or standing alone, vouches for nothing.
        let entry_of_new = &other[other_len..];
        let mut moved = bytes[..first].to_vec();
        moved.extend_from_slice(entry_of_new);
        moved.extend_from_slice(entry_of_new);
        fs_err::write(&path, &moved).expect("write");
        expected = ["s-0-0", "s-0-1", "s-0-2"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(completed_ids(&path).expect("ids"), ids_of(&expected));
        assert_eq!(from_index(&path), [false]);
        assert_eq!(len(&path), moved.len() as u64);
    }

    /// A file begun without an index (older `gen`) and continued with one reads whole, and
    /// the parallel reader accepts exactly what the line reader accepts.
    #[test]
    fn old_frames_without_entries_and_new_ones_with_read_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.jsonl.zst");
        // Frames of 1 to 13 records.
        let sizes: Vec<usize> = (0..40).map(|n| 1 + n % 13).collect();
        let mut all = write_frames(&path, false, "old", &sizes);
        all.extend(write_frames(&path, true, "new", &sizes));
        let mut sequential = HashSet::new();
        let line_scan = frames::scan(&path, |line| {
            sequential.insert(index::record_id(line)?);
            Ok(())
        })
        .expect("scan");
        let (_, parallel_scan) = frames::survey(&path, 0, |_| Ok(())).expect("scan");
        assert_eq!(parallel_scan, line_scan);
        assert_eq!(sequential, all.into_iter().collect());
        assert_eq!(completed_ids(&path).expect("ids"), ids_of(&sequential));
        let flags = from_index(&path);
        assert_eq!(flags.len(), 80);
        assert!(flags[..40].iter().all(|f| !f) && flags[40..].iter().all(|f| *f));
    }

    /// The entries are invisible to plain zstd readers: the streaming decoder (what `zstd -d`,
    /// `gen export` and Python read with) gives the same JSONL with or without them.
    #[test]
    fn a_streaming_decoder_reads_the_same_jsonl_with_or_without_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let plain = dir.path().join("plain.jsonl.zst");
        let indexed = dir.path().join("indexed.jsonl.zst");
        write_frames(&plain, false, "s", &[5, 1, 7]);
        write_frames(&indexed, true, "s", &[5, 1, 7]);
        assert!(len(&indexed) > len(&plain));
        let decode = |path: &Path| {
            zstd::stream::decode_all(&fs_err::read(path).expect("read")[..]).expect("decode")
        };
        let text = decode(&plain);
        assert_eq!(text.iter().filter(|b| **b == b'\n').count(), 13);
        assert_eq!(decode(&indexed), text);
        let mut lines = Vec::new();
        frames::scan(&indexed, |line| {
            lines.extend_from_slice(line);
            lines.push(b'\n');
            Ok(())
        })
        .expect("scan");
        assert_eq!(lines, text);
    }

    /// Records an older `gen` stored although they are not answers (aborted, empty, without a
    /// finish reason) are moved to a file of their own, whole lines as they were; the good
    /// records stay, in order, in frames whose entries now vouch for them.
    #[test]
    fn stored_records_that_are_not_answers_are_set_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("completions.jsonl.zst");
        let bad = [
            json!({"id": "aborted", "content": "half an ans", "finish_reason": "abort"}),
            json!({"id": "empty", "content": "", "finish_reason": null}),
            json!({"id": "blank", "content": " \n", "reasoning_content": "", "finish_reason": "stop"}),
            json!({"id": "turn", "content": "ok", "finish_reason": "stop",
                   "turns": [{"content": "", "finish_reason": "abort"}, {"content": "ok", "finish_reason": "stop"}]}),
        ];
        // As an older `gen` wrote them: no entry that vouches for the records.
        let mut writer = open(&path, false);
        writer.push(&answer("good-1")).expect("push");
        for record in &bad {
            writer.push(record).expect("push");
        }
        writer.push(&json!({"id": "thinking", "content": "", "reasoning_content": "hmm", "finish_reason": "length"})).expect("push");
        writer.flush().expect("flush");
        writer.push(&answer("good-2")).expect("push");
        writer.flush().expect("flush");
        drop(writer);
        let stored = load_at(&path, &SourceDir::new(dir.path()), 42, None).expect("load");
        let good: HashSet<String> = ["good-1", "thinking", "good-2"].map(str::to_owned).into();
        assert_eq!(stored.ids, ids_of(&good));
        let aside = dir.path().join("completions.not-answers-42.jsonl");
        assert_eq!(
            stored.repairs,
            [Repair::NotAnswers {
                records: 4,
                example: ("aborted".into(), Defect::Aborted),
                to: aside.clone(),
            }]
        );
        let moved: Vec<serde_json::Value> = fs_err::read_to_string(&aside)
            .expect("aside")
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(moved, bad);
        let mut lines = Vec::new();
        frames::scan(&path, |line| {
            lines.push(index::record_id(line)?);
            Ok(())
        })
        .expect("scan");
        assert_eq!(lines, ["good-1", "thinking", "good-2"]);
        // The rewritten frame vouches for its records; the untouched one is still decoded.
        assert_eq!(from_index(&path), [true, false]);
        let again = load(&path).expect("again");
        assert_eq!((again.ids, again.repairs), (ids_of(&good), vec![]));
    }

    /// Frames an older `gen` indexed (`gid1`) are decoded and checked on the first start,
    /// and from then on read from their entries, up to where the check got.
    #[test]
    fn frames_indexed_before_answers_were_checked_are_checked_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("completions.jsonl.zst");
        let mut bytes = Vec::new();
        for records in [
            vec![answer("a"), answer("b")],
            vec![
                answer("c"),
                json!({"id": "cut", "content": "", "finish_reason": "abort"}),
            ],
        ] {
            let text: String = records.iter().map(|r| format!("{r}\n")).collect();
            let frame = zstd::stream::encode_all(text.as_bytes(), 3).expect("encode");
            let entry = index::legacy_entry(text.as_bytes(), &frame).expect("entry");
            bytes.extend(frame);
            bytes.extend(entry);
        }
        fs_err::write(&path, &bytes).expect("write");
        let marker = dir.path().join("completions.jsonl.zst.checked");
        let stored = load(&path).expect("load");
        let good: HashSet<String> = ["a", "b", "c"].map(str::to_owned).into();
        assert_eq!(stored.ids, ids_of(&good));
        assert!(matches!(
            &stored.repairs[..],
            [Repair::NotAnswers { records: 1, .. }]
        ));
        let through = read_checked(&marker, &path).expect("marker");
        assert_eq!(through, len(&path));
        let trusted = |through: u64| -> Vec<bool> {
            let (frames, _) =
                frames::survey(&path, through, |body| Ok(matches!(body, FrameBody::Ids(_))))
                    .expect("survey");
            frames.into_iter().map(|f| f.value).collect()
        };
        // The untouched legacy frame, then the rewritten one (vouched for by its new entry).
        assert_eq!(trusted(0), [false, true]);
        assert_eq!(trusted(through), [true, true]);
        let again = load(&path).expect("again");
        assert_eq!((again.ids, again.repairs), (ids_of(&good), vec![]));
        // A shorter file is not the file that was checked.
        fs_err::write(&marker, format!("{{\"through\": {}}}", len(&path) + 1)).expect("write");
        assert_eq!(read_checked(&marker, &path).expect("marker"), 0);
    }

    /// A frame appended twice (indexed: its ids come from the entry) loses its repeats to
    /// `completions.repeated-*`, the first record of each prompt staying; records of ids that
    /// are not the source's go to `completions.foreign-*`. Nothing is lost: every moved line is
    /// in its file, and a second load finds a sound file.
    #[test]
    fn repeated_and_foreign_records_are_set_aside_and_the_first_of_each_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("completions.jsonl.zst");
        let ids = write_frames(&path, true, "s", &[3, 2]);
        let bytes = fs_err::read(&path).expect("read");
        let first = zstd::zstd_safe::find_frame_compressed_size(&bytes).expect("frame");
        let entry = zstd::zstd_safe::find_frame_compressed_size(&bytes[first..]).expect("entry");
        append(&path, &bytes[..first + entry]);
        write_frames(&path, true, "other", &[2]);
        let source = SourceDir::new(dir.path());
        let stored = load_at(&path, &source, 7, None).expect("load");
        let mut all: HashSet<String> = ids.iter().cloned().collect();
        all.extend(["other-0-0".to_owned(), "other-0-1".to_owned()]);
        assert_eq!(stored.ids, ids_of(&all));
        let repeated = dir.path().join("completions.repeated-7.jsonl");
        assert_eq!(
            stored.repairs,
            [Repair::Repeated {
                records: 3,
                example: "s-0-0".into(),
                to: repeated.clone(),
            }]
        );
        assert_eq!(
            fs_err::read_to_string(&repeated)
                .expect("aside")
                .lines()
                .count(),
            3
        );
        let foreign: IdSet = ["other-0-0", "other-0-1"].into_iter().collect();
        let stored = load_at(&path, &source, 8, Some(&foreign)).expect("load");
        assert_eq!(stored.ids, ids_of(&ids.iter().cloned().collect()));
        assert!(
            matches!(&stored.repairs[..], [Repair::Foreign { records: 2, .. }]),
            "{:?}",
            stored.repairs
        );
        let mut kept = Vec::new();
        frames::scan(&path, |line| {
            kept.push(index::record_id(line)?);
            Ok(())
        })
        .expect("scan");
        assert_eq!(kept, ids);
        assert_eq!(load(&path).expect("again").repairs, []);
    }

    #[test]
    fn a_missing_file_is_an_empty_set_and_a_bad_record_is_an_error() {
        for indexed in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("c.jsonl.zst");
            assert!(completed_ids(&path).expect("ids").is_empty());
            let mut writer = open(&path, indexed);
            writer.push(&json!({"no": "id"})).expect("push");
            writer.flush().expect("flush");
            assert!(completed_ids(&path).is_err());
        }
    }
}
