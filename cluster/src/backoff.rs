//! The pauses between attempts of a start-up step that waits for NATS to be ready: growing
//! from a first pause to a longest one, for as long as the step's patience lasts.

use std::time::Duration;

use tokio::time::Instant;

pub(crate) struct Backoff {
    deadline: Instant,
    pause: Duration,
    longest: Duration,
}

impl Backoff {
    /// Attempts for `patience` from now, pausing `first`, then twice as long each time, at most
    /// `longest`.
    pub(crate) fn new(patience: Duration, first: Duration, longest: Duration) -> Backoff {
        Backoff { deadline: Instant::now() + patience, pause: first, longest }
    }

    /// The pause before the next attempt, or `None` when the next attempt would start past
    /// the deadline.
    pub(crate) fn next_pause(&mut self) -> Option<Duration> {
        let pause = self.pause;
        if Instant::now() + pause >= self.deadline {
            return None;
        }
        self.pause = (pause * 2).min(self.longest);
        Some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pauses_grow_to_the_longest_and_end_at_the_deadline() {
        let mut backoff =
            Backoff::new(Duration::from_millis(1000), Duration::from_millis(100), Duration::from_millis(300));
        let mut pauses = Vec::new();
        while let Some(pause) = backoff.next_pause() {
            pauses.push(pause.as_millis());
            tokio::time::advance(pause).await;
        }
        // 100 + 200 + 300 + 300 = 900; another 300 would end past 1000.
        assert_eq!(pauses, [100, 200, 300, 300]);
        let mut none = Backoff::new(Duration::ZERO, Duration::from_millis(1), Duration::from_millis(1));
        assert_eq!(none.next_pause(), None);
    }
}
