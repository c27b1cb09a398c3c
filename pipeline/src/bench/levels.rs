//! Which concurrency levels a sweep visits: a fixed list (`1,2,4,8`) or `auto`, which doubles
//! from 1 until throughput stops growing or the server's slots are well exceeded.
//!
//! Pure: no I/O and no clock, so the stopping rule is tested on numbers.

use std::fmt;

/// `auto` stops after this many consecutive levels that gained less than [`MIN_GAIN`].
const FLAT_LEVELS_TO_STOP: u32 = 2;
/// A level must beat the best throughput so far by this factor to count as a gain (5%).
const MIN_GAIN: f64 = 1.05;
/// `auto` never goes past this many requests in flight, whatever the server says.
const AUTO_CEILING: usize = 1024;

/// The levels asked for on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Levels {
    List(Vec<usize>),
    Auto,
}

impl Levels {
    /// Parses `auto` or a comma-separated list of positive integers.
    pub fn parse(text: &str) -> Result<Levels, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("auto") {
            return Ok(Levels::Auto);
        }
        let mut levels = Vec::new();
        for part in text.split(',').map(str::trim) {
            match part.parse::<usize>() {
                Ok(level) if level > 0 => levels.push(level),
                _ => {
                    return Err(format!(
                        "`--concurrency {text}`: `{part}` is not a positive integer; give a list like `1,2,4,8` or `auto`"
                    ));
                }
            }
        }
        levels.sort_unstable();
        levels.dedup();
        Ok(Levels::List(levels))
    }

    /// The most levels a sweep at `requests` per level can visit: the list's length, or for
    /// `auto` the doublings from 1 up to the requests per level (or the ceiling).
    pub fn max_rounds(&self, requests: usize) -> usize {
        match self {
            Levels::List(list) => list.len(),
            Levels::Auto => {
                let top = requests.clamp(1, AUTO_CEILING);
                top.ilog2() as usize + 1
            }
        }
    }
}

/// Why an `auto` sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Two consecutive levels gained less than 5%.
    Flat,
    /// The next level would exceed twice the server's slots.
    Slots(u32),
    /// The next level would exceed the requests per level (it could never fill).
    Requests(usize),
    /// The hard ceiling of an `auto` sweep.
    Ceiling,
    /// Every request of the last level failed.
    Failed,
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Flat => write!(f, "throughput gained < 5% twice in a row"),
            Stop::Slots(slots) => write!(f, "next level exceeds 2 x the server's {slots} slots"),
            Stop::Requests(n) => write!(f, "next level exceeds the {n} requests per level"),
            Stop::Ceiling => write!(f, "reached the ceiling of {AUTO_CEILING} in flight"),
            Stop::Failed => write!(f, "every request of the last level failed"),
        }
    }
}

/// The levels of one server's sweep, chosen one at a time from the throughput measured so far.
#[derive(Debug, Clone)]
pub struct Sweep {
    kind: Kind,
    stopped: Option<Stop>,
}

#[derive(Debug, Clone)]
enum Kind {
    List {
        remaining: std::vec::IntoIter<usize>,
    },
    Auto {
        next: usize,
        slots: Option<u32>,
        requests: usize,
        best: f64,
        flat: u32,
    },
}

impl Sweep {
    /// A sweep over `levels` for a server with `slots` (when it says) at `requests` per level.
    pub fn new(levels: &Levels, slots: Option<u32>, requests: usize) -> Sweep {
        let kind = match levels {
            Levels::List(list) => Kind::List {
                remaining: list.clone().into_iter(),
            },
            Levels::Auto => Kind::Auto {
                next: 1,
                slots,
                requests,
                best: 0.0,
                flat: 0,
            },
        };
        Sweep {
            kind,
            stopped: None,
        }
    }

    /// The next level to measure, or `None` when the sweep is over.
    pub fn next_level(&mut self) -> Option<usize> {
        if self.stopped.is_some() {
            return None;
        }
        match &mut self.kind {
            Kind::List { remaining } => remaining.next(),
            Kind::Auto {
                next,
                slots,
                requests,
                ..
            } => {
                let stop = if slots.is_some_and(|s| *next > 2 * s as usize) {
                    slots.map(Stop::Slots)
                } else if *next > *requests {
                    Some(Stop::Requests(*requests))
                } else if *next > AUTO_CEILING {
                    Some(Stop::Ceiling)
                } else {
                    None
                };
                match stop {
                    Some(stop) => {
                        self.stopped = Some(stop);
                        None
                    }
                    None => Some(*next),
                }
            }
        }
    }

    /// Records the output throughput measured at `level`.
    pub fn record(&mut self, level: usize, tokens_per_second: f64) {
        if let Kind::Auto {
            next, best, flat, ..
        } = &mut self.kind
        {
            if tokens_per_second < *best * MIN_GAIN {
                *flat += 1;
            } else {
                *flat = 0;
            }
            *best = best.max(tokens_per_second);
            *next = level.saturating_mul(2);
            if *flat >= FLAT_LEVELS_TO_STOP {
                self.stopped = Some(Stop::Flat);
            }
        }
    }

    /// Ends the sweep early (e.g. every request of a level failed).
    pub fn abandon(&mut self) {
        self.stopped = Some(Stop::Failed);
    }

    /// Why the sweep stopped early; `None` for a list that ran to its end or a sweep still
    /// going.
    pub fn stopped(&self) -> Option<Stop> {
        self.stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a sweep against a throughput curve; returns the levels visited and the stop.
    fn sweep(
        levels: &Levels,
        slots: Option<u32>,
        curve: impl Fn(usize) -> f64,
    ) -> (Vec<usize>, Option<Stop>) {
        let mut sweep = Sweep::new(levels, slots, 64);
        let mut visited = Vec::new();
        while let Some(level) = sweep.next_level() {
            visited.push(level);
            sweep.record(level, curve(level));
        }
        (visited, sweep.stopped())
    }

    #[test]
    fn lists_parse_sorted_and_deduplicated() {
        assert_eq!(Levels::parse("8, 1,4,4"), Ok(Levels::List(vec![1, 4, 8])));
        assert_eq!(Levels::parse("AUTO"), Ok(Levels::Auto));
        assert!(Levels::parse("1,0").is_err());
        assert!(Levels::parse("1,x").is_err());
        assert!(Levels::parse("").is_err());
    }

    #[test]
    fn max_rounds_bounds_the_levels_a_sweep_visits() {
        assert_eq!(Levels::List(vec![1, 4, 8]).max_rounds(2), 3);
        let (visited, _) = sweep(&Levels::Auto, None, |l| l as f64);
        assert_eq!(Levels::Auto.max_rounds(64), visited.len());
        assert_eq!(Levels::Auto.max_rounds(63), 6, "1..=32");
        assert_eq!(Levels::Auto.max_rounds(1), 1);
        assert_eq!(Levels::Auto.max_rounds(1 << 20), 11, "1..=1024");
    }

    #[test]
    fn a_list_visits_every_level() {
        let (visited, stop) = sweep(&Levels::List(vec![1, 3, 5]), Some(1), |_| 1.0);
        assert_eq!(visited, [1, 3, 5]);
        assert_eq!(stop, None);
    }

    #[test]
    fn auto_stops_after_two_flat_levels() {
        // Saturates at 8: 16 and 32 gain nothing.
        let (visited, stop) = sweep(&Levels::Auto, None, |l| 100.0 * l.min(8) as f64);
        assert_eq!(visited, [1, 2, 4, 8, 16, 32]);
        assert_eq!(stop, Some(Stop::Flat));
    }

    #[test]
    fn one_flat_level_is_not_enough() {
        // Flat at 4, growing again at 8.
        let curve = |l: usize| match l {
            4 => 200.0,
            8 => 400.0,
            16 | 32 => 400.0,
            other => 100.0 * other as f64,
        };
        let (visited, stop) = sweep(&Levels::Auto, None, curve);
        assert_eq!(visited, [1, 2, 4, 8, 16, 32]);
        assert_eq!(stop, Some(Stop::Flat));
    }

    #[test]
    fn auto_stops_past_twice_the_slots_and_at_the_requests() {
        let (visited, stop) = sweep(&Levels::Auto, Some(4), |l| l as f64);
        assert_eq!(visited, [1, 2, 4, 8]);
        assert_eq!(stop, Some(Stop::Slots(4)));
        let (visited, stop) = sweep(&Levels::Auto, None, |l| l as f64);
        assert_eq!(visited, [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(stop, Some(Stop::Requests(64)));
    }
}
