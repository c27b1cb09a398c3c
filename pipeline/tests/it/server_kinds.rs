//! The server-kind contract: every kind of `inference::kinds` against its captured replies in
//! `pipeline/src/inference/kinds/<kind>/` and its crash logs in the diagnostics corpus. A kind
//! that claims an endpoint, metrics, a running-cap flag, a context source or a program must show
//! each on a real reply; a new kind without its folder fails here with what to add.

use std::path::{Path, PathBuf};

use gen_diagnostics::{Confidence, classify_server_log};
use gen_pipeline::config::launch::without_token_ids;
use gen_pipeline::inference::kinds::{Context, KindSpec, ServerKind};
use gen_pipeline::inference::signals::Endpoints;
use gen_pipeline::inference::signals::launch::running_cap;
use gen_pipeline::inference::signals::parse::from_metrics;
use gen_pipeline::run::refusal::heuristic_advice;
use serde_json::Value;

/// The kind's folder name, as its file is named: `llama.cpp` is `llama_cpp`.
fn id(spec: &KindSpec) -> String {
    spec.name.to_lowercase().replace('.', "_")
}

fn folder(spec: &KindSpec) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/inference/kinds")
        .join(id(spec))
}

/// The reply the kind's folder holds for `file`, or a failure saying what to capture.
fn reply(spec: &KindSpec, file: &str, what: &str) -> String {
    let path = folder(spec).join(file);
    fs_err::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "kind `{}`: `{}` is missing: capture {what} from a real {} server there \
             (see `pipeline/src/inference/kinds/README.md`)",
            spec.name,
            path.display(),
            spec.name
        )
    })
}

/// The file an endpoint's reply is kept in: `/v1/loads?include=…` is `v1_loads.json`.
fn endpoint_file(path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    format!("{}.json", path.trim_start_matches('/').replace('/', "_"))
}

fn json(text: &str, what: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what} is not JSON: {e}"))
}

#[test]
fn every_kind_reads_its_own_replies() {
    for kind in ServerKind::ALL {
        let spec = kind.spec();
        let metrics = (!spec.metrics.prefixes.is_empty())
            .then(|| reply(spec, "metrics.txt", "`GET /metrics` (with metrics on)"));
        let mut bodies: Vec<(&str, String)> = Vec::new();
        for endpoint in spec.endpoints {
            let file = endpoint_file(endpoint.paths[0]);
            let what = format!("`GET {}`", endpoint.paths[0]);
            let body = reply(spec, &file, &what);
            let reading = (endpoint.parse)(&json(&body, &file));
            assert!(
                reading.is_some(),
                "kind `{}`: its parser refuses {file}",
                spec.name
            );
            bodies.push((endpoint.paths[0], body));
        }
        bodies.extend(metrics.clone().map(|m| ("/metrics", m)));
        let answers = |path: &str| {
            bodies
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, b)| b.clone())
        };
        let (endpoints, _) = Endpoints::discover(answers);
        if bodies.is_empty() {
            assert_eq!(endpoints.kind, None, "kind `{}` says nothing", spec.name);
            continue;
        }
        assert_eq!(endpoints.kind, Some(kind), "{} is recognised", spec.name);
        let described = endpoints.describe();
        for endpoint in spec.endpoints {
            let path = endpoint.paths[0].split('?').next().unwrap_or_default();
            assert!(described.contains(path), "{}: {described}", spec.name);
        }
        let tick = endpoints.reading(answers);
        assert!(
            tick.load.running.is_some(),
            "kind `{}`: a tick reads no running count from {:?}",
            spec.name,
            endpoints.tick_paths()
        );
        if let Some(text) = metrics {
            let load = from_metrics(&text).load;
            assert!(
                load.running.is_some() && load.queued.is_some(),
                "{}",
                spec.name
            );
        }
    }
}

#[test]
fn every_kind_says_its_context_where_its_table_says() {
    for kind in ServerKind::ALL {
        let spec = kind.spec();
        let models = json(
            &reply(spec, "models.json", "`GET /v1/models`"),
            "models.json",
        );
        let listed = models["data"].as_array().expect("`data` lists the models");
        assert!(!listed.is_empty(), "kind `{}` lists a model", spec.name);
        let tokens = match spec.context {
            Some(Context::Listed { field, .. }) => listed[0][field].as_u64(),
            Some(Context::At { path, pointer, .. }) => {
                let body = reply(spec, &endpoint_file(path), &format!("`GET {path}`"));
                json(&body, path).pointer(pointer).and_then(Value::as_u64)
            }
            None => continue,
        };
        assert!(tokens.is_some(), "kind `{}` says no context", spec.name);
    }
}

#[test]
fn every_kinds_context_refusal_is_told_with_its_flag() {
    for kind in ServerKind::ALL {
        let spec = kind.spec();
        let refusal = reply(
            spec,
            "refusal.txt",
            "the message of a request too long for the context",
        );
        let advice = heuristic_advice(&format!("HTTP 400: {}", refusal.trim()), 4096);
        assert!(
            advice.starts_with("lower `max-tokens`"),
            "{}: {advice}",
            spec.name
        );
        if let Some(flag) = spec.context_flag {
            let named = format!("{} `{flag}`", spec.name);
            assert!(advice.contains(&named), "{}: {advice}", spec.name);
        }
    }
}

#[test]
fn every_kinds_launch_flags_and_programs_are_read() {
    for kind in ServerKind::ALL {
        let spec = kind.spec();
        for flag in spec.running_cap_flags {
            let args = ["server", flag, "7"].map(str::to_owned);
            assert_eq!(running_cap(&args), Some(7), "{}: {flag}", spec.name);
            for engines in spec.engine_flags {
                let args = ["server", flag, "7", engines, "2"].map(str::to_owned);
                assert_eq!(running_cap(&args), Some(14), "{}: {engines}", spec.name);
            }
        }
        for program in spec.programs {
            let refused = without_token_ids(&[format!("/usr/local/bin/{program}")]);
            let expected = spec.token_id_flags.is_empty();
            assert_eq!(refused.is_some(), expected, "{}: {program}", spec.name);
        }
    }
}

/// A kind `gen` can launch has crash signatures, each told by a rule of `gen-diagnostics`'s
/// server-log chain (`diagnostics/src/server.rs`), not by its fallback.
#[test]
fn every_launchable_kind_has_crash_logs_its_rules_recognise() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../diagnostics/tests/fixtures");
    for kind in ServerKind::ALL {
        let spec = kind.spec();
        if spec.programs.is_empty() && spec.running_cap_flags.is_empty() {
            continue;
        }
        let prefix = format!("server_{}_", id(spec));
        let mut logs: Vec<PathBuf> = fs_err::read_dir(&corpus)
            .expect("the diagnostics corpus")
            .map(|entry| entry.expect("a corpus entry").path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
            })
            .collect();
        logs.sort();
        assert!(
            !logs.is_empty(),
            "kind `{}`: no crash log in `{}`: add `{prefix}*.txt` (a real or reconstructed \
             log) and a `rule_{}_*` for it in `diagnostics/src/server/{}.rs`",
            spec.name,
            corpus.display(),
            id(spec),
            id(spec)
        );
        for log in logs {
            let verdict = classify_server_log(&fs_err::read_to_string(&log).expect("a log"));
            assert_ne!(
                verdict.confidence,
                Confidence::Low,
                "{}: {verdict:#?}",
                log.display()
            );
        }
    }
}
