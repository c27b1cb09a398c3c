//! What `[server] launch` says about the server `gen` starts: the most requests it runs at
//! once, which vLLM exports in no metric (`max_num_seqs`). Read from the arguments as the
//! plan holds them, `${NAME}` filled in from the environment as the launch fills it.

use crate::config::launch::expand;
use crate::inference::kinds::ServerKind;

/// The running cap a launch command line sets, by the first kind whose flag it carries
/// (`KindSpec::running_cap_flags`, times its `engine_flags`): vLLM `--max-num-seqs` (times
/// `--data-parallel-size`), SGLang `--max-running-requests`, llama.cpp `-np`/`--parallel`.
/// `None` when it sets none: the server's default then depends on the hardware (vLLM: 128 on
/// CPU, 256 to 1024 on GPUs), so the controller learns the cap instead of guessing it.
pub fn running_cap(args: &[String]) -> Option<u32> {
    let env = |name: &str| std::env::var(name).ok();
    let args: Vec<String> = args
        .iter()
        .map(|a| expand(a, 0, &env).unwrap_or_else(|_| a.clone()))
        .collect();
    // The last occurrence wins, as with every argument parser these servers use.
    let value = |names: &[&str]| -> Option<u32> {
        let mut found = None;
        for (i, arg) in args.iter().enumerate() {
            for name in names {
                let text = match arg.strip_prefix(name) {
                    Some("") => args.get(i + 1).map(String::as_str),
                    Some(rest) => rest.strip_prefix('='),
                    None => None,
                };
                if let Some(n) = text.and_then(|t| t.trim().parse::<u32>().ok()) {
                    found = Some(n);
                }
            }
        }
        found.filter(|n| *n > 0)
    };
    ServerKind::ALL.iter().find_map(|kind| {
        let spec = kind.spec();
        let engines = value(spec.engine_flags).unwrap_or(1);
        value(spec.running_cap_flags).map(|n| n.saturating_mul(engines))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn each_servers_flag_is_its_running_cap() {
        let table = [
            (
                "python -m vllm.entrypoints.openai.api_server --model m --max-num-seqs 16",
                Some(16),
            ),
            ("vllm serve m --max-num-seqs=48 --port {port}", Some(48)),
            (
                "vllm serve m --max-num-seqs 64 --data-parallel-size 2",
                Some(128),
            ),
            ("vllm serve m --max-num-seqs 8 --max-num-seqs 32", Some(32)),
            (
                "python -m sglang.launch_server --model-path m --max-running-requests 200",
                Some(200),
            ),
            ("llama-server -m m.gguf -np 4 -c 16384", Some(4)),
            ("llama-server -m m.gguf --parallel 6", Some(6)),
            // vLLM's default depends on the hardware: learnt, not guessed.
            ("vllm serve m --max-model-len 1024", None),
            ("vllm serve m --max-num-seqs", None),
            ("vllm serve m --max-num-seqs 0", None),
            // Not a prefix match: `-npl` is another flag.
            ("llama-batched-bench -m m.gguf -npl 8", None),
        ];
        for (line, cap) in table {
            assert_eq!(running_cap(&args(line)), cap, "{line}");
        }
    }

    #[test]
    fn a_variable_is_filled_in_as_the_launch_fills_it() {
        let line = args("vllm serve m --max-num-seqs ${GEN_TEST_UNSET_SEQS:-24}");
        assert_eq!(running_cap(&line), Some(24));
    }
}
