//! The durability gate: under `storage.durability = "always"`, an acknowledgement may leave only
//! once what it promises is on disk (the QoS 1/2 copies queued for persistent sessions, an
//! incoming QoS 2 packet id, a release), and a QoS 2 delivery only once its packet id is. Output
//! produced meanwhile is held, after the first held packet, so that the order of packets is kept.

use std::task::Context;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};

use super::Connection;

/// Output that must wait until journal sequence number `until` is on disk.
pub(super) struct Held {
    until: u64,
    bytes: BytesMut,
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
        match &mut self.held {
            Some(held) => held.until = held.until.max(seq),
            None => self.held = Some(Box::new(Held { until: seq, bytes: BytesMut::new() })),
        }
    }

    /// Releases held output once it may go; returns whether nothing is held any more.
    pub(super) fn release_gate(&mut self, cx: &mut Context<'_>) -> bool {
        let (Some(held), Some(journal)) = (&self.held, &self.journal) else { return true };
        if !journal.poll_durable(held.until, cx.waker()) {
            return false;
        }
        if let Some(held) = self.held.take() {
            self.outbuf.extend_from_slice(&held.bytes);
        }
        true
    }
}
