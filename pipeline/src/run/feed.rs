//! What one source still has to send, streamed from its prepared prompts file: a counting
//! pass ([`Feed::open`]) says how many prompts are done, settled, duplicates of another
//! source, or still pending; then a reader thread ([`Feed::start`]) sends the pending ones
//! through a small bounded channel, so a million queued prompts cost a channel's worth of
//! memory, not a million prompts. They travel in batches of [`BATCH`]: one prompt per message
//! woke the reader thread (a futex call) for every prompt sent, a measurable share of the
//! dispatcher's CPU at 20k requests/s.
//!
//! With `order = "longest-first"` the pending prompts of the source are held and sorted (by
//! characters, longest first) before the first one is sent: long requests start early instead
//! of straggling at the end. That costs the source's pending prompts in memory.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::mpsc;

use super::shard::Shard;
use crate::config::values::Order;
use gen_sources::Prompt;
use gen_sources::prompt::content_hash;

/// Prompts per message from the reader thread.
const BATCH: usize = 64;
/// Batches read ahead of the dispatcher (with the one being sent: 5 × 64 prompts).
const READ_AHEAD: usize = 4;

/// Which prepared prompts are not to be sent.
#[derive(Debug, Default)]
pub struct Skip {
    /// Prompts with a stored completion.
    pub done: HashSet<String>,
    /// Prompts settled without one (rejected, dropped, duplicates).
    pub settled: HashSet<String>,
    /// With `--shard i/n`: the prompts of this shard only.
    pub shard: Option<Shard>,
    /// Content hashes of prompts another source answers, with that source: every prompt of
    /// an earlier source, and what a later source answered before this one was prepared.
    pub elsewhere: Arc<HashMap<u64, usize>>,
}

/// Counts of the counting pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Prompts of this source (in this shard).
    pub prepared: u64,
    pub done: u64,
    pub settled: u64,
    /// Prompts still to send.
    pub pending: u64,
    /// Pending prompts another source answers (see [`Skip::elsewhere`]): ids to settle as
    /// duplicates, with that source's index.
    pub duplicates: Vec<(String, usize)>,
}

/// One source's pending prompts, ready to stream.
#[derive(Debug)]
pub struct Feed {
    path: PathBuf,
    skip: Skip,
    order: Order,
}

impl Feed {
    /// Counts the prompts of `path` against `skip` (one streaming pass over the file).
    pub fn open(path: &Path, skip: Skip, order: Order) -> anyhow::Result<(Census, Feed)> {
        let mut census = Census::default();
        for_each_prompt(path, |prompt| {
            match fate_of(&skip, &prompt) {
                Fate::OtherShard => return,
                Fate::Done => census.done += 1,
                Fate::Settled => census.settled += 1,
                Fate::Duplicate(earlier) => census.duplicates.push((prompt.id, earlier)),
                Fate::Send => census.pending += 1,
            }
            census.prepared += 1;
        })?;
        let feed = Feed {
            path: path.to_path_buf(),
            skip,
            order,
        };
        Ok((census, feed))
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

    fn send_all(&self, sender: &mpsc::Sender<Vec<Prompt>>) -> anyhow::Result<()> {
        match self.order {
            Order::File => {
                let mut closed = false;
                let mut batch = Vec::with_capacity(BATCH);
                for_each_prompt(&self.path, |prompt| {
                    if !closed && fate_of(&self.skip, &prompt) == Fate::Send {
                        batch.push(prompt);
                        if batch.len() == BATCH {
                            let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                            // A closed channel: the run is stopping; stop reading.
                            closed = sender.blocking_send(full).is_err();
                        }
                    }
                })?;
                if !closed && !batch.is_empty() {
                    sender.blocking_send(batch).ok();
                }
            }
            Order::LongestFirst => {
                let mut pending = Vec::new();
                for_each_prompt(&self.path, |prompt| {
                    if fate_of(&self.skip, &prompt) == Fate::Send {
                        pending.push(prompt);
                    }
                })?;
                longest_first(&mut pending);
                let mut pending = pending.into_iter().peekable();
                while pending.peek().is_some() {
                    let batch: Vec<Prompt> = pending.by_ref().take(BATCH).collect();
                    if sender.blocking_send(batch).is_err() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The receiving end of a [`Feed`]: the pending prompts, in order.
#[derive(Debug)]
pub struct Prompts {
    receiver: mpsc::Receiver<Vec<Prompt>>,
    batch: std::vec::IntoIter<Prompt>,
}

impl Prompts {
    /// The next prompt; `None` once every pending prompt was handed out (or reading stopped).
    pub async fn recv(&mut self) -> Option<Prompt> {
        loop {
            if let Some(prompt) = self.batch.next() {
                return Some(prompt);
            }
            self.batch = self.receiver.recv().await?.into_iter();
        }
    }
}

/// Sorts by characters, longest first; equal lengths keep the file's order.
pub fn longest_first(prompts: &mut [Prompt]) {
    prompts.sort_by_cached_key(|p| {
        std::cmp::Reverse(p.messages.iter().map(|m| m.content.len()).sum::<usize>())
    });
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    OtherShard,
    Done,
    Settled,
    Duplicate(usize),
    Send,
}

fn fate_of(skip: &Skip, prompt: &Prompt) -> Fate {
    if skip.shard.is_some_and(|s| !s.contains(&prompt.id)) {
        Fate::OtherShard
    } else if skip.done.contains(&prompt.id) {
        Fate::Done
    } else if skip.settled.contains(&prompt.id) {
        Fate::Settled
    } else if let Some(holder) = (!skip.elsewhere.is_empty())
        .then(|| skip.elsewhere.get(&content_hash(&prompt.messages)))
        .flatten()
    {
        Fate::Duplicate(*holder)
    } else {
        Fate::Send
    }
}

/// Calls `each` for every prompt of a prepared prompts file, streaming (zstd frames one after
/// the other).
pub fn for_each_prompt(path: &Path, mut each: impl FnMut(Prompt)) -> anyhow::Result<()> {
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
                "prompts file `{}` is damaged after {row} prompts; delete the source's directory to prepare it again",
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
        let prompt: Prompt = serde_json::from_slice(&line).with_context(|| {
            format!(
                "prompt {row} of `{}` is unreadable; delete the source's directory to prepare it again",
                path.display()
            )
        })?;
        each(prompt);
    }
}

/// The content hashes of every prompt of a prepared prompts file.
pub fn content_hashes(path: &Path) -> anyhow::Result<HashSet<u64>> {
    let mut hashes = HashSet::new();
    for_each_prompt(path, |prompt| {
        hashes.insert(content_hash(&prompt.messages));
    })?;
    Ok(hashes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frames::FrameWriter;
    use gen_sources::{Message, Role};

    fn prompt(id: &str, text: &str) -> Prompt {
        Prompt {
            id: id.to_owned(),
            source: "s".to_owned(),
            messages: vec![Message::new(Role::User, text.to_owned())],
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
            ids.push(p.id);
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
            done: HashSet::from(["a".to_owned()]),
            settled: HashSet::from(["c".to_owned()]),
            shard: None,
            elsewhere: Arc::new(HashMap::from([(content_hash(&prompts[3].messages), 0)])),
        };
        let (census, feed) = Feed::open(&path, skip, Order::File).expect("open");
        assert_eq!(
            census,
            Census {
                prepared: 5,
                done: 1,
                settled: 1,
                pending: 2,
                duplicates: vec![("d".to_owned(), 0)],
            }
        );
        assert_eq!(drain(feed).await, ["b", "e"]);
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
        let (census, feed) = Feed::open(&path, Skip::default(), Order::File).expect("open");
        assert_eq!(census, Census::default());
        assert!(drain(feed).await.is_empty());
    }

    #[test]
    fn a_damaged_file_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("prompts.jsonl.zst");
        std::fs::write(&path, b"not zstd at all").expect("write");
        let error = Feed::open(&path, Skip::default(), Order::File).expect_err("damaged");
        let text = format!("{error:#}");
        assert!(text.contains("prompts.jsonl.zst"), "{text}");
    }
}
