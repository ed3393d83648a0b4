//! The one clock the front ends read.
//!
//! Tokio's clock rather than the standard one: in production they are the same instant, but a
//! test can pause Tokio's clock and move it by hand, and then keep-alive deadlines, will delays
//! and session expiry are exercised with explicit time instead of real waiting. The broker core
//! reads no clock at all; the instants it gets come from here.

use std::time::Instant;

/// Now, on the monotonic clock the server's timers run on.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}
