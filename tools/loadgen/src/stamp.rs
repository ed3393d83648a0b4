//! The stamp every load message carries: when it was (meant to be) sent, and by which sender.
//!
//! Receivers turn the stamp into a latency sample and give the sender's window its slot back,
//! so the broker needs to know nothing about the load. MQTT payloads carry it in binary (12
//! bytes, then zeros); JSON messages carry it as 24 lowercase hex digits at the start of a
//! string field (then `x`s), since a JSON string cannot hold raw bytes.

use std::time::Instant;

/// Length of the binary stamp: 8 bytes of nanoseconds, 4 of sender index, little-endian.
pub(crate) const BINARY_LEN: usize = 12;
/// Length of the text stamp: 16 hex digits of nanoseconds, 8 of sender index.
pub(crate) const TEXT_LEN: usize = 24;

/// The run's time origin; stamps are nanoseconds since it. One process, one monotonic clock:
/// the sender's and the receiver's readings are directly comparable.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock starting now.
    pub(crate) fn new() -> Clock {
        Clock { origin: Instant::now() }
    }

    /// Nanoseconds since the origin.
    pub(crate) fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// What a stamp says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// Send time, nanoseconds since the run's [`Clock`] origin.
    pub(crate) sent_ns: u64,
    /// Index of the sender (its window).
    pub(crate) source: u32,
}

/// Writes the binary stamp into the first [`BINARY_LEN`] bytes of `payload` (shorter payloads
/// get as much of it as fits).
pub(crate) fn put_binary(payload: &mut [u8], stamp: Stamp) {
    let mut bytes = [0u8; BINARY_LEN];
    bytes[..8].copy_from_slice(&stamp.sent_ns.to_le_bytes());
    bytes[8..].copy_from_slice(&stamp.source.to_le_bytes());
    let n = payload.len().min(BINARY_LEN);
    payload[..n].copy_from_slice(&bytes[..n]);
}

/// Reads a binary stamp from the start of `payload`.
pub(crate) fn read_binary(payload: &[u8]) -> Option<Stamp> {
    let b = payload.get(..BINARY_LEN)?;
    Some(Stamp {
        sent_ns: u64::from_le_bytes(b[..8].try_into().ok()?),
        source: u32::from_le_bytes(b[8..].try_into().ok()?),
    })
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends the text stamp, then `x`s up to `len` characters in all (at least [`TEXT_LEN`]).
pub(crate) fn put_text(out: &mut Vec<u8>, stamp: Stamp, len: usize) {
    for shift in (0..16).rev() {
        out.push(HEX[(stamp.sent_ns >> (shift * 4)) as usize & 0xf]);
    }
    for shift in (0..8).rev() {
        out.push(HEX[(stamp.source >> (shift * 4)) as usize & 0xf]);
    }
    out.resize(out.len() + len.saturating_sub(TEXT_LEN), b'x');
}

/// Reads a text stamp from the start of `text`.
pub(crate) fn read_text(text: &[u8]) -> Option<Stamp> {
    let digits = text.get(..TEXT_LEN)?;
    let mut value = [0u64; 2];
    for (i, &c) in digits.iter().enumerate() {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        let v = &mut value[usize::from(i >= 16)];
        *v = (*v << 4) | u64::from(d);
    }
    Some(Stamp { sent_ns: value[0], source: u32::try_from(value[1]).ok()? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn text_layout() {
        let mut out = b"ct=".to_vec();
        put_text(&mut out, Stamp { sent_ns: 0x0123_4567_89ab_cdef, source: 0x2a }, 30);
        assert_eq!(out, b"ct=0123456789abcdef0000002axxxxxx");
        assert_eq!(read_text(&out[3..]), Some(Stamp { sent_ns: 0x0123_4567_89ab_cdef, source: 42 }));
        for bad in [&b"0123456789abcdef0000002"[..], b"0123456789ABCDEF0000002a", b"0123456789abcdef-000002a"]
        {
            assert_eq!(read_text(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn binary_layout_and_short_payloads() {
        let mut p = [0xffu8; 16];
        put_binary(&mut p, Stamp { sent_ns: 1, source: 2 });
        assert_eq!(p, [1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        let mut short = [0u8; 5];
        put_binary(&mut short, Stamp { sent_ns: 0x0005_0403_0201, source: 9 });
        assert_eq!(short, [1, 2, 3, 4, 5]);
        assert_eq!(read_binary(&short), None);
    }

    proptest! {
        #[test]
        fn round_trips(sent_ns: u64, source: u32, len in 0usize..100) {
            let stamp = Stamp { sent_ns, source };
            let mut text = Vec::new();
            put_text(&mut text, stamp, len);
            prop_assert_eq!(text.len(), len.max(TEXT_LEN));
            prop_assert_eq!(read_text(&text), Some(stamp));
            let mut bin = vec![0u8; BINARY_LEN + len];
            put_binary(&mut bin, stamp);
            prop_assert_eq!(read_binary(&bin), Some(stamp));
        }

        #[test]
        fn readers_take_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = read_text(&bytes);
            let _ = read_binary(&bytes);
        }
    }
}
