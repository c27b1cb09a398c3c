//! `gen verify`: audits a run directory — every prompt id has exactly one completion or one
//! recorded rejection, counts add up per source, no duplicate ids, every output file decodes.
//!
//! It only reads: what the next `gen run` puts right (a torn tail it cuts off, damaged bytes
//! and stored records that are not answers it sets aside, see [`crate::store::done`]) is
//! reported with what `gen run` will do, never repaired here, so verifying a run that is still
//! going never races its writer. Both apply the same rules: the same reader (intact frames
//! after damage count), the same answer check ([`record::line_defect`]). What counts as a
//! problem (exit 1): duplicate or unknown completion ids, damage (bytes that do not decode
//! and are not a torn tail), stored records that are not answers, manifest counters that do
//! not add up, and prompts missing from a source the run says is done. A run that is
//! consistent but incomplete (a source not prepared or whose preparation failed, prompts
//! without a completion or a rejection) also exits 1, saying what is missing, unless
//! `--allow-incomplete`: a script that goes on to train must not take half a dataset for all
//! of it.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use serde::Serialize;
use serde_json::Value;

use crate::scale::shard::Shard;
use crate::status::Phase;
use crate::status::render::push_wrapped;
use crate::store::frames;
use crate::store::ids::{self, IdSet};
use crate::store::manifest::PrepManifest;
use crate::store::pin::RunPin;
use crate::store::records::{self as record, RejectKind, RejectedRecord};
use crate::store::{RunDir, SourceDir, atomic};

/// The audit of a whole run directory.
#[derive(Debug, Clone, Serialize)]
pub struct Audit {
    pub run_dir: String,
    /// `status.json` says a `gen run` ended (normally or by a handled signal).
    pub run_finished: Option<bool>,
    /// Why the last `gen run` stopped early, as `status.json` says.
    pub stopped_by: Option<String>,
    /// The config the advice names: the one `gen verify` was given, else the one the last
    /// `gen run` used (`status.json`), else `CONFIG`.
    pub config: String,
    /// Things about the run directory as a whole that are worth saying (a damaged `run.json`).
    pub notes: Vec<String>,
    pub sources: Vec<SourceAudit>,
    /// Sums over sources.
    pub totals: Totals,
    /// No problem in any source.
    pub consistent: bool,
    /// Every source prepared and every prompt completed or rejected for good.
    pub complete: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    pub prompts: u64,
    pub completed: u64,
    pub rejected: u64,
    pub pending: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub unknown: u64,
    pub not_answers: u64,
    pub problems: usize,
}

/// The audit of one source directory.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceAudit {
    pub name: String,
    /// `manifest.json` is present: preparation completed.
    pub prepared: bool,
    /// The phase `status.json` gives the source, when it lists it.
    pub phase: Option<Phase>,
    /// Prompt ids in `prompts.jsonl.zst`.
    pub prompts: u64,
    /// Prompts with a stored completion (counted once however often they are stored).
    pub completed: u64,
    /// Prompts without a completion that the server refused for good.
    pub rejected: u64,
    /// Prompts with neither, that a rerun will send (of which `retry` ran out of attempts or
    /// were refused under other settings than the run's now).
    pub pending: u64,
    pub retry: u64,
    /// Prompts with neither in a source the run says is done.
    pub lost: u64,
    /// Completion records beyond the first for the same id.
    pub duplicated: u64,
    /// Completion ids that are not prepared prompt ids.
    pub unknown: u64,
    /// Stored records that are not answers (aborted, empty, no finish reason): not done.
    pub not_answers: u64,
    /// Things that are fine but worth saying (torn tails, why prompts are pending).
    pub notes: Vec<String>,
    /// Things that are wrong; any makes the audit fail.
    pub problems: Vec<String>,
    /// What keeps this source from being complete, and what to do about it; `None` when
    /// every prompt is completed or rejected for good.
    pub missing: Option<String>,
}

impl Audit {
    /// Each incomplete source's name and what it misses.
    pub fn missing(&self) -> impl Iterator<Item = (&str, &str)> {
        self.sources
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.missing.as_deref()?)))
    }
}

/// `gen verify TARGET [--json] [--allow-incomplete]`: prints the audit; exit 0 when consistent
/// and complete (or incomplete with `allow_incomplete`), 1 otherwise.
pub fn verify(target: &Path, json: bool, allow_incomplete: bool) -> anyhow::Result<ExitCode> {
    let run_dir = RunDir::named_by(target)?;
    let config = target.is_file().then(|| target.display().to_string());
    anyhow::ensure!(
        run_dir.root().is_dir(),
        "no run directory at `{}`: start a run with `gen run {}`",
        run_dir.root().display(),
        config.as_deref().unwrap_or("CONFIG")
    );
    let audit = audit(&run_dir, config.as_deref())?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&audit).context("the audit serializes")?
        );
    } else {
        print!("{}", render(&audit));
    }
    let ok = audit.consistent && (audit.complete || allow_incomplete);
    Ok(ExitCode::from(crate::exit::ok_if(ok)))
}

/// Audits every source directory of `run_dir` (read only); `config` is the config file the
/// user named, for the advice.
pub fn audit(run_dir: &RunDir, config: Option<&str>) -> anyhow::Result<Audit> {
    // Read loosely: only `finished`, `stopped_by`, `config` and each source's name and phase
    // matter here, and a status written by an older or newer `gen` must still be auditable.
    // One that does not decode says nothing (the next `gen run` writes it again).
    let status: Option<Value> = atomic::read_json(&run_dir.status()).ok().flatten();
    let listed_sources = listed_sources(status.as_ref(), run_dir);
    let names = source_names(run_dir, &listed_sources)?;
    let run_finished = status.as_ref().and_then(|s| s["finished"].as_bool());
    let stopped_by = status
        .as_ref()
        .and_then(|s| s["stopped_by"].as_str().map(str::to_owned));
    let config = config
        .map(str::to_owned)
        .or_else(|| status.as_ref()?["config"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "CONFIG".to_owned());
    let (pin, notes) = last_run(run_dir, &config);
    let shard = pin.as_ref().and_then(|pin| pin.shard);
    let mut sources = Vec::new();
    for name in names {
        let phase = listed_sources
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, phase)| *phase);
        let settings = pin.as_ref().map(|pin| pin.settings_of(&name));
        let fingerprint = settings.as_ref().map(crate::config::Settings::fingerprint);
        let judged = Judged {
            phase,
            run_finished,
            settings: fingerprint.as_deref(),
            samples: settings.map_or(1, |s| s.samples.get()),
            shard,
            config: &config,
        };
        let mut audit = audit_source(&run_dir.source(&name), &name, &judged)
            .with_context(|| format!("failed to audit source `{name}`"))?;
        audit.phase = phase;
        sources.push(audit);
    }
    let totals = Totals::sum(&sources);
    Ok(Audit {
        run_dir: run_dir.root().display().to_string(),
        run_finished,
        stopped_by,
        config,
        notes,
        consistent: totals.problems == 0,
        complete: sources.iter().all(|s| s.missing.is_none()),
        sources,
        totals,
    })
}

/// Each source `status.json` lists that has a directory (every source of a run has one: a
/// listed source without is another run's), with its phase when that decodes.
fn listed_sources(status: Option<&Value>, run_dir: &RunDir) -> Vec<(String, Option<Phase>)> {
    status
        .and_then(|s| s["sources"].as_array())
        .map(|sources| {
            sources
                .iter()
                .filter_map(|s| {
                    let name = s["name"].as_str()?.to_owned();
                    if !run_dir.source(&name).root().is_dir() {
                        return None;
                    }
                    let phase = serde_json::from_value(s["phase"].clone()).ok();
                    Some((name, phase))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The sources to audit: those `status.json` lists, in its order, then any other directory
/// under `sources/`, by name.
fn source_names(
    run_dir: &RunDir,
    listed_sources: &[(String, Option<Phase>)],
) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = listed_sources.iter().map(|(n, _)| n.clone()).collect();
    let sources_dir = run_dir.root().join("sources");
    let mut listed = BTreeSet::new();
    for entry in atomic::if_exists(fs_err::read_dir(&sources_dir))?
        .into_iter()
        .flatten()
    {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            listed.insert(entry.file_name().to_string_lossy().into_owned());
        }
    }
    for name in listed {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

/// The settings the last run used (`run.json`: a refusal recorded under others is sent again;
/// each source's samples per prompt), and the share of prompts it holds (`--shard`); a note
/// when it does not decode (`config` for the advice).
fn last_run(run_dir: &RunDir, config: &str) -> (Option<RunPin>, Vec<String>) {
    match RunPin::read(run_dir) {
        Ok(pin) => (pin, Vec::new()),
        Err(e) => {
            let note = format!(
                "`run.json` does not decode ({e}): the settings of the stored completions are \
                 unknown; a `gen run {config}` that has prompts to send refuses until \
                 `--allow-config-change` records this config's settings again"
            );
            (None, vec![note])
        }
    }
}

impl Totals {
    fn sum(sources: &[SourceAudit]) -> Totals {
        let mut totals = Totals::default();
        for s in sources {
            totals.prompts += s.prompts;
            totals.completed += s.completed;
            totals.rejected += s.rejected;
            totals.pending += s.pending;
            totals.lost += s.lost;
            totals.duplicated += s.duplicated;
            totals.unknown += s.unknown;
            totals.not_answers += s.not_answers;
            totals.problems += s.problems.len();
        }
        totals
    }
}

/// What one source is judged against: its phase in `status.json`, whether the last run
/// ended, the last run's settings and shard, the config to name in advice.
struct Judged<'a> {
    phase: Option<Phase>,
    run_finished: Option<bool>,
    settings: Option<&'a str>,
    /// Answers per prompt: each prompt is that many ids to account for.
    samples: u32,
    shard: Option<Shard>,
    config: &'a str,
}

fn audit_source(dir: &SourceDir, name: &str, judged: &Judged<'_>) -> anyhow::Result<SourceAudit> {
    let mut auditor = SourceAuditor {
        dir,
        judged,
        prompts_in_file: 0,
        preparation_unusable: false,
        audit: SourceAudit {
            name: name.to_owned(),
            ..SourceAudit::default()
        },
    };
    let manifest = auditor.read_manifest();
    let prompts = auditor.check_prompts(manifest.is_some())?;
    if let Some(manifest) = &manifest {
        auditor.check_manifest(manifest, prompts.is_some());
    }
    let (all, own) = prompts.unwrap_or_default();
    let known = (!auditor.preparation_unusable && auditor.dir.prompts().exists()).then_some(&all);
    let completed = auditor.check_completions(known)?;
    let stored = completed.len() as u64;
    let refusals = auditor.read_rejections()?;
    auditor.account(&own, &completed, &refusals);
    auditor.explain_pending();
    let unusable = auditor.preparation_unusable;
    let mut audit = auditor.audit;
    if audit.missing.is_none() {
        audit.missing = missing(dir, name, &audit, judged, unusable.then_some(stored));
    }
    Ok(audit)
}

/// One source's audit while its files are read: what it is judged against, and what it has
/// found so far. Each step reads one file and adds its counts, notes and problems in the
/// order they are shown.
struct SourceAuditor<'a> {
    dir: &'a SourceDir,
    judged: &'a Judged<'a>,
    /// Prompts in `prompts.jsonl.zst`, of every shard.
    prompts_in_file: u64,
    /// The prompts file or manifest is damaged or does not match: `gen run` prepares the
    /// source again, so its prompt ids say nothing about the completions.
    preparation_unusable: bool,
    audit: SourceAudit,
}

/// The prompt ids `rejected.jsonl` records, by what a rerun does with them.
#[derive(Default)]
struct Refusals {
    /// Refused for good: never sent again.
    permanent: IdSet,
    /// Out of attempts: sent again.
    exhausted: IdSet,
    /// Refused under other settings than the last run's: sent again.
    resent: IdSet,
}

impl SourceAuditor<'_> {
    /// `manifest.json`, when present and it decodes (a problem when it does not).
    fn read_manifest(&mut self) -> Option<PrepManifest> {
        let manifest = match atomic::read_json(&self.dir.manifest()) {
            Ok(manifest) => manifest,
            Err(e) => {
                self.audit.problems.push(format!(
                    "`manifest.json` does not decode: {e}; the next `gen run` sets it aside and \
                     prepares the source again, keeping its stored completions"
                ));
                self.preparation_unusable = true;
                None
            }
        };
        self.audit.prepared = manifest.is_some();
        manifest
    }

    /// Reads `prompts.jsonl.zst`: the prepared prompt ids, of every shard and of this run's
    /// shard; `None` when there is no such file.
    fn check_prompts(&mut self, manifest_present: bool) -> anyhow::Result<Option<(IdSet, IdSet)>> {
        let path = self.dir.prompts();
        if !path.exists() {
            if manifest_present {
                self.audit.problems.push(
                    "`manifest.json` is present but `prompts.jsonl.zst` is missing".to_owned(),
                );
            }
            return Ok(None);
        }
        let Judged { shard, samples, .. } = *self.judged;
        let (found, scan) = read_frames(&path, |body| prompt_frame(body, shard, samples))?;
        let FrameAudit {
            keys,
            own,
            bad_lines,
            ..
        } = found;
        let listed = keys.len() as u64;
        let prompt_ids = IdSet::from_keys(keys);
        let own = match shard {
            Some(_) => IdSet::from_keys(own),
            None => prompt_ids.clone(),
        };
        let repeated = (listed - prompt_ids.len() as u64) / u64::from(samples);
        let mut problems = Vec::new();
        if scan.torn_bytes > 0 {
            // The prompts file is renamed into place whole: any damage is a problem.
            problems.push(format!(
                "`prompts.jsonl.zst` does not decode after byte {} ({} bytes unreadable)",
                scan.intact_end(),
                scan.torn_bytes
            ));
        }
        if !scan.damaged.is_empty() {
            problems.push(format!(
                "`prompts.jsonl.zst` is damaged: bytes {} do not decode",
                frames::ranges(&scan.damaged)
            ));
        }
        if bad_lines > 0 {
            problems.push(format!(
                "`prompts.jsonl.zst` has {bad_lines} lines that are not prompts"
            ));
        }
        if repeated > 0 {
            problems.push(format!(
                "`prompts.jsonl.zst` lists {repeated} prompt ids more than once"
            ));
        }
        if let Some(last) = problems.last_mut() {
            last.push_str(
                "; the next `gen run` sets it aside as `prompts.damaged-<time>.jsonl.zst` and \
                 prepares the source again, keeping its stored completions",
            );
            self.preparation_unusable = true;
        }
        self.audit.problems.extend(problems);
        if !manifest_present {
            self.audit.notes.push(
                "prompts without `manifest.json`: preparation did not complete; the next run \
                 prepares the source again"
                    .to_owned(),
            );
        }
        self.prompts_in_file = prompt_ids.len() as u64 / u64::from(samples);
        self.audit.prompts = own.len() as u64;
        Ok(Some((prompt_ids, own)))
    }

    /// The manifest's counters add up, and agree with the prompts file when there is one.
    fn check_manifest(&mut self, manifest: &PrepManifest, prompts_present: bool) {
        let mut problems = manifest.counter_problems();
        if prompts_present && manifest.prompts != self.prompts_in_file {
            problems.push(format!(
                "manifest says {} prompts, `prompts.jsonl.zst` holds {}",
                manifest.prompts, self.prompts_in_file
            ));
        }
        let len = fs_err::metadata(self.dir.prompts()).map_or(0, |m| m.len());
        if prompts_present
            && problems.is_empty()
            && let Some(why) = manifest.mismatch(len)
        {
            problems.push(format!("`manifest.json` {why}"));
        }
        if let Some(last) = problems.last_mut() {
            last.push_str(
                "; the next `gen run` prepares the source again, keeping its stored completions",
            );
            self.preparation_unusable = true;
        }
        self.audit.problems.extend(problems);
    }

    /// Reads `completions.jsonl.zst`: the ids with a stored answer. `prompt_ids` is `None`
    /// when there is no prompts file, which makes every completion unknown.
    fn check_completions(&mut self, prompt_ids: Option<&IdSet>) -> anyhow::Result<IdSet> {
        let path = self.dir.completions();
        let (found, scan) = read_frames(&path, completion_frame)?;
        let intact = found.keys.len() as u64;
        self.report_completion_file(&found, &scan, intact)?;
        let mut keys = found.keys;
        keys.sort_unstable();
        let repeated = ids::repeated(&keys);
        let completed = IdSet::from_keys(keys);
        self.audit.duplicated = intact - completed.len() as u64;
        let unknown = match prompt_ids {
            Some(prompt_ids) => IdSet::from_keys(
                completed
                    .keys()
                    .filter(|key| !prompt_ids.contains_key(*key))
                    .collect(),
            ),
            None => IdSet::default(),
        };
        // The sets hold keys: the ids to name are read again, only when there is something wrong.
        let [repeated_example, unknown_example] = if repeated.is_empty() && unknown.is_empty() {
            [None, None]
        } else {
            smallest_ids(&path, [&repeated, &unknown])?
        };
        let audit = &mut self.audit;
        if let Some(example) = repeated_example {
            audit.problems.push(format!(
                "{} duplicate completion records (e.g. `{example}`); the next `gen run` keeps \
                 the first of each and moves the others to `completions.repeated-<time>.jsonl`",
                audit.duplicated
            ));
        }
        if prompt_ids.is_some() {
            audit.unknown = unknown.len() as u64;
            if let Some(first) = unknown_example {
                audit.problems.push(format!(
                    "{} completion ids are not prepared prompts (e.g. `{first}`); the next `gen \
                     run` moves them to `completions.foreign-<time>.jsonl`",
                    unknown.len()
                ));
            }
        } else if !completed.is_empty() && !self.preparation_unusable {
            audit.notes.push(format!(
                "{} completions are stored, but the source has no prepared prompts: the next \
                 `gen run` prepares it and keeps them",
                completed.len()
            ));
        }
        Ok(completed)
    }

    /// The notes and problems about the completions file's bytes and records, and the files
    /// `gen run` set aside from it.
    fn report_completion_file(
        &mut self,
        found: &FrameAudit,
        scan: &frames::Scan,
        intact: u64,
    ) -> anyhow::Result<()> {
        let audit = &mut self.audit;
        if !scan.damaged.is_empty() {
            let bytes = scan.damaged_bytes();
            audit.problems.push(format!(
                "`completions.jsonl.zst` is damaged: {bytes} bytes (at {}) do not decode; the \
                 completions in them are lost. The next `gen run` moves those bytes to \
                 `completions.damaged-<time>.bin`, keeps the {intact} completions of the intact \
                 frames and generates the lost prompts again",
                frames::ranges(&scan.damaged)
            ));
        }
        if scan.torn_bytes > 0 {
            audit.notes.push(format!(
                "`completions.jsonl.zst`: torn tail of {} bytes (repaired on the next run)",
                scan.torn_bytes
            ));
        }
        audit.not_answers = found.not_answers.len() as u64;
        if let Some((id, defect)) = found.not_answers.first() {
            audit.problems.push(format!(
                "{} stored completions are not answers (e.g. `{id}`: {defect}): they do not count \
                 as done; the next `gen run` moves them to `completions.not-answers-<time>.jsonl` \
                 and generates them again",
                found.not_answers.len()
            ));
        }
        for name in self.dir.set_aside()? {
            let what = crate::store::layout::SET_ASIDE
                .iter()
                .find(|(prefix, _)| name.starts_with(prefix))
                .map_or("", |(_, what)| what);
            let then = if name.starts_with("completions.") || name.starts_with("rejected.") {
                "their prompts were generated again"
            } else {
                "the source was prepared again"
            };
            audit
                .notes
                .push(format!("`{name}`: {what}, set aside by `gen run`; {then}"));
        }
        if found.bad_lines > 0 {
            audit.problems.push(format!(
                "`completions.jsonl.zst` has {} lines that are not completion records",
                found.bad_lines
            ));
        }
        Ok(())
    }

    /// Reads `rejected.jsonl`: one JSON line each, appended; only the last line can be torn.
    fn read_rejections(&mut self) -> anyhow::Result<Refusals> {
        let Some(bytes) = atomic::if_exists(fs_err::read(self.dir.rejected()))? else {
            return Ok(Refusals::default());
        };
        let (mut permanent, mut exhausted, mut resent) = (Vec::new(), Vec::new(), Vec::new());
        let lines: Vec<&[u8]> = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.trim_ascii().is_empty())
            .collect();
        let ends_whole = bytes.last().is_none_or(|b| *b == b'\n');
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_slice::<RejectedRecord>(line) {
                Ok(record)
                    if record.kind == RejectKind::Rejected
                        && matches!(
                            (record.settings.as_deref(), self.judged.settings),
                            (Some(then), Some(now)) if then != now
                        ) =>
                {
                    resent.push(ids::key(&record.id));
                }
                Ok(record) => match record.kind {
                    RejectKind::Rejected | RejectKind::Truncated | RejectKind::Duplicate => {
                        permanent.push(ids::key(&record.id))
                    }
                    RejectKind::Exhausted => exhausted.push(ids::key(&record.id)),
                },
                Err(_) if i + 1 == lines.len() && !ends_whole => self.audit.notes.push(format!(
                    "`rejected.jsonl`: torn last line of {} bytes (set aside by the next run)",
                    line.len()
                )),
                Err(e) => self.audit.problems.push(format!(
                    "`rejected.jsonl` line {} does not decode: {e}; the next `gen run` moves it \
                     to `rejected.damaged-<time>.jsonl` and sends its prompt again",
                    i + 1
                )),
            }
        }
        Ok(Refusals {
            permanent: IdSet::from_keys(permanent),
            exhausted: IdSet::from_keys(exhausted),
            resent: IdSet::from_keys(resent),
        })
    }

    /// Counts every prompt: completed, refused for good, or still to do.
    fn account(&mut self, prompt_ids: &IdSet, completed: &IdSet, refusals: &Refusals) {
        let audit = &mut self.audit;
        for key in prompt_ids.keys() {
            if completed.contains_key(key) {
                audit.completed += 1;
            } else if refusals.permanent.contains_key(key) {
                audit.rejected += 1;
            } else {
                if refusals.exhausted.contains_key(key) || refusals.resent.contains_key(key) {
                    audit.retry += 1;
                }
                audit.pending += 1;
            }
        }
    }

    /// Pending prompts are lost (a problem) in a source the run says is done, and otherwise
    /// what keeps the source from being complete.
    fn explain_pending(&mut self) {
        let audit = &mut self.audit;
        if audit.pending == 0 {
            return;
        }
        let judged = self.judged;
        if judged.phase == Some(Phase::Done) {
            audit.lost = audit.pending;
            audit.pending = 0;
            audit.problems.push(format!(
                "{} prompts have no completion or rejection, yet `status.json` says the source \
                 is done",
                audit.lost
            ));
            return;
        }
        let why = match (judged.run_finished, judged.phase) {
            (Some(false), _) => "the run is in progress or was killed",
            (_, Some(Phase::Failed)) => "the source failed in the last run",
            _ => "the last run stopped before them",
        };
        let retry = if audit.retry > 0 {
            format!(
                " ({} ran out of attempts or were refused under other settings)",
                audit.retry
            )
        } else {
            String::new()
        };
        let of = match judged.samples {
            1 => "prompts".to_owned(),
            k => format!("samples ({k} per prompt)"),
        };
        audit.missing = Some(format!(
            "{} of its {} {of} have no completion yet{retry}: {why}; `gen run {}` sends \
             them",
            audit.pending, audit.prompts, judged.config
        ));
    }
}

/// One frame of the prompts file: the keys of its prompts' sample ids (with one sample per
/// prompt, the prompt ids), and of those in `shard`.
fn prompt_frame(
    body: frames::FrameBody<'_>,
    shard: Option<Shard>,
    samples: u32,
) -> std::io::Result<FrameAudit> {
    let mut audit = FrameAudit::default();
    let mut add = |id: &str| {
        let own = shard.is_some_and(|s| s.contains(id));
        for sample in 0..samples {
            let key = ids::key(&crate::config::settings::sample_id(id, sample));
            audit.keys.push(key);
            if own {
                audit.own.push(key);
            }
        }
    };
    match body {
        frames::FrameBody::Text(text) => {
            for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                match serde_json::from_slice::<gen_sources::Prompt>(line) {
                    Ok(prompt) => add(&prompt.id),
                    Err(_) => audit.bad_lines += 1,
                }
            }
        }
        frames::FrameBody::Ids(list) => list.into_iter().for_each(add),
    }
    Ok(audit)
}

/// One frame of the completions file: the keys of its answers, and the records that are not.
fn completion_frame(body: frames::FrameBody<'_>) -> std::io::Result<FrameAudit> {
    let mut audit = FrameAudit::default();
    match body {
        frames::FrameBody::Ids(list) => audit.keys = list.into_iter().map(ids::key).collect(),
        frames::FrameBody::Text(text) => {
            for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                match record::line_defect(line) {
                    Ok(Some(defective)) => audit.not_answers.push(defective),
                    Ok(None) => match crate::store::index::record_id(line) {
                        Ok(id) => audit.keys.push(ids::key(&id)),
                        Err(_) => audit.bad_lines += 1,
                    },
                    Err(_) => audit.bad_lines += 1,
                }
            }
        }
    }
    Ok(audit)
}

/// Reads a prompts or completions file in parallel batches of frames (not the whole file in
/// memory), as `gen run` reads it: a frame whose id index entry vouches for its answers is not
/// decoded. What `on_frame` finds in each frame comes back as one, in file order.
fn read_frames(
    path: &Path,
    on_frame: impl Fn(frames::FrameBody<'_>) -> std::io::Result<FrameAudit> + Sync,
) -> anyhow::Result<(FrameAudit, frames::Scan)> {
    let (frames, scan) = frames::survey(path, 0, on_frame)
        .with_context(|| format!("failed to read `{}`", path.display()))?;
    let mut found = FrameAudit::default();
    for frame in frames {
        found.keys.extend(frame.value.keys);
        found.own.extend(frame.value.own);
        found.not_answers.extend(frame.value.not_answers);
        found.bad_lines += frame.value.bad_lines;
    }
    Ok((found, scan))
}

/// One frame of a prompts or completions file as the audit reads it.
#[derive(Default)]
struct FrameAudit {
    /// Keys of the records that are answers (of a prompts file: of its prompt ids).
    keys: Vec<u128>,
    /// Of a prompts file under `--shard`: the keys of this shard's prompt ids.
    own: Vec<u128>,
    not_answers: Vec<(String, crate::store::records::Defect)>,
    /// Lines that are not completion records.
    bad_lines: u64,
}

/// For each of `sets`, the smallest id (in `str` order) of a completion record of `path`
/// whose key it holds: the example a problem found by keys names.
fn smallest_ids<const N: usize>(
    path: &Path,
    sets: [&IdSet; N],
) -> anyhow::Result<[Option<String>; N]> {
    let mut smallest: [Option<String>; N] = std::array::from_fn(|_| None);
    frames::scan(path, |line| {
        let Ok(id) = crate::store::index::record_id(line) else {
            return Ok(());
        };
        let key = ids::key(&id);
        for (set, best) in sets.iter().zip(&mut smallest) {
            if set.contains_key(key) && best.as_ref().is_none_or(|b| id < *b) {
                *best = Some(id.clone());
            }
        }
        Ok(())
    })
    .with_context(|| format!("failed to read `{}`", path.display()))?;
    Ok(smallest)
}

/// What keeps a source from being complete, in plain words with what to do next;
/// `unusable`: its prompts file or manifest is damaged (a problem says so), with the number of
/// its stored completions.
fn missing(
    dir: &SourceDir,
    name: &str,
    audit: &SourceAudit,
    judged: &Judged<'_>,
    unusable: Option<u64>,
) -> Option<String> {
    let config = judged.config;
    if let Some(stored) = unusable {
        return Some(format!(
            "its preparation is damaged (see above); `gen run {config}` prepares it again and \
             keeps its {stored} stored completions"
        ));
    }
    if !audit.prepared {
        // Read loosely, like `status.json`: only whether the last worker failed matters, and
        // a worker `gen` stopped because the run stopped did not fail.
        let worker: Option<Value> = atomic::read_json(&dir.worker()).ok().flatten();
        let stopped = worker
            .as_ref()
            .is_some_and(|w| w["verdict"]["subtype"] == "cancelled");
        let failed = judged.phase == Some(Phase::Failed)
            || worker.is_some_and(|w| w["succeeded"] == Value::Bool(false) && !stopped);
        return Some(if failed {
            format!(
                "its preparation failed, so none of its prompts were generated; \
                 `gen diagnose {name} --config {config}` says why, `gen run {config}` prepares \
                 it again"
            )
        } else if stopped {
            format!(
                "its preparation was stopped when the run stopped, so none of its prompts were \
                 generated; `gen run {config}` prepares it"
            )
        } else {
            format!(
                "not prepared yet, so none of its prompts were generated; `gen run {config}` \
                 prepares it"
            )
        });
    }
    (audit.lost > 0).then(|| {
        format!(
            "{} of its {} prompts have no completion; `gen run {config}` sends them",
            audit.lost, audit.prompts
        )
    })
}

const WIDTH: usize = 80;

/// The audit as a table of at most 80 columns, notes and problems under it, then the verdict.
pub fn render(audit: &Audit) -> String {
    let mut out = String::new();
    let state = match audit.run_finished {
        Some(true) => "the last `gen run` ended",
        Some(false) => "a `gen run` is in progress or was killed",
        None => "no `status.json`",
    };
    writeln!(out, "run `{}`: {state}", audit.run_dir).ok();
    if let (Some(true), Some(reason)) = (audit.run_finished, &audit.stopped_by) {
        push_wrapped(
            &mut out,
            &format!("it stopped: {reason}"),
            WIDTH,
            "",
            "    ",
        );
    }
    writeln!(out).ok();
    render_table(&mut out, audit);
    render_remarks(&mut out, audit);
    writeln!(out).ok();
    push_wrapped(&mut out, &verdict(audit), WIDTH, "", "    ");
    out
}

/// One row per source, then the totals; a name too long for its column gets a line of its own.
fn render_table(out: &mut String, audit: &Audit) {
    writeln!(
        out,
        "{:<16}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}",
        "source", "prompts", "done", "rejected", "pending", "lost", "dup", "unknown"
    )
    .ok();
    let row = |out: &mut String, name: &str, s: [u64; 7]| {
        writeln!(
            out,
            "{:<16}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}",
            name, s[0], s[1], s[2], s[3], s[4], s[5], s[6]
        )
        .ok();
    };
    for s in &audit.sources {
        let name = if s.name.chars().count() > 15 {
            writeln!(out, "{}", s.name).ok();
            String::new()
        } else {
            s.name.clone()
        };
        let counts = [
            s.prompts,
            s.completed,
            s.rejected,
            s.pending,
            s.lost,
            s.duplicated,
            s.unknown,
        ];
        row(out, &name, counts);
    }
    let t = &audit.totals;
    let counts = [
        t.prompts,
        t.completed,
        t.rejected,
        t.pending,
        t.lost,
        t.duplicated,
        t.unknown,
    ];
    row(out, "total", counts);
}

/// Each source's problems and notes, then what each incomplete source misses, after a blank
/// line when there is any.
fn render_remarks(out: &mut String, audit: &Audit) {
    let remarks = audit.sources.iter().flat_map(|s| {
        s.problems
            .iter()
            .map(|p| ("problem", p))
            .chain(s.notes.iter().map(|n| ("note", n)))
            .map(|(mark, text)| format!("{mark}: `{}`: {text}", s.name))
    });
    let incomplete = audit
        .missing()
        .map(|(name, missing)| format!("incomplete: `{name}`: {missing}"));
    let remarks = audit
        .notes
        .iter()
        .map(|n| format!("note: {n}"))
        .chain(remarks);
    let mut said = false;
    for remark in remarks.chain(incomplete) {
        if !said {
            writeln!(out).ok();
            said = true;
        }
        push_wrapped(out, &remark, WIDTH, "", "    ");
    }
}

/// The last line: incomplete, consistent, or how many problems.
fn verdict(audit: &Audit) -> String {
    let t = &audit.totals;
    let incomplete = audit.missing().count();
    if audit.consistent && incomplete > 0 {
        let noun = if incomplete == 1 { "source" } else { "sources" };
        format!(
            "verdict: incomplete: {incomplete} {noun} not finished (see above); consistent \
             otherwise: {} lost, {} duplicated, {} unknown ids",
            t.lost, t.duplicated, t.unknown
        )
    } else if audit.consistent {
        format!(
            "verdict: consistent: {} lost, {} duplicated, {} unknown ids, every file decodes",
            t.lost, t.duplicated, t.unknown
        )
    } else {
        let problems = crate::status::render::plural(t.problems as u64, "problem");
        format!(
            "verdict: {problems}: {} lost, {} duplicated, {} unknown ids",
            t.lost, t.duplicated, t.unknown
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frames::FrameWriter;
    use gen_sources::{Message, Prompt, Role};

    fn prompt(source: &str, n: u64) -> Prompt {
        Prompt {
            id: format!("{source}-{n:016x}"),
            source: source.to_owned(),
            messages: vec![Message::new(Role::User, format!("q{n}"))],
            tools: None,
            source_key: None,
            row: n,
        }
    }

    fn completion(prompt: &Prompt) -> serde_json::Value {
        serde_json::json!({
            "id": prompt.id,
            "source": prompt.source,
            "model": "m",
            "messages": prompt.messages,
            "content": "a",
            "finish_reason": "stop",
        })
    }

    /// A prepared source `s` with `n` prompts; returns them.
    fn prepared(run_dir: &RunDir, n: u64) -> Vec<Prompt> {
        let dir = run_dir.source("s");
        fs_err::create_dir_all(dir.root()).expect("mkdir");
        let prompts: Vec<Prompt> = (0..n).map(|i| prompt("s", i)).collect();
        let (mut writer, _) = FrameWriter::open(&dir.prompts()).expect("open");
        for p in &prompts {
            writer.push(p).expect("push");
        }
        writer.flush().expect("flush");
        let manifest = PrepManifest {
            layout: 1,
            prompts: n,
            settings: None,
            input_stats: Default::default(),
            kept_for: None,
            prompt_ids: None,
            counters: gen_sources::Manifest {
                source: "s".into(),
                rows_read: n + 2,
                kept: n,
                dropped: [("bad_json".to_owned(), 1)].into(),
                duplicates_within: 1,
                ..gen_sources::Manifest::default()
            },
        };
        atomic::write_json(&dir.manifest(), &manifest).expect("manifest");
        prompts
    }

    fn complete(run_dir: &RunDir, prompts: &[&Prompt]) {
        let (mut writer, _) = FrameWriter::open(&run_dir.source("s").completions()).expect("open");
        for p in prompts {
            writer.push(&completion(p)).expect("push");
        }
        writer.flush().expect("flush");
    }

    #[test]
    fn a_complete_source_is_consistent_and_the_table_fits_80_columns() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run_dir = RunDir::new(tmp.path());
        let prompts = prepared(&run_dir, 3);
        complete(&run_dir, &prompts.iter().collect::<Vec<_>>());
        let audit = audit(&run_dir, None).expect("audit");
        assert!(audit.consistent, "{audit:#?}");
        assert_eq!(audit.totals.completed, 3);
        let text = render(&audit);
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        assert_eq!(
            text.lines().last(),
            Some("verdict: consistent: 0 lost, 0 duplicated, 0 unknown ids, every file decodes"),
            "{text}"
        );
    }

    /// With `samples = 2` in `run.json`, each prompt is two ids to account for: a second
    /// sample is no unknown id, and a missing one is pending.
    #[test]
    fn each_prompt_is_accounted_for_samples_times() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run_dir = RunDir::new(tmp.path());
        let prompts = prepared(&run_dir, 2);
        let settings = crate::config::Settings {
            max_tokens: 8,
            samples: std::num::NonZeroU32::new(2).expect("non-zero"),
            params: serde_json::Map::new(),
            drawn: Default::default(),
        };
        let pin = RunPin {
            layout: 1,
            model: "m".into(),
            max_tokens: 8,
            params: serde_json::Map::new(),
            sources: [("s".to_owned(), settings)].into(),
            shard: None,
        };
        atomic::write_json(&run_dir.pin(), &pin).expect("pin");
        let second = Prompt {
            id: format!("{}#1", prompts[0].id),
            ..prompts[0].clone()
        };
        complete(&run_dir, &[&prompts[0], &prompts[1], &second]);
        let audit = audit(&run_dir, None).expect("audit");
        assert!(audit.consistent, "{audit:#?}");
        let source = &audit.sources[0];
        assert_eq!(
            (source.prompts, source.completed, source.pending),
            (4, 3, 1)
        );
        let missing = source.missing.as_deref().expect("a sample is missing");
        assert!(
            missing.starts_with("1 of its 4 samples (2 per prompt) have no completion yet"),
            "{missing}"
        );
    }

    #[test]
    fn duplicates_unknown_ids_and_lost_prompts_are_problems() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run_dir = RunDir::new(tmp.path());
        let prompts = prepared(&run_dir, 4);
        let stranger = prompt("s", 99);
        complete(&run_dir, &[&prompts[0], &prompts[0], &stranger]);
        let audit_before = audit(&run_dir, None).expect("audit");
        let s = &audit_before.sources[0];
        assert_eq!((s.duplicated, s.unknown, s.pending, s.lost), (1, 1, 3, 0));
        assert!(!audit_before.consistent);

        // The same state under a status that says the source is done: 3 lost.
        let status = serde_json::json!({
            "finished": true,
            "sources": [{"name": "s", "phase": "done", "prepared": 4, "done": 4}],
        });
        atomic::write_json(&run_dir.status(), &status).expect("status");
        let audit = audit(&run_dir, None).expect("audit");
        assert_eq!(audit.sources[0].lost, 3);
        assert_eq!(audit.totals.problems, 3, "{:#?}", audit.sources[0].problems);
    }

    #[test]
    fn a_torn_tail_is_a_note_and_damage_in_the_middle_a_problem() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run_dir = RunDir::new(tmp.path());
        let prompts = prepared(&run_dir, 3);
        complete(&run_dir, &[&prompts[0]]);
        let path = run_dir.source("s").completions();
        let mut bytes = fs_err::read(&path).expect("read");
        bytes.extend_from_slice(b"garbage!");
        fs_err::write(&path, &bytes).expect("write");
        let torn = audit(&run_dir, None).expect("audit");
        assert!(torn.consistent, "{torn:#?}");
        let text = render(&torn);
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        assert!(
            text.contains("note: `s`: `completions.jsonl.zst`: torn tail of 8 bytes (repaired on the next\n    run)"),
            "{text}"
        );
        assert!(
            torn.sources[0].notes.contains(
                &"`completions.jsonl.zst`: torn tail of 8 bytes (repaired on the next run)"
                    .to_owned()
            ),
            "{:?}",
            torn.sources[0].notes
        );

        // A whole frame after the garbage (appended raw: a writer would cut the tail first).
        let frame = zstd::encode_all(
            &b"{\"id\":\"s-0000000000000001\",\"content\":\"a\",\"finish_reason\":\"stop\"}\n"[..],
            3,
        )
        .expect("zstd");
        bytes.extend_from_slice(&frame);
        fs_err::write(&path, &bytes).expect("write");
        let damaged = audit(&run_dir, None).expect("audit");
        assert!(!damaged.consistent);
        assert!(
            damaged.sources[0].problems[0].starts_with(
                "`completions.jsonl.zst` is damaged: 8 bytes (at 106..114) do not decode"
            ),
            "{:?}",
            damaged.sources[0].problems
        );
        // The intact frame after the damage counts.
        assert_eq!(damaged.sources[0].completed, 2, "{damaged:#?}");
    }

    #[test]
    fn manifest_arithmetic_is_checked_and_rejections_count() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let run_dir = RunDir::new(tmp.path());
        let prompts = prepared(&run_dir, 2);
        complete(&run_dir, &[&prompts[0]]);
        let record = RejectedRecord {
            id: prompts[1].id.clone(),
            kind: RejectKind::Rejected,
            reason: "HTTP 400".into(),
            attempts: 1,
            created_unix_ms: 0,
            settings: None,
        };
        let mut line = serde_json::to_vec(&record).expect("json");
        line.push(b'\n');
        fs_err::write(run_dir.source("s").rejected(), line).expect("write");
        let audit_ok = audit(&run_dir, None).expect("audit");
        assert!(audit_ok.consistent, "{audit_ok:#?}");
        assert_eq!(audit_ok.sources[0].rejected, 1);

        let path = run_dir.source("s").manifest();
        let text = fs_err::read_to_string(&path).expect("read");
        fs_err::write(&path, text.replace("\"rows_read\": 4", "\"rows_read\": 5")).expect("w");
        let bad = audit(&run_dir, None).expect("audit");
        assert!(
            bad.sources[0].problems[0].starts_with("manifest: rows_read 5 != kept 2"),
            "{:?}",
            bad.sources[0].problems
        );
    }
}
