//! Row filters that look at a row's own fields before any turn is read: `include`, `exclude`
//! and `languages`.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use super::DropReason;
use crate::spec::SourceSpec;

const DEFAULT_LANGUAGE_FIELD: &str = "language";

#[derive(Debug, Clone, Default)]
pub(super) struct RowFilter {
    include: BTreeMap<String, BTreeSet<String>>,
    exclude: BTreeMap<String, BTreeSet<String>>,
    /// Lowercased accepted languages, with the field holding a row's language.
    languages: Option<(String, BTreeSet<String>)>,
}

impl RowFilter {
    pub(super) fn new(spec: &SourceSpec) -> RowFilter {
        let sets = |map: &Option<toml::Spanned<BTreeMap<String, Vec<String>>>>| {
            map.as_ref()
                .map(|m| {
                    m.get_ref()
                        .iter()
                        .map(|(field, values)| (field.clone(), values.iter().cloned().collect()))
                        .collect()
                })
                .unwrap_or_default()
        };
        RowFilter {
            include: sets(&spec.include),
            exclude: sets(&spec.exclude),
            languages: spec.languages.as_ref().map(|languages| {
                let field = spec
                    .language_field
                    .clone()
                    .unwrap_or_else(|| DEFAULT_LANGUAGE_FIELD.to_owned());
                let set = languages
                    .get_ref()
                    .iter()
                    .map(|l| l.to_lowercase())
                    .collect();
                (field, set)
            }),
        }
    }

    /// The fields the filter reads.
    pub(super) fn fields(&self) -> impl Iterator<Item = &String> {
        self.include
            .keys()
            .chain(self.exclude.keys())
            .chain(self.languages.iter().map(|(field, _)| field))
    }

    /// Checks a row whose fields, as text for comparisons, `value_of` gives (`None` for a
    /// missing or null field).
    pub(super) fn check<'r>(
        &self,
        value_of: impl Fn(&str) -> Option<Cow<'r, str>>,
    ) -> Result<(), DropReason> {
        for (field, accepted) in &self.include {
            let value = value_of(field);
            if !value
                .as_ref()
                .is_some_and(|v| accepted.contains(v.as_ref()))
            {
                return Err(DropReason::NotIncluded {
                    field: field.clone(),
                    value: value.map(Cow::into_owned),
                });
            }
        }
        for (field, rejected) in &self.exclude {
            if let Some(value) = value_of(field)
                && rejected.contains(value.as_ref())
            {
                return Err(DropReason::Excluded {
                    field: field.clone(),
                    value: value.into_owned(),
                });
            }
        }
        if let Some((field, accepted)) = &self.languages {
            let value = value_of(field);
            if !value
                .as_ref()
                .is_some_and(|v| accepted.contains(&v.to_lowercase()))
            {
                return Err(DropReason::Language(value.map(Cow::into_owned)));
            }
        }
        Ok(())
    }
}
