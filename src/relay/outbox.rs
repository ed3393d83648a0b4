//! One client's bounded outbound frame queue, which every task that has something for the client
//! writes into, and which the client's own task (or, for UDP, the socket task) empties.
//!
//! Frames are kept as one buffer of TCP frames — a 4-byte big-endian length, then the body —
//! so that a TCP connection writes the buffer as it is, and WebSocket and UDP take it apart at
//! the length prefixes into one message or datagram each. Writers encode straight into it under
//! its lock (a `deliver` is built from the sender's frame with one copy), and the first write
//! after the owner last looked wakes the owner through the waker it registered: the pattern of
//! the session mailbox (`Session::drain`), without a channel in between.
//!
//! Bounds: the queued bytes plus the bytes the owner took and has not yet written
//! ([`Outbox::poll_take`] reports them) stay within `cap`. A write that would pass it is refused
//! and marks the outbox *overflowed*: the owner closes the connection (a client that stops
//! reading costs at most `cap`), and writers treat it as gone. A frame whose body is over the
//! recipient's transport limit is refused without changing anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Waker;

use bytes::{BufMut, BytesMut};
use mesgd_core::relay::frame;
use mesgd_core::sync::lock;

/// Why a frame was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PushError {
    /// The client is closing, or its output passed the cap: treat it as offline.
    Gone,
    /// The frame's body is over the recipient transport's limit.
    TooLarge,
}

#[derive(Debug, Default)]
struct State {
    /// Length-prefixed frames, oldest first.
    buf: BytesMut,
    /// Bytes the owner took and has not yet written.
    writing: usize,
    /// Frames queued since the owner last took them (for the counters).
    frames: u64,
    waker: Option<Waker>,
    closed: bool,
    overflowed: bool,
}

/// The outbound queue of one client.
#[derive(Debug)]
pub(crate) struct Outbox {
    id: u64,
    /// The largest frame body the client's transport carries.
    max_frame: usize,
    cap: usize,
    /// The address, once the client registered.
    addr: OnceLock<Arc<str>>,
    state: Mutex<State>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Outbox {
    /// An empty outbox for a client whose transport carries bodies of up to `max_frame` bytes,
    /// holding at most `cap` bytes.
    pub(crate) fn new(max_frame: usize, cap: usize) -> Arc<Outbox> {
        Arc::new(Outbox {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            max_frame,
            cap,
            addr: OnceLock::new(),
            state: Mutex::new(State::default()),
        })
    }

    /// A process-unique id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The largest frame body the client's transport carries.
    pub(crate) fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// The client's address, once registered.
    pub(crate) fn addr(&self) -> Option<&Arc<str>> {
        self.addr.get()
    }

    /// Records the address (once, at registration).
    pub(crate) fn set_addr(&self, addr: Arc<str>) {
        let _ = self.addr.set(addr);
    }

    /// Queues one frame whose body `write` appends, within the cap.
    pub(crate) fn push_with(&self, write: impl FnOnce(&mut BytesMut)) -> Result<(), PushError> {
        self.push_inner(true, write)
    }

    /// Queues one frame whose body is `body`, within the cap.
    pub(crate) fn push(&self, body: &[u8]) -> Result<(), PushError> {
        self.push_inner(true, |buf| buf.put_slice(body))
    }

    /// Queues one frame past the cap: the backlog flushed at `register` (bounded by the offline
    /// queue's own caps) and a connection's last, fatal `error`.
    pub(crate) fn push_uncapped(&self, write: impl FnOnce(&mut BytesMut)) -> Result<(), PushError> {
        self.push_inner(false, write)
    }

    fn push_inner(&self, capped: bool, write: impl FnOnce(&mut BytesMut)) -> Result<(), PushError> {
        let waker;
        {
            let mut s = lock(&self.state);
            if s.closed || (capped && s.overflowed) {
                return Err(PushError::Gone);
            }
            let start = s.buf.len();
            let body = frame::encode_with(&mut s.buf, write);
            if body > self.max_frame {
                s.buf.truncate(start);
                return Err(PushError::TooLarge);
            }
            if capped && s.buf.len() + s.writing > self.cap {
                s.buf.truncate(start);
                s.overflowed = true;
                let waker = s.waker.take();
                drop(s);
                if let Some(w) = waker {
                    w.wake();
                }
                return Err(PushError::Gone);
            }
            s.frames += 1;
            waker = s.waker.take();
        }
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// The owner's side: appends the queued frames to `out` (what the owner holds and has not
    /// yet written, counted against the cap from now on) and registers `waker` for the next
    /// write. Returns false once the outbox has overflowed.
    pub(crate) fn poll_take(&self, waker: &Waker, out: &mut BytesMut) -> bool {
        self.poll_take_counted(waker, out).0
    }

    /// As [`Outbox::poll_take`], also returning how many frames were taken.
    pub(crate) fn poll_take_counted(&self, waker: &Waker, out: &mut BytesMut) -> (bool, u64) {
        let mut s = lock(&self.state);
        let frames = std::mem::take(&mut s.frames);
        if !s.buf.is_empty() {
            if out.is_empty() {
                std::mem::swap(out, &mut s.buf);
            } else {
                out.extend_from_slice(&s.buf);
                s.buf.clear();
            }
        }
        s.writing = out.len();
        match &s.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => s.waker = Some(waker.clone()),
        }
        // An idle outbox keeps no buffer.
        if s.buf.capacity() > 0 && s.buf.is_empty() {
            s.buf = BytesMut::new();
        }
        (!s.overflowed, frames)
    }

    /// Reports the bytes the owner still holds unwritten (after a partial write).
    pub(crate) fn set_unwritten(&self, unwritten: usize) {
        lock(&self.state).writing = unwritten;
    }

    /// Bytes queued and not yet taken plus those taken and unwritten.
    pub(crate) fn pending(&self) -> usize {
        let s = lock(&self.state);
        s.buf.len() + s.writing
    }

    /// Whether the output passed the cap.
    #[cfg(test)]
    pub(crate) fn overflowed(&self) -> bool {
        lock(&self.state).overflowed
    }

    /// Closes the outbox: what is queued is dropped (returned as a frame count for the
    /// counters) and every later write is refused.
    pub(crate) fn close(&self) -> usize {
        let mut s = lock(&self.state);
        s.closed = true;
        s.waker = None;
        let mut buf = std::mem::take(&mut s.buf);
        drop(s);
        let mut frames = 0;
        while let Ok(Some(_)) = frame::decode(&mut buf, usize::MAX) {
            frames += 1;
        }
        frames
    }
}

/// Takes the next frame body off a buffer of length-prefixed frames (for WebSocket and UDP).
pub(crate) fn next_frame(buf: &mut BytesMut) -> Option<bytes::Bytes> {
    frame::decode(buf, usize::MAX).ok().flatten()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    use super::*;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn frames_come_out_in_order_and_wake_once() {
        let outbox = Outbox::new(100, 1000);
        let (count, waker) = waker();
        let mut out = BytesMut::new();
        assert!(outbox.poll_take(&waker, &mut out));
        outbox.push(b"one").unwrap();
        outbox.push(b"two").unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the first write wakes, the second need not");
        assert!(outbox.poll_take(&waker, &mut out));
        assert_eq!(next_frame(&mut out).as_deref(), Some(&b"one"[..]));
        assert_eq!(next_frame(&mut out).as_deref(), Some(&b"two"[..]));
        assert_eq!(next_frame(&mut out), None);
    }

    #[test]
    fn a_frame_over_the_transport_limit_is_refused_and_leaves_nothing() {
        let outbox = Outbox::new(4, 1000);
        assert_eq!(outbox.push(b"12345"), Err(PushError::TooLarge));
        assert_eq!(outbox.pending(), 0);
        assert_eq!(outbox.push(b"1234"), Ok(()));
    }

    #[test]
    fn the_cap_counts_what_the_owner_has_not_written() {
        let outbox = Outbox::new(100, 20);
        let (_, waker) = waker();
        outbox.push(b"0123456789").unwrap(); // 14 bytes with its prefix
        let mut out = BytesMut::new();
        assert!(outbox.poll_take(&waker, &mut out));
        assert_eq!(outbox.pending(), 14, "taken, not yet written");
        assert_eq!(outbox.push(b"0123456789"), Err(PushError::Gone), "14 + 14 > 20");
        assert!(outbox.overflowed());
        assert!(!outbox.poll_take(&waker, &mut out), "the owner learns of the overflow");
        assert_eq!(outbox.push(b"x"), Err(PushError::Gone), "overflowed stays overflowed");
        assert_eq!(outbox.push_uncapped(|b| b.put_slice(b"fatal")), Ok(()), "but the last word goes out");
    }

    #[test]
    fn a_closed_outbox_refuses_and_counts_what_it_dropped() {
        let outbox = Outbox::new(100, 1000);
        outbox.push(b"a").unwrap();
        outbox.push(b"b").unwrap();
        assert_eq!(outbox.close(), 2);
        assert_eq!(outbox.push(b"c"), Err(PushError::Gone));
        assert_eq!(outbox.push_uncapped(|b| b.put_slice(b"d")), Err(PushError::Gone));
    }
}
