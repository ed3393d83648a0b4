//! Assembling a client's frames into messages (RFC 6455, sections 5.4–5.7 and 7.4).

use bytes::{Bytes, BytesMut};

use super::WsError;
use super::frame::{Opcode, decode_header, unmask};

/// What the client sent: a whole message or a control frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A text message, checked to be UTF-8.
    Text(Bytes),
    /// A binary message.
    Binary(Bytes),
    /// A ping; answer with a pong carrying the same payload.
    Ping(Bytes),
    /// A pong.
    Pong(Bytes),
    /// The client starts (or answers) the closing handshake.
    Close(Option<CloseFrame>),
}

/// The status and reason of a close frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseFrame {
    /// The close status (a valid one: see [`is_valid_close_code`]).
    pub code: u16,
    /// The reason, UTF-8, at most 123 bytes.
    pub reason: String,
}

/// A fragmented message being received.
#[derive(Debug)]
struct Partial {
    text: bool,
    data: BytesMut,
}

/// Turns a client's byte stream into [`Event`]s, one [`Decoder::decode`] at a time.
///
/// It holds nothing but an unfinished fragmented message: the bytes are in the caller's buffer,
/// and a frame's payload is taken from it without a copy.
#[derive(Debug)]
pub struct Decoder {
    max_message: usize,
    partial: Option<Partial>,
}

impl Decoder {
    /// A decoder for messages of at most `max_message` bytes (all fragments together).
    pub fn new(max_message: usize) -> Decoder {
        Decoder { max_message, partial: None }
    }

    /// The next event from the front of `buf`, consuming its frames; `Ok(None)` when the next
    /// frame is not all there yet (nothing of it is consumed). A fragment consumes its frame
    /// and decoding goes on to the next. After an error the connection must be closed: the
    /// buffer's position is unspecified.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Event>, WsError> {
        loop {
            let Some(header) = decode_header(buf)? else { return Ok(None) };
            if !header.opcode.is_control() {
                let so_far = self.partial.as_ref().map_or(0, |p| p.data.len() as u64);
                let len = so_far.saturating_add(header.payload_len);
                if len > self.max_message as u64 {
                    return Err(WsError::MessageTooLarge { len, max: self.max_message });
                }
                match (header.opcode, self.partial.is_some()) {
                    (Opcode::Continuation, false) => return Err(WsError::UnexpectedContinuation),
                    (Opcode::Text | Opcode::Binary, true) => return Err(WsError::ExpectedContinuation),
                    _ => {}
                }
            }
            // Within `max_message` (data) or 125 bytes (control): the length fits a usize.
            let total = header.header_len + header.payload_len as usize;
            if buf.len() < total {
                return Ok(None);
            }
            let mut payload = buf.split_to(total).split_off(header.header_len);
            unmask(&mut payload, header.mask);
            match header.opcode {
                Opcode::Ping => return Ok(Some(Event::Ping(payload.freeze()))),
                Opcode::Pong => return Ok(Some(Event::Pong(payload.freeze()))),
                Opcode::Close => return close(&payload).map(|frame| Some(Event::Close(frame))),
                Opcode::Text | Opcode::Binary if header.fin => {
                    return message(header.opcode == Opcode::Text, payload).map(Some);
                }
                Opcode::Text | Opcode::Binary => {
                    self.partial = Some(Partial { text: header.opcode == Opcode::Text, data: payload });
                }
                Opcode::Continuation => {
                    let partial = self.partial.as_mut().expect("checked above");
                    partial.data.extend_from_slice(&payload);
                    if header.fin {
                        let Partial { text, data } = self.partial.take().expect("checked above");
                        return message(text, data).map(Some);
                    }
                }
            }
        }
    }

    /// The bytes of an unfinished fragmented message received so far.
    pub fn buffered(&self) -> usize {
        self.partial.as_ref().map_or(0, |p| p.data.len())
    }
}

fn message(text: bool, data: BytesMut) -> Result<Event, WsError> {
    if !text {
        return Ok(Event::Binary(data.freeze()));
    }
    if std::str::from_utf8(&data).is_err() {
        return Err(WsError::TextNotUtf8);
    }
    Ok(Event::Text(data.freeze()))
}

fn close(payload: &[u8]) -> Result<Option<CloseFrame>, WsError> {
    match payload {
        [] => Ok(None),
        [_] => Err(WsError::CloseTooShort),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !is_valid_close_code(code) {
                return Err(WsError::InvalidCloseCode(code));
            }
            let reason = std::str::from_utf8(reason).map_err(|_| WsError::CloseReasonNotUtf8)?;
            Ok(Some(CloseFrame { code, reason: reason.to_owned() }))
        }
    }
}

/// Whether an endpoint may send `code` in a close frame: the statuses RFC 6455 defines for the
/// wire (1000–1003, 1007–1011), the ones IANA registered since (1012–1014), and the ranges for
/// libraries and applications (3000–4999). 1004–1006 and 1015 are reserved or never sent.
pub fn is_valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}
