//! `gen-diagnostics`: turns what the supervisor saw of a dead worker into a verdict.
//!
//! Pure and synchronous: no I/O, no clock, no processes. The supervisor in `gen-pipeline`
//! collects an [`Observation`] (wait status, cgroup counters, RSS, kernel log text, stderr) and
//! calls [`classify()`]; inference-server logs go to [`classify_server_log`]. Both return a
//! [`Verdict`] with evidence lines and advice for `gen status` / `gen diagnose`.
//!
//! Crate map:
//! * [`observation`]: the input, with its JSON schema.
//! * [`verdict`]: the output and its one-line renderings.
//! * [`classify`](mod@classify): the worker rules as one ordered chain (first match wins).
//! * [`kmsg`], [`oom`]: kernel log formats and OOM lines of every kernel era, user-space killers.
//! * [`batch`]: what schedulers, shells and container runtimes report (Slurm, Kubernetes, ...).
//! * [`clock`]: wall-clock stamps as logs print them, and `--started-at` moments.
//! * [`traceback`], [`panic`](mod@panic), [`native`]: Python tracebacks, Rust panics, aborts and symptoms.
//! * [`server`]: SGLang, vLLM and llama.cpp crash signatures (a file per kind), as a second chain
//!   of rules.
//!
//! Policy (rerun, keep outputs, quarantine) is not decided here.

pub mod batch;
pub mod classify;
pub mod clock;
mod evidence;
mod explain;
pub mod kmsg;
pub mod native;
pub mod observation;
pub mod oom;
pub mod panic;
pub mod server;
pub mod text;
pub mod traceback;
pub mod verdict;

pub use classify::classify;
pub use observation::{Exit, KernelLog, Observation, RssSample};
pub use server::classify_server_log;
pub use verdict::{Class, Confidence, ErrorReport, Language, Location, Raised, Subtype, Verdict};
