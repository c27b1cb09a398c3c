//! The Prometheus text exposition format, as far as `/metrics` of SGLang, vLLM and llama.cpp
//! use it: `name{label="value",…} value [timestamp]`, comments and blank lines skipped. Label
//! values may hold spaces, commas, braces and escaped quotes (an info metric may print whole
//! config reprs there), so a line is scanned, not split on spaces.

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    pub labels: Vec<(&'a str, String)>,
    pub value: f64,
}

impl Sample<'_> {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every well-formed sample of `text`; malformed lines are skipped (a server that prints one
/// odd line still tells the rest).
pub fn parse(text: &str) -> Vec<Sample<'_>> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample<'_>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        rest = parse_labels(after_brace, &mut labels)?;
    }
    // The value is the first token; a timestamp may follow it.
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    (!name.is_empty()).then_some(Sample {
        name,
        labels,
        value,
    })
}

/// Reads `key="value"` pairs up to the closing brace; returns what follows it.
fn parse_labels<'a>(mut rest: &'a str, labels: &mut Vec<(&'a str, String)>) -> Option<&'a str> {
    loop {
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        if let Some(after) = rest.strip_prefix('}') {
            return Some(after);
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim();
        rest = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key, value));
        rest = &rest[end + 1..];
    }
}

/// Labels that number the processes of one server replica (tensor, pipeline and expert
/// parallel ranks, or a worker's pid): series differing only in these describe one replica,
/// often with the same value repeated, so they are not added up.
const WITHIN_REPLICA: [&str; 5] = ["tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "pid"];

/// The values of the first of `names` that `samples` hold, one per replica (vLLM's `engine`,
/// SGLang's `dp_rank`): series within one replica give their largest value.
pub fn per_replica(samples: &[Sample<'_>], names: &[impl AsRef<str>]) -> Option<Vec<f64>> {
    names.iter().find_map(|name| {
        let mut replicas: Vec<(Vec<(&str, &str)>, f64)> = Vec::new();
        for sample in samples.iter().filter(|s| s.name == name.as_ref()) {
            if !sample.value.is_finite() {
                continue;
            }
            let mut key: Vec<(&str, &str)> = sample
                .labels
                .iter()
                .filter(|(k, _)| !WITHIN_REPLICA.contains(k))
                .map(|(k, v)| (*k, v.as_str()))
                .collect();
            key.sort_unstable();
            match replicas.iter_mut().find(|(k, _)| *k == key) {
                Some((_, value)) => *value = value.max(sample.value),
                None => replicas.push((key, sample.value)),
            }
        }
        (!replicas.is_empty()).then(|| replicas.into_iter().map(|(_, v)| v).collect())
    })
}

/// The sum over replicas of the first of `names` present (counts and capacities).
pub fn total(samples: &[Sample<'_>], names: &[impl AsRef<str>]) -> Option<f64> {
    per_replica(samples, names).map(|values| values.iter().sum())
}

/// The mean over replicas of the first of `names` present (ratios such as KV usage).
pub fn mean(samples: &[Sample<'_>], names: &[impl AsRef<str>]) -> Option<f64> {
    per_replica(samples, names).map(|values| values.iter().sum::<f64>() / values.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_with_spaces_commas_and_escapes_and_a_timestamp() {
        let text = "# HELP x y\n\
            vllm:example_info{attention_config=\"AttentionConfig(backend=None, x={})\",max_num_seqs=\"256\",q=\"a\\\"b\\\\c\"} 1.0\n\
            sglang:token_usage{engine_type=\"unified\",tp_rank=\"0\"} 0.42 1790347303000\n\
            plain 7\n\
            broken{a=\"1\" 3\n\
            nan_value NaN\n";
        let samples = parse(text);
        assert_eq!(samples.len(), 4, "{samples:?}");
        assert_eq!(samples[0].label("max_num_seqs"), Some("256"));
        assert_eq!(
            samples[0].label("attention_config"),
            Some("AttentionConfig(backend=None, x={})")
        );
        assert_eq!(samples[0].label("q"), Some("a\"b\\c"));
        assert_eq!(
            (samples[1].name, samples[1].value),
            ("sglang:token_usage", 0.42)
        );
        assert_eq!((samples[2].name, samples[2].value), ("plain", 7.0));
        assert!(samples[3].value.is_nan());
    }

    #[test]
    fn ranks_of_one_replica_count_once_and_replicas_add_up() {
        // Four tensor-parallel ranks repeat one pool size (a sum would say 4×); two vLLM
        // engines (data parallel) each run their own requests.
        let text = "sglang:max_total_num_tokens{tp_rank=\"0\"} 262144.0\n\
            sglang:max_total_num_tokens{tp_rank=\"1\"} 262144.0\n\
            sglang:max_total_num_tokens{tp_rank=\"2\"} 262144.0\n\
            sglang:max_total_num_tokens{tp_rank=\"3\"} 262144.0\n\
            vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
            vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 2.0\n\
            vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n\
            vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.7\n";
        let samples = parse(text);
        assert_eq!(
            total(&samples, &["sglang:max_total_num_tokens"]),
            Some(262_144.0)
        );
        assert_eq!(total(&samples, &["vllm:num_requests_running"]), Some(5.0));
        let usage = mean(&samples, &["vllm:kv_cache_usage_perc"]).expect("present");
        assert!((usage - 0.6).abs() < 1e-9);
        assert_eq!(
            total(&samples, &["absent", "vllm:num_requests_running"]),
            Some(5.0)
        );
        assert_eq!(total(&samples, &["absent"]), None);
    }
}
