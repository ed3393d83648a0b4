//! Reading a request body up to a size: a body over it is refused as too large (413) by every
//! route, so that a client learns which of its requests was too big, and `serve` counts the
//! refusal as the `body_size` limit whichever route made it.

use std::error::Error;

use axum::body::{Body, Bytes};
use http_body_util::LengthLimitError;

/// Why a request body was not read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BodyRefused {
    /// Over the route's limit: answer 413.
    TooLarge,
    /// The body could not be read (the client went away, or its deadline passed, which `serve`
    /// answers with 408 itself).
    Unreadable,
}

/// The whole body, if it is at most `limit` bytes.
pub(crate) async fn read(body: Body, limit: usize) -> Result<Bytes, BodyRefused> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let inner = e.into_inner();
        let mut cause: Option<&(dyn Error + 'static)> = Some(&*inner);
        while let Some(e) = cause {
            if e.is::<LengthLimitError>() {
                return BodyRefused::TooLarge;
            }
            cause = e.source();
        }
        BodyRefused::Unreadable
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_over_the_limit_is_too_large_and_one_at_it_is_read() {
        assert_eq!(read(Body::from(vec![b'x'; 11]), 10).await, Err(BodyRefused::TooLarge));
        assert_eq!(read(Body::from(vec![b'x'; 10]), 10).await.unwrap().len(), 10);
        assert_eq!(read(Body::empty(), 0).await.unwrap().len(), 0);
    }

    #[tokio::test]
    async fn a_body_that_fails_is_unreadable_not_too_large() {
        let failing = futures_util::stream::iter([Err::<Bytes, _>(std::io::Error::other("reset"))]);
        assert_eq!(read(Body::from_stream(failing), 10).await, Err(BodyRefused::Unreadable));
    }
}
