//! What one source still has to send, streamed from its prepared prompts file: a counting
//! pass ([`Feed::open`]) says how many prompts are done, settled, duplicates of another
//! source, or still pending; then a reader thread ([`Feed::start`]) sends the pending ones
//! through a small bounded channel, so a million queued prompts cost a channel's worth of
//! memory, not a million prompts. They travel in batches of [`BATCH`]: one prompt per message
//! woke the reader thread (a futex call) for every prompt sent, a measurable share of the
//! dispatcher's CPU at 20k requests/s.
//!
//! Both passes read the file through [`crate::store::prompts`], deciding a prompt's fate by
//! the id read from the start of its line and parsing the rest only when its content decides
//! or it may be sent, so a resumed run does not parse the prompts it already has. When the done and settled ids are exactly the prepared
//! prompts' ids ([`PromptIds`], recorded by an earlier counting pass), [`finished`] says so
//! without reading the file at all.
//!
//! With `samples = k` a prompt is k units of work, each with its own id
//! ([`crate::config::settings::sample_id`]): the counts are of samples, and a prompt is sent
//! with the samples of it still to send ([`Pending`]).
//!
//! With `order = "longest-first"` the pending prompts of the source are held and sorted (by
//! characters, longest first) before the first one is sent: long requests start early instead
//! of straggling at the end. That costs the source's pending prompts in memory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::settings::sample_id;
use crate::config::values::Order;
use crate::scale::shard::Shard;
use crate::store::ids::{self, IdSet};
use crate::store::prompts::{PromptIds, Record, SampleIds, for_each_record};
use gen_sources::Prompt;
use gen_sources::prompt::dedup_hash;

/// Prompts per message from the reader thread.
const BATCH: usize = 64;
/// Batches read ahead of the dispatcher (with the one being sent: 5 × 64 prompts).
const READ_AHEAD: usize = 4;

/// Which prepared prompts are not to be sent.
#[derive(Debug, Default)]
pub struct Skip {
    /// Prompts with a stored completion.
    pub done: IdSet,
    /// Prompts settled without one (rejected, dropped, duplicates).
    pub settled: IdSet,
    /// With `--shard i/n`: the prompts of this shard only.
    pub shard: Option<Shard>,
    /// Content hashes of prompts another source answers, with that source: every prompt of
    /// an earlier source, and what a later source answered before this one was prepared.
    pub elsewhere: Arc<HashMap<u64, usize>>,
    /// Answers per prompt (`samples`; 0 reads as 1).
    pub samples: u32,
}

impl Skip {
    /// How the samples of prompt `id` stand, each by its own id (sample 0's is the prompt's).
    fn samples_of(&self, id: &str) -> Samples {
        let mut samples = Samples::default();
        for sample in 0..self.samples.max(1) {
            let owned;
            let sample_id = if sample == 0 {
                id
            } else {
                owned = sample_id(id, sample);
                &owned
            };
            if self.done.contains(sample_id) {
                samples.done += 1;
            } else if self.settled.contains(sample_id) {
                samples.settled += 1;
            } else {
                samples.pending.push(sample);
            }
        }
        samples
    }
}

/// The samples of one prompt: how many are done or settled, and which are left to send.
#[derive(Debug, Default)]
struct Samples {
    done: u64,
    settled: u64,
    pending: Vec<u32>,
}

/// A prompt to send, with the samples of it still to send.
#[derive(Debug)]
pub struct Pending {
    pub prompt: Prompt,
    pub samples: Vec<u32>,
}

/// Counts of the counting pass, in samples (with one sample per prompt, prompts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Samples of this source's prompts (in this shard).
    pub prepared: u64,
    pub done: u64,
    pub settled: u64,
    /// Samples still to send.
    pub pending: u64,
    /// Pending prompts another source answers (see [`Skip::elsewhere`]): ids to settle as
    /// duplicates, with that source's index.
    pub duplicates: Vec<(String, usize)>,
    /// The ids of every prompt of the file (all shards), for the next run's [`finished`].
    pub ids: PromptIds,
    /// Done ids that are no prompt of the file (another source's or another run's records).
    pub foreign: IdSet,
}

/// The census of a source whose every prompt is done or settled, when that can be told
/// without reading its prompts: `recorded` (from an earlier counting pass) still describes
/// the file at `path`, and the done and settled ids are exactly its ids. `None` means the
/// prompts must be counted ([`Feed::open`]).
pub fn finished(path: &Path, recorded: Option<&PromptIds>, skip: &Skip) -> Option<Census> {
    let recorded = recorded?;
    if skip.shard.is_some() {
        // A shard's census counts its own share of the prompts only.
        return None;
    }
    let samples = skip.samples.max(1);
    let (ids, expected) = match &recorded.samples {
        _ if samples == 1 => (recorded.prompts, &recorded.digest),
        Some(s) if s.samples == samples => (recorded.prompts * u64::from(samples), &s.digest),
        // Counted for another number of samples, or not at all.
        _ => return None,
    };
    let stat = crate::store::manifest::FileStat::of(path).ok()?;
    if recorded.stat != Some(stat) {
        // Written since it was counted (damaged, or replaced): read it again.
        return None;
    }
    let bytes = stat.len;
    // Counted and summed without building the union (another copy of the done-set).
    let (count, digest) = skip
        .done
        .union_keys(&skip.settled)
        .fold((0u64, 0u128), |(n, sum), key| {
            (n + 1, sum.wrapping_add(key))
        });
    let matches = recorded.bytes == bytes && ids == count && *expected == format!("{digest:032x}");
    matches.then(|| Census {
        prepared: ids,
        done: skip.done.len() as u64,
        settled: skip.settled.count_not_in(&skip.done) as u64,
        pending: 0,
        duplicates: Vec::new(),
        ids: recorded.clone(),
        foreign: IdSet::default(),
    })
}

/// One source's pending prompts, ready to stream.
#[derive(Debug)]
pub struct Feed {
    path: PathBuf,
    skip: Skip,
    order: Order,
}

impl Feed {
    /// Counts the prompts of `path` against `skip` (one streaming pass over the file). A file
    /// that does not read gives `skip` back with the error.
    pub fn open(
        path: &Path,
        skip: Skip,
        order: Order,
    ) -> Result<(Census, Feed), (anyhow::Error, Skip)> {
        match Self::count(path, &skip) {
            Ok(census) => Ok((
                census,
                Feed {
                    path: path.to_path_buf(),
                    skip,
                    order,
                },
            )),
            Err(e) => Err((e, skip)),
        }
    }

    fn count(path: &Path, skip: &Skip) -> anyhow::Result<Census> {
        let mut census = Census::default();
        let (mut lines, mut digest, mut samples_digest) = (0u64, 0u128, 0u128);
        // Done ids met among the prompts (of every shard).
        let mut met = Vec::new();
        let stat = crate::store::manifest::FileStat::of(path)?;
        for_each_record(path, |record| {
            let (key, fate) = match record.peek_id() {
                Some(id) => (ids::key(id), fate_of_id(skip, id)),
                None => {
                    let prompt = record.parse()?;
                    (ids::key(&prompt.id), Some(fate_of(skip, prompt)))
                }
            };
            lines += 1;
            digest = digest.wrapping_add(key);
            samples_digest = samples_digest.wrapping_add(key);
            if skip.done.contains_key(key) {
                met.push(key);
            }
            if skip.samples > 1 {
                let id = record.peek_id().map(str::to_owned);
                let id = match id {
                    Some(id) => id,
                    None => record.parse()?.id,
                };
                for sample in 1..skip.samples {
                    let key = ids::key(&sample_id(&id, sample));
                    samples_digest = samples_digest.wrapping_add(key);
                    if skip.done.contains_key(key) {
                        met.push(key);
                    }
                }
            }
            let fate = match fate {
                Some(fate) => fate,
                None => fate_of(skip, record.parse()?),
            };
            let counted = match fate {
                Fate::OtherShard => return Ok(()),
                Fate::Answered(samples) | Fate::Send(_, samples) => samples,
                Fate::Duplicate(prompt, earlier) => {
                    census.duplicates.push((prompt.id, earlier));
                    // Every sample is settled with it: the others count as settled.
                    census.settled += u64::from(skip.samples.max(1)) - 1;
                    Samples::default()
                }
            };
            census.done += counted.done;
            census.settled += counted.settled;
            census.pending += counted.pending.len() as u64;
            census.prepared += u64::from(skip.samples.max(1));
            Ok(())
        })?;
        census.ids = PromptIds {
            bytes: stat.len,
            prompts: lines,
            digest: format!("{digest:032x}"),
            stat: Some(stat),
            samples: (skip.samples > 1).then(|| SampleIds {
                samples: skip.samples,
                digest: format!("{samples_digest:032x}"),
            }),
        };
        let met = IdSet::from_keys(met);
        if met.len() < skip.done.len() {
            census.foreign = IdSet::from_keys(
                skip.done
                    .keys()
                    .filter(|key| !met.contains_key(*key))
                    .collect(),
            );
        }
        Ok(census)
    }

    /// What was not to be sent (the feed is not started).
    pub fn into_skip(self) -> Skip {
        self.skip
    }

    /// Streams the pending prompts from a reader thread. A read error after the counting pass
    /// (the file changed under us) ends the stream early: the source then ends incomplete
    /// and the next run sends the rest.
    pub fn start(self) -> Prompts {
        let (sender, receiver) = mpsc::channel(READ_AHEAD);
        std::thread::Builder::new()
            .name("gen-feed".into())
            .spawn(move || {
                if let Err(e) = self.send_all(&sender) {
                    tracing::warn!("reading `{}` stopped: {e:#}", self.path.display());
                }
            })
            .expect("a thread can be spawned");
        Prompts {
            receiver,
            batch: Vec::new().into_iter(),
        }
    }

    fn send_all(&self, sender: &mpsc::Sender<Vec<Pending>>) -> anyhow::Result<()> {
        match self.order {
            Order::File => {
                let mut closed = false;
                let mut batch = Vec::with_capacity(BATCH);
                for_each_record(&self.path, |record| {
                    if !closed && let Some(prompt) = self.pending(&record)? {
                        batch.push(prompt);
                        if batch.len() == BATCH {
                            let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                            // A closed channel: the run is stopping; stop reading.
                            closed = sender.blocking_send(full).is_err();
                        }
                    }
                    Ok(())
                })?;
                if !closed && !batch.is_empty() {
                    sender.blocking_send(batch).ok();
                }
            }
            Order::LongestFirst => {
                let mut pending = Vec::new();
                for_each_record(&self.path, |record| {
                    pending.extend(self.pending(&record)?);
                    Ok(())
                })?;
                pending.sort_by_cached_key(|p: &Pending| std::cmp::Reverse(length(&p.prompt)));
                let mut pending = pending.into_iter().peekable();
                while pending.peek().is_some() {
                    let batch: Vec<Pending> = pending.by_ref().take(BATCH).collect();
                    if sender.blocking_send(batch).is_err() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// The prompt of `record` when it is to be sent; a prompt skipped by its id is not parsed.
    fn pending(&self, record: &Record<'_>) -> anyhow::Result<Option<Pending>> {
        if let Some(id) = record.peek_id()
            && fate_of_id(&self.skip, id).is_some()
        {
            return Ok(None);
        }
        Ok(match fate_of(&self.skip, record.parse()?) {
            Fate::Send(prompt, samples) => Some(Pending {
                prompt,
                samples: samples.pending,
            }),
            _ => None,
        })
    }
}

/// The receiving end of a [`Feed`]: the pending prompts, in order.
#[derive(Debug)]
pub struct Prompts {
    receiver: mpsc::Receiver<Vec<Pending>>,
    batch: std::vec::IntoIter<Pending>,
}

impl Prompts {
    /// The next prompt; `None` once every pending prompt was handed out (or reading stopped).
    pub async fn recv(&mut self) -> Option<Pending> {
        loop {
            if let Some(prompt) = self.batch.next() {
                return Some(prompt);
            }
            self.batch = self.receiver.recv().await?.into_iter();
        }
    }
}

/// A prompt's length in characters, for `longest-first`.
fn length(prompt: &Prompt) -> usize {
    prompt.messages.iter().map(|m| m.content.len()).sum()
}

#[derive(Debug)]
enum Fate {
    OtherShard,
    /// Every sample done or settled.
    Answered(Samples),
    Duplicate(Prompt, usize),
    Send(Prompt, Samples),
}

/// The fate of a prompt its id alone decides (another shard's, done, settled); `None` when
/// its content decides ([`fate_of`]).
fn fate_of_id(skip: &Skip, id: &str) -> Option<Fate> {
    if skip.shard.is_some_and(|s| !s.contains(id)) {
        return Some(Fate::OtherShard);
    }
    let samples = skip.samples_of(id);
    samples
        .pending
        .is_empty()
        .then_some(Fate::Answered(samples))
}

fn fate_of(skip: &Skip, prompt: Prompt) -> Fate {
    if let Some(fate) = fate_of_id(skip, &prompt.id) {
        fate
    } else if let Some(holder) = (!skip.elsewhere.is_empty())
        .then(|| {
            skip.elsewhere
                .get(&dedup_hash(&prompt.messages, prompt.tools.as_ref()))
        })
        .flatten()
    {
        Fate::Duplicate(prompt, *holder)
    } else {
        let samples = skip.samples_of(&prompt.id);
        Fate::Send(prompt, samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frames::FrameWriter;
    use crate::store::prompts::content_hashes;
    use gen_sources::{Message, Role};

    fn prompt(id: &str, text: &str) -> Prompt {
        Prompt {
            id: id.to_owned(),
            source: "s".to_owned(),
            messages: vec![Message::new(Role::User, text.to_owned())],
            tools: None,
            source_key: None,
            row: 0,
        }
    }

    fn write(dir: &Path, prompts: &[Prompt]) -> PathBuf {
        let path = dir.join("prompts.jsonl.zst");
        let (mut writer, _) = FrameWriter::open(&path).expect("open");
        for (i, p) in prompts.iter().enumerate() {
            writer.push(p).expect("push");
            if i % 2 == 1 {
                writer.flush().expect("flush");
            }
        }
        writer.flush().expect("flush");
        path
    }

    async fn drain(feed: Feed) -> Vec<String> {
        let mut receiver = feed.start();
        let mut ids = Vec::new();
        while let Some(p) = receiver.recv().await {
            ids.extend(p.samples.iter().map(|s| sample_id(&p.prompt.id, *s)));
        }
        ids
    }

    #[tokio::test]
    async fn counts_and_streams_only_what_is_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let prompts = [
            prompt("a", "one"),
            prompt("b", "two two"),
            prompt("c", "three"),
            prompt("d", "shared with an earlier source"),
            prompt("e", "five"),
        ];
        let path = write(dir.path(), &prompts);
        let skip = Skip {
            done: IdSet::from_iter(["a"]),
            settled: IdSet::from_iter(["c"]),
            shard: None,
            elsewhere: Arc::new(HashMap::from([(dedup_hash(&prompts[3].messages, None), 0)])),
            samples: 1,
        };
        let (mut census, feed) = Feed::open(&path, skip, Order::File).expect("open");
        assert_eq!(census.ids.prompts, 5);
        census.ids = PromptIds::default();
        assert_eq!(
            census,
            Census {
                prepared: 5,
                done: 1,
                settled: 1,
                pending: 2,
                duplicates: vec![("d".to_owned(), 0)],
                ids: PromptIds::default(),
                foreign: IdSet::default(),
            }
        );
        assert_eq!(drain(feed).await, ["b", "e"]);
    }

    /// With `samples = 3` each prompt is three units: counted, streamed, settled and told
    /// foreign by their own ids (a refused first sample leaves the others to send).
    #[tokio::test]
    async fn samples_are_units_of_work_with_ids_of_their_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let prompts = [prompt("a", "one"), prompt("b", "two"), prompt("c", "three")];
        let path = write(dir.path(), &prompts);
        let skip = Skip {
            samples: 3,
            ..skip(&["a", "a#2", "c#1", "elsewhere#1"], &["b", "b#2"])
        };
        let (census, feed) = Feed::open(&path, skip, Order::File).expect("open");
        assert_eq!(
            (census.prepared, census.done, census.settled, census.pending),
            (9, 3, 2, 4)
        );
        let foreign: Vec<u128> = census.foreign.keys().collect();
        assert_eq!(foreign, [ids::key("elsewhere#1")]);
        assert_eq!(drain(feed).await, ["a#1", "b#1", "c", "c#2"]);
    }

    fn skip(done: &[&str], settled: &[&str]) -> Skip {
        Skip {
            done: done.iter().copied().collect(),
            settled: settled.iter().copied().collect(),
            ..Skip::default()
        }
    }

    /// With `samples`, a source whose every sample is done or settled is told without reading
    /// its prompts too (before: its prompts were read at every start); one sample left, or
    /// ids counted for another number of samples, are counted.
    #[tokio::test]
    async fn a_finished_source_of_several_samples_is_told_without_reading_its_prompts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ids = ["a", "b", "c"];
        let prompts: Vec<Prompt> = ids.iter().map(|id| prompt(id, id)).collect();
        let path = write(dir.path(), &prompts);
        let all: Vec<String> = ids
            .iter()
            .flat_map(|id| [(*id).to_owned(), sample_id(id, 1), sample_id(id, 2)])
            .collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let samples = |done: &[&str], settled: &[&str]| Skip {
            samples: 3,
            ..skip(done, settled)
        };
        let (census, _) = Feed::open(&path, samples(&[], &[]), Order::File).expect("open");
        let recorded = census.ids;
        assert_eq!(recorded.samples.as_ref().map(|s| s.samples), Some(3));

        let told = finished(&path, Some(&recorded), &samples(&all[..8], &all[8..]));
        let told = told.expect("every sample done or settled");
        assert_eq!((told.prepared, told.done, told.settled), (9, 8, 1));
        assert_eq!(
            finished(&path, Some(&recorded), &samples(&all[..8], &[])),
            None
        );
        let two = Skip {
            samples: 2,
            ..skip(&all, &[])
        };
        assert_eq!(finished(&path, Some(&recorded), &two), None);
    }

    /// A source whose done and settled ids are exactly its prompts' ids (as the counting pass
    /// recorded them) is finished without reading its prompts; any other set of ids is counted,
    /// and exactly the prompts left are sent.
    #[tokio::test]
    async fn a_finished_source_is_told_without_reading_its_prompts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ids = ["a", "b", "c", "d", "e"];
        let prompts: Vec<Prompt> = ids.iter().map(|id| prompt(id, id)).collect();
        let path = write(dir.path(), &prompts);
        let (census, _) = Feed::open(&path, Skip::default(), Order::File).expect("open");
        let recorded = census.ids;
        assert_eq!(recorded.prompts, 5);
        assert_eq!(
            recorded.bytes,
            std::fs::metadata(&path).expect("meta").len()
        );

        // Done and settled overlap on `c`: it counts as done, as the counting pass says.
        let all = skip(&["a", "b", "c"], &["c", "d", "e"]);
        let expected = Census {
            prepared: 5,
            done: 3,
            settled: 2,
            pending: 0,
            duplicates: Vec::new(),
            ids: recorded.clone(),
            foreign: IdSet::default(),
        };
        assert_eq!(
            finished(&path, Some(&recorded), &all),
            Some(expected.clone())
        );
        let (counted, feed) =
            Feed::open(&path, skip(&["a", "b", "c"], &["c", "d", "e"]), Order::File).expect("open");
        assert_eq!(counted, expected);
        assert!(drain(feed).await.is_empty());
        // The file is not read while its size and time are those counted: bytes that are not
        // prompts at all, of the same size and time, pass. Written since (damaged, replaced),
        // it is read again.
        let original = std::fs::read(&path).expect("read");
        std::fs::write(&path, vec![0u8; original.len()]).expect("write");
        let stale = PromptIds {
            stat: crate::store::manifest::FileStat::of(&path)
                .ok()
                .map(|stat| crate::store::manifest::FileStat {
                    modified_secs: stat.modified_secs - 1,
                    ..stat
                }),
            ..recorded.clone()
        };
        assert_eq!(finished(&path, Some(&stale), &all), None);
        let zeroed = PromptIds {
            stat: crate::store::manifest::FileStat::of(&path).ok(),
            ..recorded.clone()
        };
        assert_eq!(
            finished(&path, Some(&zeroed), &all),
            Some(Census {
                ids: zeroed.clone(),
                ..expected
            })
        );
        assert!(Feed::open(&path, skip(&[], &[]), Order::File).is_err());
        std::fs::write(&path, &original).expect("write");
        let recorded = PromptIds {
            stat: crate::store::manifest::FileStat::of(&path).ok(),
            ..recorded
        };

        // Not finished: nothing recorded, a prompt left, an id that is not a prompt's in its
        // place, a file of another size, a shard.
        assert_eq!(finished(&path, None, &all), None);
        let one_left = skip(&["a", "b", "c"], &["d"]);
        assert_eq!(finished(&path, Some(&recorded), &one_left), None);
        assert_eq!(
            finished(
                &path,
                Some(&recorded),
                &skip(&["a", "b", "c", "d", "zz"], &[])
            ),
            None
        );
        let resized = PromptIds {
            bytes: recorded.bytes + 1,
            ..recorded.clone()
        };
        assert_eq!(finished(&path, Some(&resized), &all), None);
        let sharded = Skip {
            shard: Some("0/1".parse().expect("shard")),
            ..skip(&["a", "b", "c"], &["d", "e"])
        };
        assert_eq!(finished(&path, Some(&recorded), &sharded), None);
        let (census, feed) = Feed::open(&path, one_left, Order::File).expect("open");
        assert_eq!((census.done, census.settled, census.pending), (3, 1, 1));
        assert_eq!(census.ids, recorded);
        assert_eq!(drain(feed).await, ["e"]);
    }

    /// Ids are read from the start of each line when the line starts with its `id`, and
    /// parsed otherwise (an escape in the id, a writer that puts `id` later): the same fates.
    #[tokio::test]
    async fn ids_are_peeked_or_parsed_with_the_same_outcome() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("prompts.jsonl.zst");
        let text = concat!(
            r#"{"id":"plain","source":"s","messages":[{"role":"user","content":"1"}],"row":0}"#,
            "\n",
            r#"{"id":"quo\"te","source":"s","messages":[{"role":"user","content":"2"}],"row":1}"#,
            "\n",
            r#"{"source":"s","id":"late","messages":[{"role":"user","content":"3"}],"row":2}"#,
            "\n",
            r#"{ "id": "spaced", "source":"s","messages":[{"role":"user","content":"4"}],"row":3}"#,
            "\n",
            r#"{"id":"sent","source":"s","messages":[{"role":"user","content":"5"}],"row":4}"#,
            "\n",
        );
        let frame = zstd::stream::encode_all(text.as_bytes(), 3).expect("encode");
        std::fs::write(&path, frame).expect("write");
        let done = ["plain", "quo\"te", "late"];
        let (census, feed) =
            Feed::open(&path, skip(&done, &["spaced"]), Order::File).expect("open");
        assert_eq!((census.done, census.settled, census.pending), (3, 1, 1));
        let all = skip(&done, &["spaced", "sent"]);
        assert!(finished(&path, Some(&census.ids), &all).is_some());
        assert_eq!(drain(feed).await, ["sent"]);
    }

    #[tokio::test]
    async fn longest_first_sends_long_prompts_first_and_keeps_ties_in_file_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            dir.path(),
            &[
                prompt("short", "ab"),
                prompt("long", "abcdefgh"),
                prompt("mid-1", "abcd"),
                prompt("mid-2", "wxyz"),
            ],
        );
        let (_, feed) = Feed::open(&path, Skip::default(), Order::LongestFirst).expect("open");
        assert_eq!(drain(feed).await, ["long", "mid-1", "mid-2", "short"]);
    }

    #[tokio::test]
    async fn a_source_without_prompts_has_nothing_to_send() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(dir.path(), &[]);
        assert_eq!(std::fs::metadata(&path).expect("written").len(), 0);
        assert!(content_hashes(&path).expect("hashes").is_empty());
        let (mut census, feed) = Feed::open(&path, Skip::default(), Order::File).expect("open");
        assert_eq!((census.ids.bytes, census.ids.prompts), (0, 0));
        census.ids = PromptIds::default();
        assert_eq!(census, Census::default());
        assert!(drain(feed).await.is_empty());
    }

    #[test]
    fn a_damaged_file_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("prompts.jsonl.zst");
        std::fs::write(&path, b"not zstd at all").expect("write");
        let (error, _) = Feed::open(&path, Skip::default(), Order::File).expect_err("damaged");
        let text = format!("{error:#}");
        assert!(text.contains("prompts.jsonl.zst"), "{text}");
    }
}
