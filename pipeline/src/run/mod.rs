//! `gen run`: the orchestrator's event loop ([`orchestrator`]) handling [`events`], with the
//! sources' state ([`sources`]), the preparation workers ([`preparation`]: supervised processes,
//! [`supervisor`], [`rss`]) and the servers ([`server`]); the request dispatcher
//! ([`dispatch`]) over one or several servers ([`fleet`]), fed from the prepared prompts
//! ([`feed`]), and the judge of refused requests ([`refusal`]); signals stop it gracefully
//! ([`stop`]); a prepared source is checked against its inputs on every run ([`inputs`]).

pub mod cgroup;
pub mod dispatch;
pub mod events;
pub mod feed;
pub mod fleet;
pub mod inputs;
pub mod kernel_log;
pub mod limiter;
pub mod lock;
pub mod observe;
pub mod orchestrator;
pub mod pin;
pub mod preparation;
pub mod refusal;
pub mod rss;
pub mod server;
pub mod sources;
pub mod stop;
pub mod supervisor;
pub mod tuner;

pub use orchestrator::{RunOutcome, Selection, run};
