//! A single-pass scanner that validates one frame as a JSON object and lists its top-level
//! members without building a tree.
//!
//! The relay reads a few string fields of each message and forwards the rest verbatim, so it
//! needs every member's key and the exact text of its value, not a parsed document. The scanner
//! checks the whole frame against RFC 8259 (nested values included: `pipe_data` forwards them,
//! and the relay never forwards invalid JSON) and hands out borrowed slices: keys are unescaped
//! only when they contain a backslash, values not at all.
//!
//! Decisions where RFC 8259 leaves room, each the choice serde_json makes too (it is the
//! scanner's test oracle):
//! - Only an object is accepted at the top level; whitespace may surround it, nothing else.
//! - A `\u` escape of a lone surrogate is refused: it has no UTF-8 form.
//! - Nesting deeper than [`MAX_DEPTH`] is refused, which bounds the recursion.
//! - Numbers are checked for syntax only; their size is not limited.

use std::borrow::Cow;

use smallvec::SmallVec;

use super::json::{JsonStr, unescape};

/// The deepest nesting of arrays and objects accepted, the top-level object included.
pub(crate) const MAX_DEPTH: usize = 64;

/// Where and why the input is not a JSON object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JsonError {
    /// The byte offset of the problem.
    pub(crate) offset: usize,
    /// What was expected there.
    pub(crate) reason: &'static str,
}

/// The JSON type of a member's value, with the value itself for the types the relay reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    /// A string, as its literal.
    Str(JsonStr<'a>),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// A number, an object or an array.
    Other,
}

/// One top-level member of the object.
#[derive(Clone, Debug)]
pub(crate) struct Member<'a> {
    /// The key, unescaped.
    pub(crate) key: Cow<'a, str>,
    /// The value.
    pub(crate) value: Value<'a>,
    /// The member exactly as sent, from the key's opening quote to the value's last byte.
    pub(crate) span: &'a str,
}

/// The members of one object; most relay messages have at most eight.
pub(crate) type Members<'a> = SmallVec<[Member<'a>; 8]>;

/// Validates `text` as one JSON object and returns its top-level members in order.
pub(crate) fn scan_object(text: &str) -> Result<Members<'_>, JsonError> {
    let mut scanner = Scanner { text, bytes: text.as_bytes(), pos: 0 };
    let mut members = Members::new();
    scanner.skip_ws();
    scanner.expect(b'{', "'{' opening the object")?;
    scanner.skip_ws();
    if scanner.peek() == Some(b'}') {
        scanner.pos += 1;
    } else {
        loop {
            scanner.skip_ws();
            members.push(scanner.member()?);
            scanner.skip_ws();
            match scanner.next_byte() {
                Some(b',') => continue,
                Some(b'}') => break,
                _ => return Err(scanner.error_before("',' or '}' after a member")),
            }
        }
    }
    scanner.skip_ws();
    if scanner.pos != scanner.bytes.len() {
        return Err(scanner.error("the end of the frame after the object"));
    }
    Ok(members)
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

/// What a string scan found: where the literal starts and ends (quotes included) and whether
/// it has escapes.
struct StrSpan {
    start: usize,
    end: usize,
    escaped: bool,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn next_byte(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    fn error(&self, reason: &'static str) -> JsonError {
        JsonError { offset: self.pos, reason }
    }

    /// An error about the byte just consumed.
    fn error_before(&self, reason: &'static str) -> JsonError {
        JsonError { offset: self.pos.saturating_sub(1), reason }
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Result<(), JsonError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(reason))
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// The text of `start..end`. Both ends sit on ASCII delimiters, so they are always char
    /// boundaries; the check keeps this total anyway.
    fn slice(&self, start: usize, end: usize) -> Result<&'a str, JsonError> {
        self.text.get(start..end).ok_or(JsonError { offset: start, reason: "a character boundary" })
    }

    fn member(&mut self) -> Result<Member<'a>, JsonError> {
        let key = self.string("a string key")?;
        self.skip_ws();
        self.expect(b':', "':' after the key")?;
        self.skip_ws();
        let value = self.value(1)?;
        let key_inner = self.slice(key.start + 1, key.end - 1)?;
        let span = self.slice(key.start, self.pos)?;
        let key = if key.escaped { Cow::Owned(unescape(key_inner)) } else { Cow::Borrowed(key_inner) };
        Ok(Member { key, value, span })
    }

    /// Scans a value; `depth` is the nesting of the container it sits in.
    fn value(&mut self, depth: usize) -> Result<Value<'a>, JsonError> {
        match self.peek() {
            Some(b'"') => {
                let span = self.string("a string")?;
                Ok(Value::Str(JsonStr::literal(self.slice(span.start, span.end)?, span.escaped)))
            }
            Some(b'{') => self.container(depth, b'}', true).map(|()| Value::Other),
            Some(b'[') => self.container(depth, b']', false).map(|()| Value::Other),
            Some(b't') => self.literal(b"true").map(|()| Value::Bool(true)),
            Some(b'f') => self.literal(b"false").map(|()| Value::Bool(false)),
            Some(b'n') => self.literal(b"null").map(|()| Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number().map(|()| Value::Other),
            _ => Err(self.error("a value")),
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), JsonError> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.error("true, false or null"))
        }
    }

    /// A nested object (`is_object`) or array, opened by the byte at `pos`.
    fn container(&mut self, depth: usize, close: u8, is_object: bool) -> Result<(), JsonError> {
        if depth >= MAX_DEPTH {
            return Err(self.error("at most 64 levels of nesting"));
        }
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(close) {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            if is_object {
                self.string("a string key")?;
                self.skip_ws();
                self.expect(b':', "':' after the key")?;
                self.skip_ws();
            }
            self.value(depth + 1)?;
            self.skip_ws();
            match self.next_byte() {
                Some(b',') => continue,
                Some(b) if b == close => return Ok(()),
                _ => return Err(self.error_before("',' or the end of the container")),
            }
        }
    }

    fn string(&mut self, reason: &'static str) -> Result<StrSpan, JsonError> {
        let start = self.pos;
        self.expect(b'"', reason)?;
        let mut escaped = false;
        loop {
            // The fast path: bytes that stand for themselves, eight at a time, then one at a
            // time up to the byte that ends the run. Non-ASCII bytes are part of characters the
            // UTF-8 check of the whole frame has already validated.
            while let Some(chunk) = self.bytes.get(self.pos..).and_then(<[u8]>::first_chunk::<8>) {
                let mask = run_end_mask(u64::from_le_bytes(*chunk));
                if mask != 0 {
                    // The lowest flagged byte is always a real one (see `run_end_mask`).
                    self.pos += (mask.trailing_zeros() / 8) as usize;
                    break;
                }
                self.pos += 8;
            }
            while let Some(&b) = self.bytes.get(self.pos) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            match self.next_byte() {
                Some(b'"') => return Ok(StrSpan { start, end: self.pos, escaped }),
                Some(b'\\') => {
                    escaped = true;
                    self.escape()?;
                }
                Some(_) => return Err(self.error_before("no control character inside a string")),
                None => return Err(self.error("the closing '\"' of a string")),
            }
        }
    }

    /// The escape after a backslash.
    fn escape(&mut self) -> Result<(), JsonError> {
        match self.next_byte() {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(()),
            Some(b'u') => {
                let unit = self.hex4()?;
                match unit {
                    0xd800..0xdc00 => {
                        if self.next_byte() != Some(b'\\') || self.next_byte() != Some(b'u') {
                            return Err(self.error_before("a low surrogate after a high surrogate"));
                        }
                        match self.hex4()? {
                            0xdc00..0xe000 => Ok(()),
                            _ => Err(self.error_before("a low surrogate after a high surrogate")),
                        }
                    }
                    0xdc00..0xe000 => Err(self.error_before("no lone low surrogate")),
                    _ => Ok(()),
                }
            }
            _ => Err(self.error_before("a valid escape")),
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let mut value = 0;
        for _ in 0..4 {
            let digit = self
                .next_byte()
                .and_then(|b| char::from(b).to_digit(16))
                .ok_or_else(|| self.error_before("four hex digits after \\u"))?;
            value = value * 16 + digit;
        }
        Ok(value)
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Result<(), JsonError> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.next_byte() {
            Some(b'0') => {}
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error_before("a digit")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.one_or_more_digits("a digit after the decimal point")?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.one_or_more_digits("a digit in the exponent")?;
        }
        Ok(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    fn one_or_more_digits(&mut self, reason: &'static str) -> Result<(), JsonError> {
        if !matches!(self.peek(), Some(b'0'..=b'9')) {
            return Err(self.error(reason));
        }
        self.digits();
        Ok(())
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// Flags the bytes of `word` (little-endian: byte 0 is the lowest) that may be `"`, `\` or a
/// control character (below 0x20), by setting their high bit; zero iff there is none. The lowest
/// flagged byte is always one of them; a byte above it may be flagged wrongly (a borrow carries
/// upwards from a match), which does not matter because scanning stops at the lowest.
fn run_end_mask(word: u64) -> u64 {
    // The classic SWAR tests: `(x - 0x01…) & !x & 0x80…` flags the zero bytes of `x`, and
    // `(x - n·0x01…) & !x & 0x80…` the bytes below `n` (for `n` ≤ 0x80).
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x;
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    (zero_byte(quote) | zero_byte(backslash) | control) & HIGH_BITS
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn ends_a_run(b: u8) -> bool {
        b == b'"' || b == b'\\' || b < 0x20
    }

    /// The index of the first byte the mask flags, if any.
    fn first_flagged(bytes: [u8; 8]) -> Option<usize> {
        let mask = run_end_mask(u64::from_le_bytes(bytes));
        (mask != 0).then(|| (mask.trailing_zeros() / 8) as usize)
    }

    proptest! {
        /// The word test finds exactly the first byte the byte test finds.
        #[test]
        fn word_test_matches_the_byte_test(bytes in any::<[u8; 8]>()) {
            prop_assert_eq!(first_flagged(bytes), bytes.iter().position(|&b| ends_a_run(b)));
        }

        /// The same with bytes drawn near the interesting values.
        #[test]
        fn word_test_near_the_edges(bytes in proptest::array::uniform8(prop_oneof![
            0x1eu8..0x24, 0x5au8..0x5f, 0x7eu8..0x82, 0xfeu8..=0xff, 0u8..2
        ])) {
            prop_assert_eq!(first_flagged(bytes), bytes.iter().position(|&b| ends_a_run(b)));
        }
    }
}
