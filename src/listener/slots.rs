//! Counting open connections, for `limits.max_connections` and for waiting at shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

use crate::limits::IpSlot;

/// The open connections of every listener.
#[derive(Debug, Default)]
pub(crate) struct Connections {
    open: AtomicUsize,
    all_closed: Notify,
}

/// Held by each connection task (and by a WebSocket that outlives its HTTP exchange); the count
/// drops with it, and so does its address's count (`limits.max_connections_per_ip`). A parked
/// MQTT connection keeps it for its whole life, so it holds nothing else (the handshake
/// deadline travels beside it, see [`super::Endpoint`]).
#[derive(Debug)]
pub(crate) struct ConnectionSlot {
    connections: Arc<Connections>,
    ip: Option<IpSlot>,
}

impl Connections {
    /// A slot, unless `max` connections are open.
    pub(crate) fn try_open(self: &Arc<Self>, max: usize) -> Option<ConnectionSlot> {
        let mut n = self.open.load(Ordering::Relaxed);
        loop {
            if n >= max {
                return None;
            }
            match self.open.compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    return Some(ConnectionSlot { connections: self.clone(), ip: None });
                }
                Err(actual) => n = actual,
            }
        }
    }

    /// How many connections are open.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Fires when the last connection closes (register before checking [`Connections::open`]).
    pub(crate) fn all_closed(&self) -> &Notify {
        &self.all_closed
    }
}

impl ConnectionSlot {
    /// The slot, also holding its address's place.
    pub(crate) fn with_ip(mut self, ip: IpSlot) -> Self {
        self.ip = Some(ip);
        self
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        if self.connections.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.connections.all_closed.notify_waiters();
        }
    }
}
