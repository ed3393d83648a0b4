//! One listener's queue of messages waiting to be written, bounded in count and bytes.
//!
//! Senders push (never waiting: a slow listener must not slow anyone down); the listener's
//! connection task takes everything queued at once and writes it as one batch. A push past
//! either cap marks the queue *overflowed*: it is emptied, every later push is dropped, and the
//! connection task, woken, disconnects the listener as too slow. Closing the queue (when the
//! listener is removed) refuses every later push, so nothing is queued after removal.
//!
//! A std `Mutex` rather than a channel: the critical sections are a few instructions, never
//! held across an `.await`, and the writer swaps the whole queue out in one step.

use std::collections::VecDeque;
use std::sync::Mutex;

use mesgd_core::sync::lock;
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Utf8Bytes;

/// The caps of every listener's queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueLimits {
    /// Messages at most.
    pub(crate) messages: usize,
    /// Bytes at most (a message shared by many listeners counts in each).
    pub(crate) bytes: usize,
}

/// What became of a push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Queued.
    Queued,
    /// Not queued: this push overflowed the queue, whose listener is now to be disconnected.
    Overflowed,
    /// Not queued: the queue had overflowed already, or is closed.
    Refused,
}

/// Why [`Outbox::take`] has nothing more to give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The queue overflowed: the listener is too slow.
    Overflowed,
    /// The queue was closed.
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Open,
    Overflowed,
    Closed,
}

#[derive(Debug)]
struct State {
    queue: VecDeque<Utf8Bytes>,
    bytes: usize,
    status: Status,
}

/// A listener's outgoing queue.
#[derive(Debug)]
pub(crate) struct Outbox {
    state: Mutex<State>,
    limits: QueueLimits,
    /// Woken on every push, on overflow and on close; one waiter, the connection task.
    wake: Notify,
}

impl Outbox {
    pub(crate) fn new(limits: QueueLimits) -> Outbox {
        Outbox {
            state: Mutex::new(State { queue: VecDeque::new(), bytes: 0, status: Status::Open }),
            limits,
            wake: Notify::new(),
        }
    }

    /// Queues `text` unless that would pass a cap.
    pub(crate) fn push(&self, text: &Utf8Bytes) -> Pushed {
        let pushed = {
            let mut s = lock(&self.state);
            if s.status != Status::Open {
                return Pushed::Refused;
            }
            let bytes = s.bytes + text.len();
            if s.queue.len() >= self.limits.messages || bytes > self.limits.bytes {
                s.status = Status::Overflowed;
                s.queue = VecDeque::new();
                s.bytes = 0;
                Pushed::Overflowed
            } else {
                s.queue.push_back(text.clone());
                s.bytes = bytes;
                Pushed::Queued
            }
        };
        self.wake.notify_one();
        pushed
    }

    /// Waits until something is queued and moves all of it into `batch` (which must be empty),
    /// or says why nothing more will come.
    pub(crate) async fn take(&self, batch: &mut VecDeque<Utf8Bytes>) -> Result<(), Ended> {
        loop {
            {
                let mut s = lock(&self.state);
                match s.status {
                    Status::Overflowed => return Err(Ended::Overflowed),
                    Status::Closed => return Err(Ended::Closed),
                    Status::Open if !s.queue.is_empty() => {
                        std::mem::swap(&mut s.queue, batch);
                        s.bytes = 0;
                        return Ok(());
                    }
                    Status::Open => {}
                }
            }
            // A push between the check and here left a permit: this returns at once.
            self.wake.notified().await;
        }
    }

    /// Whether the queue has overflowed.
    pub(crate) fn overflowed(&self) -> bool {
        lock(&self.state).status == Status::Overflowed
    }

    /// Resolves at the next push, overflow or close (or at once if one happened since the last
    /// wake-up was consumed).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Refuses every later push and drops what is queued.
    pub(crate) fn close(&self) {
        {
            let mut s = lock(&self.state);
            if s.status == Status::Open {
                s.status = Status::Closed;
            }
            s.queue = VecDeque::new();
            s.bytes = 0;
        }
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(messages: usize, bytes: usize) -> Outbox {
        Outbox::new(QueueLimits { messages, bytes })
    }

    #[tokio::test]
    async fn takes_everything_queued_in_order() {
        let o = outbox(10, 1000);
        for t in ["a", "b", "c"] {
            assert_eq!(o.push(&Utf8Bytes::from_static(t)), Pushed::Queued);
        }
        let mut batch = VecDeque::new();
        o.take(&mut batch).await.unwrap();
        assert_eq!(batch.iter().map(|t| t.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        batch.clear();
        assert_eq!(o.push(&Utf8Bytes::from_static("d")), Pushed::Queued);
        o.take(&mut batch).await.unwrap();
        assert_eq!(batch.len(), 1);
    }

    #[tokio::test]
    async fn the_count_cap_overflows_and_refuses_the_rest() {
        let o = outbox(2, 1000);
        let t = Utf8Bytes::from_static("x");
        assert_eq!(o.push(&t), Pushed::Queued);
        assert_eq!(o.push(&t), Pushed::Queued);
        assert_eq!(o.push(&t), Pushed::Overflowed);
        assert_eq!(o.push(&t), Pushed::Refused);
        assert!(o.overflowed());
        assert_eq!(o.take(&mut VecDeque::new()).await, Err(Ended::Overflowed));
    }

    #[tokio::test]
    async fn the_byte_cap_counts_bytes() {
        let o = outbox(100, 5);
        assert_eq!(o.push(&Utf8Bytes::from_static("abc")), Pushed::Queued);
        assert_eq!(o.push(&Utf8Bytes::from_static("de")), Pushed::Queued);
        assert_eq!(o.push(&Utf8Bytes::from_static("f")), Pushed::Overflowed);
    }

    #[tokio::test]
    async fn taking_frees_room_under_the_caps() {
        let o = outbox(1, 1000);
        let t = Utf8Bytes::from_static("x");
        let mut batch = VecDeque::new();
        for _ in 0..5 {
            assert_eq!(o.push(&t), Pushed::Queued);
            o.take(&mut batch).await.unwrap();
            batch.clear();
        }
    }

    #[tokio::test]
    async fn a_closed_outbox_refuses_pushes_and_ends_take() {
        let o = outbox(10, 1000);
        assert_eq!(o.push(&Utf8Bytes::from_static("x")), Pushed::Queued);
        o.close();
        assert_eq!(o.push(&Utf8Bytes::from_static("y")), Pushed::Refused);
        assert_eq!(o.take(&mut VecDeque::new()).await, Err(Ended::Closed));
    }

    #[tokio::test]
    async fn take_waits_for_a_push_from_another_task() {
        let o = std::sync::Arc::new(outbox(10, 1000));
        let pusher = o.clone();
        let task = tokio::spawn(async move {
            pusher.push(&Utf8Bytes::from_static("later"));
        });
        let mut batch = VecDeque::new();
        o.take(&mut batch).await.unwrap();
        assert_eq!(batch[0].as_str(), "later");
        task.await.unwrap();
    }
}
