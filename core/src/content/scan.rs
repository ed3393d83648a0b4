//! A single-pass, validating JSON scanner that keeps only the top level.
//!
//! Strict RFC 8259: one value with optional whitespace around it, no trailing commas, no
//! comments, strings without raw control characters and with only the eight short escapes and
//! `\uXXXX` (surrogates must pair: a lone one cannot become UTF-8 text), numbers in the JSON
//! grammar, and UTF-8 throughout. Numbers are not converted (their text is what paths compare),
//! so any length is accepted. Nesting is limited to [`MAX_DEPTH`] levels, the same limit
//! `serde_json` applies, and checked with a 128-bit stack instead of recursion.
//!
//! Strings are scanned with SIMD (`memchr`) for the bytes that end a plain run (`"` and `\`),
//! and the run is checked for control characters and bytes of 128 or more in one branch-free
//! pass; only runs with such bytes go through the standard library's UTF-8 validator. Only top-level strings with
//! escapes are decoded; nested values are validated and skipped.

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

type Result<T> = std::result::Result<T, ScanError>;

/// The first `"`, `\` or control character at or after `i` (or the end), and whether a byte of
/// 128 or more lies before it. `memchr` finds the quote or backslash with SIMD; one branch-free
/// pass over the run then looks for control characters and non-ASCII bytes together.
fn find_special(b: &[u8], i: usize) -> (usize, bool) {
    let rest = b.get(i..).unwrap_or_default();
    let end = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    let run = &rest[..end];
    let (mut low, mut high) = (false, 0u8);
    for &c in run {
        low |= c < 0x20;
        high |= c;
    }
    if low {
        let at = run.iter().position(|&c| c < 0x20).unwrap_or(end);
        return (i + at, run[..at].iter().any(|&c| c >= 0x80));
    }
    (i + end, high >= 0x80)
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

fn syntax(offset: usize, reason: SyntaxError) -> ScanError {
    ScanError::Syntax { offset, reason }
}

/// Scans `input` into a [`Message`].
pub(crate) fn scan(input: &[u8]) -> Result<Message<'_>> {
    if input.len() > MAX_MESSAGE_LEN {
        return Err(ScanError::TooLarge { len: input.len(), limit: MAX_MESSAGE_LEN });
    }
    let mut c = Cursor { b: input, i: 0 };
    c.skip_ws();
    let mut msg = match c.peek() {
        None => return Err(ScanError::Empty),
        Some(b'{') => {
            c.i += 1;
            let mut msg = Message::new(input, Shape::Object);
            c.top_object(&mut msg)?;
            msg
        }
        Some(b'[') => {
            c.i += 1;
            let mut msg = Message::new(input, Shape::Array);
            c.top_array(&mut msg)?;
            msg
        }
        Some(_) => {
            let kind = c.scalar(None)?.1;
            c.skip_ws();
            if c.i != input.len() {
                return Err(syntax(c.i, SyntaxError::TrailingCharacters));
            }
            return Err(ScanError::NotContainer { kind: kind_name(kind) });
        }
    };
    c.skip_ws();
    if c.i != input.len() {
        return Err(syntax(c.i, SyntaxError::TrailingCharacters));
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

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                break;
            }
            self.i += 1;
        }
    }

    fn end_or(&self, reason: SyntaxError) -> ScanError {
        if self.i >= self.b.len() {
            syntax(self.b.len(), SyntaxError::UnexpectedEnd)
        } else {
            syntax(self.i, reason)
        }
    }

    /// After the top-level `{`.
    fn top_object(&mut self, msg: &mut Message<'_>) -> Result<()> {
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.end_or(SyntaxError::ExpectedKey));
            }
            self.i += 1;
            let key = self.string(Some(msg.unescape_buffer()))?;
            self.colon()?;
            let (value, kind) = self.top_value(msg)?;
            msg.push_named(key, value, kind);
            if self.comma_or_close(b'}')? {
                return Ok(());
            }
        }
    }

    /// After the top-level `[`.
    fn top_array(&mut self, msg: &mut Message<'_>) -> Result<()> {
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            let (value, kind) = self.top_value(msg)?;
            msg.push_element(value, kind);
            if self.comma_or_close(b']')? {
                return Ok(());
            }
        }
    }

    /// Whitespace, then `,` (more follows: `false`) or `close` (done: `true`), then whitespace.
    fn comma_or_close(&mut self, close: u8) -> Result<bool> {
        self.skip_ws();
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                self.skip_ws();
                Ok(false)
            }
            Some(c) if c == close => {
                self.i += 1;
                Ok(true)
            }
            _ => Err(self.end_or(SyntaxError::ExpectedCommaOrClose)),
        }
    }

    fn colon(&mut self) -> Result<()> {
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.end_or(SyntaxError::ExpectedColon));
        }
        self.i += 1;
        self.skip_ws();
        Ok(())
    }

    fn top_value(&mut self, msg: &mut Message<'_>) -> Result<(Span, Kind)> {
        match self.peek() {
            Some(open @ (b'{' | b'[')) => {
                self.skip_nested()?;
                Ok((Span::default(), if open == b'{' { Kind::Object } else { Kind::Array }))
            }
            _ => self.scalar(Some(msg.unescape_buffer())),
        }
    }

    /// A string, number or literal at `self.i`; with `out`, string escapes are decoded into it.
    fn scalar(&mut self, out: Option<&mut Vec<u8>>) -> Result<(Span, Kind)> {
        let start = self.i;
        match self.peek() {
            Some(b'"') => {
                self.i += 1;
                Ok((self.string(out)?, Kind::String))
            }
            Some(b'-' | b'0'..=b'9') => {
                self.number()?;
                Ok((Span::input(start, self.i), Kind::Number))
            }
            Some(b't') => self.literal(b"true", Kind::True),
            Some(b'f') => self.literal(b"false", Kind::False),
            Some(b'n') => self.literal(b"null", Kind::Null),
            _ => Err(self.end_or(SyntaxError::ExpectedValue)),
        }
    }

    fn literal(&mut self, word: &[u8], kind: Kind) -> Result<(Span, Kind)> {
        let start = self.i;
        let Some(found) = self.b.get(start..start + word.len()) else {
            let have = &self.b[start..];
            return Err(if word.starts_with(have) {
                syntax(self.b.len(), SyntaxError::UnexpectedEnd)
            } else {
                syntax(start, SyntaxError::InvalidLiteral)
            });
        };
        if found != word {
            return Err(syntax(start, SyntaxError::InvalidLiteral));
        }
        self.i += word.len();
        Ok((Span::input(start, self.i), kind))
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.end_or(SyntaxError::InvalidNumber)),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.end_or(SyntaxError::InvalidNumber));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.end_or(SyntaxError::InvalidNumber));
            }
        }
        Ok(())
    }

    /// A string whose opening quote is just behind `self.i`; leaves `self.i` past the closing
    /// quote. Returns the span of its value: in the input when it has no escape, else (with
    /// `out`) the decoded text appended to `out`.
    fn string(&mut self, mut out: Option<&mut Vec<u8>>) -> Result<Span> {
        let start = self.i;
        let mut run = start;
        let mut decoded_from: Option<usize> = None;
        loop {
            let (stop, high) = find_special(self.b, self.i);
            if high {
                if let Err(e) = std::str::from_utf8(&self.b[run..stop]) {
                    return Err(syntax(run + e.valid_up_to(), SyntaxError::InvalidUtf8));
                }
            }
            match self.b.get(stop) {
                None => return Err(syntax(self.b.len(), SyntaxError::UnexpectedEnd)),
                Some(b'"') => {
                    self.i = stop + 1;
                    return Ok(match (decoded_from, out) {
                        (Some(from), Some(out)) => {
                            out.extend_from_slice(&self.b[run..stop]);
                            Span::owned(from, out.len())
                        }
                        _ => Span::input(start, stop),
                    });
                }
                Some(b'\\') => {
                    if let Some(out) = out.as_deref_mut() {
                        if decoded_from.is_none() {
                            decoded_from = Some(out.len());
                        }
                        out.extend_from_slice(&self.b[run..stop]);
                    }
                    self.i = stop + 1;
                    self.escape(out.as_deref_mut())?;
                    run = self.i;
                }
                Some(_) => return Err(syntax(stop, SyntaxError::ControlCharacter)),
            }
        }
    }

    /// The escape whose backslash is just behind `self.i`.
    fn escape(&mut self, out: Option<&mut Vec<u8>>) -> Result<()> {
        let at = self.i - 1;
        let Some(c) = self.peek() else {
            return Err(syntax(self.b.len(), SyntaxError::UnexpectedEnd));
        };
        self.i += 1;
        let ch = match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => self.unicode_escape(at)?,
            _ => return Err(syntax(at, SyntaxError::InvalidEscape)),
        };
        if let Some(out) = out {
            let mut buf = [0; 4];
            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        }
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32> {
        let mut n = 0;
        for _ in 0..4 {
            let Some(c) = self.peek() else {
                return Err(syntax(self.b.len(), SyntaxError::UnexpectedEnd));
            };
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(syntax(self.i, SyntaxError::InvalidEscape)),
            };
            n = n << 4 | u32::from(d);
            self.i += 1;
        }
        Ok(n)
    }

    /// `XXXX` (and a following `\uXXXX` low surrogate when needed) after `\u`.
    fn unicode_escape(&mut self, at: usize) -> Result<char> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if self.b.get(self.i..self.i + 2) != Some(b"\\u") {
                    return Err(if self.i + 2 > self.b.len() && b"\\u".starts_with(&self.b[self.i..]) {
                        syntax(self.b.len(), SyntaxError::UnexpectedEnd)
                    } else {
                        syntax(at, SyntaxError::LoneSurrogate)
                    });
                }
                self.i += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(syntax(at, SyntaxError::LoneSurrogate));
                }
                0x10000 + ((first - 0xD800) << 10 | (second - 0xDC00))
            }
            0xDC00..=0xDFFF => return Err(syntax(at, SyntaxError::LoneSurrogate)),
            _ => first,
        };
        char::from_u32(code).ok_or(syntax(at, SyntaxError::InvalidEscape))
    }

    /// A nested object or array at `self.i`, validated and skipped without recursion.
    fn skip_nested(&mut self) -> Result<()> {
        // Bit n is set when the container at nesting level n (from the innermost) is an array.
        let mut stack: u128 = 0;
        // Levels open below the top-level container.
        let mut depth = 0usize;
        'value: loop {
            match self.peek() {
                Some(open @ (b'{' | b'[')) => {
                    if depth + 2 > MAX_DEPTH {
                        return Err(ScanError::TooDeep { offset: self.i, limit: MAX_DEPTH });
                    }
                    depth += 1;
                    stack = stack << 1 | u128::from(open == b'[');
                    self.i += 1;
                    self.skip_ws();
                    let close = if open == b'[' { b']' } else { b'}' };
                    if self.peek() == Some(close) {
                        self.i += 1;
                        depth -= 1;
                        stack >>= 1;
                    } else {
                        if open == b'{' {
                            self.nested_key()?;
                        }
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    self.i += 1;
                    self.string(None)?;
                }
                _ => {
                    self.scalar(None)?;
                }
            }
            // A value is complete: close as many containers as end here.
            loop {
                if depth == 0 {
                    return Ok(());
                }
                let in_array = stack & 1 == 1;
                if !self.comma_or_close(if in_array { b']' } else { b'}' })? {
                    if !in_array {
                        self.nested_key()?;
                    }
                    continue 'value;
                }
                depth -= 1;
                stack >>= 1;
            }
        }
    }

    /// `"key"` `:` inside a nested object.
    fn nested_key(&mut self) -> Result<()> {
        if self.peek() != Some(b'"') {
            return Err(self.end_or(SyntaxError::ExpectedKey));
        }
        self.i += 1;
        self.string(None)?;
        self.colon()
    }
}
