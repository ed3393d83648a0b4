//! Leaving the connection's task while it is idle, for a parking lot's (`crate::park`), and
//! coming back.
//!
//! Only a connection that holds its listener slot parks (plain TCP and TLS; over WebSocket the
//! HTTP connection keeps the slot, and the socket, in its own task). It parks when its timer
//! finds it idle for `mqtt.park_idle_ms` and nothing is buffered or held: no partial packet in,
//! no bytes out, no acknowledgement waiting for the disk or the cluster's store, no publish
//! paused. Its keep-alive timer is dropped; the lot resumes it at its deadline.

use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite};
use tracing::Instrument;

use super::Connection;
use crate::listener::ConnectionSlot;
use crate::park::Parked;

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<S> {
    /// Holds the listener's slot until the connection ends, which lets it park (see the module
    /// doc).
    pub(crate) fn hold_slot(&mut self, slot: ConnectionSlot) {
        self.slot = Some(slot);
        self.park_idle = self.ctx.mqtt.park_idle;
        // The first time it has nothing to do, right after CONNACK, it parks at once: a device
        // that connects and then only keeps alive frees its task before the next ones connect,
        // so a reconnect storm of a fleet reuses a few task cells instead of holding one each.
        self.park_due = self.park_idle.is_some();
        self.just_connected = true;
        self.arm_timer();
    }

    /// Whether nothing is buffered or held, so that the connection can wait without a task.
    fn parkable(&self) -> bool {
        self.slot.is_some()
            && self.inbuf.is_empty()
            && self.outbuf.is_empty()
            && self.held.is_none()
            && self.paused.is_none()
            && self.ended.is_none()
    }

    /// Whether the connection parks now (its timer found it idle): still idle and nothing
    /// buffered. Traffic since the timer fired puts the park off to a new idle period.
    pub(super) fn should_park(&mut self, cx: &mut Context<'_>) -> bool {
        let idle = std::mem::take(&mut self.just_connected)
            || self.park_idle.is_some_and(|idle| self.last_active + idle <= crate::clock::now());
        if !idle {
            self.park_due = false;
            self.arm_timer();
            // Poll again, so that the timer just set registers this task.
            cx.waker().wake_by_ref();
            return false;
        }
        self.parkable()
    }

    /// Hands the connection to the parking lot; its task ends.
    pub(super) fn park(mut self: Box<Self>) {
        self.park_due = false;
        self.parked = true;
        // What an idle connection does not need: its timer (the lot keeps the deadline) and
        // the delivery scratch space.
        self.timer = None;
        self.scratch = Vec::new();
        let ctx = self.ctx.clone();
        ctx.parking.park(self);
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Parked for Connection<S> {
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> bool {
        // The same poll as in the task: with the lot's waker, it registers that waker with the
        // socket, the session and the live identity. Work it finds is done here and the
        // connection resumes.
        let _entered = self.span.clone().entered();
        match self.poll_run(cx) {
            Poll::Ready(end) => {
                self.ended = Some(Box::new(end));
                false
            }
            Poll::Pending => self.parkable(),
        }
    }

    fn deadline(&self) -> Option<Instant> {
        Connection::deadline(self)
    }

    fn resume(mut self: Box<Self>) {
        self.parked = false;
        self.arm_timer();
        let span = self.span.clone();
        tokio::spawn(self.drive().instrument(span));
    }
}
