//! Shared test helpers: a reference reading of the matching rules over `serde_json::Value`,
//! a JSON writer that varies escapes and whitespace, and proptest strategies.

use proptest::prelude::*;
use serde_json::{Map, Value as Json};

use crate::content::{Constraint, Key, Message, Path};

/// The rules of docs/content.md applied directly to a parsed document.
pub(super) fn reference_matches(path: &Path, doc: &Json) -> bool {
    path.segments().all(|seg| {
        let value = match (seg.key, doc) {
            (Key::Position(i), Json::Array(items)) => items.get(i as usize),
            (Key::Name(n), Json::Object(map)) => map.get(n),
            _ => None,
        };
        match (value, seg.constraint) {
            (None, _) => false,
            (Some(_), Constraint::Present) => true,
            (Some(v), Constraint::Equals(want)) => scalar_text(v).as_deref() == Some(want),
        }
    })
}

fn scalar_text(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        Json::Bool(b) => Some(b.to_string()),
        Json::Null => Some("null".into()),
        Json::Array(_) | Json::Object(_) => None,
    }
}

/// A message under construction: members in order, repeats allowed.
#[derive(Debug, Clone)]
pub(super) enum Doc {
    Object(Vec<(String, Json)>),
    Array(Vec<Json>),
}

impl Doc {
    /// What `serde_json` (and `JSON.parse`) make of it: the last of repeated keys wins.
    pub(super) fn to_value(&self) -> Json {
        match self {
            Doc::Object(members) => {
                let mut map = Map::new();
                for (k, v) in members {
                    map.insert(k.clone(), v.clone());
                }
                Json::Object(map)
            }
            Doc::Array(items) => Json::Array(items.clone()),
        }
    }

    /// JSON text, with escapes and whitespace chosen by `style`.
    pub(super) fn write(&self, style: u64) -> String {
        let mut w = Writer { out: String::new(), rng: style | 1 };
        match self {
            Doc::Object(members) => {
                w.out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        w.out.push(',');
                    }
                    w.ws();
                    w.string(k);
                    w.ws();
                    w.out.push(':');
                    w.ws();
                    w.value(v);
                    w.ws();
                }
                w.out.push('}');
            }
            Doc::Array(items) => {
                w.out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        w.out.push(',');
                    }
                    w.ws();
                    w.value(v);
                    w.ws();
                }
                w.out.push(']');
            }
        }
        w.out
    }
}

struct Writer {
    out: String,
    rng: u64,
}

impl Writer {
    fn next(&mut self) -> u64 {
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn ws(&mut self) {
        for _ in 0..self.next() % 4 {
            let c = [' ', '\n', '\t', '\r', ' ', ' '][(self.next() % 6) as usize];
            if self.next() % 3 == 0 {
                self.out.push(c);
            }
        }
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            let escape = self.next() % 4 == 0;
            match c {
                '"' => self.out.push_str(if escape { "\\u0022" } else { "\\\"" }),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                c if (c as u32) < 0x20 => self.out.push_str(&format!("\\u{:04x}", c as u32)),
                '/' if escape => self.out.push_str("\\/"),
                c if escape => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        self.out.push_str(&format!("\\u{u:04X}"));
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn value(&mut self, v: &Json) {
        match v {
            Json::String(s) => self.string(s),
            Json::Object(map) => {
                self.out.push('{');
                for (i, (k, v)) in map.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.string(k);
                    self.out.push(':');
                    self.ws();
                    self.value(v);
                }
                self.out.push('}');
            }
            Json::Array(items) => {
                self.out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                        self.ws();
                    }
                    self.value(v);
                }
                self.out.push(']');
            }
            other => self.out.push_str(&other.to_string()),
        }
    }
}

/// Keys that messages use; a few are awkward on purpose.
pub(super) const KEYS: &[&str] =
    &["kind", "room", "from", "n", "b", "text", "é", "k\"q", "a b", "0", "1", "01", "x/y", "Ω"];

/// Values a path can name (`*`, `/` and `=` cannot appear in one).
pub(super) const TEXTS: &[&str] =
    &["lobby", "chat", "5", "5.5", "-1", "true", "false", "null", "ann", "é", "1", "Ω x"];

pub(super) fn scalar() -> impl Strategy<Value = Json> {
    prop_oneof![
        4 => proptest::sample::select(TEXTS).prop_map(|s| Json::String(s.into())),
        1 => Just(Json::String(String::new())),
        1 => Just(Json::String("x/y=*".into())),
        2 => proptest::sample::select(&[5i64, -1, 0, 1][..]).prop_map(Json::from),
        1 => Just(Json::from(5.5)),
        1 => any::<bool>().prop_map(Json::Bool),
        1 => Just(Json::Null),
    ]
}

pub(super) fn value() -> impl Strategy<Value = Json> {
    prop_oneof![
        6 => scalar(),
        1 => Just(serde_json::json!({})),
        1 => Just(serde_json::json!({"kind": "chat", "n": [1, {"x": null}]})),
        1 => Just(serde_json::json!([])),
        1 => Just(serde_json::json!(["lobby", 5])),
    ]
}

pub(super) fn doc() -> impl Strategy<Value = Doc> {
    prop_oneof![
        4 => proptest::collection::vec((proptest::sample::select(KEYS).prop_map(String::from), value()), 0..9)
            .prop_map(Doc::Object),
        1 => proptest::collection::vec(value(), 0..6).prop_map(Doc::Array),
    ]
}

/// A path text built from the pools: names or positions, presence or values, maybe a `*` tail.
pub(super) fn path_text() -> impl Strategy<Value = String> {
    let name =
        proptest::sample::select(&["kind", "room", "from", "n", "b", "text", "é", "a b", "01", "Ω"][..]);
    let seg_value = prop_oneof![3 => proptest::sample::select(TEXTS).prop_map(Some), 2 => Just(None)];
    let named = proptest::collection::vec((name, seg_value.clone()), 0..5).prop_map(|segs| {
        segs.into_iter().map(|(k, v)| format!("/{k}={}", v.unwrap_or("*"))).collect::<String>()
    });
    let positional = proptest::collection::vec((0u32..5, seg_value), 1..4).prop_map(|segs| {
        segs.into_iter().map(|(k, v)| format!("/{k}={}", v.unwrap_or("*"))).collect::<String>()
    });
    (prop_oneof![4 => named, 1 => positional], any::<bool>())
        .prop_map(|(p, tail)| if tail { format!("{p}/*/kind=x") } else { p })
}

/// A valid path from the pools (texts that conflict are dropped by the filter).
pub(super) fn arb_path() -> impl Strategy<Value = Path> {
    path_text().prop_filter_map("conflicting values", |t| Path::parse(&t).ok())
}

pub(super) fn scan(text: &str) -> Message<'_> {
    Message::scan(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

pub(super) fn p(text: &str) -> Path {
    Path::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}
