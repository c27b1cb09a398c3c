//! Which rows an export writes: `--per-turn` splits a conversation into one row per generated
//! answer, and `--drop-cut` leaves out answers that were cut short. [`cut`] is the one place
//! a cut is recognised.

use super::{ExportMessage, ExportRow};

/// Why an answer was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Cut {
    /// `finish_reason = "length"` within its `max-tokens` budget (or a record of an older
    /// `gen`, which did not tell the two apart).
    Length,
    /// The model's context ended it: `gen run` recorded `cut_by = "context"` (the server
    /// shortened `max_tokens` to what the context had left).
    Context,
}

impl Cut {
    /// The reason as the summary, the card and `provenance.json` name it.
    pub(super) fn label(self) -> &'static str {
        match self {
            Cut::Length => "cut: finish_reason = length (max-tokens)",
            Cut::Context => "cut: finish_reason = length (the model's context)",
        }
    }
}

/// Why `message`, a generated answer, was cut short, if it was.
fn answer_cut(message: &ExportMessage) -> Option<Cut> {
    let answer = message.answer.as_ref()?;
    if answer.cut_by == Some(crate::store::records::CutBy::Context) {
        return Some(Cut::Context);
    }
    (answer.finish_reason.as_deref() == Some("length")).then_some(Cut::Length)
}

/// Why `row` counts as cut: any answer it trains on was cut short. A row of `--per-turn`
/// trains on its last answer only (its history's answers are context, as the model saw them).
pub(super) fn cut(row: &ExportRow) -> Option<Cut> {
    row.messages.iter().find_map(answer_cut)
}

/// One row per generated answer of `row`, each with the conversation before it as history:
/// id `ID#turnK` (as SpecForge's reasoning expander names them), reasoning, finish reason and
/// token counts of that answer only.
pub(super) fn per_turn(row: ExportRow) -> Vec<ExportRow> {
    let answers: Vec<usize> = row
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.answer.is_some())
        .map(|(index, _)| index)
        .collect();
    answers
        .iter()
        .enumerate()
        .map(|(turn, &end)| {
            let mut messages = row.messages[..=end].to_vec();
            for earlier in &mut messages[..end] {
                earlier.reasoning_content = None;
                earlier.answer = None;
            }
            let last = &messages[end];
            let answer = last.answer.clone().unwrap_or_default();
            ExportRow {
                id: format!("{}#turn{turn}", row.id),
                source: row.source.clone(),
                source_key: row.source_key.clone(),
                tools: row.tools.clone(),
                reasoning_content: last.reasoning_content.clone(),
                finish_reason: answer.finish_reason,
                model: row.model.clone(),
                prompt_tokens: answer.prompt_tokens,
                completion_tokens: answer.completion_tokens,
                messages,
                sample: row.sample,
                settings: row.settings.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::Answer;

    fn message(role: &str, content: &str, answer: Option<(&str, &str)>) -> ExportMessage {
        ExportMessage {
            role: role.into(),
            content: content.into(),
            reasoning_content: answer.map(|(reasoning, _)| reasoning.to_owned()),
            answer: answer.map(|(_, finish)| Answer {
                finish_reason: Some(finish.to_owned()),
                cut_by: None,
                prompt_tokens: Some(1),
                completion_tokens: Some(content.len() as u64),
                token_ids: None,
            }),
            ..ExportMessage::default()
        }
    }

    fn two_turns() -> ExportRow {
        ExportRow {
            id: "p".into(),
            source: "s".into(),
            source_key: None,
            tools: None,
            messages: vec![
                message("system", "sys", None),
                message("user", "a", None),
                message("assistant", "AA", Some(("r1", "length"))),
                message("user", "b", None),
                message("assistant", "BBB", Some(("r2", "stop"))),
            ],
            reasoning_content: Some("r2".into()),
            finish_reason: Some("stop".into()),
            model: "m".into(),
            prompt_tokens: Some(2),
            completion_tokens: Some(5),
            sample: 0,
            settings: None,
        }
    }

    #[test]
    fn per_turn_keeps_reasoning_on_the_answered_turn_only() {
        let rows = per_turn(two_turns());
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["p#turn0", "p#turn1"]);
        assert_eq!(rows[0].messages.len(), 3);
        assert_eq!(rows[0].reasoning_content.as_deref(), Some("r1"));
        assert_eq!(rows[0].completion_tokens, Some(2));
        let second = &rows[1];
        assert_eq!(second.messages.len(), 5);
        assert_eq!(second.messages[2].reasoning_content, None);
        assert_eq!(second.messages[4].reasoning_content.as_deref(), Some("r2"));
        assert_eq!(second.finish_reason.as_deref(), Some("stop"));
        // The first turn was cut; the second row trains on the second answer only.
        assert_eq!(cut(&rows[0]), Some(Cut::Length));
        assert_eq!(cut(&rows[1]), None);
        assert_eq!(cut(&two_turns()), Some(Cut::Length));
    }

    #[test]
    fn a_cut_recorded_as_the_contexts_is_told_apart() {
        let mut row = two_turns();
        if let Some(answer) = row.messages[2].answer.as_mut() {
            answer.cut_by = Some(crate::store::records::CutBy::Context);
        }
        assert_eq!(cut(&row), Some(Cut::Context));
        assert_ne!(Cut::Context.label(), Cut::Length.label());
    }
}
