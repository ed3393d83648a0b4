//! JSON strings: finding where one ends, validating it, and decoding its escapes.
//!
//! Most strings in a message are short keys and values without escapes, so the common case is
//! one cheap classification of the bytes that end a plain run (`"`, `\`, a control character)
//! and of those of 128 or more, read eight bytes at a time with a few word operations; a string
//! that runs past [`SHORT_STRING`] bytes switches to `memchr`'s SIMD search for `"` and `\`,
//! then checks the run for control characters and non-ASCII bytes in one vectorisable pass.
//! (An SSE2 classification sixteen bytes at a time was tried and measured slower on this
//! workload's short strings: docs/content.md.) Only runs with non-ASCII bytes go
//! through the standard library's UTF-8 validator, and only strings with escapes are decoded
//! (when the caller keeps them).

use super::{Fail, Result, syntax};
use crate::content::message::Span;
use crate::content::scan::SyntaxError;

pub(super) const ONES: u64 = 0x0101_0101_0101_0101;
pub(super) const HIGH: u64 = 0x8080_8080_8080_8080;

/// Bit 7 is set in each byte of the result where `w` (eight bytes, little-endian) holds `"`,
/// `\` or a control character, except that bytes above the first such byte may be flagged too
/// (a borrow carries upwards only from a byte that is itself flagged): the lowest flagged byte
/// is always exact. Bytes of 128 or more are never flagged on their own.
#[inline(always)]
fn specials(w: u64) -> u64 {
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    let is_quote = quote.wrapping_sub(ONES) & !quote;
    let is_backslash = backslash.wrapping_sub(ONES) & !backslash;
    let is_control = w.wrapping_sub(ONES * 0x20) & !w;
    (is_quote | is_backslash | is_control) & HIGH
}

/// The eight bytes at `i`, little-endian, if there are eight.
#[inline(always)]
pub(super) fn word(b: &[u8], i: usize) -> Option<u64> {
    let chunk: [u8; 8] = b.get(i..i + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(chunk))
}

/// Strings longer than this leave the fast path (and, eight bytes at a time, switch to `memchr`'s
/// SIMD search).
pub(super) const SHORT_STRING: usize = 32;

/// The first `"`, `\` or control character at or after `i` (or the end of `b`), and whether a
/// byte of 128 or more lies before it: eight bytes at a time, then with `memchr` past
/// [`SHORT_STRING`] bytes.
#[inline(always)]
fn find_special(b: &[u8], mut i: usize) -> (usize, bool) {
    let start = i;
    let mut high = 0u64;
    while let Some(w) = word(b, i) {
        let m = specials(w);
        if m != 0 {
            // Only the bytes below the stop count (the stop itself is ASCII).
            high |= w & (m & m.wrapping_neg()).wrapping_sub(1);
            return (i + (m.trailing_zeros() / 8) as usize, high & HIGH != 0);
        }
        high |= w;
        i += 8;
        if i - start >= SHORT_STRING {
            return find_special_long(b, i, high & HIGH != 0);
        }
    }
    find_special_tail(b, i, high & HIGH != 0)
}

/// [`find_special`] for the last seven bytes or fewer.
#[inline(never)]
fn find_special_tail(b: &[u8], mut i: usize, mut high: bool) -> (usize, bool) {
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        high |= c >= 0x80;
        i += 1;
    }
    (i, high)
}

/// [`find_special`] past the first [`SHORT_STRING`] bytes.
#[inline(never)]
fn find_special_long(b: &[u8], i: usize, high_before: bool) -> (usize, bool) {
    let rest = b.get(i..).unwrap_or_default();
    let end = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    let run = &rest[..end];
    let (mut control, mut high) = (0u64, 0u64);
    let mut words = run.chunks_exact(8);
    for chunk in &mut words {
        let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        control |= w.wrapping_sub(ONES * 0x20) & !w;
        high |= w;
    }
    for &c in words.remainder() {
        control |= u64::from(c < 0x20) << 7;
        high |= u64::from(c);
    }
    if control & HIGH != 0 {
        // A flag in `control` means a real control character somewhere in the run: find it.
        if let Some(at) = run.iter().position(|&c| c < 0x20) {
            return (i + at, high_before || run[..at].iter().any(|&c| c >= 0x80));
        }
    }
    (i + end, high_before || high & HIGH != 0)
}

/// A string whose opening quote is at `i - 1`. Returns the position after its closing quote
/// and the span of its value: in the input when it has no escape, else (with `out`) the
/// decoded text appended to `out`.
///
/// The fast path handles plain ASCII strings of up to [`SHORT_STRING`] bytes, stopping at the
/// first `"`, `\`, control character or byte of 128 or more; only a `"` there ends it. Anything
/// else goes to [`string_slow`].
#[inline(always)]
pub(super) fn string(b: &[u8], i: usize, out: Option<&mut Vec<u8>>) -> Result<(usize, Span)> {
    if let Some(stop) = plain_end(b, i) {
        return Ok((stop + 1, Span::input(i, stop)));
    }
    let (stop, high) = find_special(b, i);
    string_slow(b, i, out, stop, high)
}

/// The closing quote of a plain ASCII string of up to [`SHORT_STRING`] bytes whose body starts
/// at `i`, read eight bytes at a time; `None` for any other string.
#[inline(always)]
fn plain_end(b: &[u8], i: usize) -> Option<usize> {
    let mut at = i;
    while let Some(w) = word(b, at) {
        let m = specials(w) | (w & HIGH);
        if m != 0 {
            let stop = at + (m.trailing_zeros() / 8) as usize;
            return (b.get(stop) == Some(&b'"')).then_some(stop);
        }
        at += 8;
        if at - i >= SHORT_STRING {
            return None;
        }
    }
    None
}

/// The rest of a string whose first run ends at `stop` with something other than a plain
/// closing quote: an escape, non-ASCII text, a control character or the end of the input.
#[inline(never)]
fn string_slow(
    b: &[u8],
    start: usize,
    mut out: Option<&mut Vec<u8>>,
    mut stop: usize,
    mut high: bool,
) -> Result<(usize, Span)> {
    let mut run = start;
    let mut decoded_from: Option<usize> = None;
    loop {
        if high {
            if let Err(e) = std::str::from_utf8(&b[run..stop]) {
                return Err(syntax(run + e.valid_up_to(), SyntaxError::InvalidUtf8));
            }
        }
        let i = match b.get(stop) {
            None => return Err(syntax(b.len(), SyntaxError::UnexpectedEnd)),
            Some(b'"') => {
                let span = match (decoded_from, out) {
                    (Some(from), Some(out)) => {
                        out.extend_from_slice(&b[run..stop]);
                        Span::owned(from, out.len())
                    }
                    _ => Span::input(start, stop),
                };
                return Ok((stop + 1, span));
            }
            Some(b'\\') => {
                if let Some(out) = out.as_deref_mut() {
                    if decoded_from.is_none() {
                        decoded_from = Some(out.len());
                    }
                    out.extend_from_slice(&b[run..stop]);
                }
                escape(b, stop, out.as_deref_mut())?
            }
            Some(_) => return Err(syntax(stop, SyntaxError::ControlCharacter)),
        };
        run = i;
        (stop, high) = find_special(b, i);
    }
}

/// The escape whose backslash is at `at`; returns the position after it.
fn escape(b: &[u8], at: usize, out: Option<&mut Vec<u8>>) -> Result<usize> {
    let Some(&c) = b.get(at + 1) else {
        return Err(syntax(b.len(), SyntaxError::UnexpectedEnd));
    };
    let mut i = at + 2;
    let ch = match c {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let ch;
            (i, ch) = unicode_escape(b, at)?;
            ch
        }
        _ => return Err(syntax(at, SyntaxError::InvalidEscape)),
    };
    if let Some(out) = out {
        let mut buf = [0; 4];
        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
    }
    Ok(i)
}

/// Four hexadecimal digits at `i`.
fn hex4(b: &[u8], i: usize) -> Result<u32> {
    let mut n = 0;
    for j in i..i + 4 {
        let Some(&c) = b.get(j) else {
            return Err(syntax(b.len(), SyntaxError::UnexpectedEnd));
        };
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return Err(syntax(j, SyntaxError::InvalidEscape)),
        };
        n = n << 4 | u32::from(d);
    }
    Ok(n)
}

/// `\uXXXX` at `at` (and a following `\uXXXX` low surrogate when needed); returns the position
/// after it and the character.
fn unicode_escape(b: &[u8], at: usize) -> Result<(usize, char)> {
    let first = hex4(b, at + 2)?;
    let mut i = at + 6;
    let code = match first {
        0xD800..=0xDBFF => {
            if b.get(i..i + 2) != Some(b"\\u") {
                return Err(if i + 2 > b.len() && b"\\u".starts_with(&b[i..]) {
                    syntax(b.len(), SyntaxError::UnexpectedEnd)
                } else {
                    syntax(at, SyntaxError::LoneSurrogate)
                });
            }
            let second = hex4(b, i + 2)?;
            if !(0xDC00..=0xDFFF).contains(&second) {
                return Err(syntax(at, SyntaxError::LoneSurrogate));
            }
            i += 6;
            0x10000 + ((first - 0xD800) << 10 | (second - 0xDC00))
        }
        0xDC00..=0xDFFF => return Err(syntax(at, SyntaxError::LoneSurrogate)),
        _ => first,
    };
    match char::from_u32(code) {
        Some(ch) => Ok((i, ch)),
        None => Err(Fail::Syntax(at as u32, SyntaxError::InvalidEscape)),
    }
}
