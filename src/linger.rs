//! Closing a connection so that the peer reads what we sent last.
//!
//! When the server ends a connection (an MQTT 5 DISCONNECT with a reason, a refused CONNACK, a
//! relay `error` frame before closing), the peer may still be writing. Closing the socket with
//! unread data in its receive buffer makes the kernel answer with a reset, and a reset makes the
//! peer's kernel throw away what it had received but not yet delivered — our last packet
//! included. So, as HTTP servers do, we shut down our write side (the peer sees our data, then
//! end of stream), keep reading and discarding for a short, bounded time until the peer closes
//! too, and only then close.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How long a closing connection keeps reading after its last write.
pub(crate) const LINGER: Duration = Duration::from_secs(2);
/// How much a closing connection reads and discards at most.
const LINGER_BYTES: usize = 1024 * 1024;

/// Flushes `stream`, shuts its write side down, then reads and discards until the peer closes,
/// [`LINGER`] passes or [`LINGER_BYTES`] were read, whichever comes first.
pub(crate) async fn close<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    if tokio::time::timeout(LINGER, async {
        let _ = stream.flush().await;
        let _ = stream.shutdown().await;
    })
    .await
    .is_err()
    {
        return;
    }
    drain(stream).await;
}

/// Reads and discards until the peer closes, [`LINGER`] passes or [`LINGER_BYTES`] were read.
/// For a stream whose write side is already shut down.
pub(crate) async fn drain<S: AsyncRead + Unpin>(stream: &mut S) {
    let discard = async {
        let mut buf = [0u8; 4096];
        let mut read = 0;
        while read < LINGER_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, discard).await;
}
