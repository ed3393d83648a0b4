//! The durability gate: under `storage.durability = "always"`, an acknowledgement may leave only
//! once what it promises is on disk (the QoS 1/2 copies queued for persistent sessions, an
//! incoming QoS 2 packet id, a release), and a QoS 2 delivery only once its packet id is. Output
//! produced meanwhile is held, after the first held packet, so that the order of packets is kept;
//! on a clustered node it is held in segments, one per store awaited, so that each packet leaves
//! as soon as what it and the packets before it wait for is done, not when the last store is.
//!
//! On a clustered node the same gate holds a SUBACK until the node's subscriptions are in place
//! in NATS (so that messages published on other nodes right after it reach the client), and a
//! QoS 1/2 publish's PUBACK / PUBREC until the
//! cluster's message store (JetStream) has acknowledged the message
//! (`mesgd_core::cluster::durable`): the connection keeps reading meanwhile, so its stores are
//! pipelined, and its acknowledgements leave in order as the store's answers arrive. A store
//! that fails closes the connection without the acknowledgement (the client publishes again
//! when it reconnects).

use std::collections::VecDeque;
use std::task::Context;

use bytes::BytesMut;
use mesgd_core::cluster::durable::Stored;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Connection, End};

/// At most this many held segments per connection; past it, new requirements join the last
/// segment (its packets then wait a little longer, never less).
const MAX_SEGMENTS: usize = 1024;

/// Output held behind requirements, in segments: each waits for what its first packet needs
/// and for everything before it, so packets leave in order and each as soon as it may.
pub(super) struct Held {
    segments: VecDeque<Segment>,
}

/// Output that must wait until journal sequence number `until` is on disk (0: nothing to wait
/// for), the cluster store has acknowledged the stores `stored.0..=stored.1`, and the cluster
/// has confirmed the node's subscriptions as of interest generation `interest` (0: nothing).
struct Segment {
    until: u64,
    stored: Option<(u64, u64)>,
    interest: u64,
    bytes: BytesMut,
}

/// Why held output can never go: the cluster store failed one of the messages it waits for.
pub(super) struct StoreFailed;

impl From<StoreFailed> for End {
    fn from(_: StoreFailed) -> End {
        End::StoreFailed
    }
}

impl Held {
    /// The segment the next requirement applies to: with `split`, the last one while nothing
    /// was written into it (or the cap is reached), else a new one; without, the last one.
    ///
    /// Only the cluster store's requirements split: the journal's join the last segment, so
    /// that on a single node the gate holds everything until the highest sequence number is
    /// durable, as it always has (one segment).
    fn requiring(held: &mut Option<Box<Held>>, split: bool) -> &mut Segment {
        let held = held.get_or_insert_with(|| Box::new(Held { segments: VecDeque::new() }));
        let count = held.segments.len();
        let fresh = held.segments.back().is_none_or(|s| split && !s.bytes.is_empty() && count < MAX_SEGMENTS);
        if fresh {
            held.segments.push_back(Segment { until: 0, stored: None, interest: 0, bytes: BytesMut::new() });
        }
        held.segments.back_mut().expect("a segment")
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<S> {
    /// Where output goes now: the socket buffer, or the last held segment while any is held.
    pub(super) fn out(&mut self) -> &mut BytesMut {
        match self.held.as_mut().and_then(|h| h.segments.back_mut()) {
            Some(segment) => &mut segment.bytes,
            None => &mut self.outbuf,
        }
    }

    /// Output not yet written, held or not (for backpressure).
    pub(super) fn pending_output(&self) -> usize {
        self.outbuf.len() + self.held.as_ref().map_or(0, |h| h.segments.iter().map(|s| s.bytes.len()).sum())
    }

    /// Holds all further output until journal sequence number `seq` is durable (only when
    /// acknowledgements wait for the disk).
    pub(super) fn hold_until(&mut self, seq: Option<u64>) {
        let (Some(seq), Some(_)) = (seq, &self.journal) else { return };
        let segment = Held::requiring(&mut self.held, false);
        segment.until = segment.until.max(seq);
    }

    /// Holds all further output until the cluster store has acknowledged store `seq` (on a
    /// clustered node, for a QoS 1/2 publish).
    pub(super) fn hold_until_stored(&mut self, seq: Option<u64>) {
        let (Some(seq), Some(_)) = (seq, &self.store) else { return };
        let segment = Held::requiring(&mut self.held, true);
        segment.stored = Some(match segment.stored {
            Some((from, until)) => (from.min(seq), until.max(seq)),
            None => (seq, seq),
        });
    }

    /// Holds all further output until the cluster has confirmed the node's subscriptions as of
    /// interest generation `generation` (on a clustered node, for a SUBACK: the client may count
    /// on other nodes' messages once it has it).
    pub(super) fn hold_until_interest(&mut self, generation: u64) {
        if generation == 0 {
            return;
        }
        let segment = Held::requiring(&mut self.held, true);
        segment.interest = segment.interest.max(generation);
    }

    /// Releases held segments, in order, as far as they may go; returns whether nothing is held
    /// any more, or that some output never can go (a store failed).
    pub(super) fn release_gate(&mut self, cx: &mut Context<'_>) -> Result<bool, StoreFailed> {
        let Some(held) = &mut self.held else { return Ok(true) };
        while let Some(segment) = held.segments.front_mut() {
            if let (Some((from, until)), Some(store)) = (segment.stored, &self.store) {
                match store.poll_stored(from, until, cx.waker()) {
                    Stored::Yes => segment.stored = None,
                    Stored::Failed => return Err(StoreFailed),
                    _ => return Ok(false),
                }
            }
            if segment.interest > 0 {
                let interest = self.core.ctx.broker.router().interest();
                if interest.is_some_and(|i| !i.poll_synced(segment.interest, cx.waker())) {
                    return Ok(false);
                }
                segment.interest = 0;
            }
            if segment.until > 0 {
                if let Some(journal) = &self.journal {
                    if !journal.poll_durable(segment.until, cx.waker()) {
                        return Ok(false);
                    }
                }
            }
            if let Some(segment) = held.segments.pop_front() {
                self.outbuf.extend_from_slice(&segment.bytes);
            }
        }
        self.held = None;
        Ok(true)
    }
}
