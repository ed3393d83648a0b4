//! The server side of the WebSocket framing (RFC 6455, section 5), sans I/O.
//!
//! The HTTP upgrade is answered elsewhere (the binary's `http::ws`); this module turns the bytes
//! a client sends after it into messages and control frames, and writes the server's frames.
//! It exists so that a connection can read onto the stack while it is idle and hold no read
//! buffer at all, as the MQTT and relay TCP connections do: with a general-purpose WebSocket
//! library the read buffer lives inside the library and stays allocated for the connection's
//! whole life.
//!
//! # Layout
//!
//! - [`frame`]: one frame's header — decoding it from a client (masked) and encoding the
//!   server's (unmasked) — and unmasking.
//! - [`decoder`]: [`Decoder`], which assembles fragmented messages, checks UTF-8 and close
//!   payloads, and enforces the message size limit from the header alone.
//! - [`error`]: [`WsError`], every way a client's frames can break the protocol, each with the
//!   close status it earns.
//!
//! No extension is negotiated (no `permessage-deflate`), so the three reserved bits must be 0.

pub mod decoder;
pub mod error;
pub mod frame;

#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;

#[cfg(test)]
mod tests;

pub use decoder::{CloseFrame, Decoder, Event};
pub use error::WsError;
pub use frame::{Opcode, encode_close, encode_frame};
