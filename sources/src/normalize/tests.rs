//! Table tests for every normalization rule.

use super::*;
use crate::prompt::ToolCall;
use serde_json::json;

fn spec(extra: &str) -> SourceSpec {
    toml::from_str(&format!("name = \"t\"\npath = \"x.jsonl\"\n{extra}")).expect("spec")
}

fn run(extra: &str, row: Value) -> Result<Vec<(Role, String)>, &'static str> {
    let normalizer = Normalizer::new(&spec(extra));
    let row = row.as_object().expect("object").clone();
    normalizer
        .normalize(&row)
        .map(|m| m.into_iter().map(|m| (m.role, m.content)).collect())
        .map_err(|e| e.reason())
}

fn u(s: &str) -> (Role, String) {
    (Role::User, s.to_owned())
}

fn s(s: &str) -> (Role, String) {
    (Role::System, s.to_owned())
}

fn a(s: &str) -> (Role, String) {
    (Role::Assistant, s.to_owned())
}

#[test]
fn table() {
    let sharegpt = json!({"conversations": [
        {"from": "gpt", "value": "leading answer"},
        {"from": "human", "value": "  "},
        {"from": "human", "value": "q1"},
        {"from": "gpt", "value": "a1"},
        {"from": "human", "value": "q2"}]});
    let with_system = json!({"messages": [
        {"role": "system", "content": "detailed thinking on"},
        {"role": "user", "content": "q"}]});
    type Case = (
        &'static str,
        &'static str,
        Value,
        Result<Vec<(Role, String)>, &'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "plain prompt",
            "",
            json!({"prompt": "hi"}),
            Ok(vec![u("hi")]),
        ),
        (
            "instruction + input",
            "",
            json!({"instruction": "sum", "input": "1 2"}),
            Ok(vec![u("sum\n\n1 2")]),
        ),
        (
            "empty input ignored",
            "",
            json!({"instruction": "x", "input": ""}),
            Ok(vec![u("x")]),
        ),
        (
            "sharegpt first turn",
            "",
            sharegpt.clone(),
            Ok(vec![u("q1")]),
        ),
        (
            "sharegpt all turns",
            "turns = \"all\"",
            sharegpt,
            Ok(vec![u("q1"), u("q2")]),
        ),
        (
            "system kept",
            "",
            with_system.clone(),
            Ok(vec![s("detailed thinking on"), u("q")]),
        ),
        (
            "system dropped",
            "system-prompt = \"drop\"",
            with_system.clone(),
            Ok(vec![u("q")]),
        ),
        (
            "system replaced",
            "system-prompt = \"replace\"\nsystem-prompt-text = \"be brief\"",
            with_system,
            Ok(vec![s("be brief"), u("q")]),
        ),
        (
            "late system turn ignored",
            "",
            json!({"messages": [{"role": "user", "content": "q"}, {"role": "system", "content": "x"}]}),
            Ok(vec![u("q")]),
        ),
        (
            "content parts",
            "",
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
            Ok(vec![u("ab")]),
        ),
        (
            "empty conversation",
            "",
            json!({"conversations": []}),
            Err("no_user_turn"),
        ),
        (
            "only assistant",
            "",
            json!({"messages": [{"role": "assistant", "content": "a"}]}),
            Err("no_user_turn"),
        ),
        (
            "empty prompt",
            "",
            json!({"prompt": ""}),
            Err("no_user_turn"),
        ),
        (
            "null prompt",
            "",
            json!({"prompt": null}),
            Err("no_user_turn"),
        ),
        (
            "numeric prompt",
            "",
            json!({"prompt": 5}),
            Err("wrong_type"),
        ),
        (
            "messages not a list",
            "",
            json!({"messages": "x"}),
            Err("wrong_type"),
        ),
        (
            "unknown role",
            "",
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            Err("unknown_role"),
        ),
        (
            "no known field",
            "",
            json!({"text": "x"}),
            Err("missing_field"),
        ),
        (
            "mapped field",
            "prompt-field = \"text\"",
            json!({"text": "x"}),
            Ok(vec![u("x")]),
        ),
        (
            "mapped field missing",
            "prompt-field = \"text\"",
            json!({"prompt": "x"}),
            Err("missing_field"),
        ),
        (
            "too short",
            "min-chars = 3",
            json!({"prompt": "ab"}),
            Err("too_short"),
        ),
        (
            "too long",
            "max-chars = 3",
            json!({"prompt": "abcd"}),
            Err("too_long"),
        ),
        (
            "`input` is not a default messages field",
            "turns = \"history\"",
            json!({"input": [{"role": "user", "content": "q1"}]}),
            Err("missing_field"),
        ),
        (
            "history keeps assistant context and ends on a user turn",
            "turns = \"history\"\nmessages-field = \"input\"",
            json!({"input": [
                {"role": "system", "content": "detailed thinking on"},
                {"role": "assistant", "content": "orphan"},
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "q2"},
                {"role": "assistant", "content": "a2"}]}),
            Ok(vec![s("detailed thinking on"), u("q1"), a("a1"), u("q2")]),
        ),
        (
            "history with system dropped",
            "turns = \"history\"\nmessages-field = \"input\"\nsystem-prompt = \"drop\"",
            json!({"input": [{"role": "system", "content": "detailed thinking off"}, {"role": "user", "content": "q"}]}),
            Ok(vec![u("q")]),
        ),
        (
            "max turns cuts later user turns",
            "turns = \"all\"\nmax-turns = 2",
            json!({"messages": [
                {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"},
                {"role": "user", "content": "q3"}]}),
            Ok(vec![u("q1"), u("q2")]),
        ),
        (
            "max turns in history mode",
            "turns = \"history\"\nmax-turns = 1",
            json!({"messages": [
                {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "q2"}]}),
            Ok(vec![u("q1")]),
        ),
        (
            "empty user turns skipped in all mode",
            "turns = \"all\"",
            json!({"conversation": [
                {"role": "user", "content": ""}, {"role": "assistant", "content": "a0"},
                {"role": "user", "content": "q1"}, {"role": "assistant", "content": ""},
                {"role": "user", "content": "q2"}]}),
            Ok(vec![u("q1"), u("q2")]),
        ),
        (
            "consecutive human turns are one message: merged, in every mode",
            "turns = \"all\"",
            json!({"conversations": [
                {"from": "human", "value": "part one"}, {"from": "human", "value": "part two"},
                {"from": "gpt", "value": "a1"}, {"from": "human", "value": "q2"}]}),
            Ok(vec![u("part one\n\npart two"), u("q2")]),
        ),
        (
            "consecutive human turns merged in first mode",
            "",
            json!({"conversations": [
                {"from": "human", "value": "q"}, {"from": "human", "value": "more"},
                {"from": "gpt", "value": "a"}]}),
            Ok(vec![u("q\n\nmore")]),
        ),
        (
            "consecutive turns merged in history mode, the context alternates",
            "turns = \"history\"",
            json!({"conversations": [
                {"from": "human", "value": "q1"}, {"from": "human", "value": "q1b"},
                {"from": "gpt", "value": "a1"}, {"from": "gpt", "value": "a1b"},
                {"from": "human", "value": "q2"}]}),
            Ok(vec![u("q1\n\nq1b"), a("a1\n\na1b"), u("q2")]),
        ),
        (
            "an empty human turn in the middle cuts the conversation before it",
            "turns = \"all\"",
            json!({"conversations": [
                {"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"},
                {"from": "human", "value": " "}, {"from": "gpt", "value": "answer to nothing"},
                {"from": "human", "value": "q3"}]}),
            Ok(vec![u("q1")]),
        ),
        (
            "an empty answer in history mode cuts before it: no two user turns in a row",
            "turns = \"history\"",
            json!({"conversations": [
                {"from": "human", "value": "q1"}, {"from": "gpt", "value": ""},
                {"from": "human", "value": "q2"}, {"from": "gpt", "value": "a2"},
                {"from": "human", "value": "q3"}]}),
            Ok(vec![u("q1")]),
        ),
        (
            "custom role and content keys",
            "role-key = \"speaker\"\ncontent-key = \"text\"",
            json!({"messages": [{"speaker": "human", "text": "q"}]}),
            Ok(vec![u("q")]),
        ),
        (
            "custom keys replace the defaults",
            "role-key = \"speaker\"",
            json!({"messages": [{"role": "user", "content": "q"}]}),
            Err("missing_field"),
        ),
        (
            "exclude a value",
            "prompt-field = \"instruction\"\nexclude = { input_quality = [\"poor\", \"very poor\"] }",
            json!({"instruction": "x", "input_quality": "very poor"}),
            Err("excluded"),
        ),
        (
            "exclude keeps other values and missing fields",
            "prompt-field = \"instruction\"\nexclude = { input_quality = [\"poor\"] }",
            json!({"instruction": "x", "input_quality": "good"}),
            Ok(vec![u("x")]),
        ),
        (
            "exclude a placeholder prompt",
            "prompt-field = \"input\"\nexclude = { input = [\"-\"] }",
            json!({"input": "-"}),
            Err("excluded"),
        ),
        (
            "exclude compares numbers as text",
            "exclude = { repeat_count = [\"2\"] }",
            json!({"prompt": "x", "repeat_count": 2}),
            Err("excluded"),
        ),
        (
            "include a value",
            "include = { used_in_training = [\"yes\"] }",
            json!({"prompt": "x", "used_in_training": "yes"}),
            Ok(vec![u("x")]),
        ),
        (
            "include drops other values",
            "include = { used_in_training = [\"yes\"] }",
            json!({"prompt": "x", "used_in_training": "no"}),
            Err("not_included"),
        ),
        (
            "include drops a missing field",
            "include = { used_in_training = [\"yes\"] }",
            json!({"prompt": "x"}),
            Err("not_included"),
        ),
        (
            "language kept, case-insensitive",
            "languages = [\"english\"]",
            json!({"prompt": "x", "language": "English"}),
            Ok(vec![u("x")]),
        ),
        (
            "language dropped",
            "languages = [\"English\"]",
            json!({"prompt": "x", "language": "Chinese"}),
            Err("language"),
        ),
        (
            "language field mapped",
            "languages = [\"EN\"]\nlanguage-field = \"lang\"",
            json!({"prompt": "x", "lang": "ZH"}),
            Err("language"),
        ),
        (
            "template around a plain prompt",
            "prompt-field = \"problem_statement\"\nprompt-template = \"<issue>\\n{prompt}\\n</issue>\"",
            json!({"problem_statement": "  it breaks  ", "prompt": "back-translation"}),
            Ok(vec![u("<issue>\nit breaks\n</issue>")]),
        ),
        (
            "template not applied to an empty prompt",
            "prompt-field = \"problem_statement\"\nprompt-template = \"<issue>{prompt}</issue>\"",
            json!({"problem_statement": "", "prompt": "back-translation"}),
            Err("no_user_turn"),
        ),
        (
            "wrapper stripped",
            "prompt-field = \"problem_statement\"\nstrip-tags = [\"ISSUE\"]",
            json!({"problem_statement": "[ISSUE]\nBug: x\n[/ISSUE]"}),
            Ok(vec![u("Bug: x")]),
        ),
        (
            "wrapper around nothing is empty",
            "prompt-field = \"problem_statement\"\nstrip-tags = [\"ISSUE\"]",
            json!({"problem_statement": "[ISSUE]  [/ISSUE]"}),
            Err("no_user_turn"),
        ),
        (
            "system replaced even without a dataset system turn",
            "prompt-field = \"q\"\nsystem-prompt = \"replace\"\nsystem-prompt-text = \"agent\"",
            json!({"q": "fix"}),
            Ok(vec![s("agent"), u("fix")]),
        ),
        (
            "leading assistant turns dropped before the first user turn",
            "turns = \"all\"",
            json!({"conversations": [{"from": "gpt", "value": "a"}, {"from": "bing", "value": "b"}, {"from": "human", "value": "q"}]}),
            Ok(vec![u("q")]),
        ),
    ];
    for (name, extra, row, expected) in cases {
        assert_eq!(run(extra, row), expected, "case `{name}`");
    }
}

fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.to_owned(),
        kind: "function".to_owned(),
        function: crate::prompt::FunctionCall {
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        },
    }
}

fn calling(content: &str, calls: Vec<ToolCall>) -> Message {
    Message {
        tool_calls: calls,
        ..Message::new(Role::Assistant, content)
    }
}

fn result(content: &str, id: Option<&str>, name: Option<&str>) -> Message {
    Message {
        tool_call_id: id.map(str::to_owned),
        name: name.map(str::to_owned),
        ..Message::new(Role::Tool, content)
    }
}

fn normalized(extra: &str, row: &Value) -> Result<(Vec<Message>, Option<Value>), &'static str> {
    let normalizer = Normalizer::new(&spec(extra));
    let mut kept = Vec::new();
    let row = row.as_object().expect("object").clone();
    let tools = normalizer
        .normalize_into(row, &mut kept)
        .map_err(|e| e.reason())?;
    Ok((kept.into_iter().map(Turn::into_message).collect(), tools))
}

/// Tool turns are kept, as the dataset has them: an assistant's calls (OpenAI `tool_calls`,
/// a Glaive `function_call` turn parsed into one, a Hermes `<tool_call>` text) and the
/// results, which get their call's id by position; the row's `tools` come along. (Before: the
/// conversation ended before its first tool turn.)
#[test]
fn tool_turns_are_kept_with_their_calls_and_results() {
    let tools = json!([{"type": "function", "function": {"name": "weather", "parameters": {}}}]);
    let openai = json!({"tools": tools, "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "weather", "content": "{\"temp\": 18}"},
        {"role": "assistant", "content": "18 degrees"},
        {"role": "user", "content": "and tomorrow?"}]});
    let system = Message::new(Role::System, "You can call tools.");
    let asked = Message::new(Role::User, "weather in Paris?");
    let paris = calling("", vec![call("c1", "weather", r#"{"city":"Paris"}"#)]);
    let answered = result(r#"{"temp": 18}"#, Some("c1"), Some("weather"));
    let all = vec![
        system.clone(),
        asked.clone(),
        paris.clone(),
        answered.clone(),
        Message::new(Role::User, "and tomorrow?"),
    ];
    assert_eq!(
        normalized("turns = \"all\"", &openai),
        Ok((all.clone(), Some(tools.clone())))
    );
    // `first` keeps the first user turn and its tool exchange; the model answers after it.
    assert_eq!(
        normalized("", &openai),
        Ok((all[..4].to_vec(), Some(tools.clone())))
    );
    // `history` keeps the dataset's answer too.
    let mut history = all.clone();
    history.insert(4, Message::new(Role::Assistant, "18 degrees"));
    assert_eq!(
        normalized("turns = \"history\"", &openai),
        Ok((history, Some(tools.clone())))
    );

    // Glaive's ShareGPT shape: `function_call` turns (two in a row: one message with both
    // calls, ids generated), `observation` results matched to them by position, `tools` as
    // JSON text.
    let glaive = json!({"tools": tools.to_string(), "conversations": [
        {"from": "human", "value": "convert 5 and 6 USD"},
        {"from": "function_call", "value": "{\"name\": \"convert\", \"arguments\": {\"amount\": 5}}"},
        {"from": "function_call", "value": "{\"name\": \"convert\", \"arguments\": {\"amount\": 6}}"},
        {"from": "observation", "value": "4.6 EUR"},
        {"from": "observation", "value": "5.5 EUR"},
        {"from": "gpt", "value": "4.6 and 5.5 EUR"}]});
    assert_eq!(
        normalized("turns = \"all\"", &glaive),
        Ok((
            vec![
                Message::new(Role::User, "convert 5 and 6 USD"),
                calling(
                    "",
                    vec![
                        call("call_0", "convert", r#"{"amount":5}"#),
                        call("call_1", "convert", r#"{"amount":6}"#)
                    ]
                ),
                result("4.6 EUR", Some("call_0"), None),
                result("5.5 EUR", Some("call_1"), None),
            ],
            Some(tools.clone())
        ))
    );

    // Hermes: the call is the assistant's text; the `tool` turn after it makes it one.
    let hermes = json!({"conversations": [
        {"from": "human", "value": "q"},
        {"from": "gpt", "value": "<tool_call>{\"name\": \"f\"}</tool_call>"},
        {"from": "tool", "value": "<tool_response>1</tool_response>"},
        {"from": "gpt", "value": "one"}]});
    assert_eq!(
        normalized("turns = \"all\"", &hermes),
        Ok((
            vec![
                Message::new(Role::User, "q"),
                Message::new(Role::Assistant, "<tool_call>{\"name\": \"f\"}</tool_call>"),
                Message::new(Role::Tool, "<tool_response>1</tool_response>"),
            ],
            None
        ))
    );
}

/// Tool turns before the first user turn answer nothing we have: skipped, as leading
/// assistant turns are. A result that answers no kept call cuts the conversation before it
/// (counted); a call no result answers is dropped.
#[test]
fn a_tool_turn_without_its_call_cuts_the_conversation() {
    let tool_first = json!({"messages": [
        {"role": "tool", "content": "result"},
        {"role": "user", "content": "q"}]});
    assert_eq!(
        normalized("", &tool_first),
        Ok((vec![Message::new(Role::User, "q")], None))
    );
    let no_call = json!({"messages": [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
        {"role": "tool", "content": "orphan result"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "q3"}]});
    let q = |t: &str| Message::new(Role::User, t);
    assert_eq!(
        normalized("turns = \"all\"", &no_call),
        Ok((vec![q("q1"), q("q2")], None))
    );
    let dangling = json!({"messages": [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]},
        {"role": "user", "content": "q2"}]});
    assert_eq!(
        normalized("turns = \"all\"", &dangling),
        Ok((vec![q("q1"), q("q2")], None))
    );
    let normalizer = Normalizer::new(&spec("turns = \"all\""));
    for row in [&tool_first, &no_call, &dangling] {
        normalizer.normalize(row.as_object().expect("object")).ok();
    }
    assert_eq!(normalizer.cut_at_tool_turn(), 1);
}

/// `tool-turns = "cut"`: the conversation ends before its first tool turn and the row's
/// `tools` are left out (counted), as before tool turns were kept.
#[test]
fn tool_turns_cut_ends_the_conversation_before_the_first() {
    let row = json!({"tools": [{"type": "function", "function": {"name": "f"}}], "messages": [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f"}}]},
        {"role": "tool", "content": "1"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "q2"}]});
    let hermes = json!({"conversations": [
        {"from": "human", "value": "q"},
        {"from": "gpt", "value": "<tool_call>{}</tool_call>"},
        {"from": "tool", "value": "1"}]});
    let extra = "turns = \"all\"\ntool-turns = \"cut\"";
    let q = |t: &str| Message::new(Role::User, t);
    assert_eq!(normalized(extra, &row), Ok((vec![q("q1")], None)));
    assert_eq!(normalized(extra, &hermes), Ok((vec![q("q")], None)));
    let normalizer = Normalizer::new(&spec(extra));
    for row in [&row, &hermes] {
        normalizer.normalize(row.as_object().expect("object")).ok();
    }
    assert_eq!(normalizer.cut_at_tool_turn(), 2);
}

/// Bad tool payloads drop the row with a reason that names the field; a role that is no
/// tool's is still unknown.
#[test]
fn malformed_tool_fields_are_named() {
    for (row, expected) in [
        (
            json!({"messages": [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": "call it"}]}),
            "field `messages[].tool_calls` has the wrong type",
        ),
        (
            json!({"messages": [{"role": "user", "content": "q"},
                {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]}),
            "field `messages[].tool_calls` has the wrong type",
        ),
        (
            json!({"tools": "not json", "messages": [{"role": "user", "content": "q"}]}),
            "field `tools` has the wrong type",
        ),
        (
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            "unknown role `wizard`",
        ),
    ] {
        let normalizer = Normalizer::new(&spec(""));
        let error = normalizer
            .normalize(row.as_object().expect("object"))
            .expect_err("dropped");
        assert_eq!(error.detail(), expected, "{row}");
    }
}

#[test]
fn columns_cover_every_field_read() {
    let normalizer = Normalizer::new(&spec(
        "prompt-field = \"input\"\nid-field = \"id\"\nexclude = { q = [\"x\"] }\nlanguages = [\"en\"]",
    ));
    let columns: Vec<String> = normalizer.columns().into_iter().collect();
    assert_eq!(columns, ["id", "input", "language", "q", "tools"]);
}

#[test]
fn drop_keys_name_the_filtered_field() {
    let reason = DropReason::Excluded {
        field: "input".to_owned(),
        value: "-".to_owned(),
    };
    assert_eq!(reason.key(), "excluded:input");
    assert_eq!(reason.detail(), "`input` is `-`, listed in `exclude`");
}
