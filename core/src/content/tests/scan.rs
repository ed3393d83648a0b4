//! The message scanner: a malformed-input table and a differential test against serde_json.

use proptest::prelude::*;
use serde_json::Value as Json;

use super::support::*;
use crate::content::path::is_position;
use crate::content::{Key, MAX_DEPTH, Message, ScanError, Shape, SyntaxError, Value};

fn err(input: &[u8]) -> ScanError {
    Message::scan(input).err().unwrap_or_else(|| panic!("{:?} was accepted", String::from_utf8_lossy(input)))
}

fn syntax(input: &str) -> (usize, SyntaxError) {
    match Message::scan(input.as_bytes()) {
        Err(ScanError::Syntax { offset, reason }) => (offset, reason),
        other => panic!("{input:?}: {other:?}"),
    }
}

#[test]
fn malformed_messages_are_refused() {
    use SyntaxError::*;
    for (input, offset, reason) in [
        ("{", 1, UnexpectedEnd),
        ("{\"a\"", 4, UnexpectedEnd),
        ("{\"a\":", 5, UnexpectedEnd),
        ("{\"a\":1", 6, UnexpectedEnd),
        ("{\"a\":1,}", 7, ExpectedKey),
        ("{,}", 1, ExpectedKey),
        ("{a:1}", 1, ExpectedKey),
        ("{\"a\" 1}", 5, ExpectedColon),
        ("{\"a\":1 \"b\":2}", 7, ExpectedCommaOrClose),
        ("[1,]", 3, ExpectedValue),
        ("[1 2]", 3, ExpectedCommaOrClose),
        ("[1}", 2, ExpectedCommaOrClose),
        ("{\"a\":[1}", 7, ExpectedCommaOrClose),
        ("{\"a\":{\"b\":1]}", 11, ExpectedCommaOrClose),
        ("{\"a\":\"\\x\"}", 6, InvalidEscape),
        ("{\"a\":\"\\u12g4\"}", 10, InvalidEscape),
        ("{\"a\":\"\\ud800\"}", 6, LoneSurrogate),
        ("{\"a\":\"\\udc00\"}", 6, LoneSurrogate),
        ("{\"a\":\"\\ud800\\u0041\"}", 6, LoneSurrogate),
        ("{\"a\":\"\\ud800x\"}", 6, LoneSurrogate),
        ("{\"a\":\"x\ty\"}", 7, ControlCharacter),
        ("{\"a\":\"x\ny\"}", 7, ControlCharacter),
        ("[\"\u{0}\"]", 2, ControlCharacter),
        ("{\"a\":01}", 6, ExpectedCommaOrClose),
        ("{\"a\":-}", 6, InvalidNumber),
        ("{\"a\":1.}", 7, InvalidNumber),
        ("{\"a\":1e}", 7, InvalidNumber),
        ("{\"a\":.5}", 5, ExpectedValue),
        ("{\"a\":+1}", 5, ExpectedValue),
        ("{\"a\":tru}", 5, InvalidLiteral),
        ("{\"a\":nul", 8, UnexpectedEnd),
        ("{\"a\":True}", 5, ExpectedValue),
        ("{\"a\":NaN}", 5, ExpectedValue),
        ("{} {}", 3, TrailingCharacters),
        ("[]x", 2, TrailingCharacters),
        ("{\"a\":1}//", 7, TrailingCharacters),
        ("\"x\" 1", 4, TrailingCharacters),
        ("{\"a\":[{\"b\":[1,{\"c\":}]}]}", 19, ExpectedValue),
    ] {
        assert_eq!(syntax(input), (offset, reason), "{input:?}");
    }
    // Invalid UTF-8 inside strings and bytes outside ASCII elsewhere.
    assert_eq!(err(b"{\"a\":\"\xff\"}"), (ScanError::Syntax { offset: 6, reason: SyntaxError::InvalidUtf8 }));
    assert_eq!(
        err(b"[\"ok\",\"\xc3\"]"),
        (ScanError::Syntax { offset: 7, reason: SyntaxError::InvalidUtf8 })
    );
    assert_eq!(
        err(b"[\"\xed\xa0\x80\"]"),
        (ScanError::Syntax { offset: 2, reason: SyntaxError::InvalidUtf8 })
    );
    assert_eq!(err(b"\xef\xbb\xbf{}"), (ScanError::Syntax { offset: 0, reason: SyntaxError::ExpectedValue }));
    for (input, kind) in [
        ("\"hello\"", "string"),
        ("5", "number"),
        (" -1.5e3 ", "number"),
        ("true", "boolean"),
        ("null", "null"),
    ] {
        assert_eq!(err(input.as_bytes()), (ScanError::NotContainer { kind }), "{input}");
    }
    assert_eq!(err(b""), (ScanError::Empty));
    assert_eq!(err(b" \n\t"), (ScanError::Empty));
    let message = Message::scan(b"{\"a\":1,}").unwrap_err().to_string();
    assert_eq!(message, "invalid JSON at byte 7: expected an object key (a string)");
}

#[test]
fn depth_limit_is_serde_jsons() {
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let ok = nested(MAX_DEPTH);
    assert!(Message::scan(ok.as_bytes()).is_ok());
    assert!(serde_json::from_str::<Json>(&ok).is_ok());
    let deep = nested(MAX_DEPTH + 1);
    assert_eq!(err(deep.as_bytes()), (ScanError::TooDeep { offset: MAX_DEPTH, limit: MAX_DEPTH }));
    assert!(serde_json::from_str::<Json>(&deep).is_err());
    let objects = format!("{}1{}", "{\"a\":".repeat(MAX_DEPTH + 1), "}".repeat(MAX_DEPTH + 1));
    assert!(matches!(Message::scan(objects.as_bytes()), Err(ScanError::TooDeep { .. })));
    // Far deeper input costs no stack.
    let huge = nested(1_000_000);
    assert!(matches!(Message::scan(huge.as_bytes()), Err(ScanError::TooDeep { .. })));
}

#[test]
fn members_are_the_top_level() {
    let m = scan(
        r#" { "kind" : "chat", "n": 5, "b": false, "z": null, "o": {"x": 1}, "a": [1], "e": "\u00e9\n" } "#,
    );
    assert_eq!(m.shape(), Shape::Object);
    assert_eq!(m.len(), 7);
    assert_eq!(m.get("kind"), Some(Value::String("chat")));
    assert_eq!(m.get("n"), Some(Value::Number("5")));
    assert_eq!(m.get("b"), Some(Value::Bool(false)));
    assert_eq!(m.get("z"), Some(Value::Null));
    assert_eq!(m.get("o"), Some(Value::Object));
    assert_eq!(m.get("a"), Some(Value::Array));
    assert_eq!(m.get("e"), Some(Value::String("é\n")));
    assert_eq!(m.get("x"), None);
    let a = scan(r#"["foo", 1, {"k": "v"}]"#);
    assert_eq!(a.shape(), Shape::Array);
    assert_eq!(a.at(0), Some(Value::String("foo")));
    assert_eq!(a.at(2), Some(Value::Object));
    assert_eq!(a.at(3), None);
    assert_eq!(a.get("0"), None);
    // Repeated keys: the last wins; position-like keys are not addressable.
    let d = scan(r#"{"k": 1, "0": "x", "k": "two", "01": 3}"#);
    assert_eq!(d.get("k"), Some(Value::String("two")));
    assert_eq!(d.get("0"), None);
    let keys: Vec<_> = d.members().map(|(k, _)| k).collect();
    assert_eq!(keys, [Key::Name("k"), Key::Name("01")]);
    // Large objects use an index; the rule is the same.
    let big: String = format!(
        "{{{}, \"k0\": \"last\"}}",
        (0..100).map(|i| format!("\"k{i}\": {i}")).collect::<Vec<_>>().join(",")
    );
    let big = scan(&big);
    assert_eq!(big.len(), 100);
    assert_eq!(big.get("k0"), Some(Value::String("last")));
    assert_eq!(big.get("k99"), Some(Value::Number("99")));
    assert_eq!(big.get("k100"), None);
}

/// Whether serde_json accepts `text` as a message, and what it makes of it.
enum Serde {
    Container(Json),
    Scalar,
    Invalid,
    /// serde_json refuses numbers beyond f64 range; JSON does not, and neither do we.
    NumberOutOfRange,
}

fn serde(text: &[u8]) -> Serde {
    match serde_json::from_slice::<Json>(text) {
        Ok(v @ (Json::Object(_) | Json::Array(_))) => Serde::Container(v),
        Ok(_) => Serde::Scalar,
        Err(e) if e.to_string().contains("number out of range") => Serde::NumberOutOfRange,
        Err(_) => Serde::Invalid,
    }
}

/// Our members equal serde_json's top level (positions excluded from objects).
fn same_members(message: &Message<'_>, doc: &Json) -> Result<(), String> {
    let pairs: Vec<(Key<'_>, Value<'_>)> = message.members().collect();
    let expected: Vec<(String, &Json)> = match doc {
        Json::Object(map) => {
            map.iter().filter(|(k, _)| !is_position(k.as_bytes())).map(|(k, v)| (k.clone(), v)).collect()
        }
        Json::Array(items) => items.iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect(),
        _ => unreachable!(),
    };
    if pairs.len() != expected.len() {
        return Err(format!("{} members, serde_json has {}", pairs.len(), expected.len()));
    }
    for (name, want) in expected {
        let got = match doc {
            Json::Object(_) => message.get(&name),
            _ => message.at(name.parse().unwrap()),
        };
        let same = match (got, want) {
            (Some(Value::String(s)), Json::String(w)) => s == w,
            (Some(Value::Number(n)), Json::Number(_)) => {
                serde_json::from_str::<Json>(n).ok().as_ref() == Some(want)
            }
            (Some(Value::Bool(b)), Json::Bool(w)) => b == *w,
            (Some(Value::Null), Json::Null)
            | (Some(Value::Object), Json::Object(_))
            | (Some(Value::Array), Json::Array(_)) => true,
            _ => false,
        };
        if !same {
            return Err(format!("member {name}: {got:?} vs {want}"));
        }
    }
    Ok(())
}

fn agree(text: &[u8]) -> Result<(), String> {
    let ours = Message::scan(text);
    match (serde(text), &ours) {
        (Serde::Container(doc), Ok(m)) => same_members(m, &doc),
        (Serde::Scalar, Err(ScanError::NotContainer { .. })) => Ok(()),
        (Serde::Invalid, Err(ScanError::Syntax { .. } | ScanError::TooDeep { .. } | ScanError::Empty)) => {
            Ok(())
        }
        (Serde::NumberOutOfRange, _) => Ok(()),
        (Serde::Container(_), Err(e)) => Err(format!("we refuse what serde_json accepts: {e}")),
        (Serde::Scalar, other) => Err(format!("scalar: {other:?}")),
        (Serde::Invalid, other) => Err(format!("we accept what serde_json refuses: {other:?}")),
    }
}

#[test]
fn agrees_with_serde_json_on_hand_picked_inputs() {
    for text in [
        r#"{"a":1e400}"#,
        r#"{"a":-0}"#,
        r#"{"a":0.0e-0}"#,
        r#"[1E+2]"#,
        r#"{"\ud83d\ude00":"x"}"#,
        r#"{"a":"\u0000"}"#,
        r#"["\/"]"#,
        "[\"\u{7f}\"]",
        r#"{"a":[[[[]]]],"b":{"c":{}}}"#,
        "[\"\u{10ffff}\"]",
    ] {
        agree(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e}"));
    }
}

/// One edit of a valid text, to reach the invalid side of the boundary.
#[derive(Debug, Clone)]
enum Edit {
    Replace(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let byte = proptest::sample::select(
        &[
            b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'0', b'-', b'.', b'e', b'u', b'x', b' ', 0x01,
            0x80, 0xc3, 0xed, 0xff,
        ][..],
    );
    prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Edit::Replace(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    for e in edits {
        let n = b.len().max(1);
        match *e {
            Edit::Replace(i, c) if !b.is_empty() => b[i % n] = c,
            Edit::Insert(i, c) => b.insert(i % (b.len() + 1), c),
            Edit::Delete(i) if !b.is_empty() => {
                b.remove(i % n);
            }
            Edit::Truncate(i) => b.truncate(i % (b.len() + 1)),
            _ => {}
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn generated_messages_agree_with_serde_json(doc in doc(), style in any::<u64>()) {
        let text = doc.write(style);
        let message = scan(&text);
        prop_assert!(same_members(&message, &doc.to_value()).is_ok(), "{}: {:?}", text, same_members(&message, &doc.to_value()));
    }

    #[test]
    fn mutated_messages_agree_with_serde_json(doc in doc(), style in any::<u64>(), edits in proptest::collection::vec(edit(), 1..4)) {
        let text = apply(&doc.write(style), &edits);
        prop_assert!(agree(&text).is_ok(), "{:?}: {:?}", String::from_utf8_lossy(&text), agree(&text));
    }

    #[test]
    fn arbitrary_bytes_agree_with_serde_json(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        prop_assert!(agree(&bytes).is_ok(), "{:?}: {:?}", bytes, agree(&bytes));
    }
}

/// One piece of a generated string body, and what the scanner must make of it.
#[derive(Debug, Clone)]
enum Piece {
    /// Plain ASCII text.
    Plain(String),
    /// A multi-byte UTF-8 character.
    Wide(char),
    /// A valid escape and the text it stands for.
    Escape(&'static str, &'static str),
    /// Bytes that make the string invalid at the piece's first byte.
    Bad(&'static [u8], SyntaxError),
}

const BAD: &[(&[u8], SyntaxError)] = &[
    (b"\xff", SyntaxError::InvalidUtf8),
    (b"\xc3(", SyntaxError::InvalidUtf8),
    (b"\xed\xa0\x80", SyntaxError::InvalidUtf8),
    (b"\x01", SyntaxError::ControlCharacter),
    (b"\x1f", SyntaxError::ControlCharacter),
    (b"\\x", SyntaxError::InvalidEscape),
];

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        6 => "[ -!#-\\[\\]-~]{0,40}".prop_map(Piece::Plain),
        2 => proptest::sample::select(&['é', '€', '😀', '\u{7ff}', '\u{10ffff}'][..]).prop_map(Piece::Wide),
        2 => proptest::sample::select(&[("\\n", "\n"), ("\\\"", "\""), ("\\u00e9", "é"), ("\\ud83d\\ude00", "😀"), ("\\/", "/")][..])
            .prop_map(|(e, t)| Piece::Escape(e, t)),
        1 => proptest::sample::select(BAD).prop_map(|(b, e)| Piece::Bad(b, e)),
    ]
}

/// The body's bytes, the text it decodes to, and the first error (offset in the body).
fn body(pieces: &[Piece]) -> (Vec<u8>, String, Option<(usize, SyntaxError)>) {
    let (mut bytes, mut text, mut first) = (Vec::new(), String::new(), None);
    for p in pieces {
        match p {
            Piece::Plain(s) => {
                bytes.extend_from_slice(s.as_bytes());
                text.push_str(s);
            }
            Piece::Wide(c) => {
                bytes.extend_from_slice(c.to_string().as_bytes());
                text.push(*c);
            }
            Piece::Escape(e, t) => {
                bytes.extend_from_slice(e.as_bytes());
                text.push_str(t);
            }
            Piece::Bad(b, e) => {
                first = first.or(Some((bytes.len(), *e)));
                bytes.extend_from_slice(b);
            }
        }
    }
    (bytes, text, first)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Strings of every length (short ones are read word by word, long ones with SIMD) as keys,
    /// top-level values and nested values: the same decoded text, or the same first error at
    /// the same byte, wherever the string sits.
    #[test]
    fn strings_of_any_length_find_their_first_error(pieces in proptest::collection::vec(piece(), 0..12), pad in 0usize..9) {
        let (bytes, text, first) = body(&pieces);
        let spaces = " ".repeat(pad);
        for (before, after, key) in [
            (format!("{{{spaces}\"k\":\""), "\"}".to_owned(), false),
            (format!("{spaces}{{\""), "\":1}".to_owned(), true),
            (format!("[{spaces}{{\"a\":[\""), "\"]}]".to_owned(), false),
        ] {
            let mut input = before.clone().into_bytes();
            input.extend_from_slice(&bytes);
            input.extend_from_slice(after.as_bytes());
            match (Message::scan(&input), first) {
                (Ok(m), None) => {
                    if key {
                        if !is_position(text.as_bytes()) {
                            prop_assert_eq!(m.get(&text), Some(Value::Number("1")));
                        }
                    } else if before.starts_with('{') {
                        prop_assert_eq!(m.get("k"), Some(Value::String(&text)));
                    } else {
                        prop_assert_eq!(m.at(0), Some(Value::Object));
                    }
                }
                (Err(ScanError::Syntax { offset, reason }), Some((at, want))) => {
                    prop_assert_eq!((offset, reason), (before.len() + at, want));
                }
                (got, want) => prop_assert!(false, "{:?}: {:?}, expected {:?}", String::from_utf8_lossy(&input), got, want),
            }
        }
    }
}
