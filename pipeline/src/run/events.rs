//! What happens to a run, as values. The event loop's `select!` only turns each wake-up into a
//! [`RunEvent`]; the orchestrator handles it between wake-ups, and [`Stopping`] says whether
//! and why the run winds down (instead of one flag per cause).

use tokio::task::JoinError;

use super::dispatch::DispatchEvent;
use super::preparation;
use crate::inference::managed::{LaunchError, ManagedServer};

/// One thing that happened, for the orchestrator to handle.
pub(super) enum RunEvent {
    /// A preparation worker ended (or could not start).
    PreparationEnded(Result<preparation::Ended, JoinError>),
    /// The dispatcher reported a completion, a refusal, a fatal answer or a source's end.
    Dispatched(DispatchEvent),
    /// A second passed: flush, refresh the status, watch the servers.
    Ticked,
    /// Starting the servers ended: they answer (`Ok(Some)`), a signal came first
    /// (`Ok(None)`), or they could not be started or connected.
    ServersReady(anyhow::Result<Option<super::server::Servers>>),
    /// A restart of the managed inference server ended.
    ServerRestarted(Result<Result<ManagedServer, LaunchError>, JoinError>),
    /// SIGINT, SIGTERM or SIGHUP (the first one).
    Interrupted,
}

/// Why a run stops before every source is through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Failure {
    /// The server refused the requests in a way no retry fixes.
    Refused(String),
    /// An answer named another model than the run's answers so far (the message says it all).
    ModelChanged(String),
    /// No server is left: the managed one died past its restarts, or none answered for
    /// `max-outage-secs`.
    ServerGone(String),
}

/// Whether the run is winding down, and why. It only moves forward: a signal is never
/// forgotten, and a refusal outranks a lost server (the first message of each kind is kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Stopping {
    /// Every source goes on.
    #[default]
    No,
    /// A signal: no new requests; those in flight get a grace period.
    Interrupted,
    /// An error ends the run; `interrupted`: a signal came as well.
    Failed { failure: Failure, interrupted: bool },
}

impl Stopping {
    pub(super) fn is_stopping(&self) -> bool {
        *self != Stopping::No
    }

    /// A signal stopped the run (alone or besides an error).
    pub(super) fn interrupted(&self) -> bool {
        matches!(
            self,
            Stopping::Interrupted
                | Stopping::Failed {
                    interrupted: true,
                    ..
                }
        )
    }

    /// The servers' answers stopped the run: a refusal no retry fixes, or a changed model.
    pub(super) fn refused(&self) -> bool {
        matches!(
            self,
            Stopping::Failed {
                failure: Failure::Refused(_) | Failure::ModelChanged(_),
                ..
            }
        )
    }

    pub(super) fn server_gone(&self) -> bool {
        matches!(
            self,
            Stopping::Failed {
                failure: Failure::ServerGone(_),
                ..
            }
        )
    }

    /// Records a signal; `false` when one was already recorded.
    pub(super) fn interrupt(&mut self) -> bool {
        match self {
            Stopping::No => *self = Stopping::Interrupted,
            Stopping::Failed { interrupted, .. } if !*interrupted => *interrupted = true,
            _ => return false,
        }
        true
    }

    /// Records an error; `false` when it changes nothing (an error of the same or a higher
    /// rank came first).
    pub(super) fn fail(&mut self, failure: Failure) -> bool {
        let interrupted = self.interrupted();
        let replaces = match (&*self, &failure) {
            (Stopping::No | Stopping::Interrupted, _) => true,
            (_, Failure::Refused(_) | Failure::ModelChanged(_)) => !self.refused(),
            (_, Failure::ServerGone(_)) => false,
        };
        if replaces {
            *self = Stopping::Failed {
                failure,
                interrupted,
            };
        }
        replaces
    }

    /// How the run ended, for `events.jsonl`.
    pub(super) fn ending(&self) -> &'static str {
        match self {
            _ if self.interrupted() => super::stop::interrupted_by(),
            Stopping::No => "finished",
            _ => "stopped by an error",
        }
    }

    /// The error that ends the run, if any.
    pub(super) fn error(&self) -> Option<anyhow::Error> {
        match self {
            Stopping::Failed {
                failure: Failure::Refused(message),
                ..
            } => Some(anyhow::anyhow!(
                "the server refused the requests: {message}"
            )),
            Stopping::Failed {
                failure: Failure::ServerGone(message) | Failure::ModelChanged(message),
                ..
            } => Some(anyhow::anyhow!("{message}")),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Failure, Stopping};

    #[test]
    fn a_refusal_outranks_a_lost_server_and_a_signal_is_kept() {
        let mut stopping = Stopping::No;
        assert!(stopping.interrupt());
        assert!(!stopping.interrupt());
        assert!(stopping.fail(Failure::ServerGone("gone".into())));
        assert!(!stopping.fail(Failure::ServerGone("again".into())));
        assert!(stopping.fail(Failure::Refused("no".into())));
        assert!(!stopping.fail(Failure::Refused("later".into())));
        assert!(stopping.interrupted());
        assert_eq!(
            stopping.error().map(|e| e.to_string()),
            Some("the server refused the requests: no".to_owned())
        );
    }

    #[test]
    fn a_signal_after_an_error_is_recorded_once() {
        let mut stopping = Stopping::No;
        assert!(stopping.fail(Failure::ServerGone("gone".into())));
        assert!(!stopping.interrupted());
        assert!(stopping.interrupt());
        assert!(!stopping.interrupt());
        assert!(stopping.interrupted() && stopping.server_gone());
    }
}
