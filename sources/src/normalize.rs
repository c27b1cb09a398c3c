//! One dataset row → OpenAI-style messages.
//!
//! Rules, the same for every dataset: row filters first (`include`, `exclude`, `languages`); roles are
//! mapped ([`Role::parse`]); leading assistant turns are dropped; a system turn is kept only
//! before the first user turn and only if the policy says so; `first` keeps the first user
//! turn, `all` every user turn (dataset answers are dropped: the model writes its own),
//! `history` every turn up to the last user turn. User and assistant turns always alternate:
//! consecutive turns of one speaker are merged, and an empty turn cuts the conversation (see
//! `Normalizer::select` for why). A plain prompt may be
//! unwrapped (`strip-tags`) and wrapped in a `prompt-template`, but only when it is non-empty.

mod columnar;
mod filters;
#[cfg(test)]
mod tests;
mod tokens;
mod turns;

use std::borrow::Cow;
use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::prompt::{HashTurn, Message, Role, ToolCall};
use crate::read::{Projection, TurnsProjection};
use crate::spec::{
    DEFAULT_RESOLVE_PLACEHOLDER, RESOLVE_ROW_FIELDS, SourceSpec, SystemPolicy, ToolTurns, TurnMode,
};
use filters::RowFilter;
#[cfg(test)]
pub(crate) use tokens::write_test_tokenizer;
pub use tokens::{TokenFilter, TokenizerError};
use turns::{compare_text, parse_turns, strip_wrappers, text_of};

const PROMPT_FIELDS: [&str; 4] = ["prompt", "instruction", "question", "problem"];
const MESSAGES_FIELDS: [&str; 3] = ["messages", "conversations", "conversation"];
const ROLE_KEYS: [&str; 2] = ["role", "from"];
const CONTENT_KEYS: [&str; 2] = ["content", "value"];
/// Alpaca-style rows: the instruction's optional `input` belongs to the prompt.
const ALPACA_INPUT: &str = "input";
/// The row's tool definitions (OpenAI function schemas), sent with its prompt.
const TOOLS_FIELD: &str = "tools";

/// A normalized message that borrows its text from the row (or the settings) it came from:
/// normalization builds these, and only prompts that enter the sample become [`Message`]s.
/// The tool fields are [`Message`]'s (empty ones allocate nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn<'a> {
    pub role: Role,
    pub content: Cow<'a, str>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

impl<'a> Turn<'a> {
    pub fn new(role: Role, content: Cow<'a, str>) -> Turn<'a> {
        Turn {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }

    pub fn into_message(self) -> Message {
        Message {
            role: self.role,
            content: self.content.into_owned(),
            tool_calls: self.tool_calls,
            tool_call_id: self.tool_call_id,
            name: self.name,
        }
    }

    pub fn to_message(&self) -> Message {
        self.clone().into_message()
    }

    pub(crate) fn hashed(&self) -> HashTurn<'_> {
        HashTurn {
            role: self.role,
            content: &self.content,
            tool_calls: &self.tool_calls,
            tool_call_id: self.tool_call_id.as_deref(),
            name: self.name.as_deref(),
        }
    }
}

/// Why a readable row yields no prompt. Counted per reason in the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropReason {
    /// None of the expected fields is present.
    MissingField(String),
    /// A field has the wrong JSON type.
    WrongType(String),
    /// A turn's role is not one we know.
    UnknownRole(String),
    /// The conversation is empty or has no non-empty user turn.
    NoUserTurn,
    TooShort,
    TooLong,
    /// Fewer tokens than `min-prompt-tokens`.
    TooFewTokens {
        tokens: usize,
        min: usize,
    },
    /// More tokens than `max-prompt-tokens`.
    TooManyTokens {
        tokens: usize,
        max: usize,
    },
    /// The tokenizer failed on the prompt's text.
    TokenizerFailed(String),
    /// A field holds a value listed in `exclude` (Magpie's poor quality, OpenCodeReasoning's `-`).
    Excluded {
        field: String,
        value: String,
    },
    /// A field lacks every value listed in `include`.
    NotIncluded {
        field: String,
        value: Option<String>,
    },
    /// The row's language is not in `languages`.
    Language(Option<String>),
}

impl DropReason {
    pub fn reason(&self) -> &'static str {
        match self {
            DropReason::MissingField(_) => "missing_field",
            DropReason::WrongType(_) => "wrong_type",
            DropReason::UnknownRole(_) => "unknown_role",
            DropReason::NoUserTurn => "no_user_turn",
            DropReason::TooShort => "too_short",
            DropReason::TooLong => "too_long",
            DropReason::TooFewTokens { .. } => "too_few_tokens",
            DropReason::TooManyTokens { .. } => "too_many_tokens",
            DropReason::TokenizerFailed(_) => "tokenizer_failed",
            DropReason::Excluded { .. } => "excluded",
            DropReason::NotIncluded { .. } => "not_included",
            DropReason::Language(_) => "language",
        }
    }

    /// The manifest's counter key: [`DropReason::reason`], plus the field for value filters
    /// (`excluded:input_quality`), so each rule is counted on its own.
    pub fn key(&self) -> Cow<'static, str> {
        match self {
            DropReason::Excluded { field, .. } | DropReason::NotIncluded { field, .. } => {
                Cow::Owned(format!("{}:{field}", self.reason()))
            }
            _ => Cow::Borrowed(self.reason()),
        }
    }

    pub fn detail(&self) -> String {
        match self {
            DropReason::MissingField(f) => format!("missing field `{f}`"),
            DropReason::WrongType(f) => format!("field `{f}` has the wrong type"),
            DropReason::UnknownRole(r) => format!("unknown role `{r}`"),
            DropReason::NoUserTurn => "no non-empty user turn".to_owned(),
            DropReason::TooShort => "prompt shorter than `min-chars`".to_owned(),
            DropReason::TooLong => "prompt longer than `max-chars`".to_owned(),
            DropReason::TooFewTokens { tokens, min } => {
                format!("prompt has {tokens} tokens, fewer than `min-prompt-tokens` ({min})")
            }
            DropReason::TooManyTokens { tokens, max } => {
                format!("prompt has {tokens} tokens, more than `max-prompt-tokens` ({max})")
            }
            DropReason::TokenizerFailed(message) => format!("the tokenizer failed: {message}"),
            DropReason::Excluded { field, value } => {
                format!("`{field}` is `{value}`, listed in `exclude`")
            }
            DropReason::NotIncluded { field, value } => match value {
                Some(value) => format!("`{field}` is `{value}`, not listed in `include`"),
                None => format!("`{field}` is missing, `include` needs it"),
            },
            DropReason::Language(Some(language)) => {
                format!("language `{language}` is not in `languages`")
            }
            DropReason::Language(None) => "no language field, `languages` needs it".to_owned(),
        }
    }
}

/// Normalization settings resolved from a [`SourceSpec`].
#[derive(Debug, Clone)]
pub struct Normalizer {
    prompt_field: Option<String>,
    messages_field: Option<String>,
    role_keys: Vec<String>,
    content_keys: Vec<String>,
    turns: TurnMode,
    max_turns: usize,
    tool_turns: ToolTurns,
    system: SystemPolicy,
    system_text: Option<String>,
    template: Option<String>,
    strip_tags: Vec<String>,
    filter: RowFilter,
    id_field: Option<String>,
    min_chars: usize,
    max_chars: usize,
    /// With `resolve`: the prompt value that marks a row to resolve from another dataset
    /// before normalization.
    resolve_placeholder: Option<String>,
    /// Rows whose conversation ended before a tool turn: a result that answers no call, or
    /// any with `tool-turns = "cut"`.
    cut_at_tool_turn: std::cell::Cell<u64>,
}

impl Normalizer {
    pub fn new(spec: &SourceSpec) -> Normalizer {
        let bound = |v: &Option<toml::Spanned<i64>>, default: usize| {
            v.as_ref().map_or(default, |v| {
                usize::try_from(*v.get_ref()).unwrap_or(default)
            })
        };
        let text = |v: &Option<toml::Spanned<String>>| v.as_ref().map(|v| v.get_ref().clone());
        let keys = |key: &Option<String>, defaults: [&str; 2]| match key {
            Some(key) => vec![key.clone()],
            None => defaults.iter().map(|k| (*k).to_owned()).collect(),
        };
        Normalizer {
            prompt_field: text(&spec.prompt_field),
            messages_field: text(&spec.messages_field),
            role_keys: keys(&spec.role_key, ROLE_KEYS),
            content_keys: keys(&spec.content_key, CONTENT_KEYS),
            turns: spec.turns,
            max_turns: bound(&spec.max_turns, usize::MAX).max(1),
            tool_turns: spec.tool_turns,
            system: spec.system_prompt,
            system_text: text(&spec.system_prompt_text),
            template: text(&spec.prompt_template),
            strip_tags: spec.strip_tags.clone().unwrap_or_default(),
            filter: RowFilter::new(spec),
            id_field: spec.id_field.clone(),
            min_chars: bound(&spec.min_chars, 1),
            max_chars: bound(&spec.max_chars, usize::MAX),
            resolve_placeholder: spec.resolve.as_ref().map(|_| {
                spec.resolve_placeholder
                    .clone()
                    .unwrap_or_else(|| DEFAULT_RESOLVE_PLACEHOLDER.to_owned())
            }),
            cut_at_tool_turn: std::cell::Cell::new(0),
        }
    }

    /// How many rows so far had their conversation end before a tool turn: a result that
    /// answers no call kept before it, or any with `tool-turns = "cut"`.
    pub fn cut_at_tool_turn(&self) -> u64 {
        self.cut_at_tool_turn.get()
    }

    /// The top-level fields normalization may read; readers that can skip columns (Parquet)
    /// decode only these.
    pub fn columns(&self) -> BTreeSet<String> {
        let mut columns: BTreeSet<String> = self.filter.fields().cloned().collect();
        columns.extend(self.id_field.iter().cloned());
        columns.insert(TOOLS_FIELD.to_owned());
        if self.resolve_placeholder.is_some() {
            columns.extend(RESOLVE_ROW_FIELDS.map(str::to_owned));
        }
        match (&self.messages_field, &self.prompt_field) {
            (Some(field), _) | (None, Some(field)) => {
                columns.insert(field.clone());
            }
            (None, None) => {
                let defaults = MESSAGES_FIELDS.iter().chain(&PROMPT_FIELDS);
                columns.extend(defaults.map(|f| (*f).to_owned()));
                columns.insert(ALPACA_INPUT.to_owned());
            }
        }
        columns
    }

    /// Where a row's prompt comes from: the configured `messages-field` or `prompt-field` (with
    /// its config key), else any of the default fields.
    pub fn body_fields(&self) -> (Option<&'static str>, Vec<&str>) {
        match (&self.messages_field, &self.prompt_field) {
            (Some(field), _) => (Some("messages-field"), vec![field.as_str()]),
            (None, Some(field)) => (Some("prompt-field"), vec![field.as_str()]),
            (None, None) => (
                None,
                MESSAGES_FIELDS.into_iter().chain(PROMPT_FIELDS).collect(),
            ),
        }
    }

    /// What a reader must produce for this normalizer: [`Normalizer::columns`], and only the
    /// role, content and tool fields of each turn of `messages-field` (assistant content only
    /// in `history` mode, the one mode that forwards answers, and for tool calls).
    pub fn projection(&self) -> Projection {
        Projection {
            columns: self.columns(),
            turns: self.messages_field.as_ref().map(|field| TurnsProjection {
                field: field.clone(),
                role_keys: self.role_keys.clone(),
                content_keys: self.content_keys.clone(),
                skip_assistant_content: self.turns != TurnMode::History,
            }),
        }
    }

    /// Normalizes one row object.
    pub fn normalize(&self, row: &Map<String, Value>) -> Result<Vec<Message>, DropReason> {
        self.normalize_owned(row.clone())
    }

    /// Normalizes one row object, moving its texts instead of copying them.
    pub fn normalize_owned(&self, row: Map<String, Value>) -> Result<Vec<Message>, DropReason> {
        let mut kept = Vec::new();
        self.normalize_into(row, &mut kept)?;
        Ok(kept.into_iter().map(Turn::into_message).collect())
    }

    /// Normalizes one row object into `kept` (cleared first); returns the row's tool
    /// definitions, if it has any.
    pub(crate) fn normalize_into<'t>(
        &'t self,
        mut row: Map<String, Value>,
        kept: &mut Vec<Turn<'t>>,
    ) -> Result<Option<Value>, DropReason> {
        self.filter
            .check(|field| row.get(field).and_then(compare_text))?;
        let tools = match row.remove(TOOLS_FIELD) {
            Some(value) if self.tool_turns == ToolTurns::Keep => turns::tools_of(value)?,
            _ => None,
        };
        let turns = self.turns_of(row)?;
        self.select(turns, kept)?;
        self.check_bounds(kept)?;
        Ok(tools)
    }

    /// The `min-chars`/`max-chars` rule, on the user turns of a selected prompt.
    fn check_bounds(&self, kept: &[Turn<'_>]) -> Result<(), DropReason> {
        // Every kept user turn has a non-blank character, so the default bounds need no count.
        if self.min_chars > 1 || self.max_chars != usize::MAX {
            let chars: usize = kept
                .iter()
                .filter(|m| m.role == Role::User)
                .map(|m| m.content.chars().count())
                .sum();
            if chars < self.min_chars {
                return Err(DropReason::TooShort);
            }
            if chars > self.max_chars {
                return Err(DropReason::TooLong);
            }
        }
        Ok(())
    }

    /// The row's turns, before any policy.
    fn turns_of(&self, mut row: Map<String, Value>) -> Result<Vec<Turn<'static>>, DropReason> {
        let turns = |field: &str, value: Value| {
            parse_turns(field, value, &self.role_keys, &self.content_keys)
        };
        if let Some(field) = &self.messages_field {
            let value = row
                .remove(field)
                .ok_or_else(|| DropReason::MissingField(field.clone()))?;
            return turns(field, value);
        }
        if let Some(field) = &self.prompt_field {
            let value = row
                .remove(field)
                .ok_or_else(|| DropReason::MissingField(field.clone()))?;
            return Ok(vec![self.plain(Cow::Owned(text_of(field, value)?))?]);
        }
        if let Some((field, value)) = MESSAGES_FIELDS
            .iter()
            .find_map(|f| row.remove(*f).map(|v| (*f, v)))
        {
            return turns(field, value);
        }
        if let Some((field, value)) = PROMPT_FIELDS
            .iter()
            .find_map(|f| row.remove(*f).map(|v| (*f, v)))
        {
            let text = text_of(field, value)?;
            let input = match row.remove(ALPACA_INPUT) {
                Some(input) if field == "instruction" => Some(text_of(ALPACA_INPUT, input)?),
                _ => None,
            };
            let text = with_alpaca_input(Cow::Owned(text), input.as_deref());
            return Ok(vec![self.plain(Cow::Owned(text.into_owned()))?]);
        }
        Err(no_known_field())
    }

    /// A plain prompt as one user turn: unwrapped, then templated when it has any text.
    fn plain<'t>(&self, text: Cow<'t, str>) -> Result<Turn<'t>, DropReason> {
        let text = match text {
            _ if self.strip_tags.is_empty() => text,
            Cow::Borrowed(text) => Cow::Borrowed(strip_wrappers(text, &self.strip_tags)),
            Cow::Owned(text) => Cow::Owned(strip_wrappers(&text, &self.strip_tags).to_owned()),
        };
        if text.trim().is_empty() {
            return Err(DropReason::NoUserTurn);
        }
        let text = match &self.template {
            Some(template) => Cow::Owned(template.replace("{prompt}", text.trim())),
            None => text,
        };
        Ok(Turn::new(Role::User, text))
    }

    /// Applies the system, leading-assistant, alternation, tool, turn-mode and `max-turns`
    /// rules; the prompt is left in `kept` (cleared first).
    ///
    /// What comes out alternates user and assistant turns (assistant answers only in `history`
    /// mode; in `first` and `all` the model writes them), whatever the dataset holds:
    /// - consecutive turns of one speaker are **merged** into one, their texts joined by a
    ///   blank line (`[human, human, gpt]`: the answer that follows answered both, so the
    ///   model is asked both at once; nothing is lost, nothing invented);
    /// - an empty user turn after the first one **cuts** the conversation before it: what
    ///   follows answered a message we do not have (merging the user turns around it would
    ///   join two questions whose answer in between was dropped). In `history` mode an empty
    ///   assistant turn cuts it too: the context would lack that answer. Empty turns before
    ///   the first user turn are skipped.
    ///
    /// Tool turns are **kept in every mode**, as the dataset has them: an assistant turn
    /// that calls a tool (it has `tool_calls`, or a tool's result follows it: a call in the
    /// model's own syntax) and the results after it, which get their call's id by position
    /// when they have none. A result that answers no call kept before it **cuts** the
    /// conversation (counted: [`Normalizer::cut_at_tool_turn`]), as any tool turn does with
    /// `tool-turns = "cut"`; a call no result answers is dropped (in `history` mode it cuts, as an empty answer does). Tool turns before the
    /// first user turn are skipped, as leading assistant turns are. A prompt ends on a user
    /// turn or a tool's result: the model writes what follows.
    fn select<'t>(
        &'t self,
        turns: impl IntoIterator<Item = Turn<'t>>,
        kept: &mut Vec<Turn<'t>>,
    ) -> Result<(), DropReason> {
        /// The kind of the last turn walked after the first user turn.
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Walked {
            User,
            /// An assistant answer (kept only in `history` mode).
            Answer,
            /// A kept call, and then its results.
            Call,
            Result,
        }
        kept.clear();
        let history = self.turns == TurnMode::History;
        let mut system = None;
        let mut users = 0usize;
        let mut last = None;
        let mut turns = turns.into_iter().peekable();
        while let Some(mut turn) = turns.next() {
            let empty = turn.content.trim().is_empty();
            let call = turn.role == Role::Assistant
                && (!turn.tool_calls.is_empty()
                    || turns.peek().is_some_and(|next| next.role == Role::Tool));
            // A call no result answered: dropped, or in `history` mode the end.
            if last == Some(Walked::Call) && turn.role != Role::Tool && !call {
                if history {
                    break;
                }
                kept.pop();
                last = Some(Walked::Answer);
            }
            if users > 0 && self.tool_turns == ToolTurns::Cut && (turn.role == Role::Tool || call) {
                self.cut_at_tool_turn.set(self.cut_at_tool_turn.get() + 1);
                break;
            }
            match turn.role {
                // A system turn counts only before the first user turn.
                Role::System => {
                    if users == 0 && system.is_none() && !empty {
                        system = Some(turn);
                    }
                }
                // Leading assistant and tool turns (ShareGPT's `_N` chunks) answer nothing
                // we have.
                Role::Assistant | Role::Tool if users == 0 => {}
                Role::User if users == 0 && empty => {}
                Role::User if empty => break,
                Role::User if last == Some(Walked::User) => merge(kept, turn),
                Role::User => {
                    if users == self.max_turns || (self.turns == TurnMode::First && users == 1) {
                        break;
                    }
                    users += 1;
                    last = Some(Walked::User);
                    kept.push(turn);
                }
                Role::Tool if matches!(last, Some(Walked::Call | Walked::Result)) => {
                    let call = kept
                        .iter()
                        .rposition(|t| t.role == Role::Assistant)
                        .expect("a call is kept before its results");
                    if turn.tool_call_id.is_none() {
                        let answered = kept.len() - call - 1;
                        turn.tool_call_id =
                            kept[call].tool_calls.get(answered).map(|c| c.id.clone());
                    }
                    last = Some(Walked::Result);
                    kept.push(turn);
                }
                Role::Tool => {
                    self.cut_at_tool_turn.set(self.cut_at_tool_turn.get() + 1);
                    break;
                }
                Role::Assistant if call => {
                    if last == Some(Walked::Call) || (history && last == Some(Walked::Answer)) {
                        merge(kept, turn);
                    } else {
                        kept.push(turn);
                    }
                    last = Some(Walked::Call);
                }
                Role::Assistant if !history => last = Some(Walked::Answer),
                Role::Assistant if empty => break,
                Role::Assistant if last == Some(Walked::Answer) => merge(kept, turn),
                Role::Assistant => {
                    last = Some(Walked::Answer);
                    kept.push(turn);
                }
            }
        }
        if users == 0 {
            return Err(DropReason::NoUserTurn);
        }
        // A prompt ends on a user turn or a tool's result: the model writes what follows.
        while kept
            .last()
            .is_some_and(|m| !matches!(m.role, Role::User | Role::Tool))
        {
            kept.pop();
        }
        let system = match self.system {
            SystemPolicy::Keep => system,
            SystemPolicy::Drop => None,
            SystemPolicy::Replace => self
                .system_text
                .as_deref()
                .filter(|t| !t.trim().is_empty())
                .map(|t| Turn::new(Role::System, Cow::Borrowed(t))),
        };
        if let Some(system) = system {
            kept.insert(0, system);
        }
        Ok(())
    }
}

/// Appends `turn`'s text (and calls) to the last kept turn, of the same speaker.
fn merge<'t>(kept: &mut [Turn<'t>], turn: Turn<'t>) {
    if let Some(last) = kept.last_mut() {
        last.content = match (last.content.is_empty(), turn.content.is_empty()) {
            (_, true) => std::mem::take(&mut last.content),
            (true, false) => turn.content,
            (false, false) => Cow::Owned(format!("{}\n\n{}", last.content, turn.content)),
        };
        last.tool_calls.extend(turn.tool_calls);
    }
}

/// An Alpaca instruction with its `input` appended, when that has any text.
fn with_alpaca_input<'t>(text: Cow<'t, str>, input: Option<&str>) -> Cow<'t, str> {
    match input {
        Some(input) if !input.trim().is_empty() => Cow::Owned(format!("{text}\n\n{input}")),
        _ => text,
    }
}

/// Why a row without any of the default fields is dropped.
fn no_known_field() -> DropReason {
    DropReason::MissingField(format!(
        "one of {}",
        MESSAGES_FIELDS
            .iter()
            .chain(PROMPT_FIELDS.iter())
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}
