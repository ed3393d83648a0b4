//! A single-pass, validating JSON scanner that keeps only the top level.
//!
//! Strict RFC 8259: one value with optional whitespace around it, no trailing commas, no
//! comments, strings without raw control characters and with only the eight short escapes and
//! `\uXXXX` (surrogates must pair: a lone one cannot become UTF-8 text), numbers in the JSON
//! grammar, and UTF-8 throughout. Numbers are not converted (their text is what paths compare),
//! so any length is accepted. Nesting is limited to [`MAX_DEPTH`] levels, the same limit
//! `serde_json` applies, and checked with a 128-bit stack instead of recursion.
//!
//! The scanner is written for the common message: compact JSON whose bytes are mostly inside
//! strings. Positions travel as plain `usize` values between small inlined functions (so they
//! stay in registers), whitespace costs one comparison when there is none, strings are read
//! eight bytes at a time, or with `memchr` when long (`string.rs`), and failures are an 8-byte
//! [`Fail`] that becomes a [`ScanError`] only at the end. Only top-level strings with escapes
//! are decoded; nested values are validated and skipped.

mod string;

use self::string::{HIGH, ONES, string, word};
use super::message::{Kind, Message, Shape, Span};

/// The deepest nesting accepted; the top-level object or array is level 1.
pub const MAX_DEPTH: usize = 127;

/// The largest message accepted, in bytes.
pub const MAX_MESSAGE_LEN: usize = (1 << 31) - 1;

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    /// The message is empty or only whitespace.
    #[error("empty message: send a JSON object or array")]
    Empty,
    /// The message is valid JSON but a scalar, not an object or array.
    #[error("a JSON {kind} is not a message: send a JSON object or array")]
    NotContainer {
        /// `string`, `number`, `boolean` or `null`.
        kind: &'static str,
    },
    /// The message is not valid JSON.
    #[error("invalid JSON at byte {offset}: {reason}")]
    Syntax {
        /// Byte offset of the problem.
        offset: usize,
        /// What was wrong there.
        reason: SyntaxError,
    },
    /// Objects and arrays nest deeper than [`MAX_DEPTH`].
    #[error("JSON nested deeper than {limit} levels at byte {offset}")]
    TooDeep {
        /// Byte offset of the opening bracket that went too deep.
        offset: usize,
        /// The limit.
        limit: usize,
    },
    /// The message is longer than [`MAX_MESSAGE_LEN`].
    #[error("message of {len} bytes is over the {limit}-byte limit")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
}

/// What made a message invalid JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SyntaxError {
    /// The text ends in the middle of a value.
    #[error("unexpected end of the message")]
    UnexpectedEnd,
    /// Something other than a value where a value must be.
    #[error("expected a value")]
    ExpectedValue,
    /// Something other than a string where an object key must be.
    #[error("expected an object key (a string)")]
    ExpectedKey,
    /// No `:` after an object key.
    #[error("expected ':' after the key")]
    ExpectedColon,
    /// No `,` or closing bracket after a value in an object or array.
    #[error("expected ',' or a closing bracket")]
    ExpectedCommaOrClose,
    /// A backslash followed by something other than a JSON escape.
    #[error("invalid escape in a string")]
    InvalidEscape,
    /// A `\u` escape of a UTF-16 surrogate without its pair.
    #[error("unpaired surrogate in a \\u escape")]
    LoneSurrogate,
    /// A raw control character (below U+0020) inside a string.
    #[error("control character in a string (escape it)")]
    ControlCharacter,
    /// Bytes that are not UTF-8 inside a string.
    #[error("invalid UTF-8 in a string")]
    InvalidUtf8,
    /// A malformed number (leading zero, missing digits, ...).
    #[error("invalid number")]
    InvalidNumber,
    /// A word other than `true`, `false` or `null`.
    #[error("invalid literal (expected true, false or null)")]
    InvalidLiteral,
    /// More text after the message.
    #[error("unexpected text after the message")]
    TrailingCharacters,
}

/// Why scanning stopped, in eight bytes: internal results travel in registers, and only the
/// failure that ends the scan becomes a [`ScanError`].
#[derive(Clone, Copy, Debug)]
enum Fail {
    Syntax(u32, SyntaxError),
    TooDeep(u32),
}

impl From<Fail> for ScanError {
    fn from(fail: Fail) -> ScanError {
        match fail {
            Fail::Syntax(offset, reason) => ScanError::Syntax { offset: offset as usize, reason },
            Fail::TooDeep(offset) => ScanError::TooDeep { offset: offset as usize, limit: MAX_DEPTH },
        }
    }
}

type Result<T> = std::result::Result<T, Fail>;

#[cold]
fn syntax(offset: usize, reason: SyntaxError) -> Fail {
    // Offsets fit: inputs of 2³¹ bytes or more are refused before scanning.
    Fail::Syntax(offset as u32, reason)
}

/// `reason` at `i`, or [`SyntaxError::UnexpectedEnd`] when `i` is past the input.
#[cold]
fn expected(b: &[u8], i: usize, reason: SyntaxError) -> Fail {
    if i >= b.len() { syntax(b.len(), SyntaxError::UnexpectedEnd) } else { syntax(i, reason) }
}

/// Bit n is set when byte n is JSON whitespace (space, tab, newline, carriage return).
const WHITESPACE: u64 = 1 << b' ' | 1 << b'\t' | 1 << b'\n' | 1 << b'\r';

/// The first position at or after `i` that is not whitespace. Compact JSON has none, so one
/// comparison decides the common case.
#[inline(always)]
fn ws(b: &[u8], mut i: usize) -> usize {
    while let Some(&c) = b.get(i) {
        if c > b' ' || WHITESPACE & (1 << c) == 0 {
            break;
        }
        i += 1;
    }
    i
}

/// Scans `input` into a [`Message`].
pub(crate) fn scan(input: &[u8]) -> std::result::Result<Message<'_>, ScanError> {
    if input.len() > MAX_MESSAGE_LEN {
        return Err(ScanError::TooLarge { len: input.len(), limit: MAX_MESSAGE_LEN });
    }
    let i = ws(input, 0);
    let (mut msg, end) = match input.get(i) {
        None => return Err(ScanError::Empty),
        Some(b'{') => {
            let mut msg = Message::new(input, Shape::Object);
            let end = top_object(input, i + 1, &mut msg)?;
            (msg, end)
        }
        Some(b'[') => {
            let mut msg = Message::new(input, Shape::Array);
            let end = top_array(input, i + 1, &mut msg)?;
            (msg, end)
        }
        Some(_) => {
            let (end, _, kind) = scalar(input, i, None)?;
            let end = ws(input, end);
            if end != input.len() {
                return Err(syntax(end, SyntaxError::TrailingCharacters).into());
            }
            return Err(ScanError::NotContainer { kind: kind_name(kind) });
        }
    };
    let end = ws(input, end);
    if end != input.len() {
        return Err(syntax(end, SyntaxError::TrailingCharacters).into());
    }
    msg.finish();
    Ok(msg)
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::String => "string",
        Kind::Number => "number",
        Kind::True | Kind::False => "boolean",
        Kind::Null => "null",
        Kind::Object => "object",
        Kind::Array => "array",
    }
}

/// The members of the top-level object whose `{` is at `i - 1`; returns the position after
/// its `}`.
fn top_object(b: &[u8], i: usize, msg: &mut Message<'_>) -> Result<usize> {
    let mut i = ws(b, i);
    if b.get(i) == Some(&b'}') {
        return Ok(i + 1);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return Err(expected(b, i, SyntaxError::ExpectedKey));
        }
        let (after, key) = string(b, i + 1, Some(msg.unescape_buffer()))?;
        i = colon(b, after)?;
        let (after, value, kind) = scalar(b, i, Some(msg.unescape_buffer()))?;
        msg.push_named(key, value, kind);
        i = ws(b, after);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            Some(b'}') => return Ok(i + 1),
            _ => return Err(expected(b, i, SyntaxError::ExpectedCommaOrClose)),
        }
    }
}

/// The elements of the top-level array whose `[` is at `i - 1`; returns the position after
/// its `]`.
fn top_array(b: &[u8], i: usize, msg: &mut Message<'_>) -> Result<usize> {
    let mut i = ws(b, i);
    if b.get(i) == Some(&b']') {
        return Ok(i + 1);
    }
    loop {
        let (after, value, kind) = scalar(b, i, Some(msg.unescape_buffer()))?;
        msg.push_element(value, kind);
        i = ws(b, after);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            Some(b']') => return Ok(i + 1),
            _ => return Err(expected(b, i, SyntaxError::ExpectedCommaOrClose)),
        }
    }
}

/// `:` after a key (whitespace around it allowed); returns the position of the value.
#[inline(always)]
fn colon(b: &[u8], i: usize) -> Result<usize> {
    let i = ws(b, i);
    if b.get(i) != Some(&b':') {
        return Err(expected(b, i, SyntaxError::ExpectedColon));
    }
    Ok(ws(b, i + 1))
}

/// The value at `i`: returns the position after it, the comparable text of a scalar (empty for
/// a nested value) and its kind. With `out`, string escapes are decoded into it.
#[inline(always)]
fn scalar(b: &[u8], i: usize, out: Option<&mut Vec<u8>>) -> Result<(usize, Span, Kind)> {
    match b.get(i) {
        Some(b'"') => {
            let (end, span) = string(b, i + 1, out)?;
            Ok((end, span, Kind::String))
        }
        Some(b'-' | b'0'..=b'9') => {
            let end = number(b, i)?;
            Ok((end, Span::input(i, end), Kind::Number))
        }
        Some(b'{') => Ok((skip_nested(b, i)?, Span::default(), Kind::Object)),
        Some(b'[') => Ok((skip_nested(b, i)?, Span::default(), Kind::Array)),
        Some(b't') => literal(b, i, b"true", Kind::True),
        Some(b'f') => literal(b, i, b"false", Kind::False),
        Some(b'n') => literal(b, i, b"null", Kind::Null),
        _ => Err(expected(b, i, SyntaxError::ExpectedValue)),
    }
}

fn literal(b: &[u8], i: usize, word: &[u8], kind: Kind) -> Result<(usize, Span, Kind)> {
    let end = i + word.len();
    match b.get(i..end) {
        Some(found) if found == word => Ok((end, Span::input(i, end), kind)),
        Some(_) => Err(syntax(i, SyntaxError::InvalidLiteral)),
        None if word.starts_with(&b[i..]) => Err(syntax(b.len(), SyntaxError::UnexpectedEnd)),
        None => Err(syntax(i, SyntaxError::InvalidLiteral)),
    }
}

/// The first position at or after `i` that is not a decimal digit, eight bytes at a time: a
/// byte is a digit when its low nibble is at most 9 after xoring `0`; adding 0x76 carries into
/// bit 7 of every other byte (and a carry out of a byte only ever follows a flagged one, so
/// the lowest flagged byte is exact).
#[inline(always)]
fn digits(b: &[u8], mut i: usize) -> usize {
    while let Some(w) = word(b, i) {
        let x = w ^ (ONES * u64::from(b'0'));
        let other = (x.wrapping_add(ONES * 0x76) | x) & HIGH;
        if other != 0 {
            return i + (other.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// A number at `i` (its first byte is `-` or a digit); returns the position after it.
fn number(b: &[u8], i: usize) -> Result<usize> {
    let mut i = i + usize::from(b.get(i) == Some(&b'-'));
    i = match b.get(i) {
        Some(b'0') => i + 1,
        Some(b'1'..=b'9') => digits(b, i + 1),
        _ => return Err(expected(b, i, SyntaxError::InvalidNumber)),
    };
    if b.get(i) == Some(&b'.') {
        let end = digits(b, i + 1);
        if end == i + 1 {
            return Err(expected(b, end, SyntaxError::InvalidNumber));
        }
        i = end;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let end = digits(b, i);
        if end == i {
            return Err(expected(b, end, SyntaxError::InvalidNumber));
        }
        i = end;
    }
    Ok(i)
}

/// A nested object or array at `i`, validated and skipped without recursion; returns the
/// position after it.
#[inline(never)]
fn skip_nested(b: &[u8], mut i: usize) -> Result<usize> {
    // Bit n is set when the container at nesting level n (from the innermost) is an array.
    let mut stack: u128 = 0;
    // Levels open below the top-level container.
    let mut depth = 0usize;
    'value: loop {
        match b.get(i) {
            Some(&open @ (b'{' | b'[')) => {
                if depth + 2 > MAX_DEPTH {
                    return Err(Fail::TooDeep(i as u32));
                }
                depth += 1;
                stack = stack << 1 | u128::from(open == b'[');
                i = ws(b, i + 1);
                let close = if open == b'[' { b']' } else { b'}' };
                if b.get(i) == Some(&close) {
                    i += 1;
                    depth -= 1;
                    stack >>= 1;
                } else {
                    if open == b'{' {
                        i = nested_key(b, i)?;
                    }
                    continue 'value;
                }
            }
            Some(b'"') => i = string(b, i + 1, None)?.0,
            Some(b'-' | b'0'..=b'9') => i = number(b, i)?,
            _ => i = scalar(b, i, None)?.0,
        }
        // A value is complete: close as many containers as end here.
        loop {
            if depth == 0 {
                return Ok(i);
            }
            let in_array = stack & 1 == 1;
            i = ws(b, i);
            match b.get(i) {
                Some(b',') => {
                    i = ws(b, i + 1);
                    if !in_array {
                        i = nested_key(b, i)?;
                    }
                    continue 'value;
                }
                Some(b']') if in_array => {}
                Some(b'}') if !in_array => {}
                _ => return Err(expected(b, i, SyntaxError::ExpectedCommaOrClose)),
            }
            i += 1;
            depth -= 1;
            stack >>= 1;
        }
    }
}

/// `"key"` `:` inside a nested object, at `i`; returns the position of the value.
#[inline(always)]
fn nested_key(b: &[u8], i: usize) -> Result<usize> {
    if b.get(i) != Some(&b'"') {
        return Err(expected(b, i, SyntaxError::ExpectedKey));
    }
    let (after, _) = string(b, i + 1, None)?;
    colon(b, after)
}
