//! Listener paths: `/kind=chat/room=lobby`, `/room=*`, `/0=foo`, `/`.
//!
//! A path is a set of conditions on the top level of a JSON message. Segments are separated by
//! `/` (empty pieces are dropped); `key=value` requires the field to hold that value, `key=*`
//! (or a bare `key`, or `key=`) requires it to be present with any value, and a lone `*` ends
//! the path: the segments after it are checked for syntax and then ignored. A key made only of
//! decimal digits without a leading zero (`0`, `7`, `12`) is an array position.
//!
//! A parsed [`Path`] is kept in canonical form: segments sorted (names byte-wise, positions by
//! number), presence written `key=*`, duplicates merged. Two paths that match the same
//! messages because of segment order, spelling or a `*` tail are equal and print the same.
//! The canonical text is also the representation: one shared allocation per path, cheap to
//! clone, and the matcher verifies candidates by walking it.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::hash;
use super::message::{Message, short_eq};
use super::percent::percent_decode;

/// The longest path text accepted, in bytes (after percent-decoding).
pub const MAX_PATH_LEN: usize = 4096;

/// The most segments a path may have, counting those after a `*`.
pub const MAX_SEGMENTS: usize = 64;

/// A validated listener path in canonical form.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Path {
    /// Canonical text, always starting with `/`.
    text: Arc<str>,
}

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// The path text is longer than [`MAX_PATH_LEN`].
    #[error("path of {len} bytes is longer than the {limit}-byte limit")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The path's canonical text (every bare `key` written `key=*`) is longer than
    /// [`MAX_PATH_LEN`], although the text as written was not.
    #[error(
        "path is {len} bytes long in canonical form (`key` written `key=*`), over the {limit}-byte limit"
    )]
    CanonicalTooLong {
        /// The canonical text's length in bytes.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The path has more than [`MAX_SEGMENTS`] segments.
    #[error("path has more than {limit} segments")]
    TooManySegments {
        /// The limit.
        limit: usize,
    },
    /// A segment has a second `=` (`a=b=c`).
    #[error("segment '{segment}' has more than one '=': a value cannot contain '='")]
    ExtraEquals {
        /// The segment as written.
        segment: String,
    },
    /// A segment has nothing before its `=`.
    #[error("segment '{segment}' has an empty key")]
    EmptyKey {
        /// The segment as written.
        segment: String,
    },
    /// A key contains `*` (only a lone `*` segment or a `key=*` value may use it).
    #[error("segment '{segment}': a key cannot contain '*'")]
    StarInKey {
        /// The segment as written.
        segment: String,
    },
    /// A value contains `*` next to other characters (`a=b*`).
    #[error("segment '{segment}': a value is either '*' alone or has no '*'")]
    StarInValue {
        /// The segment as written.
        segment: String,
    },
    /// A position is larger than any array can be (more than 2³² − 1).
    #[error("segment '{segment}': array position is out of range")]
    PositionOutOfRange {
        /// The segment as written.
        segment: String,
    },
    /// The same key is required to hold two different values, which no message can satisfy.
    #[error("segments '{first}' and '{second}' require two different values of one key")]
    ConflictingValues {
        /// The first segment, canonical.
        first: String,
        /// The second segment, canonical.
        second: String,
    },
    /// The path names both array positions and object keys, which no message can satisfy: a
    /// message is either an array or an object.
    #[error("segments '{position}' and '{name}' mix an array position with an object key")]
    MixedPositionsAndNames {
        /// A segment with a position, canonical.
        position: String,
        /// A segment with a name, canonical.
        name: String,
    },
    /// A `%` in a URL path is not followed by two hexadecimal digits.
    #[error("invalid percent-encoding '{escape}' at byte {offset}")]
    InvalidPercentEncoding {
        /// Byte offset of the `%` in the encoded path.
        offset: usize,
        /// The bad escape as written.
        escape: String,
    },
    /// The percent-decoded URL path is not UTF-8.
    #[error("the decoded path is not UTF-8 (at byte {offset})")]
    NotUtf8 {
        /// Byte offset of the first bad byte in the decoded path.
        offset: usize,
    },
}

/// The key of a segment: an object field or an array position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key<'a> {
    /// An object key.
    Name(&'a str),
    /// An array position.
    Position(u32),
}

/// What a segment requires of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Constraint<'a> {
    /// The field is present, with any value (an object or array counts).
    Present,
    /// The field is a scalar whose text is this value (a string's unescaped value, or the JSON
    /// text of a number, `true`, `false` or `null`).
    Equals(&'a str),
}

/// One canonical segment of a [`Path`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    /// The key as written in the path.
    pub key_text: &'a str,
    /// The key, interpreted.
    pub key: Key<'a>,
    /// The condition.
    pub constraint: Constraint<'a>,
}

impl Segment<'_> {
    pub(crate) fn key_hash(&self) -> u64 {
        match self.key {
            Key::Name(name) => hash::name_hash(name.as_bytes()),
            Key::Position(p) => hash::position_hash(p),
        }
    }
}

/// The position of the first `c` in `b` (or its length), eight bytes at a time.
#[inline(always)]
fn find_byte(b: &[u8], c: u8) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let pattern = ONES * u64::from(c);
    let mut i = 0;
    while let Some(chunk) = b.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])) ^ pattern;
        let zero = w.wrapping_sub(ONES) & !w & (ONES << 7);
        if zero != 0 {
            return i + (zero.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i).is_some_and(|&x| x != c) {
        i += 1;
    }
    i
}

/// Whether a key is an array position: `0`, or digits without a leading zero.
pub(crate) fn is_position(key: &[u8]) -> bool {
    match key {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

fn key_of(text: &str) -> Key<'_> {
    if is_position(text.as_bytes()) {
        // Canonical paths only hold positions that fit (checked when parsed).
        text.parse().map_or(Key::Name(text), Key::Position)
    } else {
        Key::Name(text)
    }
}

/// A segment while parsing: key text, value (`None` for presence).
struct Draft<'a> {
    key: &'a str,
    position: Option<u32>,
    value: Option<&'a str>,
}

impl Draft<'_> {
    fn canonical(&self) -> String {
        format!("{}={}", self.key, self.value.unwrap_or("*"))
    }
}

impl Path {
    /// The path that matches every message: `/`.
    pub fn everything() -> Path {
        Path { text: Arc::from("/") }
    }

    /// Parses a path as written (already percent-decoded).
    pub fn parse(text: &str) -> Result<Path, PathError> {
        if text.len() > MAX_PATH_LEN {
            return Err(PathError::TooLong { len: text.len(), limit: MAX_PATH_LEN });
        }
        let mut drafts: Vec<Draft<'_>> = Vec::new();
        let mut count = 0;
        let mut ended = false;
        for piece in text.split('/').filter(|p| !p.is_empty()) {
            count += 1;
            if count > MAX_SEGMENTS {
                return Err(PathError::TooManySegments { limit: MAX_SEGMENTS });
            }
            if piece == "*" {
                ended = true;
                continue;
            }
            let draft = parse_segment(piece)?;
            if !ended {
                drafts.push(draft);
            }
        }
        normalise(drafts)
    }

    /// Parses the path component of a request URL: percent-decodes it, then parses the text.
    pub fn from_url_path(encoded: &str) -> Result<Path, PathError> {
        if encoded.len() > 3 * MAX_PATH_LEN {
            return Err(PathError::TooLong { len: encoded.len(), limit: 3 * MAX_PATH_LEN });
        }
        Path::parse(&percent_decode(encoded)?)
    }

    /// The canonical text, e.g. `/kind=chat/room=*`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this path has no condition (`/`, `/*`) and so matches every message.
    pub fn matches_everything(&self) -> bool {
        self.text.len() == 1
    }

    /// Whether the path addresses array positions (`/0=foo`); such a path matches arrays only.
    pub fn is_positional(&self) -> bool {
        self.segments().next().is_some_and(|s| matches!(s.key, Key::Position(_)))
    }

    /// The number of segments in canonical form.
    pub fn len(&self) -> usize {
        self.segments().count()
    }

    /// Whether the path has no segment (the same as [`Path::matches_everything`]).
    pub fn is_empty(&self) -> bool {
        self.matches_everything()
    }

    /// The canonical segments in order.
    pub fn segments(&self) -> impl Iterator<Item = Segment<'_>> + '_ {
        self.pieces().map(|(key_text, value)| {
            let constraint = if value == "*" { Constraint::Present } else { Constraint::Equals(value) };
            Segment { key_text, key: key_of(key_text), constraint }
        })
    }

    /// The canonical segments as `(key, value)` texts (`*` for presence). Canonical text is
    /// `/key=value` repeated: no empty piece and one `=` per segment (keys hold no `=`, values
    /// no `/`), so two byte searches split each one; this is the hot path of matching.
    #[inline(always)]
    fn pieces(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        let mut rest = &self.text[1..];
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let eq = find_byte(rest.as_bytes(), b'=');
            let value_and_rest = rest.get(eq + 1..).unwrap_or_default();
            let end = find_byte(value_and_rest.as_bytes(), b'/');
            let piece = (rest.get(..eq).unwrap_or_default(), value_and_rest.get(..end).unwrap_or_default());
            rest = value_and_rest.get(end + 1..).unwrap_or_default();
            Some(piece)
        })
    }

    /// Whether `message` satisfies every segment.
    pub fn matches(&self, message: &Message<'_>) -> bool {
        // The same split as `pieces`, on bytes (no character-boundary checks).
        let mut rest = self.text.as_bytes().get(1..).unwrap_or_default();
        while !rest.is_empty() {
            let eq = find_byte(rest, b'=');
            let key = rest.get(..eq).unwrap_or_default();
            let after = rest.get(eq + 1..).unwrap_or_default();
            let end = find_byte(after, b'/');
            let value = after.get(..end).unwrap_or_default();
            rest = after.get(end + 1..).unwrap_or_default();
            let member = if is_position(key) {
                std::str::from_utf8(key).ok().and_then(|k| k.parse().ok()).and_then(|p| message.member_at(p))
            } else {
                message.member_by_name(key)
            };
            let ok = match member {
                None => false,
                Some(_) if value == b"*" => true,
                Some(m) => message.scalar_bytes(m).is_some_and(|text| short_eq(text, value)),
            };
            if !ok {
                return false;
            }
        }
        true
    }

    /// Heap bytes of the shared text (an estimate of the allocation, header included).
    pub(crate) fn heap_bytes(&self) -> usize {
        super::matcher::malloc_size(2 * std::mem::size_of::<usize>() + self.text.len())
    }
}

fn parse_segment(piece: &str) -> Result<Draft<'_>, PathError> {
    let segment = || piece.to_owned();
    let (key, value) = match piece.split_once('=') {
        None => (piece, None),
        Some((_, v)) if v.contains('=') => return Err(PathError::ExtraEquals { segment: segment() }),
        Some((k, "" | "*")) => (k, None),
        Some((_, v)) if v.contains('*') => return Err(PathError::StarInValue { segment: segment() }),
        Some((k, v)) => (k, Some(v)),
    };
    if key.is_empty() {
        return Err(PathError::EmptyKey { segment: segment() });
    }
    if key.contains('*') {
        return Err(PathError::StarInKey { segment: segment() });
    }
    let position = if is_position(key.as_bytes()) {
        Some(key.parse::<u32>().map_err(|_| PathError::PositionOutOfRange { segment: segment() })?)
    } else {
        None
    };
    Ok(Draft { key, position, value })
}

fn normalise(mut drafts: Vec<Draft<'_>>) -> Result<Path, PathError> {
    if let (Some(p), Some(n)) =
        (drafts.iter().find(|d| d.position.is_some()), drafts.iter().find(|d| d.position.is_none()))
    {
        return Err(PathError::MixedPositionsAndNames { position: p.canonical(), name: n.canonical() });
    }
    // Positions sort by number, names byte-wise; a stable sort keeps equal keys in order.
    drafts.sort_by(|a, b| a.position.cmp(&b.position).then_with(|| a.key.cmp(b.key)));
    let mut merged: Vec<Draft<'_>> = Vec::with_capacity(drafts.len());
    for d in drafts {
        match merged.last_mut() {
            Some(last) if last.key == d.key => match (last.value, d.value) {
                (_, None) => {}
                (None, Some(_)) => last.value = d.value,
                (Some(a), Some(b)) if a == b => {}
                (Some(_), Some(_)) => {
                    return Err(PathError::ConflictingValues {
                        first: last.canonical(),
                        second: d.canonical(),
                    });
                }
            },
            _ => merged.push(d),
        }
    }
    if merged.is_empty() {
        return Ok(Path::everything());
    }
    let mut text =
        String::with_capacity(merged.iter().map(|d| d.key.len() + 2 + d.value.map_or(1, str::len)).sum());
    for d in &merged {
        text.push('/');
        text.push_str(d.key);
        text.push('=');
        text.push_str(d.value.unwrap_or("*"));
    }
    // The canonical text can be longer than what was written (`/a` is `/a=*`); it is what is
    // stored and parsed again, so it must be within the limit too.
    if text.len() > MAX_PATH_LEN {
        return Err(PathError::CanonicalTooLong { len: text.len(), limit: MAX_PATH_LEN });
    }
    Ok(Path { text: Arc::from(text) })
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Path({:?})", &*self.text)
    }
}

impl FromStr for Path {
    type Err = PathError;

    fn from_str(s: &str) -> Result<Path, PathError> {
        Path::parse(s)
    }
}

impl serde::Serialize for Path {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for Path {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Path, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Path::parse(&text).map_err(serde::de::Error::custom)
    }
}
