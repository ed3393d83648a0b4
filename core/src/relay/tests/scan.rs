//! The scanner against serde_json as an oracle: valid objects are read with the same members,
//! and on mutated input the two agree on what is valid JSON.

use proptest::prelude::*;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::roundtrip::json_value;
use crate::relay::scan::{MAX_DEPTH, Value as Scanned, scan_object};

/// The object read back from one member's span (`{span}`), as serde_json sees it.
fn member_as_object(span: &str) -> serde_json::Map<String, Value> {
    match serde_json::from_str(&format!("{{{span}}}")) {
        Ok(Value::Object(map)) => map,
        other => panic!("span {span:?} is not a member: {other:?}"),
    }
}

fn check_members(text: &str, object: &serde_json::Map<String, Value>) -> Result<(), TestCaseError> {
    let members = scan_object(text).map_err(|e| TestCaseError::fail(format!("{e:?} in {text:?}")))?;
    prop_assert_eq!(members.len(), object.len());
    for member in &members {
        let single = member_as_object(member.span);
        prop_assert_eq!(single.len(), 1);
        let (key, value) = single.iter().next().unwrap();
        prop_assert_eq!(key.as_str(), &*member.key);
        prop_assert_eq!(Some(value), object.get(key));
        match (member.value, value) {
            (Scanned::Str(s), Value::String(v)) => prop_assert_eq!(&*s.to_text(), v.as_str()),
            (Scanned::Bool(b), Value::Bool(v)) => prop_assert_eq!(b, *v),
            (Scanned::Null, Value::Null) => {}
            (Scanned::Other, Value::Number(_) | Value::Array(_) | Value::Object(_)) => {}
            (scanned, value) => prop_assert!(false, "{scanned:?} vs {value:?}"),
        }
    }
    Ok(())
}

/// Writes `s` as a JSON string with every non-ASCII character as `\u` escapes (surrogate pairs
/// above the BMP), a form serde_json never produces.
fn ascii_escaped(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        }
    }
    out.push('"');
    out
}

const ALPHABET: &[u8] = b"{}[]\":,\\ \n-+.0123456789eEtrufalsn/ux";

proptest! {
    #[test]
    fn objects_read_like_serde_json(members in proptest::collection::btree_map(any::<String>(), json_value(), 0..8)) {
        let object: serde_json::Map<String, Value> = members.into_iter().collect();
        let compact = serde_json::to_string(&object).unwrap();
        check_members(&compact, &object)?;
        let pretty = serde_json::to_string_pretty(&object).unwrap();
        check_members(&pretty, &object)?;
    }

    #[test]
    fn ascii_escaped_keys_and_strings(key in any::<String>(), value in any::<String>()) {
        let text = format!("{{{}:{}}}", ascii_escaped(&key), ascii_escaped(&value));
        let members = scan_object(&text).unwrap();
        prop_assert_eq!(&*members[0].key, key.as_str());
        let Scanned::Str(s) = members[0].value else { panic!() };
        prop_assert_eq!(&*s.to_text(), value.as_str());
    }

    /// One to three byte edits of a valid object: the scanner accepts exactly what serde_json
    /// accepts as an object (serde_json's full parse, which also refuses lone surrogates), and
    /// anything it accepts is valid JSON syntax for serde_json too.
    #[test]
    fn mutations_agree_with_serde_json(
        members in proptest::collection::btree_map("[a-z]{0,3}", json_value(), 0..4),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<prop::sample::Index>()), 1..4),
    ) {
        let object: serde_json::Map<String, Value> = members.into_iter().collect();
        let mut bytes = serde_json::to_vec(&object).unwrap();
        for (at, kind, pick) in edits {
            let at = at.index(bytes.len() + 1);
            let b = ALPHABET[pick.index(ALPHABET.len())];
            match kind {
                0 => bytes.insert(at, b),
                1 if at < bytes.len() => { bytes.remove(at); }
                _ if at < bytes.len() => bytes[at] = b,
                _ => {}
            }
        }
        let Ok(text) = std::str::from_utf8(&bytes) else { return Ok(()) };
        let ours = scan_object(text);
        let theirs = serde_json::from_str::<Value>(text);
        let theirs_is_object = matches!(theirs, Ok(Value::Object(_)));
        if theirs_is_object {
            prop_assert!(ours.is_ok(), "serde_json accepts {text:?}, the scanner says {:?}", ours.err());
        }
        if ours.is_ok() {
            prop_assert!(serde_json::from_str::<IgnoredAny>(text).is_ok(), "scanner accepts {text:?}");
            prop_assert!(text.trim_start().starts_with('{'), "not an object: {:?}", text);
            // The only difference allowed: numbers serde_json cannot hold in an f64.
            if !theirs_is_object {
                let error = theirs.unwrap_err().to_string();
                prop_assert!(error.contains("number out of range"), "{text:?}: {error}");
            }
        }
    }
}

#[test]
fn nesting_limit() {
    let at = |depth: usize| format!("{{\"x\":{}{}}}", "[".repeat(depth - 1), "]".repeat(depth - 1));
    assert!(scan_object(&at(MAX_DEPTH)).is_ok());
    assert!(scan_object(&at(MAX_DEPTH + 1)).is_err());
    // Far deeper than any stack allows, refused without recursing that far.
    assert!(scan_object(&at(1_000_000)).is_err());
}

#[test]
fn huge_numbers_are_syntax_only() {
    let members = scan_object(r#"{"n":1e999999,"m":-0.0e-0}"#).unwrap();
    assert_eq!(members.len(), 2);
}
