//! Writing JSON straight into a send buffer, and [`JsonStr`]: a string value that is either a
//! literal taken verbatim from a client's frame or text still to be escaped.
//!
//! The relay forwards most of what it receives (`ct`, `pub`, `nonce`, `id`): keeping those as
//! the literal the client sent, quotes and escapes included, means a `send` becomes a `deliver`
//! by copying bytes, with no unescaping and re-escaping in between. Only text that did not come
//! from a client frame (addresses written as `from`, an MQTT payload as `ct`) is escaped here.
//!
//! Escaping writes the two-character escapes for `"` `\` and `\b \f \n \r \t`, `\u00XX` for the
//! other control characters, and every other character as UTF-8; that is RFC 8259's minimum,
//! and what every JSON parser reads back unchanged.

use std::borrow::Cow;
use std::fmt;

use bytes::{BufMut, BytesMut};

/// For each byte: 0 when it is written as is, otherwise the character after the backslash
/// (`u` for `\u00XX`).
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as a JSON string literal (quotes included).
pub(crate) fn write_str(buf: &mut BytesMut, s: &str) {
    buf.reserve(s.len() + 2);
    buf.put_u8(b'"');
    let bytes = s.as_bytes();
    let mut run_start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape = ESCAPE[usize::from(b)];
        if escape == 0 {
            continue;
        }
        buf.put_slice(&bytes[run_start..i]);
        if escape == b'u' {
            buf.put_slice(&[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
        } else {
            buf.put_slice(&[b'\\', escape]);
        }
        run_start = i + 1;
    }
    buf.put_slice(&bytes[run_start..]);
    buf.put_u8(b'"');
}

/// Appends an unsigned integer in decimal.
pub(crate) fn write_u64(buf: &mut BytesMut, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // `n % 10` is below 10, so the cast cannot truncate.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.put_slice(&digits[at..]);
}

/// Appends a finite number in 0..=1 (a load factor) with at most four decimals; anything else is
/// clamped into that range (NaN as 0) so that the output is always a valid JSON number.
pub(crate) fn write_fraction(buf: &mut BytesMut, x: f64) {
    let x = if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) };
    // Rounded to 1/10,000; the value is in 0..=10,000 so the cast is exact.
    let scaled = (x * 10_000.0).round() as u64;
    write_u64(buf, scaled / 10_000);
    buf.put_u8(b'.');
    let mut frac = scaled % 10_000;
    let mut digits = [b'0'; 4];
    for slot in digits.iter_mut().rev() {
        // Below 10, so the cast cannot truncate.
        *slot = b'0' + (frac % 10) as u8;
        frac /= 10;
    }
    let keep = digits.iter().rposition(|&d| d != b'0').map_or(1, |p| p + 1);
    buf.put_slice(&digits[..keep]);
}

/// Appends `true` or `false`.
pub(crate) fn write_bool(buf: &mut BytesMut, b: bool) {
    buf.put_slice(if b { b"true" } else { b"false" });
}

/// The bytes `,"key":` for a literal key, built at compile time, so that the hot path writes a
/// key with one copy (the keys are fixed ASCII names that need no escaping). [`write_key`] is for
/// keys only known at run time.
macro_rules! key {
    ($key:literal) => {
        concat!(",\"", $key, "\":").as_bytes()
    };
}
pub(crate) use key;

/// Appends `,"key":` — every key the relay writes is a fixed ASCII name that needs no escaping.
pub(crate) fn write_key(buf: &mut BytesMut, key: &str) {
    buf.reserve(key.len() + 4);
    buf.put_slice(b",\"");
    buf.put_slice(key.as_bytes());
    buf.put_slice(b"\":");
}

/// A JSON string value: a literal from a client's frame, kept verbatim, or text to escape.
///
/// Its `Debug` shows only the length: these are `ct`, `pub`, `nonce` and `id` values, which the
/// relay never logs by content.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct JsonStr<'a> {
    repr: Repr<'a>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Repr<'a> {
    /// A validated JSON string literal, quotes included; `escaped` when it contains a backslash.
    Literal { raw: &'a str, escaped: bool },
    /// Plain text.
    Text(&'a str),
}

impl<'a> JsonStr<'a> {
    /// Text that is escaped when written.
    pub fn text(text: &'a str) -> Self {
        JsonStr { repr: Repr::Text(text) }
    }

    /// A literal the scanner has validated: `raw` starts and ends with `"` and is a complete
    /// JSON string.
    pub(crate) fn literal(raw: &'a str, escaped: bool) -> Self {
        JsonStr { repr: Repr::Literal { raw, escaped } }
    }

    /// Appends the value as a JSON string literal.
    pub fn write(&self, buf: &mut BytesMut) {
        match self.repr {
            Repr::Literal { raw, .. } => buf.put_slice(raw.as_bytes()),
            Repr::Text(text) => write_str(buf, text),
        }
    }

    /// The string's value, unescaped: borrowed unless the literal contains escapes.
    pub fn to_text(&self) -> Cow<'a, str> {
        match self.repr {
            Repr::Text(text) => Cow::Borrowed(text),
            Repr::Literal { raw, escaped } => {
                let inner = literal_inner(raw);
                if escaped { Cow::Owned(unescape(inner)) } else { Cow::Borrowed(inner) }
            }
        }
    }

    /// The value as a slice of the input when no unescaping is needed (plain text, or a literal
    /// without escapes); lets a caller share the frame's bytes instead of copying.
    pub fn as_unescaped(&self) -> Option<&'a str> {
        match self.repr {
            Repr::Text(text) => Some(text),
            Repr::Literal { raw, escaped: false } => Some(literal_inner(raw)),
            Repr::Literal { escaped: true, .. } => None,
        }
    }

    /// An upper bound of the bytes [`JsonStr::write`] appends (exact for literals).
    pub fn max_encoded_len(&self) -> usize {
        match self.repr {
            Repr::Literal { raw, .. } => raw.len(),
            Repr::Text(text) => text.len() * 6 + 2,
        }
    }
}

impl fmt::Debug for JsonStr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = match self.repr {
            Repr::Literal { raw, .. } => raw.len(),
            Repr::Text(text) => text.len(),
        };
        write!(f, "JsonStr(<{len} bytes>)")
    }
}

/// The text between the quotes of a literal.
fn literal_inner(raw: &str) -> &str {
    raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(raw)
}

/// Unescapes the inside of a validated JSON string literal. Total on any input, so that it
/// cannot panic even if handed something the scanner did not validate: an escape it cannot
/// read becomes U+FFFD.
pub(crate) fn unescape(inner: &str) -> String {
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let unescaped = match chars.next() {
            Some('"') => '"',
            Some('\\') => '\\',
            Some('/') => '/',
            Some('b') => '\u{8}',
            Some('f') => '\u{c}',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('t') => '\t',
            Some('u') => unescape_unicode(&mut chars),
            _ => char::REPLACEMENT_CHARACTER,
        };
        out.push(unescaped);
    }
    out
}

/// Reads the hex digits after `\u` (and, for a high surrogate, the `\uXXXX` low surrogate that
/// must follow).
fn unescape_unicode(chars: &mut std::str::Chars<'_>) -> char {
    let Some(first) = read_hex4(chars) else {
        return char::REPLACEMENT_CHARACTER;
    };
    if !(0xd800..0xdc00).contains(&first) {
        return char::from_u32(first).unwrap_or(char::REPLACEMENT_CHARACTER);
    }
    let low = match (chars.next(), chars.next()) {
        (Some('\\'), Some('u')) => read_hex4(chars),
        _ => None,
    };
    match low {
        Some(low @ 0xdc00..0xe000) => char::from_u32(0x10000 + ((first - 0xd800) << 10) + (low - 0xdc00))
            .unwrap_or(char::REPLACEMENT_CHARACTER),
        _ => char::REPLACEMENT_CHARACTER,
    }
}

fn read_hex4(chars: &mut std::str::Chars<'_>) -> Option<u32> {
    let mut value = 0;
    for _ in 0..4 {
        value = value * 16 + chars.next()?.to_digit(16)?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn written(s: &str) -> String {
        let mut buf = BytesMut::new();
        write_str(&mut buf, s);
        String::from_utf8(buf.to_vec()).unwrap()
    }

    #[test]
    fn escapes_what_json_requires() {
        assert_eq!(written("plain"), r#""plain""#);
        assert_eq!(written("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(written("\n\r\t\u{8}\u{c}"), r#""\n\r\t\b\f""#);
        assert_eq!(written("\u{0}\u{1f}"), r#""\u0000\u001f""#);
        assert_eq!(written("é ✓ 😀 /"), "\"é ✓ 😀 /\"");
        assert_eq!(written("\u{7f}"), "\"\u{7f}\"");
    }

    #[test]
    fn integers() {
        for n in [0, 7, 10, 65_536, u64::MAX] {
            let mut buf = BytesMut::new();
            write_u64(&mut buf, n);
            assert_eq!(&buf[..], n.to_string().as_bytes());
        }
    }

    #[test]
    fn fractions_are_json_numbers_in_range() {
        let cases = [
            (0.0, "0.0"),
            (1.0, "1.0"),
            (0.5, "0.5"),
            (0.12345, "0.1235"),
            (0.95, "0.95"),
            (2.0, "1.0"),
            (-1.0, "0.0"),
            (f64::NAN, "0.0"),
            (f64::INFINITY, "1.0"),
        ];
        for (x, text) in cases {
            let mut buf = BytesMut::new();
            write_fraction(&mut buf, x);
            assert_eq!(std::str::from_utf8(&buf).unwrap(), text, "{x}");
        }
    }

    #[test]
    fn unescape_table() {
        let cases = [
            (r"plain", "plain"),
            (r#"\"\\\/\b\f\n\r\t"#, "\"\\/\u{8}\u{c}\n\r\t"),
            (r"\u00e9\u2713", "é✓"),
            (r"\ud83d\ude00", "😀"),
            (r"\uD83D\uDE00", "😀"),
            // Not reachable from validated input; total anyway.
            (r"\x", "\u{fffd}"),
            (r"\ud83d", "\u{fffd}"),
            (r"\ude00", "\u{fffd}"),
            (r"\u12", "\u{fffd}"),
            ("\\", "\u{fffd}"),
        ];
        for (input, expected) in cases {
            assert_eq!(unescape(input), expected, "{input}");
        }
    }

    #[test]
    fn literal_and_text_views() {
        let lit = JsonStr::literal(r#""a\nb""#, true);
        assert_eq!(lit.to_text(), "a\nb");
        assert_eq!(lit.as_unescaped(), None);
        let plain = JsonStr::literal(r#""ab""#, false);
        assert_eq!(plain.as_unescaped(), Some("ab"));
        assert!(matches!(plain.to_text(), Cow::Borrowed("ab")));
        let mut buf = BytesMut::new();
        lit.write(&mut buf);
        JsonStr::text("q\"").write(&mut buf);
        assert_eq!(&buf[..], br#""a\nb""q\"""#);
    }

    #[test]
    fn debug_hides_the_content() {
        let shown = format!("{:?}", JsonStr::text("secret ciphertext"));
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("17 bytes"), "{shown}");
    }

    proptest! {
        /// What `write_str` produces, serde_json reads back as the same string; and `unescape`
        /// undoes serde_json's own escaping (an independent encoder).
        #[test]
        fn escaping_round_trips_through_serde_json(s in any::<String>()) {
            let ours = written(&s);
            prop_assert_eq!(serde_json::from_str::<String>(&ours).unwrap(), s.as_str());
            let theirs = serde_json::to_string(&s).unwrap();
            prop_assert_eq!(unescape(&theirs[1..theirs.len() - 1]), s);
        }
    }
}
