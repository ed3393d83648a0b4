//! The messages nodes exchange for the relay, on each node's subject `mesgd.relay.<node>`
//! (core NATS), and their replies.
//!
//! A request is binary, so that a frame body travels unchanged and unescaped:
//!
//! ```text
//! kind (1 byte)   address length (2 bytes, big-endian)   address (UTF-8)   body (the rest)
//! ```
//!
//! | kind | meaning | address | body | reply |
//! |---|---|---|---|---|
//! | `D` | deliver to the client holding the address here | recipient | the frame body | `L` written, `N` not here, `T` too large |
//! | `H` | does a client here hold the address? | the address | empty | `Y` yes, `N` no |
//! | `F` | the address's cluster queue got a message: flush it if held here | the address | empty | none |
//! | `P` | open a pipe to the client holding the address here | the peer | pipe, opener's node and instance, opener's frame limit, opener's address | `O` opened (with the peer's frame limit), `N` not here, `U` / `V` a pipe limit |
//! | `W` | data on a pipe, for its end here | that end | pipe, sender's node, the `pipe_data` frame body | none |
//! | `C` | the sender's end of a pipe closed (or is not there) | the closed end | pipe, sender's node | none |
//! | `M` | the waiter here of a game was paired by the sender | the waiter | its instance and ticket, the game, the peer | `L` told, `N` not waiting here |
//! | `R` | how many members the room has here | the room | empty | `S` with the count |
//!
//! The bodies of the pipe kinds, each field in this order:
//!
//! ```text
//! P: pipe id (32 bytes)  node length (1)  node  instance (8, big-endian)  max frame (4, big-endian)  opener address (the rest)
//! W: pipe id (32 bytes)  node length (1)  node  frame body (the rest)
//! C: pipe id (32 bytes)  node length (1)  node
//! M: instance (8, big-endian)  ticket (8, big-endian)  game length (2, big-endian)  game  peer address (the rest)
//! ```
//!
//! A pipe id is 32 lowercase hex digits; a node name is a cluster node name (1–64 ASCII
//! letters, digits, `-`, `_`); addresses and game tags are checked like relay addresses (1–256
//! characters).
//! Replies are one byte, but `O` and `S`, which carry a 4-byte big-endian number (a frame limit,
//! a member count). Anything else
//! is a typed [`RelayWireError`]; nothing panics on any input (the `cluster_relay` fuzz target).

use bytes::{BufMut, Bytes, BytesMut};

use super::registry::is_node_name;
use crate::relay::validate_address;

/// The length of a pipe id: 128 bits as lowercase hex.
pub const PIPE_ID_LEN: usize = 32;

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
    /// Open pipe `pipe_id` from `from` (a client of `node`) to `to`, held on the receiving
    /// node.
    PipeOpen {
        /// The peer, held on the receiving node.
        to: String,
        /// The pipe's id, chosen by the opener's node.
        pipe_id: String,
        /// The opener's node.
        node: String,
        /// The opener's node's process instance (its lease's).
        instance: u64,
        /// The largest frame body the opener's transport carries.
        max_frame: u32,
        /// The opener's address.
        from: String,
    },
    /// A `pipe_data` frame for `to`, the end of `pipe_id` on the receiving node, from the
    /// other end on `node`.
    PipeData {
        /// The end on the receiving node.
        to: String,
        /// The pipe.
        pipe_id: String,
        /// The sender's node.
        node: String,
        /// The frame body, exactly as `to` gets it.
        body: Bytes,
    },
    /// `from`, the end of `pipe_id` on `node`, closed or is not there: the end on the
    /// receiving node is told `pipe_closed`.
    PipeClose {
        /// The end that closed, on the sending node.
        from: String,
        /// The pipe.
        pipe_id: String,
        /// The sender's node.
        node: String,
    },
    /// How many members `room` has on the receiving node.
    RoomMembers {
        /// The room (1 to 256 characters, like an address).
        room: String,
    },
    /// The sender took `waiter`, the waiter of `game` on the receiving node (its instance
    /// `instance`, connection `ticket`), out of the game's record: it is paired with `peer`.
    Matched {
        /// The waiter's address.
        waiter: String,
        /// The receiving node's instance, as the record names it.
        instance: u64,
        /// The waiter's connection there.
        ticket: u64,
        /// The game tag.
        game: String,
        /// The address it is paired with.
        peer: String,
    },
}

/// A node's reply to a [`RelayRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayReply {
    /// `D`: written into the recipient's outbox; `M`: the waiter was told.
    Written,
    /// `D`, `H`, `P`: no client here holds the address; `M`: it does not wait here.
    NotHere,
    /// `D`: the frame is over the recipient's transport limit.
    TooLarge,
    /// `H`: a client here holds the address (or is registering it).
    Held,
    /// `P`: the pipe is open here; its end here takes frame bodies of up to `max_frame` bytes.
    PipeOpened {
        /// The largest frame body the peer's transport carries.
        max_frame: u32,
    },
    /// `P`: refused, the peer is an end of as many pipes as one connection may be.
    PipesPerConnection,
    /// `P`: refused, the receiving node has as many pipes as it may.
    Pipes,
    /// `R`: the room's members on the receiving node.
    Members(u32),
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
    /// Shorter than its header, its address length or its body's fields say.
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
    /// A request that takes no body (`H`, `F`, `R`) has one, a request's body has bytes after its
    /// last field (`C`), or a reply is longer than its kind.
    #[error("relay message kind {0:?} has trailing bytes")]
    Trailing(char),
    /// A pipe id that is not 32 lowercase hex digits.
    #[error("relay message pipe id is not 32 lowercase hex digits")]
    PipeId,
    /// A node name that is not one (1–64 ASCII letters, digits, `-`, `_`).
    #[error("relay message node name is not a node name")]
    Node,
    /// An address in the body (the opener of a pipe, a waiter's peer) that is not UTF-8 or
    /// not a relay address.
    #[error("relay message body address is not a relay address")]
    BodyAddress,
    /// A game tag that is not UTF-8 or not 1 to 256 characters.
    #[error("relay message game tag is not 1 to 256 characters of UTF-8")]
    Game,
}

const HEADER: usize = 3;

/// Reads a request's body field by field; positions count from the message's first byte, so
/// that a truncation says where in the message it is.
struct Fields<'a> {
    data: &'a Bytes,
    at: usize,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RelayWireError> {
        let data: &'a [u8] = self.data;
        let end = self.at + n;
        if data.len() < end {
            return Err(RelayWireError::Truncated { need: end, have: data.len() });
        }
        let field = &data[self.at..end];
        self.at = end;
        Ok(field)
    }

    fn pipe_id(&mut self) -> Result<String, RelayWireError> {
        let id = self.take(PIPE_ID_LEN)?;
        if !id.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(RelayWireError::PipeId);
        }
        Ok(id.iter().map(|&b| char::from(b)).collect())
    }

    fn node(&mut self) -> Result<String, RelayWireError> {
        let len = self.take(1)?[0];
        let name = std::str::from_utf8(self.take(usize::from(len))?).map_err(|_| RelayWireError::Node)?;
        if !is_node_name(name) {
            return Err(RelayWireError::Node);
        }
        Ok(name.to_owned())
    }

    fn game(&mut self) -> Result<String, RelayWireError> {
        let len = self.take(2)?;
        let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
        let game = std::str::from_utf8(self.take(len)?).map_err(|_| RelayWireError::Game)?;
        validate_address(game).map_err(|_| RelayWireError::Game)?;
        Ok(game.to_owned())
    }

    fn u32(&mut self) -> Result<u32, RelayWireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, RelayWireError> {
        let b = self.take(8)?;
        Ok(u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    /// The rest, as a relay address.
    fn address(&mut self) -> Result<String, RelayWireError> {
        let rest = self.take(self.data.len() - self.at)?;
        let addr = std::str::from_utf8(rest).map_err(|_| RelayWireError::BodyAddress)?;
        validate_address(addr).map_err(|_| RelayWireError::BodyAddress)?;
        Ok(addr.to_owned())
    }

    /// The rest, as bytes.
    fn rest(&mut self) -> Bytes {
        let rest = self.data.slice(self.at..);
        self.at = self.data.len();
        rest
    }

    /// Nothing may follow the last field of `kind`.
    fn end(&self, kind: u8) -> Result<(), RelayWireError> {
        if self.at == self.data.len() { Ok(()) } else { Err(RelayWireError::Trailing(char::from(kind))) }
    }
}

fn put_node(out: &mut BytesMut, node: &str) {
    // A node name is at most 64 bytes (the decoder refuses any other).
    out.put_u8(u8::try_from(node.len()).unwrap_or(u8::MAX));
    out.put_slice(node.as_bytes());
}

impl RelayRequest {
    /// The wire form. Addresses must be valid relay addresses, names node names and pipe ids
    /// 32 lowercase hex digits (the relay and the cluster made or checked them).
    pub fn encode(&self) -> Bytes {
        let (kind, addr): (u8, &str) = match self {
            RelayRequest::Deliver { to, .. } => (b'D', to),
            RelayRequest::Held { addr } => (b'H', addr),
            RelayRequest::Flush { addr } => (b'F', addr),
            RelayRequest::PipeOpen { to, .. } => (b'P', to),
            RelayRequest::PipeData { to, .. } => (b'W', to),
            RelayRequest::PipeClose { from, .. } => (b'C', from),
            RelayRequest::Matched { waiter, .. } => (b'M', waiter),
            RelayRequest::RoomMembers { room } => (b'R', room),
        };
        let mut out = BytesMut::with_capacity(HEADER + addr.len() + 128);
        out.put_u8(kind);
        // A relay address is at most 256 characters of at most 4 bytes: always fits.
        out.put_u16(u16::try_from(addr.len()).unwrap_or(u16::MAX));
        out.put_slice(addr.as_bytes());
        match self {
            RelayRequest::Deliver { body, .. } => out.put_slice(body),
            RelayRequest::Held { .. } | RelayRequest::Flush { .. } | RelayRequest::RoomMembers { .. } => {}
            RelayRequest::PipeOpen { pipe_id, node, instance, max_frame, from, .. } => {
                out.put_slice(pipe_id.as_bytes());
                put_node(&mut out, node);
                out.put_u64(*instance);
                out.put_u32(*max_frame);
                out.put_slice(from.as_bytes());
            }
            RelayRequest::PipeData { pipe_id, node, body, .. } => {
                out.put_slice(pipe_id.as_bytes());
                put_node(&mut out, node);
                out.put_slice(body);
            }
            RelayRequest::PipeClose { pipe_id, node, .. } => {
                out.put_slice(pipe_id.as_bytes());
                put_node(&mut out, node);
            }
            RelayRequest::Matched { instance, ticket, game, peer, .. } => {
                out.put_u64(*instance);
                out.put_u64(*ticket);
                // A game tag is at most 256 characters of at most 4 bytes: always fits.
                out.put_u16(u16::try_from(game.len()).unwrap_or(u16::MAX));
                out.put_slice(game.as_bytes());
                out.put_slice(peer.as_bytes());
            }
        }
        out.freeze()
    }

    /// Reads a request.
    pub fn decode(data: &Bytes) -> Result<RelayRequest, RelayWireError> {
        let &kind = data.first().ok_or(RelayWireError::Empty)?;
        if !matches!(kind, b'D' | b'H' | b'F' | b'P' | b'W' | b'C' | b'M' | b'R') {
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
        let mut body = Fields { data, at: end };
        let request = match kind {
            b'D' => RelayRequest::Deliver { to: addr, body: body.rest() },
            b'H' => RelayRequest::Held { addr },
            b'F' => RelayRequest::Flush { addr },
            b'R' => RelayRequest::RoomMembers { room: addr },
            b'P' => RelayRequest::PipeOpen {
                to: addr,
                pipe_id: body.pipe_id()?,
                node: body.node()?,
                instance: body.u64()?,
                max_frame: body.u32()?,
                from: body.address()?,
            },
            b'W' => RelayRequest::PipeData {
                to: addr,
                pipe_id: body.pipe_id()?,
                node: body.node()?,
                body: body.rest(),
            },
            b'C' => RelayRequest::PipeClose { from: addr, pipe_id: body.pipe_id()?, node: body.node()? },
            _ => RelayRequest::Matched {
                waiter: addr,
                instance: body.u64()?,
                ticket: body.u64()?,
                game: body.game()?,
                peer: body.address()?,
            },
        };
        body.end(kind)?;
        Ok(request)
    }
}

impl RelayReply {
    /// The wire form: one byte, five for `O` and `S`.
    pub fn encode(self) -> Bytes {
        match self {
            RelayReply::Written => Bytes::from_static(b"L"),
            RelayReply::NotHere => Bytes::from_static(b"N"),
            RelayReply::TooLarge => Bytes::from_static(b"T"),
            RelayReply::Held => Bytes::from_static(b"Y"),
            RelayReply::PipeOpened { max_frame } => {
                let mut out = BytesMut::with_capacity(5);
                out.put_u8(b'O');
                out.put_u32(max_frame);
                out.freeze()
            }
            RelayReply::PipesPerConnection => Bytes::from_static(b"U"),
            RelayReply::Pipes => Bytes::from_static(b"V"),
            RelayReply::Members(n) => {
                let mut out = BytesMut::with_capacity(5);
                out.put_u8(b'S');
                out.put_u32(n);
                out.freeze()
            }
        }
    }

    /// Reads a reply.
    pub fn decode(data: &[u8]) -> Result<RelayReply, RelayWireError> {
        let &kind = data.first().ok_or(RelayWireError::Empty)?;
        let (reply, len) = match kind {
            b'L' => (RelayReply::Written, 1),
            b'N' => (RelayReply::NotHere, 1),
            b'T' => (RelayReply::TooLarge, 1),
            b'Y' => (RelayReply::Held, 1),
            b'O' => (RelayReply::PipeOpened { max_frame: number(data)? }, 5),
            b'S' => (RelayReply::Members(number(data)?), 5),
            b'U' => (RelayReply::PipesPerConnection, 1),
            b'V' => (RelayReply::Pipes, 1),
            other => return Err(RelayWireError::UnknownKind(other)),
        };
        if data.len() > len {
            return Err(RelayWireError::Trailing(char::from(kind)));
        }
        Ok(reply)
    }
}

/// The four-byte big-endian number after a reply's kind.
fn number(data: &[u8]) -> Result<u32, RelayWireError> {
    match data.get(1..5) {
        Some(&[a, b, c, d]) => Ok(u32::from_be_bytes([a, b, c, d])),
        _ => Err(RelayWireError::Truncated { need: 5, have: data.len() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIPE: &str = "0123456789abcdef0123456789abcdef";

    fn pipe_open() -> RelayRequest {
        RelayRequest::PipeOpen {
            to: "bob".into(),
            pipe_id: PIPE.into(),
            node: "node-a_1".into(),
            instance: 0x0102_0304_0506_0708,
            max_frame: 65_536,
            from: "alice".into(),
        }
    }

    /// Each input is refused with its error.
    fn refused(cases: &[(&[u8], RelayWireError)]) {
        for (input, error) in cases {
            assert_eq!(
                RelayRequest::decode(&Bytes::copy_from_slice(input)).as_ref(),
                Err(error),
                "{input:?}"
            );
        }
    }

    fn matched() -> RelayRequest {
        RelayRequest::Matched {
            waiter: "wendy".into(),
            instance: 7,
            ticket: 9,
            game: "chess".into(),
            peer: "paul".into(),
        }
    }

    #[test]
    fn requests_round_trip() {
        let long = "é".repeat(256);
        for request in [
            RelayRequest::Deliver { to: "bob".into(), body: Bytes::from_static(br#"{"t":"deliver"}"#) },
            RelayRequest::Deliver { to: long.clone(), body: Bytes::new() },
            RelayRequest::Held { addr: "a.b/c d".into() },
            RelayRequest::RoomMembers { room: "lobby".into() },
            RelayRequest::Flush { addr: long.clone() },
            pipe_open(),
            RelayRequest::PipeOpen {
                to: long.clone(),
                pipe_id: PIPE.into(),
                node: "n".repeat(64),
                instance: u64::MAX,
                max_frame: 0,
                from: long.clone(),
            },
            RelayRequest::PipeData {
                to: "bob".into(),
                pipe_id: PIPE.into(),
                node: "a".into(),
                body: Bytes::from_static(br#"{"t":"pipe_data","pipe_id":"x","n":1}"#),
            },
            RelayRequest::PipeData { to: long, pipe_id: PIPE.into(), node: "a".into(), body: Bytes::new() },
            RelayRequest::PipeClose { from: "alice".into(), pipe_id: PIPE.into(), node: "b".into() },
            matched(),
            RelayRequest::Matched {
                waiter: "w".into(),
                instance: 0,
                ticket: 0,
                game: "😀".repeat(256),
                peer: "é".repeat(256),
            },
        ] {
            assert_eq!(RelayRequest::decode(&request.encode()), Ok(request));
        }
        assert_eq!(&RelayRequest::Held { addr: "ab".into() }.encode()[..], b"H\x00\x02ab");
        let close = RelayRequest::PipeClose { from: "x".into(), pipe_id: PIPE.into(), node: "b".into() };
        assert_eq!(&close.encode()[..], format!("C\x00\x01x{PIPE}\x01b").as_bytes());
        for reply in [
            RelayReply::Written,
            RelayReply::NotHere,
            RelayReply::TooLarge,
            RelayReply::Held,
            RelayReply::PipeOpened { max_frame: 16_384 },
            RelayReply::PipesPerConnection,
            RelayReply::Pipes,
            RelayReply::Members(0),
            RelayReply::Members(u32::MAX),
        ] {
            assert_eq!(RelayReply::decode(&reply.encode()), Ok(reply));
        }
        assert_eq!(&RelayReply::PipeOpened { max_frame: 258 }.encode()[..], b"O\x00\x00\x01\x02");
    }

    #[test]
    fn malformed_requests_get_typed_errors() {
        let too_long = format!("D\x01\x01{}", "x".repeat(257));
        let open = pipe_open().encode();
        // Header 3 + "bob" 3: the pipe id starts at byte 6, the node's length at 38.
        let at = |i: usize, b: u8| {
            let mut v = open.to_vec();
            v[i] = b;
            v
        };
        let upper_id = at(6, b'A');
        let long_node = at(38, 65);
        let bad_node = at(39, b'.');
        let no_opener = open[..open.len() - "alice".len()].to_vec();
        let mut bad_opener = open[..open.len() - "alice".len()].to_vec();
        bad_opener.extend_from_slice(b"\xc3\x28");
        let short_id = format!("W\x00\x01b{}", &PIPE[..31]);
        let close_trailing = format!("C\x00\x01x{PIPE}\x01bz");
        let close_no_node = format!("C\x00\x01x{PIPE}");
        let close_empty_node = format!("C\x00\x01x{PIPE}\x00");
        let cases: &[(&[u8], RelayWireError)] = &[
            (b"", RelayWireError::Empty),
            (b"X\x00\x01a", RelayWireError::UnknownKind(b'X')),
            (b"d\x00\x01a", RelayWireError::UnknownKind(b'd')),
            (b"O\x00\x01a", RelayWireError::UnknownKind(b'O')),
            (b"D", RelayWireError::Truncated { need: 3, have: 1 }),
            (b"D\x00", RelayWireError::Truncated { need: 3, have: 2 }),
            (b"D\x00\x05ab", RelayWireError::Truncated { need: 8, have: 5 }),
            (b"D\xff\xffab", RelayWireError::Truncated { need: 65_538, have: 5 }),
            (b"D\x00\x00body", RelayWireError::InvalidAddress),
            (too_long.as_bytes(), RelayWireError::InvalidAddress),
            (b"D\x00\x02\xc3\x28", RelayWireError::AddressNotUtf8),
            (b"H\x00\x01ax", RelayWireError::Trailing('H')),
            (b"F\x00\x01ax", RelayWireError::Trailing('F')),
            (b"R\x00\x01ax", RelayWireError::Trailing('R')),
            (b"R\x00\x00", RelayWireError::InvalidAddress),
            (b"P\x00\x03bob", RelayWireError::Truncated { need: 38, have: 6 }),
            (short_id.as_bytes(), RelayWireError::Truncated { need: 36, have: 35 }),
            (&upper_id, RelayWireError::PipeId),
            (&open[..38], RelayWireError::Truncated { need: 39, have: 38 }),
            (&long_node, RelayWireError::Truncated { need: 104, have: open.len() }),
            (&bad_node, RelayWireError::Node),
            (&open[..50], RelayWireError::Truncated { need: 55, have: 50 }),
            (&open[..57], RelayWireError::Truncated { need: 59, have: 57 }),
            (&no_opener, RelayWireError::BodyAddress),
            (&bad_opener, RelayWireError::BodyAddress),
            (close_no_node.as_bytes(), RelayWireError::Truncated { need: 37, have: 36 }),
            (close_trailing.as_bytes(), RelayWireError::Trailing('C')),
            (close_empty_node.as_bytes(), RelayWireError::Node),
        ];
        refused(cases);
    }

    #[test]
    fn malformed_match_requests_get_typed_errors() {
        let good = matched().encode();
        // Header 3 + "wendy" 5: instance at 8, ticket at 16, the game's length at 24, the game
        // at 26, the peer at 31.
        assert_eq!(good.len(), 35);
        let with = |at: usize, bytes: &[u8]| {
            let mut v = good.to_vec();
            v.splice(at..at + bytes.len(), bytes.iter().copied());
            v
        };
        let empty_game = [&good[..24], &b"\x00\x00paul"[..]].concat();
        let long_game = [&good[..24], &[0x01u8, 0x01][..], "g".repeat(257).as_bytes(), &b"paul"[..]].concat();
        let cases: &[(&[u8], RelayWireError)] = &[
            (&good[..15], RelayWireError::Truncated { need: 16, have: 15 }),
            (&good[..20], RelayWireError::Truncated { need: 24, have: 20 }),
            (&good[..25], RelayWireError::Truncated { need: 26, have: 25 }),
            (&with(24, &[0, 9]), RelayWireError::BodyAddress),
            (&with(24, &[0, 10]), RelayWireError::Truncated { need: 36, have: 35 }),
            (&with(26, b"\xff"), RelayWireError::Game),
            (&empty_game, RelayWireError::Game),
            (&long_game, RelayWireError::Game),
            (&good[..31], RelayWireError::BodyAddress),
            (&with(31, b"\xc3\x28"), RelayWireError::BodyAddress),
        ];
        refused(cases);
    }

    #[test]
    fn malformed_replies_get_typed_errors() {
        let cases: &[(&[u8], RelayWireError)] = &[
            (b"", RelayWireError::Empty),
            (b"l", RelayWireError::UnknownKind(b'l')),
            (b"D", RelayWireError::UnknownKind(b'D')),
            (b"LL", RelayWireError::Trailing('L')),
            (b"Y\n", RelayWireError::Trailing('Y')),
            (b"O", RelayWireError::Truncated { need: 5, have: 1 }),
            (b"O\x00\x00\x01", RelayWireError::Truncated { need: 5, have: 4 }),
            (b"O\x00\x00\x01\x00\x00", RelayWireError::Trailing('O')),
            (b"UU", RelayWireError::Trailing('U')),
            (b"S\x00\x00", RelayWireError::Truncated { need: 5, have: 3 }),
            (b"S\x00\x00\x00\x01\x00", RelayWireError::Trailing('S')),
        ];
        for (input, error) in cases {
            assert_eq!(RelayReply::decode(input).as_ref(), Err(error), "{input:?}");
        }
    }
}
