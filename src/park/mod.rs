//! Idle connections parked together, so that an idle client costs no task and no timer of its
//! own.
//!
//! A connection is one task while it has something to do. Once it has read and written nothing
//! for `mqtt.park_idle_ms`, with no buffered input or output and nothing held, it hands itself
//! to the [`ParkingLot`] and its task ends: tokio's task cell (about 512 bytes) and its
//! keep-alive timer (about 100) are freed. A lot holds up to [`LOT_SIZE`] connections in one
//! task with one timer, its earliest deadline. Each parked connection is polled once with a
//! waker of its own (a [`SlotWaker`]), which registers that waker with everything that can wake
//! it (its socket, its session's queue and kicks, its live identity); when any of them fires,
//! or its deadline (keep-alive, credential expiry) passes, the lot gives it a task of its own
//! again ([`Parked::resume`]) and that task goes on exactly where the old one stopped.
//!
//! Why lots of 64 and not one task for every idle connection: a wake names its slot, so the lot
//! does work only for the connections that woke, but the lot's task is one future, polled on one
//! thread at a time; small lots spread resumes over the runtime's threads and keep one lot's
//! work short. A lot that empties ends its task.
//!
//! # Layout
//!
//! - this file: the lots, their tasks and the per-connection wakers.
//! - [`socket`]: a plain TCP socket that waits outside tokio's reactor while its connection is
//!   parked ([`ParkableTcp`]), in the server's one [`IdleWatch`], and that enters no reactor
//!   after its accept until it has to wait.

mod socket;

pub(crate) use socket::{IdleWatch, ParkableTcp};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Wake, Waker};
use std::time::Instant;

use mesgd_core::sync::lock;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

/// Connections one lot holds at most.
pub(crate) const LOT_SIZE: usize = 64;

/// A connection that waits in a lot.
pub(crate) trait Parked: Send {
    /// Polls the connection once with the lot's waker, which it registers with everything
    /// that can wake it. Returns it if it is still idle; when the poll found work (or the end),
    /// it has resumed itself.
    fn poll_idle(self: Box<Self>, cx: &mut Context<'_>) -> Option<Box<dyn Parked>>;

    /// When the lot must resume it even if nothing wakes it (keep-alive, credential expiry).
    fn deadline(&self) -> Option<Instant>;

    /// Gives the connection a task of its own again.
    fn resume(self: Box<Self>);
}

/// The lots of a server, and how many connections they hold.
#[derive(Debug, Default)]
pub(crate) struct ParkingLot {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Lots with room for another connection (the last one is filled first).
    open: Mutex<Vec<Arc<Lot>>>,
    /// Connections parked now.
    parked: Gauge,
    /// Connections parked, ever.
    parks: Counter,
    /// Connections resumed, ever.
    resumes: Counter,
    /// The epoll set of parked sockets, started by the first socket that parks; `None` if it
    /// could not be started (parked sockets then stay in tokio's reactor).
    watch: OnceLock<Option<Arc<IdleWatch>>>,
    /// Parked connections' sockets in the watch now.
    sockets_watched: Gauge,
}

#[derive(Default)]
struct Lot {
    inbox: Mutex<Inbox>,
    notify: Notify,
    /// Connections given to this lot and not yet resumed (changed with `Shared::open` locked).
    assigned: AtomicUsize,
}

impl std::fmt::Debug for Lot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lot").field("assigned", &self.assigned.load(Ordering::Relaxed)).finish()
    }
}

#[derive(Default)]
struct Inbox {
    /// Connections handed over, not yet placed in a slot.
    arriving: Vec<Box<dyn Parked>>,
    /// Slots whose waker fired: (index, generation). Each waker pushes once, so this holds at
    /// most one entry per parked connection.
    woken: Vec<(u32, u32)>,
}

/// The waker of one parked connection: it names its slot. One is allocated per park, so it is
/// kept to 40 bytes with its reference counts (a lot has [`LOT_SIZE`] slots; a generation
/// repeats only after 2^32 parks in one slot, and then only a wake that old would be misread).
struct SlotWaker {
    lot: Weak<Lot>,
    index: u32,
    generation: u32,
    fired: AtomicBool,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.fired.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(lot) = self.lot.upgrade() {
            lock(&lot.inbox).woken.push((self.index, self.generation));
            lot.notify.notify_one();
        }
    }
}

/// One slot of a lot's task: 24 bytes per parked connection. Its deadline is asked of the
/// connection at each turn of the lot rather than kept here (a parked connection's deadline
/// does not change while it waits, and computing it is two additions).
#[derive(Default)]
struct Slot {
    connection: Option<Box<dyn Parked>>,
    /// Raised each time the slot takes a connection, so that a late wake of an earlier one is
    /// ignored.
    generation: u32,
}

impl ParkingLot {
    /// Parks `connection` in a lot with room (starting one when none has). Must be called from
    /// within the runtime.
    pub(crate) fn park(&self, connection: Box<dyn Parked>) {
        let mut open = lock(&self.shared.open);
        let lot = match open.last() {
            Some(lot) => lot.clone(),
            None => {
                let lot = Arc::new(Lot::default());
                tokio::spawn(run(lot.clone(), self.shared.clone()));
                open.push(lot.clone());
                lot
            }
        };
        if lot.assigned.fetch_add(1, Ordering::AcqRel) + 1 == LOT_SIZE {
            open.pop();
        }
        lock(&lot.inbox).arriving.push(connection);
        drop(open);
        self.shared.parked.inc();
        self.shared.parks.inc();
        lot.notify.notify_one();
    }

    /// How many connections are parked now.
    pub(crate) fn parked(&self) -> usize {
        usize::try_from(self.shared.parked.get()).unwrap_or(0)
    }

    /// The gauge of parked connections and the counters of parks and resumes, for `/metrics`.
    pub(crate) fn metrics(&self) -> (Gauge, Counter, Counter) {
        (self.shared.parked.clone(), self.shared.parks.clone(), self.shared.resumes.clone())
    }

    /// The gauge of parked sockets waiting outside tokio's reactor, for `/metrics`.
    pub(crate) fn sockets_watched_gauge(&self) -> Gauge {
        self.shared.sockets_watched.clone()
    }

    /// How many parked connections' sockets wait outside tokio's reactor now.
    pub(crate) fn sockets_watched(&self) -> usize {
        usize::try_from(self.shared.sockets_watched.get()).unwrap_or(0)
    }

    /// The server's watch of parked sockets, started on first use.
    pub(crate) fn idle_watch(&self) -> Option<&Arc<IdleWatch>> {
        self.shared
            .watch
            .get_or_init(|| match IdleWatch::start(self.shared.sockets_watched.clone()) {
                Ok(watch) => Some(Arc::new(watch)),
                Err(e) => {
                    tracing::warn!(error = %e, "could not start the watch of idle sockets: parked MQTT connections keep their sockets in tokio's reactor (about 270 bytes each)");
                    None
                }
            })
            .as_ref()
    }
}

/// A lot's task: places arriving connections, resumes the woken and the due, and ends when
/// the lot is empty.
async fn run(lot: Arc<Lot>, shared: Arc<Shared>) {
    let mut slots: Vec<Slot> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    loop {
        let (arriving, woken) = {
            let mut inbox = lock(&lot.inbox);
            (std::mem::take(&mut inbox.arriving), std::mem::take(&mut inbox.woken))
        };
        let mut resumed = 0;
        for (index, generation) in woken {
            let index = index as usize;
            let slot = &mut slots[index];
            if slot.generation == generation
                && let Some(connection) = slot.connection.take()
            {
                free.push(index);
                connection.resume();
                resumed += 1;
            }
        }
        for connection in arriving {
            let index = free.pop().unwrap_or_else(|| {
                slots.push(Slot::default());
                slots.len() - 1
            });
            let slot = &mut slots[index];
            slot.generation = slot.generation.wrapping_add(1);
            let waker = Waker::from(Arc::new(SlotWaker {
                lot: Arc::downgrade(&lot),
                // A lot has at most LOT_SIZE slots.
                index: index as u32,
                generation: slot.generation,
                fired: AtomicBool::new(false),
            }));
            match connection.poll_idle(&mut Context::from_waker(&waker)) {
                Some(connection) => slot.connection = Some(connection),
                None => {
                    free.push(index);
                    resumed += 1;
                }
            }
        }
        let now = crate::clock::now();
        let mut next: Option<Instant> = None;
        for (index, slot) in slots.iter_mut().enumerate() {
            let Some(connection) = &slot.connection else { continue };
            match connection.deadline() {
                Some(at) if at <= now => {
                    if let Some(connection) = slot.connection.take() {
                        free.push(index);
                        connection.resume();
                        resumed += 1;
                    }
                }
                Some(at) => next = Some(next.map_or(at, |n| n.min(at))),
                None => {}
            }
        }
        if resumed > 0 {
            shared.parked.dec_by(resumed as i64);
            shared.resumes.inc_by(resumed as u64);
            if release(&lot, &shared, resumed) {
                return;
            }
        }
        match next {
            Some(at) => {
                let _ = tokio::time::timeout_at(at.into(), lot.notify.notified()).await;
            }
            None => lot.notify.notified().await,
        }
    }
}

/// Gives back `resumed` places of `lot`: reopens it if it was full; retires it (true) if it is
/// empty, so that its task ends.
fn release(lot: &Arc<Lot>, shared: &Shared, resumed: usize) -> bool {
    let mut open = lock(&shared.open);
    let before = lot.assigned.fetch_sub(resumed, Ordering::AcqRel);
    if before == LOT_SIZE {
        open.push(lot.clone());
    }
    if before == resumed {
        // Nothing is assigned, so nothing is arriving either: `park` assigns under this lock.
        open.retain(|l| !Arc::ptr_eq(l, lot));
        return true;
    }
    false
}
