//! A concurrency limit that can shrink as well as grow: an in-flight counter, a limit, and a
//! `Notify`. Shrinking never cancels a running request; it only withholds new ones until the
//! count falls below the limit (a `Semaphore` cannot take permits back — tokio#5308).

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Debug)]
pub struct Limiter {
    state: Mutex<State>,
    released: Notify,
}

#[derive(Debug, Clone, Copy)]
struct State {
    in_flight: u32,
    limit: u32,
}

/// One request's place; released on drop.
#[derive(Debug)]
pub struct Slot {
    limiter: Arc<Limiter>,
}

impl Limiter {
    pub fn new(limit: u32) -> Arc<Limiter> {
        Arc::new(Limiter {
            state: Mutex::new(State {
                in_flight: 0,
                limit: limit.max(1),
            }),
            released: Notify::new(),
        })
    }

    /// A free place under the current limit, if there is one now.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Slot> {
        let mut state = self.state.lock().expect("limiter lock not poisoned");
        (state.in_flight < state.limit).then(|| {
            state.in_flight += 1;
            Slot {
                limiter: self.clone(),
            }
        })
    }

    /// Resolves when a place is released or the limit changes (register it before checking).
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }

    pub fn set_limit(&self, limit: u32) {
        self.state.lock().expect("limiter lock not poisoned").limit = limit.max(1);
        self.released.notify_waiters();
    }

    pub fn limit(&self) -> u32 {
        self.state.lock().expect("limiter lock not poisoned").limit
    }

    pub fn in_flight(&self) -> u32 {
        self.state
            .lock()
            .expect("limiter lock not poisoned")
            .in_flight
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.limiter
            .state
            .lock()
            .expect("limiter lock not poisoned")
            .in_flight -= 1;
        self.limiter.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinking_withholds_new_requests_without_cancelling_running_ones() {
        let limiter = Limiter::new(3);
        let mut slots: Vec<Slot> = (0..3)
            .map(|_| limiter.try_acquire().expect("a place"))
            .collect();
        assert_eq!(limiter.in_flight(), 3);
        limiter.set_limit(1);
        assert!(limiter.try_acquire().is_none());
        let still_running = slots.pop();
        drop(slots);
        assert_eq!(limiter.in_flight(), 1);
        assert!(
            limiter.try_acquire().is_none(),
            "1 still running = the new limit"
        );
        limiter.set_limit(2);
        let slot = limiter
            .try_acquire()
            .expect("a place under the raised limit");
        assert_eq!(limiter.in_flight(), 2);
        drop(slot);
        drop(still_running);
        assert_eq!(limiter.in_flight(), 0);
    }
}
