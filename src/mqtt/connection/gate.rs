//! The durability gate: under `storage.durability = "always"`, an acknowledgement may leave only
//! once what it promises is on disk (the QoS 1/2 copies queued for persistent sessions, an
//! incoming QoS 2 packet id, a release), and a QoS 2 delivery only once its packet id is. Output
//! produced meanwhile is held, after the first held packet, so that the order of packets is kept.
//!
//! On a clustered node the same gate holds a QoS 1/2 publish's PUBACK / PUBREC until the
//! cluster's message store (JetStream) has acknowledged the message
//! (`mesgd_core::cluster::durable`): the connection keeps reading meanwhile, so its stores are
//! pipelined, and its acknowledgements leave in order as the store's answers arrive. A store
//! that fails closes the connection without the acknowledgement (the client publishes again
//! when it reconnects).

use std::task::Context;

use bytes::BytesMut;
use mesgd_core::cluster::durable::Stored;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Connection, End};

/// Output that must wait until journal sequence number `until` is on disk (0: nothing to wait
/// for) and the cluster store has acknowledged the stores `stored.0..=stored.1`.
pub(super) struct Held {
    until: u64,
    stored: Option<(u64, u64)>,
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
    fn empty() -> Box<Held> {
        Box::new(Held { until: 0, stored: None, bytes: BytesMut::new() })
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Connection<S> {
    /// Where output goes now: the socket buffer, or the held buffer while a gate is closed.
    pub(super) fn out(&mut self) -> &mut BytesMut {
        match &mut self.held {
            Some(held) => &mut held.bytes,
            None => &mut self.outbuf,
        }
    }

    /// Output not yet written, held or not (for backpressure).
    pub(super) fn pending_output(&self) -> usize {
        self.outbuf.len() + self.held.as_ref().map_or(0, |h| h.bytes.len())
    }

    /// Holds all further output until journal sequence number `seq` is durable (only when
    /// acknowledgements wait for the disk).
    pub(super) fn hold_until(&mut self, seq: Option<u64>) {
        let (Some(seq), Some(_)) = (seq, &self.journal) else { return };
        let held = self.held.get_or_insert_with(Held::empty);
        held.until = held.until.max(seq);
    }

    /// Holds all further output until the cluster store has acknowledged store `seq` (on a
    /// clustered node, for a QoS 1/2 publish).
    pub(super) fn hold_until_stored(&mut self, seq: Option<u64>) {
        let (Some(seq), Some(_)) = (seq, &self.store) else { return };
        let held = self.held.get_or_insert_with(Held::empty);
        held.stored = Some(match held.stored {
            Some((from, until)) => (from.min(seq), until.max(seq)),
            None => (seq, seq),
        });
    }

    /// Releases held output once it may go; returns whether nothing is held any more, or that
    /// it never can go (a store failed).
    pub(super) fn release_gate(&mut self, cx: &mut Context<'_>) -> Result<bool, StoreFailed> {
        let Some(held) = &mut self.held else { return Ok(true) };
        if let (Some((from, until)), Some(store)) = (held.stored, &self.store) {
            match store.poll_stored(from, until, cx.waker()) {
                Stored::Yes => held.stored = None,
                Stored::Failed => return Err(StoreFailed),
                _ => return Ok(false),
            }
        }
        if held.until > 0 {
            let Some(journal) = &self.journal else { return Ok(true) };
            if !journal.poll_durable(held.until, cx.waker()) {
                return Ok(false);
            }
        }
        if let Some(held) = self.held.take() {
            self.outbuf.extend_from_slice(&held.bytes);
        }
        Ok(true)
    }
}
