//! The run's sources: per source, what is stored and what is left ([`SourceState`]), and the
//! decisions that need every source at once ([`Sources`]): which source may be counted (its
//! earlier sources are settled), cross-source deduplication, and the done-set and settled-set
//! of each source until its feed takes them. Nothing here awaits: the event loop calls these
//! methods between events.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;

use super::feed::{Census, Feed, Skip};
use crate::config::Plan;
use crate::config::values::LengthPolicy;
use crate::notice::Notice;
use crate::report::RunReporter;
use crate::status::state::{Phase, SourceStatus};
use crate::store::frames::FrameWriter;
use crate::store::ids::IdSet;
use crate::store::manifest::{PrepManifest, read_manifest};
use crate::store::private::create_private_dir;
use crate::store::prompts::{content_hashes, for_each_prompt};
use crate::store::records::{self as record, CompletionRecord, CutBy, RejectKind, RejectedRecord};
use crate::store::{RunDir, SourceDir, atomic};

/// Completions buffered before a frame is written (a frame is also written every tick).
const FRAME_RECORDS: usize = 64;

/// One source of the plan in this run.
pub(super) struct SourceState {
    pub(super) status: SourceStatus,
    /// Prompts with a completion when the run started (handed to the feed when it opens).
    done_ids: IdSet,
    /// Prompts settled without a completion: rejected by the server, truncated and dropped,
    /// or duplicates of an earlier source.
    settled_ids: IdSet,
    /// Completions stored in this run, and their output tokens.
    completed_here: u64,
    tokens_here: u64,
    /// Counted and ready to stream, until its dispatch starts.
    feed: Option<Feed>,
    /// Its prompts were counted in this run (at most once).
    opened: bool,
    /// Content hashes of its prompts, for later sources' cross-source deduplication.
    hashes: Option<Arc<HashSet<u64>>>,
    /// Content hashes of its prompts answered before this run, for an earlier source that is
    /// prepared only now (what was generated is not generated again).
    answered_hashes: Option<Arc<HashSet<u64>>>,
    /// Prompts settled as duplicates of another source in earlier runs.
    settled_duplicates: u64,
    /// Prepared again in this run, leaving out the earlier sources' prompts (at most once).
    reprepared: bool,
    /// Prepared again in this run because its prompts file did not read (at most once).
    prompts_reprepared: bool,
    /// The earlier sources' content hashes, until its preparation again starts.
    pub(super) exclude: Option<Vec<u64>>,
    /// When generation of this source started in this run.
    generating_since: Option<Instant>,
    /// Peak RSS of its preparation worker in this run.
    pub(super) peak_rss_bytes: Option<u64>,
    writer: Option<FrameWriter>,
    /// Prompts the server refused and nothing answered since (recorded in `rejected.jsonl`).
    refused: u64,
    /// Not prepared, and the last preparation worker failed.
    pub(super) prep_failed: bool,
    /// An answer cut by the context was stored and said in this run (said once per source).
    context_cut_said: bool,
}

/// Sources whose inputs changed after answers were generated from their preparation.
#[derive(Debug, thiserror::Error)]
#[error(
    "the inputs of {} changed since {} prepared, and answers were generated from {}:\n{}\npreparing again would mix two datasets in `{run_dir}`: use a new run directory (`--run-dir`), or pass `--keep-preparation` to go on with the prompts prepared before",
    if changed.len() == 1 { "a source".to_owned() } else { format!("{} sources", changed.len()) },
    if changed.len() == 1 { "it was" } else { "they were" },
    if changed.len() == 1 { "it" } else { "them" },
    changed.iter().map(|(name, changes)| format!("  `{name}`: {}", changes.join("; "))).collect::<Vec<_>>().join("\n")
)]
pub struct InputsChanged {
    pub run_dir: String,
    /// Per source, what changed.
    pub changed: Vec<(String, Vec<String>)>,
}

/// What [`Sources::open_source`] did with a prepared source.
enum Opened {
    /// Counted: done, or with a feed of what is left.
    Counted,
    /// To prepare again without the earlier sources' prompts.
    PrepareAgain,
}

/// Every source of the plan, in plan order (an index is a source's position in the plan).
pub(super) struct Sources<'p> {
    plan: &'p Plan,
    run_dir: RunDir,
    /// Only this host's share of every source's prompts (`--shard`).
    shard: Option<crate::scale::shard::Shard>,
    /// Under `--shard auto`: checked before every write to a source's files.
    fence: Option<crate::scale::owner::Fence>,
    list: Vec<SourceState>,
}

impl std::ops::Index<usize> for Sources<'_> {
    type Output = SourceState;
    fn index(&self, i: usize) -> &SourceState {
        &self.list[i]
    }
}

impl std::ops::IndexMut<usize> for Sources<'_> {
    fn index_mut(&mut self, i: usize) -> &mut SourceState {
        &mut self.list[i]
    }
}

impl<'p> Sources<'p> {
    /// Reads what the run directory holds for every source of the plan, after removing what a
    /// process that died mid-write left (this run holds the lock).
    pub(super) fn load(
        plan: &'p Plan,
        run_dir: &RunDir,
        resend: &record::Resend,
        selection: &super::Selection,
        reporter: &RunReporter,
    ) -> anyhow::Result<Sources<'p>> {
        remove_stale_temps(run_dir.root())?;
        let mut list: Vec<SourceState> = plan
            .sources
            .iter()
            .map(|spec| {
                // A refusal is sent again under other settings than the source's own.
                let resend = record::Resend {
                    settings: resend
                        .settings
                        .as_ref()
                        .map(|_| spec.settings.fingerprint()),
                    ..resend.clone()
                };
                SourceState::load(run_dir, spec.name(), &resend, reporter)
            })
            .collect::<anyhow::Result<_>>()?;
        for (state, source) in list.iter_mut().zip(&plan.sources) {
            let settings = &source.settings;
            // Counted in samples: each is a unit of work.
            let status = &mut state.status;
            status.samples = settings.samples.get();
            status.prepared = status.prepared.map(|p| p * u64::from(status.samples));
        }
        Ok(Sources {
            plan,
            run_dir: run_dir.clone(),
            shard: selection.shard,
            fence: selection.fence.clone(),
            list,
        })
    }

    /// Under `--shard auto`: `Err` once this task no longer owns its shard.
    pub(super) fn fenced(&self) -> anyhow::Result<()> {
        match &self.fence {
            Some(fence) => Ok(fence.check()?),
            None => Ok(()),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, SourceState> {
        self.list.iter()
    }

    pub(super) fn plan(&self) -> &'p Plan {
        self.plan
    }

    pub(super) fn run_dir(&self) -> &RunDir {
        &self.run_dir
    }

    pub(super) fn statuses(&self) -> Vec<SourceStatus> {
        self.list.iter().map(|s| s.status.clone()).collect()
    }

    /// The sources with completions stored, from this run or an earlier one.
    pub(super) fn stored_in(&self) -> std::collections::BTreeSet<String> {
        self.list
            .iter()
            .filter(|s| s.status.done > 0)
            .map(|s| s.status.name.clone())
            .collect()
    }

    /// Whether some source was counted with prompts left and is not streaming yet.
    pub(super) fn has_feeds(&self) -> bool {
        self.list.iter().any(|s| s.feed.is_some())
    }

    /// The selected sources that are not done.
    pub(super) fn unfinished(&self, selected: &[bool]) -> Vec<String> {
        self.list
            .iter()
            .zip(selected)
            .filter(|(s, selected)| **selected && s.status.phase != Phase::Done)
            .map(|(s, _)| s.status.name.clone())
            .collect()
    }

    /// Compares every selected, prepared source with its inputs now. A changed source of which
    /// nothing was generated is prepared again; one with answers keeps its preparation only
    /// with `keep` (recorded in its manifest, so later runs compare with the inputs it was kept
    /// for), else the run is refused, naming every change.
    pub(super) fn check_inputs(
        &mut self,
        selected: &[bool],
        keep: bool,
        reporter: &RunReporter,
    ) -> anyhow::Result<()> {
        let mut refused = Vec::new();
        for (i, _) in selected
            .iter()
            .enumerate()
            .filter(|(_, selected)| **selected)
        {
            if let Some(changes) = self.check_input(i, keep, reporter)? {
                refused.push((self.list[i].status.name.clone(), changes));
            }
        }
        if refused.is_empty() {
            return Ok(());
        }
        Err(InputsChanged {
            run_dir: self.run_dir.root().display().to_string(),
            changed: refused,
        }
        .into())
    }

    /// [`Self::check_inputs`] for source `i`: the changes that refuse the run, if any.
    fn check_input(
        &mut self,
        i: usize,
        keep: bool,
        reporter: &RunReporter,
    ) -> anyhow::Result<Option<Vec<String>>> {
        let name = self.list[i].status.name.clone();
        let Some(mut manifest) = read_manifest(&self.run_dir, &name)? else {
            return Ok(None);
        };
        let dir = self.run_dir.source(&name);
        let output = crate::store::worker::custom_output(&self.run_dir, &name).0;
        let reader = match self.plan.sources[i].worker.command {
            Some(_) => super::inputs::Reader::Custom {
                output: manifest.counters.files.first().unwrap_or(&output),
            },
            None => super::inputs::Reader::Builtin {
                base_dir: &self.plan.base_dir,
            },
        };
        let comparison = super::inputs::compare(
            &self.plan.sources[i].spec,
            &reader,
            &super::inputs::recorded(&manifest),
        );
        if comparison.changes.is_empty() {
            // A manifest written before sizes and times were recorded gets them now, so
            // its files are not read in full again on every run.
            let unrecorded = manifest.input_stats.is_empty() && manifest.kept_for.is_none();
            if unrecorded && !comparison.now.stats.is_empty() {
                manifest.input_stats = comparison.now.stats;
                atomic::write_json(&dir.manifest(), &manifest)
                    .with_context(|| format!("failed to write `{}`", dir.manifest().display()))?;
            }
            return Ok(None);
        }
        let changes = comparison.changes.join("; ");
        let state = &self.list[i];
        let generated =
            !state.done_ids.is_empty() || state.settled_ids.len() as u64 > state.settled_duplicates;
        if !generated {
            self.prepare_changed_again(i, &changes, reporter)?;
            Ok(None)
        } else if keep {
            manifest.kept_for = Some(comparison.now);
            atomic::write_json(&dir.manifest(), &manifest)
                .with_context(|| format!("failed to write `{}`", dir.manifest().display()))?;
            reporter.notice(Notice::PreparationKept {
                source: &name,
                changes: &changes,
            });
            Ok(None)
        } else {
            Ok(Some(comparison.changes))
        }
    }

    /// Source `i`'s inputs changed (`changes`) and nothing of it was answered: it is prepared
    /// again, and its duplicates and failed attempts are re-decided from the new prompts.
    fn prepare_changed_again(
        &mut self,
        i: usize,
        changes: &str,
        reporter: &RunReporter,
    ) -> anyhow::Result<()> {
        let state = &mut self.list[i];
        let name = state.status.name.clone();
        let dir = self.run_dir.source(&name);
        fs_err::remove_file(dir.manifest())?;
        if dir.rejected().exists() {
            fs_err::remove_file(dir.rejected())?;
        }
        state.settled_ids = IdSet::default();
        state.settled_duplicates = 0;
        let status = &mut state.status;
        status.prepared = None;
        status.rejected = 0;
        status.duplicates = 0;
        status.note = format!("inputs changed ({changes}); preparing again");
        enter(status, Phase::Pending, reporter);
        let source = &name;
        reporter.notice(Notice::InputsChanged { source, changes });
        Ok(())
    }

    /// Counts the prompts of every selected, prepared source not counted yet whose earlier
    /// sources are settled (prepared, failed or not in this run): cross-source deduplication
    /// needs them first. Returns the sources to prepare again (see [`Self::open_source`]).
    pub(super) fn open_ready(&mut self, selected: &[bool], reporter: &RunReporter) -> Vec<usize> {
        let mut again = Vec::new();
        for i in 0..self.list.len() {
            let state = &self.list[i];
            if !selected[i] || state.opened || state.status.prepared.is_none() {
                continue;
            }
            let blocked = (0..i).any(|j| {
                let earlier = &self.list[j].status;
                selected[j] && earlier.prepared.is_none() && earlier.phase != Phase::Failed
            });
            if blocked {
                continue;
            }
            match self.open_source(i, reporter) {
                Ok(Opened::Counted) => {}
                Ok(Opened::PrepareAgain) => again.push(i),
                Err(e) => {
                    // This source's files are unreadable: it fails, the others go on.
                    let state = &mut self.list[i].status;
                    state.note = format!("{e:#}");
                    enter(state, Phase::Failed, reporter);
                    let (source, note) = (&state.name, &state.note);
                    reporter.notice(Notice::SourceFailed { source, note });
                }
            }
        }
        again
    }

    /// Counts source `i`'s prompts, settles as duplicates those an earlier source holds or a
    /// later source already answered, and keeps a feed of the rest (opening its output) when
    /// there are any.
    ///
    /// When earlier sources hold some of its prompts, its sample had to leave rows out and
    /// nothing of it has been answered or settled yet, it is not counted but prepared again
    /// instead, leaving the earlier sources' prompts out of its sample (their content hashes
    /// in `earlier-prompts.hashes`, written when that worker starts), so it still gets `limit`
    /// prompts of its own. A custom worker's source (its worker would have to run again) and
    /// any source under `--shard` (every host must prepare the same prompts) settle their
    /// duplicates instead.
    fn open_source(&mut self, i: usize, reporter: &RunReporter) -> anyhow::Result<Opened> {
        let name = self.list[i].status.name.clone();
        let dir = self.run_dir.source(&name);
        let mut manifest = read_manifest(&self.run_dir, &name)?;
        let counters = manifest.as_ref().map(|m| &m.counters);
        // Earlier sources' prompts its worker left out of the sample.
        let left_out = counters.map_or(0, |c| c.duplicates_across);
        // Whether its sample had to leave rows out: only then can another sample do better.
        let sampled_out = counters.map_or(0, |c| c.sampled_out);
        let state = &mut self.list[i];
        let mut skip = Skip {
            done: std::mem::take(&mut state.done_ids),
            settled: std::mem::take(&mut state.settled_ids),
            shard: self.shard,
            elsewhere: Arc::default(),
            samples: self.plan.sources[i].settings.samples.get(),
        };
        let recorded = manifest.as_ref().and_then(|m| m.prompt_ids.as_ref());
        if let Some(census) = super::feed::finished(&dir.prompts(), recorded, &skip) {
            // Nothing to send: neither its prompts nor the other sources' need reading.
            state.finished_unread(&census, left_out, reporter);
            return Ok(Opened::Counted);
        }
        if self.plan.sources[i].spec.dedup() {
            skip.elsewhere = self.held_elsewhere(i)?;
        }
        let earlier_hashes = Arc::clone(&skip.elsewhere);
        self.list[i].opened = true;
        let worker = &self.plan.sources[i].worker;
        let (census, feed) = match Feed::open(&dir.prompts(), skip, worker.order) {
            Ok(opened) => opened,
            Err((e, skip)) => {
                let why = format!("does not read ({e:#})");
                return self.prompts_unusable(i, skip, &why, manifest.as_ref(), reporter);
            }
        };
        let counted = manifest.as_ref().and_then(|m| m.prompt_ids.as_ref());
        let why = match manifest.as_ref().map(|m| m.prompts) {
            Some(listed) if listed != census.ids.prompts => Some(format!(
                "holds {} prompts, but its manifest says {listed}",
                census.ids.prompts
            )),
            _ if counted.is_some_and(|c| c.digest != census.ids.digest) => {
                Some("holds other prompts than its manifest counted".to_owned())
            }
            _ => None,
        };
        if let Some(why) = why {
            let skip = feed.into_skip();
            return self.prompts_unusable(i, skip, &why, manifest.as_ref(), reporter);
        }
        if !census.foreign.is_empty() {
            self.set_aside_foreign(i, &census.foreign, reporter)?;
        }
        if let Some(manifest) = manifest.as_mut()
            && manifest.prompt_ids.as_ref() != Some(&census.ids)
        {
            manifest.prompt_ids = Some(census.ids.clone());
            atomic::write_json(&dir.manifest(), &*manifest)
                .with_context(|| format!("failed to write `{}`", dir.manifest().display()))?;
        }
        let earlier_duplicates = census.duplicates.iter().filter(|(_, j)| *j < i).count();
        // Not with `--shard`: every host must prepare the same prompts, and a host sees the
        // duplicates of its own share only.
        if earlier_duplicates > 0
            && sampled_out > 0
            && census.done == 0
            && census.settled == 0
            && worker.command.is_none()
            && self.shard.is_none()
            && !self.list[i].reprepared
        {
            self.prepare_again(i, &earlier_hashes, earlier_duplicates, reporter);
            return Ok(Opened::PrepareAgain);
        }
        if !census.duplicates.is_empty() {
            self.settle_duplicates(i, &census.duplicates, reporter)?;
        }
        let state = &mut self.list[i];
        state.status.prepared = Some(census.prepared);
        state.status.done = census.done;
        state.status.rejected = census.settled + census.duplicates.len() as u64;
        state.status.duplicates =
            state.settled_duplicates + census.duplicates.len() as u64 + left_out;
        if census.pending == 0 {
            enter(&mut state.status, Phase::Done, reporter);
        } else {
            let (writer, _) = FrameWriter::open_indexed(&dir.completions())?;
            state.writer = Some(writer);
            state.feed = Some(feed);
        }
        Ok(Opened::Counted)
    }

    /// Source `i`'s prompts file is unusable (`why`): its done and settled ids go back to it
    /// and it is prepared again, keeping its answers (prompt ids are stable, so the same
    /// inputs give the same prompts). Once per run; not when its preparation was kept for
    /// inputs that changed since (another preparation would not give the same prompts).
    fn prompts_unusable(
        &mut self,
        i: usize,
        skip: Skip,
        why: &str,
        manifest: Option<&PrepManifest>,
        reporter: &RunReporter,
    ) -> anyhow::Result<Opened> {
        let state = &mut self.list[i];
        state.done_ids = skip.done;
        state.settled_ids = skip.settled;
        state.opened = false;
        state.hashes = None;
        if manifest.is_some_and(|m| m.kept_for.is_some()) {
            anyhow::bail!(
                "`prompts.jsonl.zst` {why}; it cannot be prepared again as it was, since its \
                 inputs changed after it was prepared (`--keep-preparation`)"
            );
        }
        if state.prompts_reprepared {
            anyhow::bail!("`prompts.jsonl.zst` {why}, also after it was prepared again");
        }
        state.prompts_reprepared = true;
        let name = state.status.name.clone();
        let dir = self.run_dir.source(&name);
        let stored = state.done_ids.len();
        let message = prepare_anew(&dir, &name, "prompts.jsonl.zst", why, stored, reporter)?;
        let status = &mut self.list[i].status;
        status.warnings.push(message);
        status.prepared = None;
        status.note = "its prompts file was damaged; preparing it again".to_owned();
        enter(status, Phase::Pending, reporter);
        Ok(Opened::PrepareAgain)
    }

    /// Moves source `i`'s stored records of `foreign` ids (no prompt of its file) out of its
    /// completions, loudly, and counts what stays.
    fn set_aside_foreign(
        &mut self,
        i: usize,
        foreign: &IdSet,
        reporter: &RunReporter,
    ) -> anyhow::Result<()> {
        let name = self.list[i].status.name.clone();
        let dir = self.run_dir.source(&name);
        let stored = crate::store::done::set_aside_foreign(&dir.completions(), foreign)
            .with_context(|| format!("failed to read `{}`", dir.completions().display()))?;
        let warnings = report_repairs(&name, &stored.repairs, reporter);
        let tally = crate::store::tally::load(&dir)
            .with_context(|| format!("failed to read `{}`", dir.completions().display()))?;
        let status = &mut self.list[i].status;
        status.warnings.extend(warnings);
        status.truncated = tally.truncated;
        status.cut_by_context = tally.cut_by_context;
        status.tool_turns_cut = tally.tool_turns_cut;
        status.output_tokens = tally.output_tokens;
        Ok(())
    }

    /// Sets source `i` back to be prepared again without the earlier sources' prompts (see
    /// [`Self::open_source`]).
    fn prepare_again(
        &mut self,
        i: usize,
        held: &HashMap<u64, usize>,
        earlier_duplicates: usize,
        reporter: &RunReporter,
    ) {
        let state = &mut self.list[i];
        state.exclude = Some(
            held.iter()
                .filter(|(_, j)| **j < i)
                .map(|(hash, _)| *hash)
                .collect(),
        );
        state.reprepared = true;
        state.opened = false;
        state.hashes = None;
        let status = &mut state.status;
        status.prepared = None;
        status.note = format!(
            "preparing again: {earlier_duplicates} of its prompts are in earlier sources; \
             sampling others instead"
        );
        enter(status, Phase::Pending, reporter);
        let (source, note) = (&status.name, &status.note);
        reporter.notice(Notice::PrepareAgain { source, note });
    }

    /// Records source `i`'s prompts that another source holds (`(id, holder)`) as settled
    /// duplicates in its `rejected.jsonl`, each sample of them.
    fn settle_duplicates(
        &mut self,
        i: usize,
        duplicates: &[(String, usize)],
        reporter: &RunReporter,
    ) -> anyhow::Result<()> {
        let name = &self.list[i].status.name;
        let samples = self.plan.sources[i].settings.samples.get();
        let mut records = Vec::new();
        for (prompt_id, j) in duplicates {
            let holder = &self.list[*j].status.name;
            let reason = if *j < i {
                format!("the same prompt is in the earlier source `{holder}`, which answers it")
            } else {
                format!(
                    "the same prompt was already answered in the later source `{holder}` \
                     (this source was prepared after it had generated)"
                )
            };
            for sample in 0..samples {
                records.push(RejectedRecord {
                    id: crate::config::settings::sample_id(prompt_id, sample),
                    kind: RejectKind::Duplicate,
                    reason: reason.clone(),
                    attempts: 0,
                    created_unix_ms: crate::sys::unix_ms(),
                    settings: None,
                });
            }
        }
        crate::store::append::json_lines(&self.run_dir.source(name).rejected(), &records, true)?;
        let later = duplicates.iter().filter(|(_, j)| *j > i).count();
        let earlier = duplicates.len() - later;
        let note = match (earlier, later) {
            (n, 0) => format!(
                "{n} prompts are duplicates of earlier sources (the earlier source answers them)"
            ),
            (0, n) => format!(
                "{n} prompts were already answered in later sources (prepared before this one)"
            ),
            (n, m) => format!(
                "{n} prompts are duplicates of earlier sources (the earlier source answers \
                 them), {m} were already answered in later sources"
            ),
        };
        let (source, note) = (name.as_str(), &note);
        reporter.notice(Notice::DuplicatesAcross { source, note });
        Ok(())
    }

    /// The content hashes source `i` must not send, each with the source holding it: every
    /// prompt of a prepared source before `i` (the first such source wins), then every prompt
    /// a later source answered before this run — it had generated while `i` was not prepared
    /// (its preparation failed), and what was generated is not generated twice.
    fn held_elsewhere(&mut self, i: usize) -> anyhow::Result<Arc<HashMap<u64, usize>>> {
        let mut earlier = HashMap::new();
        for j in 0..i {
            let name = self.list[j].status.name.clone();
            if self.list[j].hashes.is_none() {
                if read_manifest(&self.run_dir, &name)?.is_none() {
                    continue;
                }
                let path = self.run_dir.source(&name).prompts();
                let hashes = content_hashes(&path)?;
                self.list[j].hashes = Some(Arc::new(hashes));
            }
            if let Some(hashes) = &self.list[j].hashes {
                for hash in hashes.iter() {
                    earlier.entry(*hash).or_insert(j);
                }
            }
        }
        for j in i + 1..self.list.len() {
            // A later source that opened in this run has handed its done-set to its feed; it
            // opened before `i` only if `i` was not prepared then, and `i` is not prepared
            // twice in one run.
            let later = &self.list[j];
            if later.opened || later.done_ids.is_empty() {
                continue;
            }
            if later.answered_hashes.is_none() {
                let name = later.status.name.clone();
                if read_manifest(&self.run_dir, &name)?.is_none() {
                    continue;
                }
                let path = self.run_dir.source(&name).prompts();
                let mut answered = HashSet::new();
                let done = &self.list[j].done_ids;
                for_each_prompt(&path, |prompt| {
                    if done.contains(&prompt.id) {
                        answered.insert(gen_sources::prompt::dedup_hash(
                            &prompt.messages,
                            prompt.tools.as_ref(),
                        ));
                    }
                })?;
                self.list[j].answered_hashes = Some(Arc::new(answered));
            }
            if let Some(hashes) = &self.list[j].answered_hashes {
                for hash in hashes.iter() {
                    earlier.entry(*hash).or_insert(j);
                }
            }
        }
        Ok(Arc::new(earlier))
    }

    /// Starts streaming every source counted with prompts left; marks them generating.
    pub(super) fn take_feeds(
        &mut self,
        reporter: &RunReporter,
    ) -> Vec<(usize, super::feed::Prompts)> {
        let mut started = Vec::new();
        for (i, state) in self.list.iter_mut().enumerate() {
            if let Some(feed) = state.feed.take() {
                enter(&mut state.status, Phase::Generating, reporter);
                started.push((i, feed.start()));
            }
        }
        started
    }

    /// Records a prompt settled without an answer (or out of attempts) in `rejected.jsonl`.
    pub(super) fn record_rejected(
        &mut self,
        i: usize,
        record: &RejectedRecord,
    ) -> anyhow::Result<()> {
        self.fenced()?;
        let path = self.run_dir.source(&self.list[i].status.name).rejected();
        crate::store::append::json_lines(&path, std::slice::from_ref(record), false)?;
        let source = &mut self.list[i];
        source.refused += u64::from(record.kind == RejectKind::Rejected);
        let state = &mut source.status;
        let what = match record.kind {
            RejectKind::Rejected => "rejected",
            RejectKind::Truncated => "truncated",
            RejectKind::Exhausted => "out of attempts",
            RejectKind::Duplicate => "duplicate",
        };
        if record.kind == RejectKind::Exhausted {
            state.failed += 1;
            state.note = format!(
                "{} failed (retried on the next run); last: {}",
                state.failed, record.reason
            );
        } else {
            state.rejected += 1;
            if state.failed == 0 {
                state.note = format!(
                    "{} settled without answer; last {what}: {}",
                    state.rejected, record.reason
                );
            }
        }
        Ok(())
    }

    /// The selected sources with prompts the server refused, and how many.
    pub(super) fn refused(&self, selected: &[bool]) -> Vec<(String, u64)> {
        self.list
            .iter()
            .zip(selected)
            .filter(|(s, selected)| **selected && s.refused > 0)
            .map(|(s, _)| (s.status.name.clone(), s.refused))
            .collect()
    }

    /// Source `i`'s dispatch ended; `stopped`: the run stopped early (resumable, not failed).
    pub(super) fn finish_generation(
        &mut self,
        i: usize,
        stopped: bool,
        reporter: &RunReporter,
    ) -> anyhow::Result<()> {
        self.fenced()?;
        let state = &mut self.list[i];
        if let Some(writer) = state.writer.as_mut() {
            writer.flush()?;
        }
        let status = &mut state.status;
        if status.prepared == Some(status.done + status.rejected) {
            status.note = if status.rejected > 0 {
                format!(
                    "{} rejected by the server (see rejected.jsonl)",
                    status.rejected
                )
            } else {
                String::new()
            };
            enter(status, Phase::Done, reporter);
            reporter.notice(Notice::SourceDone {
                source: &status.name,
                done: status.done,
                cuts: &cuts(status),
            });
        } else if stopped {
            enter(status, Phase::Prepared, reporter);
        } else {
            enter(status, Phase::Failed, reporter);
            let (source, note) = (&status.name, &status.note);
            reporter.notice(Notice::GenerationFailed { source, note });
        }
        Ok(())
    }

    pub(super) fn flush_all(&mut self) -> anyhow::Result<()> {
        self.fenced()?;
        for state in &mut self.list {
            if let Some(writer) = state.writer.as_mut() {
                writer
                    .flush()
                    .with_context(|| format!("failed to write `{}`", writer.path().display()))?;
            }
        }
        Ok(())
    }

    /// Saves every source's counts of its stored completions (`tally.json`): only a shortcut
    /// for the next start, which counts from the file again without it.
    pub(super) fn save_tallies(&self) {
        for state in &self.list {
            let tally = crate::store::tally::Tally {
                truncated: state.status.truncated,
                cut_by_context: state.status.cut_by_context,
                output_tokens: state.status.output_tokens,
                tool_turns_cut: state.status.tool_turns_cut,
            };
            crate::store::tally::save(&self.run_dir.source(&state.status.name), tally).ok();
        }
    }

    /// Refreshes rates and ETAs (once per tick).
    pub(super) fn refresh_rates(&mut self) {
        for source in &mut self.list {
            let status = &mut source.status;
            if status.phase != Phase::Generating {
                status.tokens_per_sec = None;
                status.eta_secs = None;
                continue;
            }
            let since = *source.generating_since.get_or_insert_with(Instant::now);
            let secs = since.elapsed().as_secs_f64();
            if secs < 1.0 || source.tokens_here == 0 {
                continue;
            }
            let rate = source.tokens_here as f64 / secs;
            status.tokens_per_sec = Some(rate);
            // Mean tokens per completion in this run, times what is left.
            let completed_here = source.completed_here.max(1) as f64;
            let per_completion = source.tokens_here as f64 / completed_here;
            let remaining = status
                .prepared
                .unwrap_or(0)
                .saturating_sub(status.done + status.rejected) as f64;
            status.eta_secs = Some((remaining * per_completion / rate).round() as u64);
        }
    }

    /// Completions stored in this run, over every source.
    pub(super) fn completed_here(&self) -> u64 {
        self.list.iter().map(|s| s.completed_here).sum()
    }

    /// The highest peak RSS of a preparation worker in this run.
    pub(super) fn peak_rss_bytes(&self) -> Option<u64> {
        self.list.iter().filter_map(|s| s.peak_rss_bytes).max()
    }

    /// Stores a completion of source `i`; returns its output tokens.
    pub(super) fn completed(
        &mut self,
        i: usize,
        record: &CompletionRecord,
        reporter: &RunReporter,
    ) -> anyhow::Result<u64> {
        let tokens = record.usage.as_ref().map_or(0, |u| u.completion_tokens);
        let policy = self.plan.sources[i].worker.on_length;
        let state = &mut self.list[i];
        state.status.done += 1;
        state.status.output_tokens += tokens;
        state.status.tool_turns_cut += u64::from(record.tool_turns_cut);
        match (record.finish_reason.as_deref(), record.cut_by) {
            (Some("length"), Some(CutBy::Context)) => {
                state.status.cut_by_context += 1;
                if !std::mem::replace(&mut state.context_cut_said, true) {
                    reporter.notice(context_cut(&state.status.name, record, policy));
                }
            }
            (Some("length"), _) => state.status.truncated += 1,
            _ => {}
        }
        state.completed_here += 1;
        state.tokens_here += tokens;
        let writer = state
            .writer
            .as_mut()
            .expect("a generating source has a writer");
        writer.push(record)?;
        if writer.pending() >= FRAME_RECORDS {
            // Written now, fsynced on the next tick.
            if let Some(fence) = &self.fence {
                fence.check()?;
            }
            writer
                .write_frame()
                .with_context(|| format!("failed to write `{}`", writer.path().display()))?;
        }
        Ok(tokens)
    }
}

impl SourceState {
    /// Counted without reading its prompts: every one is done or settled (`census`, from
    /// [`super::feed::finished`]), `left_out` of them left out of its sample as an earlier
    /// source's.
    fn finished_unread(&mut self, census: &Census, left_out: u64, reporter: &RunReporter) {
        self.opened = true;
        self.status.prepared = Some(census.prepared);
        self.status.done = census.done;
        self.status.rejected = census.settled;
        self.status.duplicates = self.settled_duplicates + left_out;
        enter(&mut self.status, Phase::Done, reporter);
    }

    /// What the run directory holds for source `name`, putting right what an interrupted run
    /// left: a partial prompts file, a first sample set aside, a torn completions tail.
    fn load(
        run_dir: &RunDir,
        name: &str,
        resend: &record::Resend,
        reporter: &RunReporter,
    ) -> anyhow::Result<SourceState> {
        let dir = run_dir.source(name);
        put_right(&dir)?;
        let mut repaired = Vec::new();
        let to = dir.damaged_rejections(crate::sys::unix_ms());
        let unreadable = record::set_aside_unreadable_rejections(&dir.rejected(), &to)
            .with_context(|| format!("failed to repair `{}`", dir.rejected().display()))?;
        if unreadable > 0 {
            let message = format!(
                "{unreadable} lines of `rejected.jsonl` were not records (damaged, or cut by a \
                 crash): moved them to `{}`; their prompts are sent again",
                to.file_name().unwrap_or_default().to_string_lossy()
            );
            reporter.notice(Notice::CompletionsRepaired {
                source: name,
                message: &message,
            });
            repaired.push(message);
        }
        let settled = record::settled_ids(&dir.rejected(), resend)
            .with_context(|| format!("failed to read `{}`", dir.rejected().display()))?;
        let stored = crate::store::done::load(&dir.completions())
            .with_context(|| format!("failed to read `{}`", dir.completions().display()))?;
        repaired.extend(report_repairs(name, &stored.repairs, reporter));
        let len = fs_err::metadata(dir.prompts()).map_or(0, |m| m.len());
        let (mut manifest, unusable) = match read_manifest(run_dir, name) {
            Ok(Some(manifest)) => {
                let why = manifest.mismatch(len);
                (Some(manifest), why)
            }
            Ok(None) => (None, None),
            Err(e) => (None, Some(format!("does not decode ({e})"))),
        };
        if let Some(why) = unusable {
            let stored = stored.ids.len();
            let message = prepare_anew(&dir, name, "manifest.json", &why, stored, reporter)?;
            repaired.push(message);
            manifest = None;
        }
        let tally = crate::store::tally::load(&dir)
            .with_context(|| format!("failed to read `{}`", dir.completions().display()))?;
        let done_ids = stored.ids;
        let refused = settled.refused.count_not_in(&done_ids) as u64;
        let previous = crate::store::worker::last_failure(&dir);
        let prep_failed = manifest.is_none() && previous.is_some();
        let note = match (&manifest, previous) {
            (None, Some(report)) => format!(
                "last preparation failed ({}); retrying",
                report.exit.describe()
            ),
            _ => String::new(),
        };
        let status = SourceStatus {
            phase: if manifest.is_some() {
                Phase::Prepared
            } else {
                Phase::Pending
            },
            prepared: manifest.as_ref().map(|m| m.prompts),
            done: done_ids.len() as u64,
            rejected: settled.ids.len() as u64,
            truncated: tally.truncated,
            cut_by_context: tally.cut_by_context,
            with_tool_turns: manifest.as_ref().map_or(0, |m| m.counters.with_tool_turns),
            tool_turns_cut: tally.tool_turns_cut,
            output_tokens: tally.output_tokens,
            duplicates: settled.duplicates
                + manifest
                    .as_ref()
                    .map_or(0, |m| m.counters.duplicates_across),
            note,
            // The preparation's own warning first, then what this start repaired.
            warnings: manifest
                .as_ref()
                .and_then(PrepManifest::warning)
                .into_iter()
                .chain(repaired)
                .collect(),
            ..SourceStatus::new(name, Phase::Pending)
        };
        Ok(SourceState {
            status,
            done_ids,
            settled_ids: settled.ids,
            completed_here: 0,
            tokens_here: 0,
            feed: None,
            opened: false,
            hashes: None,
            answered_hashes: None,
            settled_duplicates: settled.duplicates,
            reprepared: false,
            prompts_reprepared: false,
            exclude: None,
            generating_since: None,
            peak_rss_bytes: None,
            writer: None,
            refused,
            prep_failed,
            context_cut_said: false,
        })
    }
}

/// The cut answers among a source's completions, told apart: `; 3 cut by max-tokens, 2 by the
/// context`, or nothing when none was cut.
fn cuts(status: &SourceStatus) -> String {
    const EXPORT: &str = " (stored; `gen export` leaves them out unless `--keep-cut`)";
    match (status.truncated, status.cut_by_context) {
        (0, 0) => String::new(),
        (by_budget, 0) => format!("; {by_budget} cut by `max-tokens`{EXPORT}"),
        (0, by_context) => {
            format!("; {by_context} cut by the context (not by `max-tokens`){EXPORT}")
        }
        (by_budget, by_context) => {
            format!("; {by_budget} cut by `max-tokens`, {by_context} by the context{EXPORT}")
        }
    }
}

/// The first answer of `source` cut by the context in a run: not a `max-tokens` cut, and no
/// larger budget is asked for (under `policy`).
fn context_cut<'a>(
    source: &'a str,
    record: &'a CompletionRecord,
    policy: LengthPolicy,
) -> Notice<'a> {
    // The last turn's own counts (a record's `usage` sums its turns).
    let usage = record
        .turns
        .last()
        .and_then(|t| t.usage.as_ref())
        .or(record.usage.as_ref());
    Notice::ContextCut {
        source,
        first: &record.id,
        usage: usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
        retry: policy == LengthPolicy::Retry,
    }
}

/// Moves a source to `phase`; a change is recorded in the run's history, with the source's
/// note as it is then.
pub(super) fn enter(status: &mut SourceStatus, phase: Phase, reporter: &RunReporter) {
    if status.phase == phase {
        return;
    }
    status.phase = phase;
    reporter.notice(Notice::SourcePhase {
        source: &status.name,
        phase: phase.label(),
        note: &status.note,
    });
}

/// Removes what an interrupted run left in a source's directory (temp files, a partial prompts
/// file) and settles a first sample set aside (see `store::worker::settle_first_sample`).
fn put_right(dir: &SourceDir) -> anyhow::Result<()> {
    create_private_dir(dir.root())?;
    remove_stale_temps(dir.root())?;
    let partial_prompts = dir.prompts().with_extension("zst.tmp");
    if partial_prompts.exists() {
        fs_err::remove_file(&partial_prompts)?;
    }
    crate::store::worker::settle_first_sample(dir)?;
    Ok(())
}

/// Sets aside source `name`'s preparation because its `file` (`manifest.json` or
/// `prompts.jsonl.zst`) is damaged or does not match (`why`), so the source is prepared
/// again; its `stored` completions stay. Says so loudly; returns what it said, for the
/// source's warnings. The manifest goes first: without it the source is not prepared,
/// whatever stops here.
fn prepare_anew(
    dir: &SourceDir,
    name: &str,
    file: &str,
    why: &str,
    stored: usize,
    reporter: &RunReporter,
) -> anyhow::Result<String> {
    let now = crate::sys::unix_ms();
    let moved = if file == "manifest.json" {
        let to = dir.damaged_manifest(now);
        fs_err::rename(dir.manifest(), &to)?;
        to
    } else {
        // It describes the prompts set aside, and a new preparation writes another.
        if dir.manifest().exists() {
            fs_err::remove_file(dir.manifest())?;
        }
        let to = dir.damaged_prompts(now);
        fs_err::rename(dir.prompts(), &to)?;
        to
    };
    let moved = moved
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let message = format!(
        "`{file}` {why}: moved it to `{moved}`; preparing the source again (its {stored} \
         stored completions are kept)"
    );
    reporter.notice(Notice::PreparationSetAside {
        source: name,
        message: &message,
    });
    Ok(message)
}

/// Says what [`crate::store::done::load`] put right in source `name`'s completions: a torn
/// tail quietly (a crash's normal leftover), anything that lost or moved records loudly, on
/// stderr and in `events.jsonl`; returns those for the source's status.
fn report_repairs(
    name: &str,
    repairs: &[crate::store::done::Repair],
    reporter: &RunReporter,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for repair in repairs {
        if repair.is_loud() {
            let (source, message) = (name, &repair.to_string());
            reporter.notice(Notice::CompletionsRepaired { source, message });
            warnings.push(repair.to_string());
        } else {
            tracing::info!(source = name, "{repair}");
        }
    }
    warnings
}

fn remove_stale_temps(dir: &std::path::Path) -> anyhow::Result<()> {
    for path in atomic::remove_stale_temps(dir)? {
        tracing::info!("removed the stale temporary file `{}`", path.display());
    }
    Ok(())
}
