//! Reading a socket without holding a read buffer while the connection is idle.
//!
//! Most connections are idle most of the time, and a buffer per idle connection is most of
//! what it costs (a few KiB against a few hundred bytes of state). So a connection whose buffer
//! is empty reads onto the stack first and copies into its (then allocated) buffer only what
//! arrived; a wake-up with nothing to read allocates nothing. Once bytes are buffered (a partial
//! frame), it reads straight into the buffer, growing it in `CHUNK` steps. The MQTT, relay TCP
//! and relay WebSocket connections read this way, and drop their buffer when it empties.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, ReadBuf};

/// Reads what `stream` has into `inbuf` (at most `CHUNK` bytes onto the stack when `inbuf` is
/// empty); the number of bytes read, 0 at the end of the stream.
pub(crate) fn poll_read<S: AsyncRead + Unpin, const CHUNK: usize>(
    stream: &mut S,
    cx: &mut Context<'_>,
    inbuf: &mut BytesMut,
) -> Poll<io::Result<usize>> {
    if !inbuf.is_empty() {
        if inbuf.capacity() - inbuf.len() < CHUNK / 4 {
            inbuf.reserve(CHUNK);
        }
        return tokio_util::io::poll_read_buf(Pin::new(stream), cx, inbuf);
    }
    let mut stack = [MaybeUninit::<u8>::uninit(); CHUNK];
    let mut read = ReadBuf::uninit(&mut stack);
    match Pin::new(stream).poll_read(cx, &mut read) {
        Poll::Ready(Ok(())) => {
            inbuf.extend_from_slice(read.filled());
            Poll::Ready(Ok(read.filled().len()))
        }
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        Poll::Pending => Poll::Pending,
    }
}

/// Frees `inbuf`'s allocation if it holds nothing (call when the socket has nothing more).
pub(crate) fn release_if_empty(inbuf: &mut BytesMut) {
    if inbuf.is_empty() && inbuf.capacity() > 0 {
        *inbuf = BytesMut::new();
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use tokio::io::AsyncWriteExt;

    use super::*;

    #[tokio::test]
    async fn an_empty_buffer_stays_unallocated_until_bytes_arrive() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let mut cx = Context::from_waker(Waker::noop());
        let mut inbuf = BytesMut::new();
        assert!(poll_read::<_, 16>(&mut server, &mut cx, &mut inbuf).is_pending());
        assert_eq!(inbuf.capacity(), 0, "nothing to read allocates nothing");
        client.write_all(b"0123456789abcdefXYZ").await.unwrap();
        let n = poll_read::<_, 16>(&mut server, &mut cx, &mut inbuf);
        assert!(matches!(n, Poll::Ready(Ok(16))), "at most CHUNK onto the stack: {n:?}");
        // With bytes buffered, the rest is read into the buffer itself.
        let n = poll_read::<_, 16>(&mut server, &mut cx, &mut inbuf);
        assert!(matches!(n, Poll::Ready(Ok(3))), "{n:?}");
        assert_eq!(&inbuf[..], b"0123456789abcdefXYZ");
        inbuf.clear();
        release_if_empty(&mut inbuf);
        assert_eq!(inbuf.capacity(), 0);
        drop(client);
        assert!(matches!(poll_read::<_, 16>(&mut server, &mut cx, &mut inbuf), Poll::Ready(Ok(0))));
    }
}
