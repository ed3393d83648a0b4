//! Back-pressure from the broker-wide queue budget: a connection stops at the next PUBLISH it
//! would read while the budget is under pressure, unless its own session has deliveries queued
//! or in flight (their acknowledgements, read from this very connection, are what frees the
//! budget). See [`crate::limits::budget`] for why this and not withheld acknowledgements.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;

use mesgd_core::mqtt::PacketType;
use mesgd_core::session::QueueBudget;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::futures::OwnedNotified;

use super::Connection;

/// A connection paused by the budget: counted in the paused-readers gauge while it exists.
pub(super) struct Paused {
    /// Fires when the budget's pressure ends; enabled before the pressure was last checked.
    resumed: Pin<Box<OwnedNotified>>,
    budget: Arc<QueueBudget>,
}

impl Paused {
    fn new(budget: &Arc<QueueBudget>) -> Paused {
        budget.reader_paused();
        Paused { resumed: armed(budget), budget: budget.clone() }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        self.budget.reader_resumed();
    }
}

/// A wake-up for the next end of pressure, registered now so that an end between this call and
/// the caller's check of the pressure is not missed.
fn armed(budget: &QueueBudget) -> Pin<Box<OwnedNotified>> {
    let mut resumed = Box::pin(budget.resumed());
    resumed.as_mut().enable();
    resumed
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<S> {
    /// Whether the next packet in the input is a PUBLISH that must wait for the budget; if so,
    /// the connection is now paused (and counted, and logged once per interval).
    pub(super) fn publish_must_wait(&mut self) -> bool {
        if self.paused.is_some() {
            return true;
        }
        let next_is_publish = self.inbuf.first().is_some_and(|b| b >> 4 == PacketType::Publish as u8);
        let budget = self.core.ctx.broker.budget();
        if !next_is_publish || !budget.under_pressure() || self.core.session.has_pending() {
            return false;
        }
        let paused = Paused::new(budget);
        // The pressure may have ended just before the wake-up was armed.
        if !budget.under_pressure() {
            return false;
        }
        self.paused = Some(Box::new(paused));
        if let Some(more) = self.core.ctx.limits.logs.queue_budget.tripped(self.now) {
            let limits = budget.limits();
            tracing::warn!(
                queued_bytes = budget.used(),
                max_queued_bytes_total = limits.max_bytes,
                pause_at = limits.pause_at,
                resume_below = limits.resume_below,
                paused_connections = budget.paused_readers(),
                dropped_for_budget = budget.dropped(),
                more_since_last_line = more,
                "queued messages over the budget's pause threshold: publishers paused"
            );
        }
        true
    }

    /// Logs, once per interval, that a message this connection published was dropped by the
    /// budget's hard cap for some receivers.
    pub(super) fn log_budget_drop(&self) {
        let budget = self.core.ctx.broker.budget();
        if let Some(more) = self.core.ctx.limits.logs.queue_budget_drops.tripped(self.now) {
            tracing::warn!(
                queued_bytes = budget.used(),
                max_queued_bytes_total = budget.limits().max_bytes,
                dropped_for_budget = budget.dropped(),
                more_since_last_line = more,
                "queued messages at the budget: deliveries dropped"
            );
        }
    }

    /// Whether a paused connection may read again: the pressure ended, or its own session now
    /// has deliveries whose acknowledgements it must read. Registers the task to be woken when
    /// the pressure ends otherwise. True for a connection that is not paused.
    pub(super) fn poll_resume(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(paused) = self.paused.as_mut() else { return true };
        loop {
            if !paused.budget.under_pressure() || self.core.session.has_pending() {
                self.paused = None;
                // The client was stopped by the broker, not silent: its keep-alive counts from now.
                self.core.last_received = self.now;
                return true;
            }
            if paused.resumed.as_mut().poll(cx).is_pending() {
                return false;
            }
            // Woken, but pressure may have come back at once: wait for its next end.
            paused.resumed = armed(&paused.budget);
        }
    }
}
