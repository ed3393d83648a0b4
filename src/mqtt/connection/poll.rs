//! The poll loop: output first, then input with back-pressure, the timers, and live changes
//! to the client's identity.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use mesgd_core::broker::{DropReason, IdentityUpdate, Stats};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Connection, Core, End};

/// Stop reading and draining while this much output waits for the socket: a client that does
/// not read cannot make the broker buffer without bound.
pub(super) const OUT_HIGH_WATER: usize = 256 * 1024;
/// Read buffer growth step.
const READ_CHUNK: usize = 8 * 1024;
/// Messages taken from the session per drain call.
const DRAIN_BATCH: usize = 256;

impl<S> Core<S> {
    /// How long the client may stay silent: one and a half keep-alive periods (MQTT-3.1.2-24),
    /// or no limit for a keep-alive of 0.
    pub(super) fn keep_alive(&self) -> Option<Duration> {
        let period = Duration::from_secs(self.keep_alive_s.into());
        (self.keep_alive_s != 0).then(|| period + period / 2)
    }

    /// The next keep-alive or credential-expiry deadline.
    pub(super) fn deadline(&self) -> Option<Instant> {
        let keep_alive = self.keep_alive().map(|ka| self.last_received + ka);
        [keep_alive, self.identity_expires].into_iter().flatten().min()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<S> {
    pub(super) fn poll_run(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        loop {
            self.now = crate::clock::now();
            if let Some(kick) = self.core.session.poll_kick(self.core.generation, cx.waker()) {
                return Poll::Ready(End::Kicked(kick));
            }
            // After poll_kick registered this task with the session: a change published after
            // this check wakes it through the session.
            if let Some(end) = self.poll_identity() {
                return Poll::Ready(end);
            }
            // Output first: a connection woken because messages were queued for it writes them
            // before it spends a system call finding that its socket has nothing to read.
            let mut again = false;
            if self.pending_output() < OUT_HIGH_WATER {
                again |= self.drain_session(cx);
            }
            if let Err(failed) = self.release_gate(cx) {
                return Poll::Ready(failed.into());
            }
            if let Err(e) = self.poll_write(cx) {
                return Poll::Ready(End::Io(e));
            }
            match self.poll_read(cx) {
                Ok(progress) => again |= progress,
                Err(end) => return Poll::Ready(end),
            }
            if self.routed {
                // Let the subscribers this read woke write their deliveries before this
                // connection reads again or writes its acknowledgements, as a single-threaded
                // broker would: at low load that takes two system calls off every message's
                // path. This task runs again right after them.
                self.routed = false;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if let Some(end) = self.poll_timer(cx) {
                return Poll::Ready(end);
            }
            if !again {
                crate::lean_read::release_if_empty(&mut self.inbuf);
                return Poll::Pending;
            }
        }
    }

    /// Reads and handles packets until the socket has nothing more (or output backs up, or the
    /// queue budget pauses this publisher). Returns whether anything was read.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Result<bool, End> {
        let mut progress = false;
        while self.pending_output() < OUT_HIGH_WATER {
            if self.paused.is_some() {
                if !self.poll_resume(cx) {
                    break;
                }
                // What was read before the pause waits in the input.
                progress = true;
                self.handle_input()?;
                if self.routed {
                    break;
                }
                // Paused again or not, the next round goes on from here.
                continue;
            }
            // Publishers wait while the journal's backlog is over its bound (a slow disk): what
            // they send would be promises the broker cannot yet keep.
            if self.core.ctx.broker.journal().is_some_and(|j| !j.poll_room(cx.waker())) {
                break;
            }
            let polled =
                crate::lean_read::poll_read::<_, READ_CHUNK>(&mut self.core.stream, cx, &mut self.inbuf);
            match polled {
                Poll::Pending => break,
                Poll::Ready(Ok(0)) => return Err(End::Closed),
                Poll::Ready(Ok(n)) => {
                    Stats::add(&self.core.ctx.broker.stats().bytes_received, n as u64);
                    Stats::add(&self.traffic().bytes_in, n as u64);
                    self.core.last_received = self.now;
                    self.last_active = self.now;
                    progress = true;
                    // A PUBLISH that must wait for the budget pauses the connection here; the
                    // next round registers for the wake-up.
                    self.handle_input()?;
                    if self.routed {
                        break;
                    }
                }
                Poll::Ready(Err(e)) => return Err(End::Io(e)),
            }
        }
        Ok(progress)
    }

    fn poll_write(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        while !self.outbuf.is_empty() {
            match Pin::new(&mut self.core.stream).poll_write(cx, &self.outbuf) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => {
                    Stats::add(&self.core.ctx.broker.stats().bytes_sent, n as u64);
                    Stats::add(&self.traffic().bytes_out, n as u64);
                    self.outbuf.advance(n);
                    self.last_active = self.now;
                }
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(()),
            }
        }
        // TLS and WebSocket streams buffer internally; a plain TCP flush is a no-op.
        match Pin::new(&mut self.core.stream).poll_flush(cx) {
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Ready(Ok(())) | Poll::Pending => {}
        }
        if self.outbuf.capacity() > 0 {
            self.outbuf = BytesMut::new();
        }
        Ok(())
    }

    /// Moves queued deliveries into the output. Returns whether more are ready right away.
    fn drain_session(&mut self, cx: &mut Context<'_>) -> bool {
        let now = self.now;
        let mut batch = std::mem::take(&mut self.scratch);
        let stats = self.core.session.drain(
            self.core.generation,
            usize::from(self.core.window),
            DRAIN_BATCH,
            now,
            cx.waker(),
            &mut batch,
        );
        self.hold_until(stats.gate);
        if stats.expired > 0 {
            self.core.ctx.broker.stats().dropped(DropReason::Expired, stats.expired as u64);
        }
        let mut sent = 0;
        for o in batch.drain(..) {
            sent += usize::from(self.write_outgoing(o, now));
        }
        self.count_sent(sent);
        self.scratch = batch;
        stats.more
    }

    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Option<End> {
        loop {
            let timer = self.timer.as_mut()?;
            if timer.as_mut().poll(cx).is_pending() {
                return None;
            }
            let now = crate::clock::now();
            if self.core.identity_expires.is_some_and(|at| at <= now) {
                return Some(End::IdentityExpired);
            }
            if self.paused.is_some() {
                // Not reading is the broker's doing: the client is not late.
                self.core.last_received = now;
            }
            if self.core.keep_alive().is_some_and(|ka| self.core.last_received + ka <= now) {
                return Some(End::KeepAliveTimeout);
            }
            if self.park_idle.is_some_and(|idle| self.last_active + idle <= now) {
                // Parks once this poll finds nothing more to do (see `drive`).
                self.park_due = true;
            }
            self.arm_timer();
        }
    }

    /// Sets the timer to the next keep-alive or identity-expiry deadline. Reads do not move
    /// the timer (that would touch the timer wheel per packet); it fires at the old deadline and
    /// re-arms from the last read.
    pub(super) fn arm_timer(&mut self) {
        if self.parked {
            // The lot keeps the deadline.
            return;
        }
        let park = self.park_idle.filter(|_| !self.park_due).map(|idle| self.last_active + idle);
        let Some(deadline) = [self.deadline(), park].into_iter().flatten().min() else {
            self.timer = None;
            return;
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        match &mut self.timer {
            Some(t) => t.as_mut().reset(deadline),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    /// The next keep-alive or credential-expiry deadline.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.core.deadline()
    }

    /// Applies a live change the identity's provider made (rules edited, account disabled or
    /// deleted) through the broker's one implementation of it.
    fn poll_identity(&mut self) -> Option<End> {
        let live = self.core.live.as_mut().filter(|live| live.has_changed())?;
        match self.core.ctx.broker.refresh_identity(
            &self.core.session,
            live.current(),
            self.core.username.as_deref(),
        ) {
            IdentityUpdate::Rules(acl) => {
                self.core.acl = acl;
                tracing::info!("rules changed: new ACL applies from now on");
                None
            }
            IdentityUpdate::Revoked(kick) => Some(End::Kicked(kick)),
        }
    }
}
