//! The pattern compiler: the seed's example, every refusal, and its properties.

use proptest::prelude::*;
use serde_json::{Value as Json, json};

use super::support::*;
use crate::content::{CompileError, FieldMode, Modes, Path, compile};

fn modes(pairs: &[(&str, &str)]) -> Modes {
    Modes::from_pairs(pairs.iter().copied()).unwrap()
}

fn compiled(sample: &Json, pairs: &[(&str, &str)]) -> Result<String, CompileError> {
    compile(sample, &modes(pairs)).map(|p| p.to_string())
}

#[test]
fn seed_example_verbatim() {
    let sample = json!({"kind":"chat","room":"lobby","text":"hello"});
    assert_eq!(
        compiled(&sample, &[("kind", "exact"), ("room", "exact"), ("text", "omit")]).unwrap(),
        "/kind=chat/room=lobby"
    );
    assert_eq!(
        compiled(&sample, &[("kind", "exact"), ("room", "any"), ("text", "omit")]).unwrap(),
        "/kind=chat/room=*"
    );
    // Fields not named are omitted.
    assert_eq!(compiled(&sample, &[("room", "exact"), ("kind", "exact")]).unwrap(), "/kind=chat/room=lobby");
    let pattern = compile(&sample, &modes(&[("kind", "exact"), ("room", "exact")])).unwrap();
    assert!(pattern.matches(&scan(&sample.to_string())));
}

#[test]
fn synonyms_wildcards_and_all_omitted() {
    let sample = json!({"kind":"chat","room":"lobby","text":"hello"});
    for any in ["any", "*", "wildcard", "all"] {
        assert_eq!(
            compiled(&sample, &[("kind", "exact"), ("room", any)]).unwrap(),
            "/kind=chat/room=*",
            "{any}"
        );
    }
    for key in ["*", "wildcard"] {
        assert_eq!(compiled(&sample, &[(key, "any")]).unwrap(), "/kind=*/room=*/text=*");
        assert_eq!(compiled(&sample, &[(key, "any"), ("text", "omit")]).unwrap(), "/kind=*/room=*");
        assert_eq!(
            compiled(&sample, &[(key, "any"), ("kind", "exact")]).unwrap(),
            "/kind=chat/room=*/text=*"
        );
    }
    assert_eq!(
        compiled(&sample, &[("kind", "omit"), ("room", "omit"), ("text", "omit")]).unwrap(),
        "/kind=*/room=*/text=*"
    );
    assert_eq!(compiled(&sample, &[]).unwrap(), "/kind=*/room=*/text=*");
    // Fields that cannot take `any` are left out of the wildcard.
    assert_eq!(compiled(&json!({"a/b": 1, "ok": 2, "0": 3, "": 4}), &[("*", "any")]).unwrap(), "/ok=*");
}

#[test]
fn arrays_and_nested_values() {
    let sample = json!(["chat", {"deep": 1}, 5, true, null]);
    assert_eq!(compiled(&sample, &[("0", "exact"), ("2", "exact")]).unwrap(), "/0=chat/2=5");
    assert_eq!(compiled(&sample, &[("3", "exact"), ("4", "exact")]).unwrap(), "/3=true/4=null");
    assert_eq!(compiled(&sample, &[("1", "any")]), Err(CompileError::AnyOnPosition { field: "1".into() }));
    assert_eq!(compiled(&sample, &[("1", "exact")]), Err(CompileError::ExactOnNested { field: "1".into() }));
    assert_eq!(compiled(&sample, &[]), Err(CompileError::NoSegments));
    assert_eq!(compiled(&sample, &[("*", "any")]), Err(CompileError::NoSegments));
    let positions: Vec<Json> = (0..12).map(|i| json!(format!("v{i}"))).collect();
    let twelve: Vec<(String, &str)> = (0..12).map(|i| (i.to_string(), "exact")).collect();
    let p = compile(&Json::Array(positions), &Modes::from_pairs(twelve).unwrap()).unwrap();
    assert!(p.to_string().starts_with("/0=v0/1=v1/2=v2/"), "{p}");
    let nested = json!({"meta": {"a": 1}, "tags": [1], "kind": "x"});
    assert_eq!(compiled(&nested, &[("meta", "any"), ("kind", "exact")]).unwrap(), "/kind=x/meta=*");
    assert_eq!(
        compiled(&nested, &[("tags", "exact")]),
        Err(CompileError::ExactOnNested { field: "tags".into() })
    );
    assert_eq!(
        compiled(
            &json!({"n": 5, "f": 1.5, "b": false, "z": null}),
            &[("*", "omit"), ("n", "exact"), ("f", "exact"), ("b", "exact"), ("z", "exact")]
        )
        .unwrap(),
        "/b=false/f=1.5/n=5/z=null"
    );
}

#[test]
fn refusals_name_the_field() {
    let sample =
        json!({"path": "a/b", "eq": "x=y", "star": "*", "empty": "", "0": "zero", "a=b": 1, "ok": "fine"});
    for (field, expected) in [
        ("path", CompileError::ReservedCharacter { field: "path".into(), character: '/' }),
        ("eq", CompileError::ReservedCharacter { field: "eq".into(), character: '=' }),
        ("star", CompileError::ReservedCharacter { field: "star".into(), character: '*' }),
        ("empty", CompileError::EmptyValue { field: "empty".into() }),
        ("0", CompileError::NumericKey { field: "0".into() }),
        ("a=b", CompileError::ReservedCharacter { field: "a=b".into(), character: '=' }),
        ("missing", CompileError::UnknownField { field: "missing".into() }),
    ] {
        assert_eq!(compiled(&sample, &[(field, "exact")]), Err(expected), "{field}");
    }
    assert_eq!(compiled(&sample, &[("0", "any")]), Err(CompileError::NumericKey { field: "0".into() }));
    assert_eq!(compiled(&sample, &[("path", "any"), ("ok", "exact")]).unwrap(), "/ok=fine/path=*");
    assert_eq!(compiled(&json!({}), &[]), Err(CompileError::EmptySample));
    assert_eq!(compiled(&json!([]), &[]), Err(CompileError::EmptySample));
    assert_eq!(compiled(&json!("x"), &[]), Err(CompileError::NotContainer { kind: "string" }));
    assert_eq!(compiled(&json!(5), &[]), Err(CompileError::NotContainer { kind: "number" }));
    assert_eq!(compiled(&json!({"a": 1}), &[("*", "exact")]), Err(CompileError::ExactWildcard));
    let wide: serde_json::Map<String, Json> = (0..17).map(|i| (format!("k{i:02}"), json!(i))).collect();
    let wide = Json::Object(wide);
    assert_eq!(compiled(&wide, &[]), Err(CompileError::TooManyFields { count: 17, limit: 16 }));
    let sixteen: Vec<(String, &str)> = (0..16).map(|i| (format!("k{i:02}"), "exact")).collect();
    assert_eq!(compile(&wide, &Modes::from_pairs(sixteen).unwrap()).unwrap().len(), 16);
    let msg = compiled(&sample, &[("path", "exact")]).unwrap_err().to_string();
    assert!(msg.contains("'path'") && msg.contains("'/'"), "{msg}");
}

#[test]
fn modes_parse_from_strings() {
    assert_eq!("exact".parse(), Ok(FieldMode::Exact));
    assert_eq!("omit".parse(), Ok(FieldMode::Omit));
    for any in ["any", "*", "wildcard", "all"] {
        assert_eq!(any.parse(), Ok(FieldMode::Any));
    }
    for bad in ["", "Exact", "none", "exact "] {
        assert!(bad.parse::<FieldMode>().is_err(), "{bad:?}");
    }
    assert_eq!(
        Modes::from_pairs([("room", "sometimes")]),
        Err(CompileError::UnknownMode { field: "room".into(), mode: "sometimes".into() })
    );
    let mut m = Modes::new();
    m.parse_assignment("room=exact").unwrap().parse_assignment("*=any").unwrap();
    assert_eq!(m.get("room"), Some(FieldMode::Exact));
    assert_eq!(m.get("wildcard"), Some(FieldMode::Any));
    assert_eq!(
        m.parse_assignment("room").unwrap_err(),
        CompileError::InvalidAssignment { text: "room".into() }
    );
    let from_json: Modes = serde_json::from_str(r#"{"kind": "exact", "room": "*"}"#).unwrap();
    assert_eq!(from_json, modes(&[("kind", "exact"), ("room", "any")]));
    assert!(serde_json::from_str::<Modes>(r#"{"kind": "maybe"}"#).is_err());
}

fn mode() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(&["exact", "any", "omit", "*", "all"][..])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A compiled pattern matches its own sample and is in canonical form.
    #[test]
    fn compiled_pattern_matches_its_sample(
        doc in doc(),
        picks in proptest::collection::vec((0usize..10, mode()), 0..6),
        wildcard in any::<bool>(),
    ) {
        let sample = doc.to_value();
        let names: Vec<String> = match &sample {
            Json::Object(map) => map.keys().cloned().collect(),
            Json::Array(items) => (0..items.len()).map(|i| i.to_string()).collect(),
            _ => unreachable!(),
        };
        let mut modes = Modes::new();
        if !names.is_empty() {
            for (i, m) in &picks {
                modes.set(names[i % names.len()].clone(), m.parse().unwrap());
            }
        }
        if wildcard {
            modes.set("*", FieldMode::Any);
        }
        if let Ok(path) = compile(&sample, &modes) {
            prop_assert!(path.matches(&scan(&sample.to_string())), "{} on {}", path, sample);
            prop_assert_eq!(&Path::parse(path.as_str()).unwrap(), &path);
            prop_assert!((1..=16).contains(&path.len()));
        }
    }
}
