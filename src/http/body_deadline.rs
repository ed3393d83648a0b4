//! The deadline on a request body: hyper's header timeout ends once the headers are in, so a
//! client could announce `Content-Length: 100`, send ten bytes and hold the connection (and its
//! per-address slot) for as long as it likes. Every request body is therefore wrapped in a
//! [`DeadlineBody`] that fails once `limits.connect_timeout_ms` has passed since the headers
//! arrived; [`serve`](super::serve) then answers 408 and closes the connection, whatever the
//! route did with the error.
//!
//! The timer is only armed when a route actually waits for body bytes, so a request without a
//! body (or whose body is already buffered) costs no allocation.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

/// The error a body read gets once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within connect_timeout_ms")]
pub(crate) struct BodyTimedOut;

/// A request body that fails at `deadline` and records that it did in `expired`.
pub(crate) struct DeadlineBody {
    inner: Incoming,
    deadline: Instant,
    timer: Option<Pin<Box<Sleep>>>,
    expired: Arc<AtomicBool>,
}

impl DeadlineBody {
    /// Wraps `inner`; `expired` is set if a read runs into `deadline`.
    pub(crate) fn new(inner: Incoming, deadline: Instant, expired: Arc<AtomicBool>) -> Self {
        DeadlineBody { inner, deadline, timer: None, expired }
    }
}

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
