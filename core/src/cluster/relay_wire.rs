//! The messages nodes exchange for the relay, on each node's subject `mesgd.relay.<node>`
//! (core NATS), and their one-byte replies.
//!
//! A request is binary, so that a frame body travels unchanged and unescaped:
//!
//! ```text
//! kind (1 byte)   address length (2 bytes, big-endian)   address (UTF-8)   body (the rest)
//! ```
//!
//! | kind | meaning | body | reply |
//! |---|---|---|---|
//! | `D` | deliver to the client holding the address here | the frame body | `L` written, `N` not here, `T` too large |
//! | `H` | does a client here hold the address? | empty | `Y` yes, `N` no |
//! | `F` | the address's cluster queue got a message: flush it if held here | empty | none |
//!
//! The address is checked like a relay address (1–256 characters). Anything else is a typed
//! [`RelayWireError`]; nothing panics on any input (the `cluster_relay` fuzz target).

use bytes::{BufMut, Bytes, BytesMut};

use crate::relay::validate_address;

/// A request to another node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayRequest {
    /// Deliver `body` to the client holding `to` on the receiving node.
    Deliver {
        /// The recipient address.
        to: String,
        /// The frame body, exactly as the recipient gets it.
        body: Bytes,
    },
    /// Whether a client of the receiving node holds `addr`.
    Held {
        /// The address.
        addr: String,
    },
    /// The cluster queue of `addr` has a message: flush it if a client here holds `addr`.
    Flush {
        /// The address.
        addr: String,
    },
}

/// A node's reply to a [`RelayRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayReply {
    /// `D`: written into the recipient's outbox.
    Written,
    /// `D`, `H`: no client here holds the address.
    NotHere,
    /// `D`: the frame is over the recipient's transport limit.
    TooLarge,
    /// `H`: a client here holds the address (or is registering it).
    Held,
}

/// Why a relay message between nodes could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RelayWireError {
    /// The message is empty.
    #[error("empty relay message")]
    Empty,
    /// The first byte names no request or reply.
    #[error("unknown relay message kind {0:#04x}")]
    UnknownKind(u8),
    /// Shorter than its header or its address length says.
    #[error("relay message truncated: {need} bytes needed, {have} present")]
    Truncated {
        /// Bytes the header says are needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The address is not UTF-8.
    #[error("relay message address is not UTF-8")]
    AddressNotUtf8,
    /// The address is empty or over 256 characters.
    #[error("relay message address is empty or over 256 characters")]
    InvalidAddress,
    /// A request that takes no body (`H`, `F`) has one, or a reply has more than one byte.
    #[error("relay message kind {0:?} has trailing bytes")]
    Trailing(char),
}

const HEADER: usize = 3;

impl RelayRequest {
    /// The wire form. The address must be a valid relay address (the relay checked it).
    pub fn encode(&self) -> Bytes {
        let (kind, addr, body): (u8, &str, &[u8]) = match self {
            RelayRequest::Deliver { to, body } => (b'D', to, body),
            RelayRequest::Held { addr } => (b'H', addr, &[]),
            RelayRequest::Flush { addr } => (b'F', addr, &[]),
        };
        let mut out = BytesMut::with_capacity(HEADER + addr.len() + body.len());
        out.put_u8(kind);
        // A relay address is at most 256 characters of at most 4 bytes: always fits.
        out.put_u16(u16::try_from(addr.len()).unwrap_or(u16::MAX));
        out.put_slice(addr.as_bytes());
        out.put_slice(body);
        out.freeze()
    }

    /// Reads a request.
    pub fn decode(data: &Bytes) -> Result<RelayRequest, RelayWireError> {
        let &kind = data.first().ok_or(RelayWireError::Empty)?;
        if !matches!(kind, b'D' | b'H' | b'F') {
            return Err(RelayWireError::UnknownKind(kind));
        }
        if data.len() < HEADER {
            return Err(RelayWireError::Truncated { need: HEADER, have: data.len() });
        }
        let len = usize::from(u16::from_be_bytes([data[1], data[2]]));
        let end = HEADER + len;
        if data.len() < end {
            return Err(RelayWireError::Truncated { need: end, have: data.len() });
        }
        let addr = std::str::from_utf8(&data[HEADER..end]).map_err(|_| RelayWireError::AddressNotUtf8)?;
        validate_address(addr).map_err(|_| RelayWireError::InvalidAddress)?;
        let addr = addr.to_owned();
        let rest = data.slice(end..);
        match kind {
            b'D' => Ok(RelayRequest::Deliver { to: addr, body: rest }),
            _ if !rest.is_empty() => Err(RelayWireError::Trailing(char::from(kind))),
            b'H' => Ok(RelayRequest::Held { addr }),
            _ => Ok(RelayRequest::Flush { addr }),
        }
    }
}

impl RelayReply {
    /// The wire form: one byte.
    pub fn encode(self) -> Bytes {
        Bytes::from_static(match self {
            RelayReply::Written => b"L",
            RelayReply::NotHere => b"N",
            RelayReply::TooLarge => b"T",
            RelayReply::Held => b"Y",
        })
    }

    /// Reads a reply.
    pub fn decode(data: &[u8]) -> Result<RelayReply, RelayWireError> {
        let &kind = data.first().ok_or(RelayWireError::Empty)?;
        let reply = match kind {
            b'L' => RelayReply::Written,
            b'N' => RelayReply::NotHere,
            b'T' => RelayReply::TooLarge,
            b'Y' => RelayReply::Held,
            other => return Err(RelayWireError::UnknownKind(other)),
        };
        if data.len() > 1 {
            return Err(RelayWireError::Trailing(char::from(kind)));
        }
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let long = "é".repeat(256);
        for request in [
            RelayRequest::Deliver { to: "bob".into(), body: Bytes::from_static(br#"{"t":"deliver"}"#) },
            RelayRequest::Deliver { to: long.clone(), body: Bytes::new() },
            RelayRequest::Held { addr: "a.b/c d".into() },
            RelayRequest::Flush { addr: long },
        ] {
            assert_eq!(RelayRequest::decode(&request.encode()), Ok(request));
        }
        assert_eq!(&RelayRequest::Held { addr: "ab".into() }.encode()[..], b"H\x00\x02ab");
        for reply in [RelayReply::Written, RelayReply::NotHere, RelayReply::TooLarge, RelayReply::Held] {
            assert_eq!(RelayReply::decode(&reply.encode()), Ok(reply));
        }
    }

    #[test]
    fn malformed_requests_get_typed_errors() {
        let too_long = format!("D\x01\x01{}", "x".repeat(257));
        let cases: &[(&[u8], RelayWireError)] = &[
            (b"", RelayWireError::Empty),
            (b"X\x00\x01a", RelayWireError::UnknownKind(b'X')),
            (b"d\x00\x01a", RelayWireError::UnknownKind(b'd')),
            (b"D", RelayWireError::Truncated { need: 3, have: 1 }),
            (b"D\x00", RelayWireError::Truncated { need: 3, have: 2 }),
            (b"D\x00\x05ab", RelayWireError::Truncated { need: 8, have: 5 }),
            (b"D\xff\xffab", RelayWireError::Truncated { need: 65_538, have: 5 }),
            (b"D\x00\x00body", RelayWireError::InvalidAddress),
            (too_long.as_bytes(), RelayWireError::InvalidAddress),
            (b"D\x00\x02\xc3\x28", RelayWireError::AddressNotUtf8),
            (b"H\x00\x01ax", RelayWireError::Trailing('H')),
            (b"F\x00\x01ax", RelayWireError::Trailing('F')),
        ];
        for (input, error) in cases {
            assert_eq!(
                RelayRequest::decode(&Bytes::copy_from_slice(input)).as_ref(),
                Err(error),
                "{input:?}"
            );
        }
    }

    #[test]
    fn malformed_replies_get_typed_errors() {
        let cases: &[(&[u8], RelayWireError)] = &[
            (b"", RelayWireError::Empty),
            (b"l", RelayWireError::UnknownKind(b'l')),
            (b"D", RelayWireError::UnknownKind(b'D')),
            (b"LL", RelayWireError::Trailing('L')),
            (b"Y\n", RelayWireError::Trailing('Y')),
        ];
        for (input, error) in cases {
            assert_eq!(RelayReply::decode(input).as_ref(), Err(error), "{input:?}");
        }
    }
}
