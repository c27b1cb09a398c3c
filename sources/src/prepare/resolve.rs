//! `resolve`: rows whose prompt is a placeholder (OpenCodeReasoning's `-`) get it from another
//! Hub dataset, by the row's `dataset`, `split` and `index` fields.
//!
//! A dataset's split is fetched (through the same Hub cache) the first time a row needs it, and
//! only its prompt field is kept, in file order: TACO's ~26k questions, APPS's 10k.
//!
//! A dataset the Hub does not give (refused, missing repository or revision, no network, not
//! cached offline) fails the whole source ([`PlaceholderResolver::fatal`]): its rows are often a large
//! share of the source (a quarter of OpenCodeReasoning), and a manifest without them would
//! look complete. A preparation that failed is run again by the next `gen run`. Single rows
//! that cannot be resolved (a split the dataset has no file for, a row number past its end, a
//! row without text) are dropped and counted (`unresolved`), with the reason in the examples.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::hub::{self, HubSettings};
use crate::read::{Projection, for_each_row, format_of};
use crate::spec::{DEFAULT_RESOLVE_FIELD, DEFAULT_RESOLVE_PLACEHOLDER, ResolveSpec, SourceSpec};

/// Where resolved prompts came from, for the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedFrom {
    /// The row's `dataset` value.
    pub dataset: String,
    pub split: String,
    pub repo: String,
    /// The commit the revision resolved to.
    pub commit: String,
    pub files: Vec<PathBuf>,
    /// Per file, as in [`crate::Manifest::checksums`].
    pub checksums: BTreeMap<String, String>,
}

/// One split's prompts in row order (`None`: the row has no text there), or why the split
/// could not be had.
type SplitPrompts = Result<Vec<Option<String>>, String>;

/// Why a row could not be resolved.
pub(super) struct Unresolved(pub(super) String);

pub(super) struct PlaceholderResolver<'a> {
    datasets: &'a BTreeMap<String, ResolveSpec>,
    pub(super) placeholder: &'a str,
    pub(super) prompt_field: &'a str,
    hub: &'a HubSettings,
    /// By (dataset, split).
    splits: HashMap<(String, String), SplitPrompts>,
    pub(super) provenance: Vec<ResolvedFrom>,
    /// The first dataset the Hub did not give; the source fails with it.
    pub(super) fatal: Option<Unfetched>,
}

/// A `resolve` dataset the Hub did not give.
#[derive(Debug)]
pub(super) struct Unfetched {
    pub(super) dataset: String,
    pub(super) split: String,
    pub(super) error: hub::HubError,
}

impl<'a> PlaceholderResolver<'a> {
    /// The resolver of `spec`, when it has `resolve` (and the `prompt-field` it fills in).
    pub(super) fn new(
        spec: &'a SourceSpec,
        hub: &'a HubSettings,
    ) -> Option<PlaceholderResolver<'a>> {
        Some(PlaceholderResolver {
            datasets: spec.resolve.as_ref()?.get_ref(),
            placeholder: spec
                .resolve_placeholder
                .as_deref()
                .unwrap_or(DEFAULT_RESOLVE_PLACEHOLDER),
            prompt_field: spec.prompt_field.as_ref()?.get_ref(),
            hub,
            splits: HashMap::new(),
            provenance: Vec::new(),
            fatal: None,
        })
    }

    /// Replaces the row's placeholder prompt by the one it points at; other rows are left
    /// alone.
    pub(super) fn resolve(&mut self, row: &mut Map<String, Value>) -> Result<(), Unresolved> {
        match row.get(self.prompt_field) {
            Some(Value::String(prompt)) if prompt == self.placeholder => {}
            _ => return Ok(()),
        }
        let text = |field: &str| match row.get(field) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        let missing = |field: &str| Unresolved(format!("no `{field}` to resolve the prompt by"));
        let dataset = text("dataset").ok_or_else(|| missing("dataset"))?;
        let split = text("split").ok_or_else(|| missing("split"))?;
        let index = text("index").ok_or_else(|| missing("index"))?;
        let index: usize = index
            .trim()
            .parse()
            .map_err(|_| Unresolved(format!("`index` `{index}` is not a row number")))?;
        let Some(entry) = self.datasets.get(&dataset) else {
            return Err(Unresolved(format!(
                "`dataset` is `{dataset}`, not listed in `resolve`"
            )));
        };
        let key = (dataset, split);
        if !self.splits.contains_key(&key) {
            let prompts = self.load(&key.0, entry, &key.1);
            self.splits.insert(key.clone(), prompts);
        }
        let prompts = self.splits[&key]
            .as_ref()
            .map_err(|e| Unresolved(e.clone()))?;
        let prompt = prompts.get(index).ok_or_else(|| {
            Unresolved(format!(
                "`{}` split `{}` has {} rows, no row {index}",
                entry.repo,
                key.1,
                prompts.len()
            ))
        })?;
        let prompt = prompt.clone().ok_or_else(|| {
            Unresolved(format!(
                "row {index} of `{}` split `{}` has no text `{}`",
                entry.repo,
                key.1,
                entry.field.as_deref().unwrap_or(DEFAULT_RESOLVE_FIELD)
            ))
        })?;
        row.insert(self.prompt_field.to_owned(), Value::String(prompt));
        Ok(())
    }

    /// The prompts of one split of a `resolve` dataset, in file order.
    fn load(&mut self, dataset: &str, entry: &ResolveSpec, split: &str) -> SplitPrompts {
        let patterns: Vec<String> = entry
            .files
            .iter()
            .map(|p| p.replace("{split}", split))
            .collect();
        let revision = entry.revision.as_deref().unwrap_or("main");
        let download = match hub::fetch(&entry.repo, revision, &patterns, self.hub) {
            Ok(download) => download,
            Err(error) => {
                let message = format!(
                    "cannot fetch `{}` split `{split}`: {}",
                    entry.repo,
                    chain(&error)
                );
                // The dataset was reached, it just has no file for this row's split: a row
                // problem. Anything else loses every row that points there.
                if !matches!(error, hub::HubError::NoMatch { .. }) && self.fatal.is_none() {
                    self.fatal = Some(Unfetched {
                        dataset: dataset.to_owned(),
                        split: split.to_owned(),
                        error,
                    });
                }
                return Err(message);
            }
        };
        let field = entry.field.as_deref().unwrap_or(DEFAULT_RESOLVE_FIELD);
        let projection = Projection {
            columns: BTreeSet::from([field.to_owned()]),
            turns: None,
        };
        let mut prompts = Vec::new();
        for file in &download.files {
            for_each_row(
                &file.local,
                format_of(None, &file.local),
                Some(&projection),
                &mut |(_, row)| {
                    let prompt = row
                        .ok()
                        .and_then(|row| row.get(field)?.as_str().map(str::to_owned));
                    prompts.push(prompt);
                },
            )
            .map_err(|e| format!("cannot read `{}` of `{}`: {e}", file.path, entry.repo))?;
        }
        self.provenance.push(ResolvedFrom {
            dataset: dataset.to_owned(),
            split: split.to_owned(),
            repo: download.repo,
            commit: download.commit,
            files: download
                .files
                .iter()
                .map(|f| PathBuf::from(&f.path))
                .collect(),
            checksums: download
                .files
                .iter()
                .filter_map(|f| {
                    let etag = f.etag.as_deref()?;
                    Some((f.path.clone(), super::manifest::etag_checksum(etag)))
                })
                .collect(),
        });
        Ok(prompts)
    }
}

/// An error and its causes on one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
