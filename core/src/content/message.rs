//! A scanned JSON message: its top-level members, nothing deeper.
//!
//! Paths address only the top level of a message, so the scanner (see `scan.rs`) validates the
//! whole document but keeps only the top-level members: each key (unescaped), its hash, and its
//! value as the text a path compares with (a string's unescaped value, or the JSON text of a
//! number, `true`, `false` or `null`) or a mark that it is an object or array. Text is kept as
//! spans of the input; only strings with escapes are copied, into one buffer per message.
//!
//! Objects resolve duplicate keys the way JavaScript's `JSON.parse` and `serde_json` do: the
//! last one wins, the earlier ones are ignored. A member whose key is an array position (`"0"`,
//! `"12"`) is not kept: positions in a path address arrays only, so no path can name it.
//!
//! A message is scanned once and can be matched any number of times.

use super::hash;
use super::path::Key;
use super::scan::{self, ScanError};

/// Objects with up to this many members index them in a 32-slot inline table; larger ones get
/// a table on the heap.
const SMALL_LIMIT: usize = 24;

const SMALL_SLOTS: usize = 32;

/// Marks a span that lives in the message's unescape buffer rather than in the input.
const OWNED: u32 = 1 << 31;

const EMPTY_SLOT: u32 = u32::MAX;

/// A range of bytes in the input or in the unescape buffer.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Span {
    start: u32,
    len: u32,
}

impl Span {
    pub(crate) fn input(start: usize, end: usize) -> Span {
        // The scanner refuses inputs of 2³¹ bytes or more, so both fit.
        Span { start: start as u32, len: (end - start) as u32 }
    }

    pub(crate) fn owned(start: usize, end: usize) -> Span {
        Span { start: start as u32 | OWNED, len: (end - start) as u32 }
    }
}

/// What a top-level value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    String,
    Number,
    True,
    False,
    Null,
    Object,
    Array,
}

/// One top-level member.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Member {
    /// For an object, the unescaped key; for an array, `start` is the position.
    key: Span,
    /// The comparable text of a scalar (empty for a nested value).
    value: Span,
    pub(crate) key_hash: u64,
    kind: Kind,
    /// False when a later member of the same object has the same key.
    pub(crate) live: bool,
}

/// Whether a message is an object or an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A JSON object: members are addressed by key.
    Object,
    /// A JSON array: members are addressed by position.
    Array,
}

/// A top-level value, as a path sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'m> {
    /// A string, unescaped.
    String(&'m str),
    /// A number, as written.
    Number(&'m str),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// An object (its contents are not addressable).
    Object,
    /// An array (its contents are not addressable).
    Array,
}

impl<'m> Value<'m> {
    /// The text a `key=value` segment compares with; `None` for an object or array.
    pub fn text(&self) -> Option<&'m str> {
        match *self {
            Value::String(s) | Value::Number(s) => Some(s),
            Value::Bool(true) => Some("true"),
            Value::Bool(false) => Some("false"),
            Value::Null => Some("null"),
            Value::Object | Value::Array => None,
        }
    }
}

/// The key of a member, in the form the matcher compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemberKey<'m> {
    Name(&'m [u8]),
    Position(u32),
}

/// A JSON message scanned for matching. See the module documentation.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    input: &'a [u8],
    unescaped: Vec<u8>,
    shape: Shape,
    members: Vec<Member>,
    /// Open-addressing index of member positions + 1 by key hash, for objects of up to
    /// [`SMALL_LIMIT`] members (0: empty slot).
    small: [u8; SMALL_SLOTS],
    /// The same for larger objects ([`EMPTY_SLOT`]: empty).
    table: Vec<u32>,
}

impl<'a> Message<'a> {
    /// Scans and validates a JSON text (RFC 8259, UTF-8). The top level must be an object or an
    /// array; a scalar, invalid JSON, or nesting deeper than [`scan::MAX_DEPTH`] is an error.
    pub fn scan(input: &'a [u8]) -> Result<Message<'a>, ScanError> {
        scan::scan(input)
    }

    pub(crate) fn new(input: &'a [u8], shape: Shape) -> Message<'a> {
        Message {
            input,
            unescaped: Vec::new(),
            shape,
            members: Vec::with_capacity(16),
            small: [0; SMALL_SLOTS],
            table: Vec::new(),
        }
    }

    /// Whether the message is an object or an array.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The number of addressable top-level members (an object's distinct keys that are not
    /// positions; an array's elements).
    pub fn len(&self) -> usize {
        self.members.iter().filter(|m| m.live).count()
    }

    /// Whether the message has no addressable member.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of an object's key (the last one, if repeated).
    pub fn get(&self, name: &str) -> Option<Value<'_>> {
        self.member_by_name(name.as_bytes()).map(|m| self.value_of(m))
    }

    /// The value at an array position.
    pub fn at(&self, position: u32) -> Option<Value<'_>> {
        self.member_at(position).map(|m| self.value_of(m))
    }

    /// The addressable members, in document order.
    pub fn members(&self) -> impl Iterator<Item = (Key<'_>, Value<'_>)> + '_ {
        self.live_members().map(|m| {
            let key = match self.key_of(m) {
                MemberKey::Name(n) => Key::Name(text(n)),
                MemberKey::Position(p) => Key::Position(p),
            };
            (key, self.value_of(m))
        })
    }

    pub(crate) fn unescape_buffer(&mut self) -> &mut Vec<u8> {
        &mut self.unescaped
    }

    pub(crate) fn bytes(&self, span: Span) -> &[u8] {
        let (buf, start) = if span.start & OWNED != 0 {
            (&self.unescaped[..], span.start & !OWNED)
        } else {
            (self.input, span.start)
        };
        let start = start as usize;
        buf.get(start..start + span.len as usize).unwrap_or_default()
    }

    /// Records an object member; `key` is already unescaped.
    pub(crate) fn push_named(&mut self, key: Span, value: Span, kind: Kind) {
        let name = self.bytes(key);
        if super::path::is_position(name) {
            return;
        }
        let key_hash = hash::name_hash(name);
        self.members.push(Member { key, value, key_hash, kind, live: true });
    }

    /// Records the next array element.
    pub(crate) fn push_element(&mut self, value: Span, kind: Kind) {
        let position = self.members.len() as u32;
        let key = Span { start: position, len: 0 };
        self.members.push(Member { key, value, key_hash: hash::position_hash(position), kind, live: true });
    }

    /// Resolves repeated keys (the last wins) and indexes the members by key.
    pub(crate) fn finish(&mut self) {
        if self.shape == Shape::Array || self.members.is_empty() {
            return;
        }
        if self.members.len() <= SMALL_LIMIT {
            self.build_small();
        } else {
            self.build_table();
        }
    }

    /// The small index: slots chosen by the top five bits of the key hash.
    fn build_small(&mut self) {
        for j in 0..self.members.len() {
            let mut slot = (self.members[j].key_hash >> 59) as usize;
            loop {
                let held = self.small[slot];
                if held == 0 {
                    // At most 24 members: the index fits.
                    self.small[slot] = j as u8 + 1;
                    break;
                }
                let held = usize::from(held - 1);
                if self.same_key(held, j) {
                    self.members[held].live = false;
                    self.small[slot] = j as u8 + 1;
                    break;
                }
                slot = (slot + 1) % SMALL_SLOTS;
            }
        }
    }

    fn build_table(&mut self) {
        let size = (self.members.len() * 2).next_power_of_two();
        let mask = size - 1;
        let mut table = vec![EMPTY_SLOT; size];
        for j in 0..self.members.len() {
            let mut slot = self.members[j].key_hash as usize & mask;
            loop {
                let held = table[slot];
                if held == EMPTY_SLOT {
                    table[slot] = j as u32;
                    break;
                }
                if self.same_key(held as usize, j) {
                    self.members[held as usize].live = false;
                    table[slot] = j as u32;
                    break;
                }
                slot = (slot + 1) & mask;
            }
        }
        self.table = table;
    }

    fn same_key(&self, i: usize, j: usize) -> bool {
        let (a, b) = (&self.members[i], &self.members[j]);
        a.key_hash == b.key_hash && self.bytes(a.key) == self.bytes(b.key)
    }

    pub(crate) fn live_members(&self) -> impl Iterator<Item = &Member> + '_ {
        self.members.iter().filter(|m| m.live)
    }

    pub(crate) fn key_of(&self, m: &Member) -> MemberKey<'_> {
        match self.shape {
            Shape::Object => MemberKey::Name(self.bytes(m.key)),
            Shape::Array => MemberKey::Position(m.key.start),
        }
    }

    pub(crate) fn member_by_name(&self, name: &[u8]) -> Option<&Member> {
        if self.shape != Shape::Object {
            return None;
        }
        let h = hash::name_hash(name);
        if self.table.is_empty() {
            let mut slot = (h >> 59) as usize;
            loop {
                let held = *self.small.get(slot)?;
                let m = self.members.get(usize::from(held).checked_sub(1)?)?;
                if m.key_hash == h && short_eq(self.bytes(m.key), name) {
                    return Some(m);
                }
                slot = (slot + 1) % SMALL_SLOTS;
            }
        }
        let mask = self.table.len() - 1;
        let mut slot = h as usize & mask;
        loop {
            let held = *self.table.get(slot)?;
            let m = self.members.get(held as usize)?;
            if m.key_hash == h && short_eq(self.bytes(m.key), name) {
                return Some(m);
            }
            slot = (slot + 1) & mask;
        }
    }

    pub(crate) fn member_at(&self, position: u32) -> Option<&Member> {
        match self.shape {
            Shape::Array => self.members.get(position as usize),
            Shape::Object => None,
        }
    }

    /// The comparable text of a scalar member; `None` for an object or array.
    pub(crate) fn scalar_bytes(&self, m: &Member) -> Option<&[u8]> {
        match m.kind {
            Kind::Object | Kind::Array => None,
            _ => Some(self.bytes(m.value)),
        }
    }

    fn value_of(&self, m: &Member) -> Value<'_> {
        match m.kind {
            Kind::String => Value::String(text(self.bytes(m.value))),
            Kind::Number => Value::Number(text(self.bytes(m.value))),
            Kind::True => Value::Bool(true),
            Kind::False => Value::Bool(false),
            Kind::Null => Value::Null,
            Kind::Object => Value::Object,
            Kind::Array => Value::Array,
        }
    }
}

/// Byte equality, without a call for the short strings keys and values usually are.
#[inline(always)]
pub(crate) fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap_or([0; 8]));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap_or([0; 4]));
    match len {
        0 => true,
        1..=3 => a[0] == b[0] && a[len / 2] == b[len / 2] && a[len - 1] == b[len - 1],
        4..=7 => half(a, 0) == half(b, 0) && half(a, len - 4) == half(b, len - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, len - 8) == word(b, len - 8),
        _ => a == b,
    }
}

/// Text the scanner has validated as UTF-8 (outside strings, JSON is ASCII; inside, every run
/// of non-ASCII bytes is checked, and escapes are decoded to whole characters).
fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap_or_default()
}
