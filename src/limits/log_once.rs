//! A log gate that opens once per interval: the first event after the interval has passed gets
//! a line, with the number of events the gate swallowed since the last one.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use mesgd_core::sync::lock;

/// Lets one event per interval through to the log. Time is passed in, so it can be tested
/// without waiting; the lock is held for a comparison and two stores.
#[derive(Debug)]
pub struct LogOnce {
    interval: Duration,
    state: Mutex<GateState>,
}

#[derive(Debug, Default)]
struct GateState {
    last: Option<Instant>,
    swallowed: u64,
}

impl LogOnce {
    /// A gate that opens at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        LogOnce { interval, state: Mutex::new(GateState::default()) }
    }

    /// Records an event at `now`. `Some(n)` means "log this one": `n` events were swallowed
    /// since the previous line. `None` means a line was written less than an interval ago.
    pub fn tripped(&self, now: Instant) -> Option<u64> {
        let mut state = lock(&self.state);
        let due = state.last.is_none_or(|last| now.saturating_duration_since(last) >= self.interval);
        if due {
            state.last = Some(now);
            Some(std::mem::take(&mut state.swallowed))
        } else {
            state.swallowed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_swallowed() {
        let gate = LogOnce::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(gate.tripped(t0), Some(0));
        for i in 1..=99 {
            assert_eq!(gate.tripped(t0 + Duration::from_millis(i * 10)), None);
        }
        assert_eq!(gate.tripped(t0 + Duration::from_secs(10)), Some(99));
        assert_eq!(gate.tripped(t0 + Duration::from_secs(11)), None);
        assert_eq!(gate.tripped(t0 + Duration::from_secs(25)), Some(1));
    }

    #[test]
    fn a_clock_that_goes_back_does_not_open_the_gate() {
        let gate = LogOnce::new(Duration::from_secs(10));
        let t0 = Instant::now() + Duration::from_secs(60);
        assert_eq!(gate.tripped(t0), Some(0));
        assert_eq!(gate.tripped(t0 - Duration::from_secs(30)), None);
    }
}
