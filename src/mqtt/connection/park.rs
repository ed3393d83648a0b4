//! Leaving the connection's task while it is idle, for a parking lot's (`crate::park`), and
//! coming back.
//!
//! Only a connection that holds its listener slot parks (plain TCP and TLS; over WebSocket the
//! HTTP connection keeps the slot, and the socket, in its own task). It parks when its timer
//! finds it idle for `mqtt.park_idle_ms` and nothing is buffered or held: no partial packet in,
//! no bytes out, no acknowledgement waiting for the disk or the cluster's store, no publish
//! paused. Only its [`Core`] waits in the lot: the buffers, the keep-alive timer and the
//! scratch space are dropped, and the lot resumes it at its deadline. A plain TCP socket
//! also leaves tokio's reactor for the server's watch of idle sockets
//! ([`crate::park::ParkableTcp`]) until the connection next reads or writes.

use std::task::{Context, Poll};
use std::time::Instant;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::Instrument;

use super::{Connection, Core};
use crate::listener::ConnectionSlot;
use crate::park::{ParkableTcp, Parked};

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<S> {
    /// Holds the listener's slot until the connection ends, which lets it park (see the module
    /// doc).
    pub(crate) fn hold_slot(&mut self, slot: ConnectionSlot) {
        self.core.slot = Some(slot);
        self.park_idle = self.core.ctx.mqtt.park_idle;
        // The first time it has nothing to do, right after CONNACK, it parks at once: a device
        // that connects and then only keeps alive frees its task before the next ones connect,
        // so a reconnect storm of a fleet reuses a few task cells instead of holding one each.
        self.park_due = self.park_idle.is_some();
        self.just_connected = true;
        if self.park_due {
            // So its socket, if still in no reactor, waits for the client's next bytes where a
            // parked connection's does.
            self.core.wait_in_idle_watch();
        }
        self.arm_timer();
    }

    /// Whether nothing is buffered or held, so that the connection can wait without a task.
    fn parkable(&self) -> bool {
        self.core.slot.is_some()
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

    /// Hands the connection to the parking lot; its task ends. What only a busy connection
    /// needs (its timer, buffers, scratch space) is dropped: the lot keeps the [`Core`].
    pub(super) fn park(self) {
        let ctx = self.core.ctx.clone();
        ctx.parking.park(Box::new(self.into_core()));
    }

    /// The part that waits in the lot.
    fn into_core(self) -> Core<S> {
        self.core
    }

    /// A connection polled in its lot, from what it kept: no timer (the lot keeps the deadline).
    fn polled_in_lot(core: Core<S>) -> Self {
        let mut c = Connection::from_core(core, BytesMut::new());
        c.park_idle = c.core.ctx.mqtt.park_idle;
        c.parked = true;
        c
    }

    /// The span to enter, or none when it is disabled.
    fn span(&self) -> tracing::Span {
        self.core.span.as_deref().cloned().unwrap_or_else(tracing::Span::none)
    }

    /// Gives the connection a task of its own again.
    fn resume(mut self: Box<Self>) {
        self.parked = false;
        self.arm_timer();
        let span = self.span();
        tokio::spawn(self.drive().instrument(span));
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Core<S> {
    /// Moves a plain TCP socket out of tokio's reactor into the server's watch of idle
    /// sockets, which wakes the lot's waker for this connection when the socket turns readable.
    /// The stream's type is the listener's choice (plain TCP, TLS, a test's duplex), so it is
    /// asked for here rather than spelled in every bound of `Connection`: other streams stay
    /// where they are.
    fn leave_reactor(&mut self, cx: &Context<'_>) {
        let Some(socket) = (&mut self.stream as &mut dyn std::any::Any).downcast_mut::<ParkableTcp>() else {
            return;
        };
        if let Some(watch) = self.ctx.parking.idle_watch() {
            socket.leave_reactor(watch, cx.waker());
        }
    }

    /// Lets a plain TCP socket still in no reactor (just accepted) wait for bytes in the
    /// server's watch of idle sockets (see [`ParkableTcp::wait_in`]).
    fn wait_in_idle_watch(&mut self) {
        let Some(socket) = (&mut self.stream as &mut dyn std::any::Any).downcast_mut::<ParkableTcp>() else {
            return;
        };
        if let Some(watch) = self.ctx.parking.idle_watch() {
            socket.wait_in(watch);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Parked for Core<S> {
    fn poll_idle(self: Box<Self>, cx: &mut Context<'_>) -> Option<Box<dyn Parked>> {
        // The same poll as in the task: with the lot's waker, it registers that waker with the
        // socket, the session and the live identity. Work it finds is done here, and unless the
        // connection is idle again after it, it resumes.
        let mut c = Connection::polled_in_lot(*self);
        let span = c.span();
        let _entered = span.enter();
        let idle = match c.poll_run(cx) {
            Poll::Ready(end) => {
                c.ended = Some(Box::new(end));
                false
            }
            Poll::Pending => c.parkable(),
        };
        if idle {
            let mut core = c.into_core();
            core.leave_reactor(cx);
            return Some(Box::new(core));
        }
        Box::new(c).resume();
        None
    }

    fn deadline(&self) -> Option<Instant> {
        Core::deadline(self)
    }

    fn resume(self: Box<Self>) {
        Box::new(Connection::polled_in_lot(*self)).resume();
    }
}
