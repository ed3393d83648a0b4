//! The MQTT data representations (MQTT 5.0 §1.5): two- and four-byte integers, variable byte
//! integers, UTF-8 strings and binary data, read from a bounded cursor and written through a
//! [`Sink`].
//!
//! Encoding is done in two passes over the same code: a [`Counter`] pass that computes every
//! length up front and validates what the decoder would refuse (over-long or NUL-bearing strings,
//! out-of-range integers), then a pass that writes straight into the caller's `BytesMut`. One
//! description of each packet thus serves both passes and the two cannot drift apart.

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::{DecodeError, EncodeError};

/// The largest value a variable byte integer can carry (four bytes of seven bits each).
pub const MAX_VAR_INT: u32 = 268_435_455;

/// How many bytes the variable byte integer encoding of `value` takes (1 to 4; values above
/// [`MAX_VAR_INT`] are reported as 4 and refused when written).
pub fn var_int_len(value: u32) -> usize {
    match value {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Appends `value` as a variable byte integer and returns the number of bytes written.
pub fn encode_var_int(value: u32, buf: &mut BytesMut) -> Result<usize, EncodeError> {
    if value > MAX_VAR_INT {
        return Err(EncodeError::VarIntTooLarge(value));
    }
    put_var_int(buf, value);
    Ok(var_int_len(value))
}

/// Reads a variable byte integer from the front of `buf`: `Ok(Some((value, bytes_used)))`, or
/// `Ok(None)` when `buf` ends before the integer does.
///
/// An integer longer than four bytes, or not in its shortest form ([MQTT-1.5.5-1]; such an
/// encoding always ends in a zero byte), is [`DecodeError::MalformedVarInt`].
pub fn decode_var_int(buf: &[u8]) -> Result<Option<(u32, usize)>, DecodeError> {
    let mut value = 0u32;
    for (i, &byte) in buf.iter().take(4).enumerate() {
        value |= u32::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            if i > 0 && byte == 0 {
                return Err(DecodeError::MalformedVarInt);
            }
            return Ok(Some((value, i + 1)));
        }
    }
    if buf.len() >= 4 { Err(DecodeError::MalformedVarInt) } else { Ok(None) }
}

fn put_var_int(buf: &mut BytesMut, mut value: u32) {
    loop {
        let mut byte = (value & 0x7F) as u8;
        value >>= 7;
        if value > 0 {
            byte |= 0x80;
        }
        buf.put_u8(byte);
        if value == 0 {
            return;
        }
    }
}

/// A cursor over one packet's bytes. Reads never go past `end`, which the property decoder lowers
/// to the end of a property block so a property cannot spill into the fields after it.
pub(crate) struct Reader {
    data: Bytes,
    pos: usize,
    end: usize,
}

impl Reader {
    /// A reader over `data`, starting at `pos`.
    pub(crate) fn new(data: Bytes, pos: usize) -> Self {
        let end = data.len();
        Reader { data, pos, end }
    }

    /// Bytes left before the current end.
    pub(crate) fn remaining(&self) -> usize {
        self.end - self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos == self.end
    }

    fn take(&mut self, n: usize) -> Result<std::ops::Range<usize>, DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::UnexpectedEnd);
        }
        let range = self.pos..self.pos + n;
        self.pos += n;
        Ok(range)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        let r = self.take(1)?;
        Ok(self.data[r.start])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        let r = self.take(2)?;
        Ok(u16::from_be_bytes([self.data[r.start], self.data[r.start + 1]]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let r = self.take(4)?;
        let b = &self.data[r];
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A variable byte integer inside the packet: running out of bytes here is the packet's
    /// fault (its remaining length was too short), not a reason to wait for more.
    pub(crate) fn var_int(&mut self) -> Result<u32, DecodeError> {
        match decode_var_int(&self.data[self.pos..self.end])? {
            Some((value, used)) => {
                self.pos += used;
                Ok(value)
            }
            None => Err(DecodeError::UnexpectedEnd),
        }
    }

    /// A packet identifier; zero is reserved ([MQTT-2.3.1-1] in 3.1.1, [MQTT-2.2.1-3] in 5.0).
    pub(crate) fn packet_id(&mut self) -> Result<u16, DecodeError> {
        match self.u16()? {
            0 => Err(DecodeError::ZeroPacketId),
            id => Ok(id),
        }
    }

    /// The raw bytes of a two-byte-length-prefixed field.
    pub(crate) fn prefixed(&mut self) -> Result<&[u8], DecodeError> {
        let len = usize::from(self.u16()?);
        let r = self.take(len)?;
        Ok(&self.data[r])
    }

    /// A UTF-8 encoded string: well-formed UTF-8 ([MQTT-1.5.3-1]) without U+0000 ([MQTT-1.5.3-2]).
    pub(crate) fn str(&mut self) -> Result<&str, DecodeError> {
        utf8_string(self.prefixed()?)
    }

    /// A string into `held`: left as it is when it has the same bytes (neither copied nor
    /// checked for UTF-8 again, a `str` being UTF-8 already), replaced otherwise. U+0000 is
    /// refused either way.
    pub(crate) fn string_into(&mut self, held: &mut Arc<str>) -> Result<(), DecodeError> {
        let raw = self.prefixed()?;
        if raw == held.as_bytes() && !raw.contains(&0) {
            return Ok(());
        }
        *held = utf8_string(raw).map(Arc::from)?;
        Ok(())
    }

    /// A string converted to the owner type the packet model uses (`String` or `Arc<str>`).
    pub(crate) fn string<T: for<'a> From<&'a str>>(&mut self) -> Result<T, DecodeError> {
        self.str().map(T::from)
    }

    /// A string pair (user property).
    pub(crate) fn string_pair<T: for<'a> From<&'a str>>(&mut self) -> Result<(T, T), DecodeError> {
        let key = self.string()?;
        let value = self.string()?;
        Ok((key, value))
    }

    /// Binary data, sharing the packet's buffer instead of copying.
    pub(crate) fn binary(&mut self) -> Result<Bytes, DecodeError> {
        let len = usize::from(self.u16()?);
        let r = self.take(len)?;
        Ok(self.data.slice(r))
    }

    /// Everything up to the end (the PUBLISH payload), sharing the packet's buffer: the
    /// reader's own handle on it, narrowed, rather than a new one (no reference count is
    /// taken and dropped per message). The reader is used up and reads nothing more.
    pub(crate) fn rest(&mut self) -> Bytes {
        let mut data = std::mem::take(&mut self.data);
        data.truncate(self.end);
        data.advance(self.pos);
        self.pos = 0;
        self.end = 0;
        data
    }

    /// Narrows the reader to the next `len` bytes; returns the previous end for [`Reader::widen`].
    pub(crate) fn narrow(&mut self, len: usize) -> Result<usize, DecodeError> {
        if self.remaining() < len {
            return Err(DecodeError::UnexpectedEnd);
        }
        let outer = self.end;
        self.end = self.pos + len;
        Ok(outer)
    }

    /// Restores the end saved by [`Reader::narrow`].
    pub(crate) fn widen(&mut self, outer_end: usize) {
        self.end = outer_end;
    }
}

/// A UTF-8 encoded string: well-formed UTF-8 ([MQTT-1.5.3-1]) without U+0000 ([MQTT-1.5.3-2]).
fn utf8_string(raw: &[u8]) -> Result<&str, DecodeError> {
    let s = std::str::from_utf8(raw).map_err(|_| DecodeError::InvalidUtf8)?;
    if raw.contains(&0) {
        return Err(DecodeError::NulInString);
    }
    Ok(s)
}

/// Where an encoder pass sends its output: a [`Counter`] (lengths and validation) or a `BytesMut`.
pub(crate) trait Sink {
    fn u8(&mut self, v: u8);
    fn u16(&mut self, v: u16);
    fn u32(&mut self, v: u32);
    fn var_int(&mut self, v: u32);
    /// A length-prefixed UTF-8 string.
    fn str(&mut self, s: &str);
    /// Length-prefixed binary data.
    fn binary(&mut self, b: &[u8]);
    /// Bytes with no length prefix (the PUBLISH payload).
    fn raw(&mut self, b: &[u8]);
    /// Records that the packet cannot be encoded. Only the counting pass acts on it; the writing
    /// pass runs only after the counting pass reported no failure.
    fn fail(&mut self, error: EncodeError);
}

/// The counting pass: sums lengths and keeps the first validation failure.
#[derive(Default)]
pub(crate) struct Counter {
    pub(crate) len: usize,
    pub(crate) error: Option<EncodeError>,
}

impl Counter {
    pub(crate) fn finish(self) -> Result<usize, EncodeError> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.len),
        }
    }
}

impl Sink for Counter {
    fn u8(&mut self, _: u8) {
        self.len += 1;
    }

    fn u16(&mut self, _: u16) {
        self.len += 2;
    }

    fn u32(&mut self, _: u32) {
        self.len += 4;
    }

    fn var_int(&mut self, v: u32) {
        if v > MAX_VAR_INT {
            self.fail(EncodeError::VarIntTooLarge(v));
        }
        self.len += var_int_len(v);
    }

    fn str(&mut self, s: &str) {
        if s.len() > usize::from(u16::MAX) {
            self.fail(EncodeError::StringTooLong(s.len()));
        }
        if s.as_bytes().contains(&0) {
            self.fail(EncodeError::NulInString);
        }
        self.len += 2 + s.len();
    }

    fn binary(&mut self, b: &[u8]) {
        if b.len() > usize::from(u16::MAX) {
            self.fail(EncodeError::BinaryTooLong(b.len()));
        }
        self.len += 2 + b.len();
    }

    fn raw(&mut self, b: &[u8]) {
        self.len += b.len();
    }

    fn fail(&mut self, error: EncodeError) {
        self.error.get_or_insert(error);
    }
}

impl Sink for BytesMut {
    fn u8(&mut self, v: u8) {
        BufMut::put_u8(self, v);
    }

    fn u16(&mut self, v: u16) {
        BufMut::put_u16(self, v);
    }

    fn u32(&mut self, v: u32) {
        BufMut::put_u32(self, v);
    }

    fn var_int(&mut self, v: u32) {
        put_var_int(self, v);
    }

    fn str(&mut self, s: &str) {
        Sink::binary(self, s.as_bytes());
    }

    fn binary(&mut self, b: &[u8]) {
        // The counting pass refused anything longer.
        BufMut::put_u16(self, b.len() as u16);
        self.put_slice(b);
    }

    fn raw(&mut self, b: &[u8]) {
        self.put_slice(b);
    }

    fn fail(&mut self, _: EncodeError) {}
}
