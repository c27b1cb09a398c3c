//! Offline diagnosis (`gen diagnose --stderr F ...`) of logs captured anywhere, one table row per
//! real capture or public log (see fixtures/README.md for where each comes from). A row gives
//! what a user would hand over — stderr, kernel log, other logs, and whichever of exit, pid,
//! cgroup, lifetime and output completeness they know — and the verdict it must get.

mod common;

use common::fixture;
use gen_diagnostics::{Class, Confidence, Exit, KernelLog, Observation, Subtype, classify};

/// One offline diagnosis and what it must conclude.
struct Case {
    name: &'static str,
    stderr: Option<&'static str>,
    kernel: Option<&'static str>,
    other: Vec<&'static str>,
    exit: Exit,
    pid: u32,
    cgroup: Option<&'static str>,
    started_at: Option<&'static str>,
    exited_at: Option<&'static str>,
    outputs_complete: bool,
    class: Class,
    subtype: Option<Subtype>,
    confidence: Option<Confidence>,
    evidence: Vec<&'static str>,
    next_action: Option<&'static str>,
}

fn case(name: &'static str, class: Class, subtype: Option<Subtype>) -> Case {
    Case {
        name,
        stderr: None,
        kernel: None,
        other: Vec::new(),
        exit: Exit::Unknown,
        pid: 0,
        cgroup: None,
        started_at: None,
        exited_at: None,
        outputs_complete: false,
        class,
        subtype,
        confidence: None,
        evidence: Vec::new(),
        next_action: None,
    }
}

const SIGKILL: Exit = Exit::Signal {
    signal: 9,
    sent_by_gen: false,
};
const SIGTERM: Exit = Exit::Signal {
    signal: 15,
    sent_by_gen: false,
};

impl Case {
    fn stderr(mut self, path: &'static str) -> Self {
        self.stderr = Some(path);
        self
    }
    fn kernel(mut self, path: &'static str) -> Self {
        self.kernel = Some(path);
        self
    }
    fn other(mut self, path: &'static str) -> Self {
        self.other.push(path);
        self
    }
    fn exit(mut self, exit: Exit) -> Self {
        self.exit = exit;
        self
    }
    fn pid(mut self, pid: u32) -> Self {
        self.pid = pid;
        self
    }
    fn cgroup(mut self, cgroup: &'static str) -> Self {
        self.cgroup = Some(cgroup);
        self
    }
    fn lifetime(mut self, started: &'static str, exited: &'static str) -> Self {
        self.started_at = Some(started);
        self.exited_at = Some(exited);
        self
    }
    fn complete(mut self) -> Self {
        self.outputs_complete = true;
        self
    }
    fn confidence(mut self, confidence: Confidence) -> Self {
        self.confidence = Some(confidence);
        self
    }
    fn evidence(mut self, needle: &'static str) -> Self {
        self.evidence.push(needle);
        self
    }
    fn next(mut self, action: &'static str) -> Self {
        self.next_action = Some(action);
        self
    }

    fn observation(&self) -> Observation {
        let mut observation = Observation::new(self.exit, self.pid);
        observation.stderr_tail = self.stderr.map(fixture).unwrap_or_default();
        observation.kernel_log = match self.kernel {
            Some(path) => KernelLog::Text {
                text: fixture(path),
            },
            None => KernelLog::Unavailable {
                reason: "no --kernel-log given".to_string(),
            },
        };
        observation.other_log = self
            .other
            .iter()
            .map(|p| fixture(p))
            .collect::<Vec<_>>()
            .join("\n");
        observation.cgroup_path = self.cgroup.map(str::to_string);
        observation.started_at = self.started_at.map(str::to_string);
        observation.exited_at = self.exited_at.map(str::to_string);
        observation.outputs_complete = self.outputs_complete;
        observation
    }

    fn inputs(&self) -> String {
        let mut all: Vec<String> = self.stderr.iter().map(|p| fixture(p)).collect();
        all.extend(self.kernel.iter().map(|p| fixture(p)));
        all.extend(self.other.iter().map(|p| fixture(p)));
        all.join("\n")
    }
}

/// What is wrong with the verdict for `case`, if anything.
fn check(case: &Case) -> Vec<String> {
    let verdict = classify(&case.observation());
    let mut wrong = Vec::new();
    if (verdict.class, verdict.subtype) != (case.class, case.subtype) {
        wrong.push(format!(
            "got {:?} / {:?}, want {:?} / {:?}",
            verdict.class, verdict.subtype, case.class, case.subtype
        ));
    }
    if let Some(confidence) = case.confidence
        && verdict.confidence != confidence
    {
        wrong.push(format!(
            "confidence {:?}, want {confidence:?}",
            verdict.confidence
        ));
    }
    let evidence = verdict.evidence.join("\n");
    for needle in &case.evidence {
        if !evidence.contains(needle) {
            wrong.push(format!("evidence lacks `{needle}`"));
        }
    }
    if let Some(action) = case.next_action
        && verdict.next_action() != action
    {
        wrong.push(format!(
            "next action `{}`, want `{action}`",
            verdict.next_action()
        ));
    }
    // Every verdict quotes at least one line of what it was given: some 20 characters of an
    // input line (or the whole of a shorter one) appear in its evidence.
    let inputs = gen_diagnostics::text::normalize(&case.inputs());
    let quoted = inputs
        .lines()
        .map(str::trim)
        .filter(|l| l.len() >= 6)
        .any(|line| {
            let chars: Vec<char> = line.chars().collect();
            let width = chars.len().min(20);
            (0..=chars.len() - width).any(|start| {
                let window: String = chars[start..start + width].iter().collect();
                evidence.contains(&window)
            })
        });
    if !quoted {
        wrong.push("no evidence line quotes the logs".to_string());
    }
    if verdict.headline().chars().count() > 60 {
        wrong.push(format!("headline longer than 60: {}", verdict.headline()));
    }
    if verdict.advice.is_empty() {
        wrong.push("no advice".to_string());
    }
    if !wrong.is_empty() {
        wrong.push(format!(
            "verdict: {} | {}\n      evidence:\n        {}",
            verdict.headline(),
            verdict.next_action(),
            verdict.evidence.join("\n        ")
        ));
    }
    wrong
}

fn run(table: Vec<Case>) {
    let failures: Vec<String> = table
        .iter()
        .filter_map(|case| {
            let wrong = check(case);
            (!wrong.is_empty()).then(|| format!("{}:\n    {}", case.name, wrong.join("\n    ")))
        })
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

#[test]
fn kernel_logs_in_every_format_name_the_worker() {
    use Class::Oom;
    use Subtype::{Kernel, KernelGlobal, KernelMemcg};
    let own_stderr = "batch/own_bash_script_killed_memcg.stderr.txt";
    run(vec![
        // Own capture: a bash job's python3 killed in a 64 MiB memcg; kmsg, dmesg, dmesg -T.
        case("own kmsg + job stderr, nothing else", Oom, Some(KernelMemcg))
            .stderr(own_stderr)
            .kernel("kernel_formats/own_bash_job_kmsg.txt")
            .confidence(Confidence::Medium)
            .evidence("Killed process 21862 (python3)")
            .evidence("line 7: 21862 Killed"),
        case("own dmesg with pid and signal", Oom, Some(KernelMemcg))
            .stderr(own_stderr)
            .kernel("kernel_formats/own_bash_job_dmesg.txt")
            .exit(SIGKILL)
            .pid(21862)
            .confidence(Confidence::Medium)
            .evidence("kernel: the memory cgroup's limit was 64 MiB")
            .next("raise memory-limit to 128M"),
        case("own dmesg -T inside the lifetime", Oom, Some(KernelMemcg))
            .stderr(own_stderr)
            .kernel("kernel_formats/own_bash_job_dmesg_T.txt")
            .exit(SIGKILL)
            .pid(21862)
            .lifetime("2026-12-01T15:46:10", "2026-12-01T15:46:16")
            .confidence(Confidence::High)
            .evidence("inside the worker's window"),
        case("own dmesg -T, the process started after the record", Class::Other, Some(Subtype::ExternalKill))
            .stderr(own_stderr)
            .kernel("kernel_formats/own_bash_job_dmesg_T.txt")
            .exit(SIGKILL)
            .pid(21862)
            .lifetime("2026-12-01T16:30:00", "2026-12-01T16:31:00")
            .evidence("ignored kernel line for pid 21862: logged at 2026-12-01 15:46:15, before the worker started"),
        case("own /dev/kmsg records, pid and signal only", Oom, Some(KernelMemcg))
            .stderr("py_keyerror.txt")
            .kernel("kernel_formats/kmsg_raw_memcg_6_18_own.txt")
            .exit(SIGKILL)
            .pid(9142)
            .confidence(Confidence::Medium),
        case("journalctl -r, newest first", Oom, Some(KernelGlobal))
            .stderr(own_stderr)
            .kernel("kernel_formats/journalctl_r_syslog_global_reversed.txt")
            .exit(SIGKILL)
            .pid(15784)
            .confidence(Confidence::Medium)
            .evidence("newest first"),
        case("journalctl -r of a memcg kill", Oom, Some(KernelMemcg))
            .stderr(own_stderr)
            .kernel("kernel_formats/journalctl_r_ltp_memcg_reversed.txt")
            .exit(SIGKILL)
            .pid(42474),
        case("dmesg -x decoded levels", Oom, Some(KernelMemcg))
            .stderr(own_stderr)
            .kernel("kernel_formats/dmesg_x_decoded_levels.txt")
            .exit(SIGKILL)
            .pid(63214),
        case("dmesg -r raw priorities", Oom, Some(KernelMemcg))
            .stderr(own_stderr)
            .kernel("kernel_formats/dmesg_r_raw_priorities.txt")
            .exit(SIGKILL)
            .pid(63214),
        case("journal with CRLF and colours, bare first kill", Oom, Some(Kernel))
            .stderr(own_stderr)
            .kernel("kernel_formats/journalctl_k_crlf_ansi.txt")
            .exit(SIGKILL)
            .pid(42452)
            .evidence("Killed process 42452 (memcg_test_1), UID 0"),
        case("pasted as a quote", Oom, Some(KernelMemcg))
            .stderr(own_stderr)
            .kernel("kernel_formats/quoted_paste_dmesg.txt")
            .exit(SIGKILL)
            .pid(63214),
        case("kubectl event of node-problem-detector, no pid", Oom, Some(KernelMemcg))
            .stderr("py_keyerror.txt")
            .other("kernel_formats/kubectl_event_oomkilling_npd_json.txt")
            .exit(SIGKILL)
            .evidence("Killed process 3504804 (kubectl)"),
    ]);
}

#[test]
fn kernel_wording_from_2_6_32_to_6_x() {
    use Class::Oom;
    use Subtype::{Kernel, KernelGlobal, KernelMemcg};
    let stderr = "batch/shell_bare_killed_after_tqdm.txt";
    run(vec![
        case(
            "2.6.32 el6: only the rate-limit-proof kill line",
            Oom,
            Some(Kernel),
        )
        .stderr(stderr)
        .kernel("kernel_versions/el6_2_6_32_uid_only_killed_line_syslog.txt")
        .exit(SIGKILL)
        .pid(11726)
        .confidence(Confidence::Medium),
        case(
            "2.6.32 el6: child sacrificed for the worker",
            Oom,
            Some(KernelGlobal),
        )
        .stderr(stderr)
        .kernel("kernel_versions/el6_2_6_32_sacrifice_child_unstamped.txt")
        .exit(SIGKILL)
        .pid(16929)
        .evidence("victim pid 28364 (sh)"),
        case(
            "3.x dmesg: kill process ... sacrifice child",
            Oom,
            Some(KernelGlobal),
        )
        .stderr(stderr)
        .kernel("kernel_versions/v3_x_dmesg_sacrifice_child_python2.txt")
        .exit(SIGKILL)
        .pid(21518)
        .confidence(Confidence::Medium),
        case(
            "3.10 el7 dmesg -T: k8s memcg, child killed",
            Oom,
            Some(KernelMemcg),
        )
        .stderr(stderr)
        .kernel("kernel_versions/el7_3_10_dmesg_t_k8s_memcg_sacrificed_child.txt")
        .exit(SIGKILL)
        .pid(24572)
        .evidence("Killed process 28438 (java)")
        .next("raise the container's resources.limits.memory to 960M"),
        case("3.10 el7 syslog: UID after comm", Oom, Some(KernelMemcg))
            .stderr(stderr)
            .kernel("kernel_versions/el7_3_10_ltp_memcg_uid_after_comm_syslog.txt")
            .exit(SIGKILL)
            .pid(42453)
            .confidence(Confidence::Medium),
        case("5.4: memcg kill line and reaper", Oom, Some(KernelMemcg))
            .stderr(stderr)
            .kernel("kernel_versions/v5_4_dmesg_memcg_bare_kill_and_reaper.txt")
            .exit(SIGKILL)
            .pid(63214)
            .confidence(Confidence::Medium),
        case("5.x syslog: comm with parentheses", Oom, Some(KernelGlobal))
            .stderr(stderr)
            .kernel("kernel_versions/v5_x_syslog_global_parens_in_comm.txt")
            .exit(SIGKILL)
            .pid(15925)
            .evidence("Killed process 15925 ((resolved))"),
        case("6.16 dmesg -T global", Oom, Some(KernelGlobal))
            .stderr(stderr)
            .kernel("kernel_versions/v6_16_dmesg_t_global.txt")
            .exit(SIGKILL)
            .pid(3581527)
            .next("free host memory or run fewer workers at once"),
        case(
            "6.x: only the oom-kill summary, global",
            Oom,
            Some(KernelGlobal),
        )
        .stderr(stderr)
        .kernel("kernel_versions/v6_x_summary_only_global_docker.txt")
        .exit(SIGKILL)
        .pid(7134)
        .evidence("oom-kill:constraint=CONSTRAINT_NONE"),
        case(
            "6.x: only the summary, kubepods memcg, no pid",
            Oom,
            Some(KernelMemcg),
        )
        .stderr(stderr)
        .kernel("kernel_versions/v6_x_summary_only_memcg_kubepods_journal.txt")
        .exit(SIGKILL)
        .confidence(Confidence::Medium)
        .evidence("pid=461754")
        .next("raise the container's resources.limits.memory, then rerun with --only-failed"),
        case(
            "3.10: quoted up to the header, the worker invoked it",
            Oom,
            Some(Kernel),
        )
        .stderr(stderr)
        .kernel("kernel_formats/syslog_kernel_prefix_only_el7.txt")
        .exit(SIGKILL)
        .pid(9949)
        .confidence(Confidence::Medium)
        .evidence("java invoked oom-killer"),
        case(
            "4.x kubepods: quoted up to the task table, no pid",
            Oom,
            Some(Kernel),
        )
        .stderr(stderr)
        .kernel("kernel_versions/v4_x_syslog_kubepods_task_in_cut_before_kill.txt")
        .confidence(Confidence::Low)
        .evidence("without its `Killed process` line")
        .next("raise the container's resources.limits.memory to 2G"),
        case(
            "4.x: the worker's child sacrificed, kill line cut",
            Oom,
            Some(KernelMemcg),
        )
        .stderr(stderr)
        .kernel("kernel_versions/v4_x_dmesg_sacrificed_child_kill_line_cut.txt")
        .pid(62685)
        .evidence("Killed process 62769 (")
        .next("raise memory-limit to 1G"),
        case("journal in Russian", Oom, Some(KernelGlobal))
            .stderr(stderr)
            .kernel("kernel_versions/localized_journal_ru_sacrifice_child.txt")
            .exit(SIGKILL)
            .pid(27541),
    ]);
}

#[test]
fn batch_logs_without_a_pid() {
    use Class::Oom;
    use Subtype::{SchedulerReport, SuspectedSigkill};
    run(vec![
        case(
            "slurm oom_kill event, then the step cancelled",
            Oom,
            Some(SchedulerReport),
        )
        .stderr("batch/slurm_oom_kill_event_stepid_then_cancelled.txt")
        .confidence(Confidence::High)
        .evidence("Detected 1 oom_kill event in StepId=440575.0"),
        case("slurm 20.x wording", Oom, Some(SchedulerReport))
            .stderr("batch/slurm_oom_kill_events_old_wording_srun.txt"),
        case(
            "slurm batch script: shell Killed then oom event",
            Oom,
            Some(SchedulerReport),
        )
        .stderr("batch/slurm_batch_script_killed_then_oom_event.txt")
        .evidence("line 28:  8156 Killed")
        .next("raise the job's Slurm --mem, then rerun with --only-failed"),
        case(
            "slurm jobacct: exceeded memory limit",
            Oom,
            Some(SchedulerReport),
        )
        .stderr("batch/slurm_jobacct_exceeded_memory_limit.txt"),
        case("snakemake over slurm", Oom, Some(SchedulerReport))
            .stderr("batch/slurm_snakemake_oom_kill_events.txt"),
        case(
            "own: a bash job's python3 Killed, no kernel log",
            Oom,
            Some(SuspectedSigkill),
        )
        .stderr("batch/own_bash_script_killed_memcg.stderr.txt")
        .confidence(Confidence::Medium),
        case("shell line N: PID Killed", Oom, Some(SuspectedSigkill))
            .stderr("batch/shell_script_line_killed_no_scheduler.txt")
            .confidence(Confidence::Medium),
        case(
            "/bin/bash: line N: PID Killed after a log",
            Oom,
            Some(SuspectedSigkill),
        )
        .stderr("batch/shell_bin_bash_killed_after_training_log.txt"),
        case("bare Killed after tqdm", Oom, Some(SuspectedSigkill))
            .stderr("batch/shell_bare_killed_after_tqdm.txt"),
        case("bare Killed after epochs", Oom, Some(SuspectedSigkill))
            .stderr("batch/shell_interactive_killed_after_epochs.txt"),
        case("kubectl describe: OOMKilled", Oom, Some(SchedulerReport))
            .stderr("batch/k8s_describe_last_state_oomkilled.txt")
            .confidence(Confidence::High),
        case(
            "kubectl describe given as --log",
            Oom,
            Some(SchedulerReport),
        )
        .stderr("batch/shell_bare_killed_after_tqdm.txt")
        .other("batch/k8s_describe_last_state_oomkilled.txt"),
        case("kubectl get pods: OOMKilled", Oom, Some(SchedulerReport))
            .stderr("batch/k8s_get_pods_status_oomkilled.txt"),
        case(
            "pod JSON: exit 137, reason Error",
            Oom,
            Some(SuspectedSigkill),
        )
        .stderr("batch/k8s_pod_json_exit_137_reason_error.txt")
        .evidence("exit code 137 = 128 + SIGKILL"),
        case("kubelet 2014: OOM Killed", Oom, Some(SchedulerReport))
            .stderr("batch/k8s_kubelet_status_oom_killed_2014.txt"),
        case(
            "systemd: a process of the unit killed by the OOM killer",
            Oom,
            Some(SchedulerReport),
        )
        .stderr("batch/shell_bare_killed_after_tqdm.txt")
        .other("batch/systemd_units_killed_by_oom_killer_iso.txt")
        .next("raise the unit's MemoryMax=, then rerun with --only-failed"),
        case(
            "slurm: limit at some point, then srun Out Of Memory",
            Oom,
            Some(SchedulerReport),
        )
        .stderr("batch/slurm_limit_at_some_point_then_srun_out_of_memory.txt")
        .evidence("task 0: Out Of Memory"),
        case(
            "slurm: step exceeded memory limit, being killed",
            Oom,
            Some(SchedulerReport),
        )
        .stderr("batch/slurm_step_exceeded_memory_limit_being_killed_srun.txt")
        .evidence("exceeded memory limit (52917772 > 20971520)")
        .next("raise the job's Slurm --mem to 40G"),
        case(
            "docker inspect: exit 137, OOMKilled false",
            Oom,
            Some(SuspectedSigkill),
        )
        .stderr("batch/docker_inspect_exit_137_oomkilled_false.txt")
        .confidence(Confidence::Low)
        .evidence("a host-wide OOM kill is still possible"),
        case(
            "Killed in a container, with its dmesg",
            Oom,
            Some(Subtype::KernelMemcg),
        )
        .stderr("batch/docker_bash_killed_in_container.txt")
        .kernel("kernel_versions/docker_container_dmesg_zero_stamps_memcg.txt")
        .evidence("Killed process 19417 (python)"),
    ]);
}

#[test]
fn user_space_killers() {
    use Class::Oom;
    use Subtype::{KernelGlobal, UserspaceKiller};
    let stderr = "batch/shell_bare_killed_after_tqdm.txt";
    run(vec![
        case("earlyoom 1.7 journal", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/earlyoom_1_7_journal_sigterm_uid.txt")
            .exit(SIGTERM)
            .pid(29410)
            .confidence(Confidence::High)
            .evidence("sending SIGTERM to process 29410"),
        case("earlyoom 1.8 journal without host", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/earlyoom_1_8_journal_oom_score_cmdline_no_host.txt")
            .exit(SIGTERM)
            .pid(906175),
        case("earlyoom 1.3 escalating to SIGKILL", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/earlyoom_1_3_stdout_escalating_sigkill.txt")
            .exit(SIGKILL)
            .pid(12006),
        case("earlyoom 1.0 wording", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/earlyoom_1_0_stdout_killing_process_quoted_name.txt")
            .exit(SIGTERM)
            .pid(5874),
        case("earlyoom's SIGTERM ignored, the kernel killed", Oom, Some(KernelGlobal))
            .stderr(stderr)
            .other("userspace/earlyoom_stdout_then_kernel_oom_same_pid.txt")
            .exit(SIGKILL)
            .pid(27541),
        case("earlyoom journal, no pid: SIGTERM", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/earlyoom_1_7_journal_sigterm_uid.txt")
            .exit(SIGTERM)
            .confidence(Confidence::Medium),
        case("systemd-oomd kills the worker's scope", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/systemd_oomd_pressure_scope_and_unit.txt")
            .exit(SIGKILL)
            .cgroup("/user.slice/user-1001.slice/user@1001.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-dbb4a75e-031f-480d-924b-5de5af7579d2.scope")
            .confidence(Confidence::High),
        case("systemd-oomd swap rule, nothing else known", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/systemd_oomd_swap_used.txt")
            .confidence(Confidence::Medium),
        case("systemd-oomd names the pid it kills", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/systemd_oomd_marked_for_killing_monotonic.txt")
            .exit(SIGKILL)
            .pid(407)
            .confidence(Confidence::High),
        case("systemd-oomd kill, then the unit's result", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/systemd_oomd_attempting_kill_then_unit_signal.txt")
            .exit(SIGKILL)
            .pid(63),
        case("nohang-desktop journal", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/nohang_desktop_journal_victim_sigterm.txt")
            .exit(SIGTERM),
        case("nohang stdout names its victim", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/nohang_stdout_victim_pid_run_command.txt")
            .exit(SIGTERM)
            .pid(12297)
            .confidence(Confidence::High),
        case("nohang journal in Russian", Oom, Some(UserspaceKiller))
            .stderr(stderr)
            .other("userspace/nohang_journal_victim_sigterm_ru.txt")
            .exit(SIGTERM),
    ]);
}

#[test]
fn a_childs_oom_behind_the_parents_traceback() {
    use Class::{Oom, Traceback};
    use Subtype::{KernelMemcg, LastLine, Python, SuspectedSigkill};
    let map = "child_oom/own_datasets_map_num_proc_child_oom.stderr.txt";
    let map_dmesg = "child_oom/own_datasets_map_num_proc_child_oom.dmesg.txt";
    run(vec![
        case("own: datasets map(num_proc=2) child OOM, parent pid", Oom, Some(KernelMemcg))
            .stderr(map)
            .kernel(map_dmesg)
            .exit(Exit::Code(1))
            .pid(22789)
            .evidence("Killed process 22868 (python)")
            .evidence("traceback raised: RuntimeError: One of the subprocesses has abruptly died"),
        case("own: datasets map child OOM, no pid", Oom, Some(KernelMemcg))
            .stderr(map)
            .kernel(map_dmesg)
            .confidence(Confidence::Medium),
        case("own: datasets map without the kernel log", Traceback, Some(Python))
            .stderr(map)
            .exit(Exit::Code(1)),
        case("datasets map (data-juicer) alone", Traceback, Some(LastLine))
            .stderr("child_oom/datasets_map_subprocess_died_data_juicer.txt"),
        case("own: ProcessPoolExecutor child OOM", Oom, Some(KernelMemcg))
            .stderr("py_broken_process_pool_real.txt")
            .kernel("kernel_kmsg_pool_child_real.txt")
            .exit(Exit::Code(1))
            .pid(10344)
            .evidence("BrokenProcessPool"),
        case("own: multiprocessing.Pool hung after its worker's OOM kill, then timeout", Oom, Some(KernelMemcg))
            .stderr("child_oom/own_multiprocessing_pool_hang_then_timeout.stderr.txt")
            .kernel("child_oom/own_multiprocessing_pool_hang_then_timeout.dmesg.txt")
            .evidence("Killed process 4397 (python3)"),
        case("own: the same with the parent's pid", Oom, Some(KernelMemcg))
            .stderr("child_oom/own_multiprocessing_pool_hang_then_timeout.stderr.txt")
            .kernel("child_oom/own_multiprocessing_pool_hang_then_timeout.dmesg.txt")
            .exit(SIGKILL)
            .pid(4356),
        case("own: the same without the kernel log is the watchdog's", Class::Other, Some(Subtype::TimeLimit))
            .stderr("child_oom/own_multiprocessing_pool_hang_then_timeout.stderr.txt"),
        case("DataLoader worker killed by signal: Killed", Oom, Some(SuspectedSigkill))
            .stderr("child_oom/dataloader_killed_py27_traceback.txt")
            .confidence(Confidence::Medium)
            .evidence("traceback raised: RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed."),
        case("DataLoader behind [rank0]: prefixes", Oom, Some(SuspectedSigkill))
            .stderr("child_oom/dataloader_killed_rank_prefixed_megatron.txt")
            .exit(Exit::Code(1)),
        case("DataLoader worker segfault is not OOM", Traceback, Some(LastLine))
            .stderr("child_oom/dataloader_killed_segfault_not_oom.txt"),
        case("torchrun: exitcode -9 in the root cause", Oom, Some(SuspectedSigkill))
            .stderr("child_oom/torchrun_child_failed_sigkill_root_cause.txt")
            .evidence("Signal 9 (SIGKILL) received by PID 14750"),
        case("torchrun: failed (exitcode: -9)", Oom, Some(SuspectedSigkill))
            .stderr("child_oom/torchrun_sigterm_siblings_exitcode_minus_9.txt"),
        case("joblib: a worker SIGKILLed", Oom, Some(SuspectedSigkill))
            .stderr("child_oom/joblib_loky_terminated_worker_sigkill.txt")
            .evidence("{SIGKILL(-9)}"),
        case("joblib: exit codes on their own line", Oom, Some(SuspectedSigkill))
            .stderr("child_oom/joblib_exit_codes_on_their_own_line.txt"),
        case("joblib: a worker segfault is not OOM", Traceback, Some(LastLine))
            .stderr("child_oom/joblib_worker_segfault_not_oom.txt"),
        case("DataLoader killed, but the kernel log has no kill", Traceback, Some(Python))
            .stderr("child_oom/dataloader_killed_py27_traceback.txt")
            .kernel("kernel_versions/v6_16_dmesg_t_global.txt")
            .exit(Exit::Code(1)),
        // Issue 24, item 11: the kernel names the map worker 22868, never named as the
        // parent's child, and only its kill lines are given (no task table listing the
        // parent): the child's OOM, not the traceback it caused.
        case("own: datasets map child OOM, kill lines only, parent pid and exit 1", Oom, Some(KernelMemcg))
            .stderr(map)
            .kernel("child_oom/own_datasets_map_num_proc_child_oom.kill_lines.txt")
            .exit(Exit::Code(1))
            .pid(22789)
            .confidence(Confidence::Medium)
            .evidence("Killed process 22868 (python)")
            .evidence("taken as that child")
            .evidence("traceback raised: RuntimeError: One of the subprocesses has abruptly died"),
        case("own: the same read from the traceback, no exit given", Oom, Some(KernelMemcg))
            .stderr(map)
            .kernel("child_oom/own_datasets_map_num_proc_child_oom.kill_lines.txt")
            .pid(22789),
        case("the same kill lines behind a traceback that reports no child's death", Traceback, Some(Python))
            .stderr("py_keyerror.txt")
            .kernel("child_oom/own_datasets_map_num_proc_child_oom.kill_lines.txt")
            .exit(Exit::Code(1))
            .pid(22789),
        case("the same kill lines, but the worker's cgroup is another", Traceback, Some(Python))
            .stderr(map)
            .kernel("child_oom/own_datasets_map_num_proc_child_oom.kill_lines.txt")
            .exit(Exit::Code(1))
            .pid(22789)
            .cgroup("/process_api/70bebf160b1d4ae825a8e4c88de47071/othersource"),
    ]);
}

#[test]
fn finished_then_killed_late_is_a_cleanup_crash() {
    use Class::{CleanupAfterCompletion, Other};
    let kill = "cleanup/own_hang_at_exit_timeout_kill.stderr.txt";
    run(vec![
        case(
            "own: hung at exit, timeout -s KILL",
            CleanupAfterCompletion,
            None,
        )
        .stderr(kill)
        .complete()
        .evidence("timeout: sending signal KILL"),
        case(
            "own: same, output not known complete",
            Other,
            Some(Subtype::TimeLimit),
        )
        .stderr(kill)
        .evidence("timeout: sending signal KILL"),
        case(
            "own: hung at exit, timeout's SIGTERM (124)",
            CleanupAfterCompletion,
            None,
        )
        .stderr("cleanup/own_hang_at_exit_timeout_term.stderr.txt")
        .exit(Exit::Code(124))
        .complete(),
        case(
            "SIGKILL after complete output, nothing else known",
            CleanupAfterCompletion,
            None,
        )
        .stderr("batch/shell_interactive_killed_after_epochs.txt")
        .exit(SIGKILL)
        .complete(),
    ]);
}

#[test]
fn not_oom() {
    use Class::{Other, Traceback};
    use Subtype::{LastLine, Python, TimeLimit};
    run(vec![
        case(
            "own: Python MemoryError under ulimit -v",
            Traceback,
            Some(Python),
        )
        .stderr("not_oom/own_python_memoryerror_ulimit_v.stderr.txt")
        .exit(Exit::Code(1))
        .evidence("not an OOM kill"),
        case("SGLang capture failed on gloo", Traceback, Some(Python))
            .stderr("not_oom/sglang_capture_gloo_connection_closed.txt"),
        case(
            "SGLang capture timed out on gloo",
            Traceback,
            Some(LastLine),
        )
        .stderr("not_oom/sglang_capture_gloo_timeout.txt"),
        case("Slurm time limit, job and step", Other, Some(TimeLimit))
            .stderr("not_oom/slurm_time_limit_job_and_step.txt")
            .evidence("DUE TO TIME LIMIT"),
        case("Slurm time limit, tasks Terminated", Other, Some(TimeLimit))
            .stderr("not_oom/slurm_time_limit_srun_tasks_terminated.txt"),
        case(
            "Slurm time limit after Python logging",
            Other,
            Some(TimeLimit),
        )
        .stderr("not_oom/slurm_time_limit_python_logging.txt"),
        case(
            "Kubernetes liveness probe kill, exit 137",
            Other,
            Some(TimeLimit),
        )
        .stderr("batch/shell_bare_killed_after_tqdm.txt")
        .other("not_oom/k8s_liveness_probe_restart_events.txt")
        .exit(Exit::Code(137))
        .evidence("failed liveness probe"),
        case(
            "Slurm's memory warning after a job that finished",
            Other,
            Some(Subtype::ExitCode),
        )
        .stderr("not_oom/slurm_step_memory_limit_warning_job_succeeded.txt")
        .evidence("nothing was killed for it"),
        case(
            "Slurm time limit with SIGKILL given",
            Other,
            Some(TimeLimit),
        )
        .stderr("not_oom/slurm_time_limit_job_and_step.txt")
        .exit(SIGKILL),
    ]);
}

/// `memory allocation of N bytes failed`, then SIGABRT: Rust's allocation-error handler under
/// a per-process limit (or asked for an impossible size). Memory, but no kill: an allocation
/// failure, never a traceback or a crash (issue 24, item 13; these were `traceback (rust)`).
#[test]
fn an_allocation_failure_is_memory_not_a_traceback() {
    use Class::Oom;
    use Subtype::AllocationFailure;
    run(vec![
        case(
            "own: Rust allocation failure under ulimit -v",
            Oom,
            Some(AllocationFailure),
        )
        .stderr("not_oom/own_rust_alloc_failed_ulimit_v.stderr.txt")
        .confidence(Confidence::High)
        .evidence("not an OOM kill")
        .evidence("RLIMIT_AS")
        .next("lift the per-process memory limit or hold less at once"),
        case(
            "own: the same with its SIGABRT given",
            Oom,
            Some(AllocationFailure),
        )
        .stderr("not_oom/own_rust_alloc_failed_ulimit_v.stderr.txt")
        .exit(Exit::Signal {
            signal: 6,
            sent_by_gen: false,
        })
        .pid(22272)
        .evidence("memory allocation of 67108864 bytes failed"),
        case(
            "Rust: 10 bytes refused under ulimit -v",
            Oom,
            Some(AllocationFailure),
        )
        .stderr("not_oom/rust_alloc_failed_ulimit_v_sudo_rs.txt")
        .evidence("RLIMIT_AS"),
        case(
            "Rust: glued to a progress bar and the shell",
            Oom,
            Some(AllocationFailure),
        )
        .stderr("not_oom/rust_alloc_failed_glued_shell_aborted.txt"),
        case(
            "Rust: no newline before Aborted",
            Oom,
            Some(AllocationFailure),
        )
        .stderr("not_oom/rust_alloc_failed_aborted_no_newline.txt")
        .evidence("a request of 21.8 GiB was refused"),
        case(
            "Rust: 2656 bytes refused, then Aborted",
            Oom,
            Some(AllocationFailure),
        )
        .stderr("not_oom/rust_alloc_failed_small_blazesym.txt")
        .exit(Exit::Code(134))
        .evidence("a request of 2.6 KiB was refused"),
        case(
            "Rust: usize::MAX asked, cargo reports SIGABRT",
            Oom,
            Some(AllocationFailure),
        )
        .stderr("not_oom/rust_alloc_failed_usize_max_clippy.txt")
        .evidence("not a limit that is too low")
        .next("find where the impossible size comes from"),
    ]);
}

/// A kernel OOM record of the worker's own pid while the worker exited with a code and a
/// traceback: the OOM killer kills with SIGKILL, so the record is of an earlier process that
/// had the pid (issue 24, item 12: this was an OOM). With SIGKILL it stays the worker's.
#[test]
fn a_kill_of_the_workers_pid_does_not_relabel_its_traceback() {
    use Class::{Oom, Traceback};
    use Subtype::{KernelMemcg, Python};
    let kmsg = "kernel_formats/kmsg_raw_memcg_6_18_own.txt";
    run(vec![
        case("own: kmsg kill of pid 9142, worker 9142 exited 1 with a traceback", Traceback, Some(Python))
            .stderr("py_keyerror.txt")
            .kernel(kmsg)
            .exit(Exit::Code(1))
            .pid(9142)
            .evidence("ignored kernel line for pid 9142: the worker exited with exit code 1, but the OOM killer kills with SIGKILL")
            .next("fix the error, then rerun with --only-failed"),
        case("own: the same without the exit status (read from the traceback)", Traceback, Some(Python))
            .stderr("py_keyerror.txt")
            .kernel(kmsg)
            .pid(9142)
            .evidence("pid reuse"),
        case("own: the same with SIGKILL is the worker's OOM", Oom, Some(KernelMemcg))
            .stderr("py_keyerror.txt")
            .kernel(kmsg)
            .exit(SIGKILL)
            .pid(9142),
        case("own: dmesg kill of pid 21862, worker 21862 exited 1 with a traceback", Traceback, Some(Python))
            .stderr("py_chained_direct_cause.txt")
            .kernel("kernel_formats/own_bash_job_dmesg.txt")
            .exit(Exit::Code(1))
            .pid(21862)
            .evidence("ignored kernel line for pid 21862"),
    ]);
}

#[test]
fn server_logs_keep_their_own_verdicts() {
    let verdict = gen_diagnostics::classify_server_log(&fixture(
        "not_oom/sglang_capture_gloo_connection_closed.txt",
    ));
    assert_eq!(
        (verdict.class, verdict.subtype),
        (Class::Other, Some(Subtype::CudaGraphCapture))
    );
}
