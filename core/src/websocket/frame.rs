//! One WebSocket frame's header (RFC 6455, section 5.2): decoding a client's, encoding the
//! server's, and unmasking a payload.

use bytes::{BufMut, BytesMut};

use super::WsError;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// The next fragment of a message.
    Continuation,
    /// A text message (or its first fragment).
    Text,
    /// A binary message (or its first fragment).
    Binary,
    /// The closing handshake.
    Close,
    /// A keep-alive probe.
    Ping,
    /// The answer to a ping (or an unsolicited heartbeat).
    Pong,
}

impl Opcode {
    fn from_bits(bits: u8) -> Result<Opcode, WsError> {
        Ok(match bits {
            0x0 => Opcode::Continuation,
            0x1 => Opcode::Text,
            0x2 => Opcode::Binary,
            0x8 => Opcode::Close,
            0x9 => Opcode::Ping,
            0xA => Opcode::Pong,
            other => return Err(WsError::ReservedOpcode(other)),
        })
    }

    fn bits(self) -> u8 {
        match self {
            Opcode::Continuation => 0x0,
            Opcode::Text => 0x1,
            Opcode::Binary => 0x2,
            Opcode::Close => 0x8,
            Opcode::Ping => 0x9,
            Opcode::Pong => 0xA,
        }
    }

    /// Close, ping and pong: at most 125 bytes, never fragmented, allowed between fragments.
    pub fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// A decoded client frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The last fragment of its message.
    pub fin: bool,
    /// What the frame carries.
    pub opcode: Opcode,
    /// The masking key.
    pub mask: [u8; 4],
    /// The payload's length.
    pub payload_len: u64,
    /// The header's own length (2 to 14 bytes).
    pub header_len: usize,
}

/// The largest payload a control frame may carry.
pub const MAX_CONTROL_PAYLOAD: u64 = 125;

/// Decodes the header at the start of `buf`: `Ok(None)` until all of it is there. Checks
/// everything the header alone shows: reserved bits and opcodes, the mask, control frames'
/// length and FIN, the 64-bit length's top bit.
pub fn decode_header(buf: &[u8]) -> Result<Option<Header>, WsError> {
    let [first, second, ..] = *buf else { return Ok(None) };
    let rsv = (first >> 4) & 0b111;
    if rsv != 0 {
        return Err(WsError::ReservedBits(rsv));
    }
    let fin = first & 0x80 != 0;
    let opcode = Opcode::from_bits(first & 0x0F)?;
    if second & 0x80 == 0 {
        return Err(WsError::Unmasked);
    }
    let (payload_len, len_bytes) = match second & 0x7F {
        126 => match buf.get(2..4) {
            Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 2),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(b) => {
                let len = u64::from_be_bytes(b.try_into().expect("eight bytes"));
                if len >> 63 != 0 {
                    return Err(WsError::LengthOverflow);
                }
                (len, 8)
            }
            None => return Ok(None),
        },
        short => (u64::from(short), 0),
    };
    if opcode.is_control() {
        if !fin {
            return Err(WsError::FragmentedControl);
        }
        if payload_len > MAX_CONTROL_PAYLOAD {
            return Err(WsError::ControlTooLong(payload_len));
        }
    }
    let mask_at = 2 + len_bytes;
    let Some(mask) = buf.get(mask_at..mask_at + 4) else { return Ok(None) };
    Ok(Some(Header {
        fin,
        opcode,
        mask: mask.try_into().expect("four bytes"),
        payload_len,
        header_len: mask_at + 4,
    }))
}

/// XORs `payload` with the masking key, in place (masking and unmasking are the same).
pub fn unmask(payload: &mut [u8], mask: [u8; 4]) {
    let wide = u64::from_ne_bytes([mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3]]);
    let mut chunks = payload.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let word = u64::from_ne_bytes((&*chunk).try_into().expect("eight bytes")) ^ wide;
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
    // The tail starts at a multiple of 8, so the key's phase is back at its first byte.
    for (byte, key) in chunks.into_remainder().iter_mut().zip(mask.iter().cycle()) {
        *byte ^= key;
    }
}

/// Appends a server frame (FIN set, unmasked) carrying `payload` to `out`.
pub fn encode_frame(opcode: Opcode, payload: &[u8], out: &mut BytesMut) {
    out.reserve(10 + payload.len());
    out.put_u8(0x80 | opcode.bits());
    match payload.len() {
        n @ 0..=125 => out.put_u8(n as u8),
        n @ 126..=0xFFFF => {
            out.put_u8(126);
            out.put_u16(n as u16);
        }
        n => {
            out.put_u8(127);
            out.put_u64(n as u64);
        }
    }
    out.put_slice(payload);
}

/// Appends a close frame with `code` and `reason` (cut at a character boundary to fit the 123
/// bytes a close reason may have).
pub fn encode_close(code: u16, reason: &str, out: &mut BytesMut) {
    let mut end = reason.len().min(MAX_CONTROL_PAYLOAD as usize - 2);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = [0u8; MAX_CONTROL_PAYLOAD as usize];
    payload[..2].copy_from_slice(&code.to_be_bytes());
    payload[2..2 + end].copy_from_slice(&reason.as_bytes()[..end]);
    encode_frame(Opcode::Close, &payload[..2 + end], out);
}
