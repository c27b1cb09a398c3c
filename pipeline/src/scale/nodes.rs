//! A shard across several nodes (`--nodes-per-shard K`), for a model larger than one node:
//! the server `[server] launch` starts runs once on each of the K nodes of the shard's Slurm
//! allocation, as one `srun` step with a task per node ([`across`]), and `gen` runs on the
//! first node (where the batch script runs, and where the step's rank 0 runs), talking to rank
//! 0's server on `127.0.0.1:{port}` there.
//!
//! A launch says which node is which with [`NODE_RANK`] (`0` on the head node), [`NNODES`]
//! and [`HEAD`] (the head node's host name), e.g. SGLang's `--nnodes {nnodes} --node-rank
//! {node_rank} --dist-init-addr {head}:5000`. `{nnodes}` and `{head}` are filled in by `gen`;
//! `{node_rank}` by each node's shell, from the `SLURM_PROCID` Slurm gives its task.
//!
//! The step is the server: `srun` ends every node's part as soon as one fails
//! (`--kill-on-bad-exit`) or shortly after one ends at all (`--wait`), and then exits itself,
//! which `gen` sees as the server's death (restarts and the log's diagnosis as for one node;
//! `srun` writes every node's output to the server log, and names the node that failed).
//!
//! A leaf: the config's checks, the managed server and `gen slurm` use it.

/// The rank of the node a launch runs on: `0` on the head node, up to `{nnodes}` − 1.
pub const NODE_RANK: &str = "{node_rank}";
/// How many nodes the server spans.
pub const NNODES: &str = "{nnodes}";
/// The head node's host name, where rank 0 runs (e.g. SGLang's `--dist-init-addr {head}:5000`).
pub const HEAD: &str = "{head}";

const PLACEHOLDERS: [&str; 3] = [NODE_RANK, NNODES, HEAD];

/// Seconds the other nodes' parts may outlive one that ended with exit code 0, before `srun`
/// ends them: a node's part that leaves is a server that no longer works.
const WAIT_SECS: u32 = 10;

/// Quotes `word` for a POSIX shell when it needs it.
pub fn quote(word: &str) -> String {
    shlex::try_quote(word).map_or_else(|_| format!("'{word}'"), |q| q.into_owned())
}

/// What is wrong with starting `launch` (`None`: no server is launched) on `nodes` nodes: each
/// problem with the index of the argument at fault, or `None` when it is the whole command's.
pub fn launch_problems(launch: Option<&[String]>, nodes: u32) -> Vec<(Option<usize>, String)> {
    let Some(launch) = launch else {
        return if nodes > 1 {
            vec![(
                None,
                format!(
                    "no server is launched to start across {nodes} nodes: add `[server] \
                     launch` (or `--server-launch`) with `{NODE_RANK}`, or leave \
                     `--nodes-per-shard` out"
                ),
            )]
        } else {
            Vec::new()
        };
    };
    if nodes > 1 {
        if launch.iter().any(|arg| arg.contains(NODE_RANK)) {
            return Vec::new();
        }
        return vec![(
            None,
            format!(
                "`launch` runs on each of the {nodes} nodes of a shard (`--nodes-per-shard \
                 {nodes}`) but never says which node it is on: pass `{NODE_RANK}` (e.g. \
                 SGLang's `--nnodes {NNODES} --node-rank {NODE_RANK} --dist-init-addr \
                 {HEAD}:5000`)"
            ),
        )];
    }
    launch
        .iter()
        .enumerate()
        .flat_map(|(index, arg)| {
            PLACEHOLDERS
                .iter()
                .filter(|p| arg.contains(**p))
                .map(move |p| {
                    (
                        Some(index),
                        format!(
                            "`launch` uses `{p}`, which only a server across several nodes has: \
                             give `--nodes-per-shard N` (N > 1) to `gen slurm` (or `gen run` \
                             in an allocation of N nodes), or take it out"
                        ),
                    )
                })
        })
        .collect()
}

/// Why this process cannot start a server across `nodes` nodes: it is not in a Slurm
/// allocation of that many nodes (`env` reads a variable).
pub fn allocation_problem(nodes: u32, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let allocated = env("SLURM_JOB_NUM_NODES").and_then(|n| n.trim().parse::<u32>().ok());
    match allocated {
        Some(allocated) if allocated >= nodes => None,
        Some(allocated) => Some(format!(
            "the server starts across {nodes} nodes, but this Slurm job has {allocated} (`SLURM_JOB_NUM_NODES`): submit it with `gen slurm \
             --nodes-per-shard {nodes}` (or `sbatch --nodes={nodes}`)"
        )),
        None => Some(format!(
            "the server starts across {nodes} nodes of a Slurm job, but this is not one (`SLURM_JOB_NUM_NODES` is not set): submit it with `gen slurm \
             --nodes-per-shard {nodes}`, or run it under `salloc --nodes={nodes}`"
        )),
    }
}

/// The command that runs `args` (expanded but for the placeholders above) once on each of
/// `nodes` nodes of this Slurm allocation as one step, `head` being this node's host name.
pub fn across(args: &[String], nodes: u32, head: &str) -> Vec<String> {
    let per_node: Vec<String> = args
        .iter()
        .map(|arg| {
            let arg = arg.replace(NNODES, &nodes.to_string()).replace(HEAD, head);
            let pieces: Vec<String> = arg.split(NODE_RANK).map(quote).collect();
            pieces.join("\"$SLURM_PROCID\"")
        })
        .collect();
    [
        "srun".to_owned(),
        format!("--nodes={nodes}"),
        format!("--ntasks={nodes}"),
        "--ntasks-per-node=1".to_owned(),
        "--kill-on-bad-exit=1".to_owned(),
        format!("--wait={WAIT_SECS}"),
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        format!("exec {}", per_node.join(" ")),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        shlex::split(line).expect("words")
    }

    #[test]
    fn each_node_fills_in_its_own_rank() {
        let launch = words(
            "python -m sglang.launch_server --model-path 'my model' --port 30000 --tp 16 \
             --nnodes {nnodes} --node-rank={node_rank} --dist-init-addr {head}:5000",
        );
        let step = across(&launch, 2, "gpu-017");
        assert_eq!(
            step[..8],
            [
                "srun",
                "--nodes=2",
                "--ntasks=2",
                "--ntasks-per-node=1",
                "--kill-on-bad-exit=1",
                "--wait=10",
                "/bin/sh",
                "-c"
            ]
        );
        assert_eq!(
            step[8],
            "exec python -m sglang.launch_server --model-path 'my model' --port 30000 --tp 16 \
             --nnodes 2 '--node-rank='\"$SLURM_PROCID\"'' --dist-init-addr gpu-017:5000"
        );
        // What each node's shell makes of it.
        let ran = std::process::Command::new("/bin/sh")
            .args(["-c", &step[8].replacen("exec ", "printf '%s\\n' ", 1)])
            .env("SLURM_PROCID", "1")
            .output()
            .expect("sh");
        let ran = String::from_utf8_lossy(&ran.stdout);
        assert!(ran.contains("\nmy model\n"), "{ran}");
        assert!(ran.contains("\n--node-rank=1\n"), "{ran}");
    }

    #[test]
    fn placeholders_need_several_nodes_and_several_nodes_need_a_rank() {
        let sglang = words("sglang --node-rank {node_rank} --dist-init-addr {head}:5000");
        let problems = launch_problems(Some(&sglang), 1);
        let at: Vec<Option<usize>> = problems.iter().map(|(i, _)| *i).collect();
        assert_eq!(at, [Some(2), Some(4)]);
        assert!(
            problems[0]
                .1
                .starts_with("`launch` uses `{node_rank}`, which only")
        );
        assert!(launch_problems(Some(&sglang), 2).is_empty());
        let plain = words("llama-server --port {port}");
        assert!(launch_problems(Some(&plain), 1).is_empty());
        let problems = launch_problems(Some(&plain), 2);
        assert!(
            problems[0].1.contains("never says which node it is on"),
            "{problems:?}"
        );
        assert!(launch_problems(None, 1).is_empty());
        assert!(
            launch_problems(None, 3)[0]
                .1
                .contains("no server is launched")
        );
    }

    #[test]
    fn the_allocation_must_hold_the_nodes() {
        let env = |n: &'static str| {
            move |name: &str| (name == "SLURM_JOB_NUM_NODES").then(|| n.to_owned())
        };
        assert_eq!(allocation_problem(2, &env("2")), None);
        let short = allocation_problem(2, &env("1")).expect("too few");
        assert!(short.contains("this Slurm job has 1"), "{short}");
        let none = allocation_problem(2, &|_| None).expect("no job");
        assert!(none.contains("is not set"), "{none}");
    }
}
