//! The pattern compiler ("message-access form", "suggest"): a path from a sample message.
//!
//! Each field of the sample (an object's keys, an array's positions) gets a mode: `exact` keeps
//! its value (`key=value`), `any` requires it to be present (`key=*`), `omit` leaves it out.
//! `*`, `wildcard` and `all` are synonyms of `any`. Fields the modes do not name are omitted.
//! A field key of `*` or `wildcard` in the modes, or modes that leave every field of the sample
//! omitted, mean `any` on each field that allows it; a field named explicitly keeps its mode,
//! so `omit` on one field drops just that field.
//!
//! Array positions allow `exact` or `omit`; nested values (objects, arrays) allow `any` or
//! `omit`; an object key that is a position (`"0"`) is reserved for positional patterns and
//! refused. Values and keys cannot contain `/`, `=` or `*`, and an exact value cannot be empty
//! (`key=` means presence). The result has between 1 and [`MAX_FIELDS`] segments, sorted:
//! object keys lexicographically, positions by number, so the same sample gives the same path
//! whatever the order of its keys.

use std::collections::BTreeMap;
use std::str::FromStr;

use serde_json::Value as Json;

use super::path::{Path, PathError, is_position};

/// The most fields a compiled pattern can name.
pub const MAX_FIELDS: usize = 16;

/// What a field contributes to a compiled pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldMode {
    /// `key=value`: the field must hold the sample's value.
    Exact,
    /// `key=*`: the field must be present, with any value.
    Any,
    /// The field has no effect.
    Omit,
}

/// A mode name that is not one of `exact`, `any`, `*`, `wildcard`, `all`, `omit`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown field mode '{mode}': use exact, any (or *, wildcard, all) or omit")]
pub struct UnknownMode {
    /// The mode as given.
    pub mode: String,
}

impl FromStr for FieldMode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<FieldMode, UnknownMode> {
        match s {
            "exact" => Ok(FieldMode::Exact),
            "any" | "*" | "wildcard" | "all" => Ok(FieldMode::Any),
            "omit" => Ok(FieldMode::Omit),
            _ => Err(UnknownMode { mode: s.to_owned() }),
        }
    }
}

/// Per-field modes for [`compile`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Modes {
    fields: BTreeMap<String, FieldMode>,
    wildcard: Option<FieldMode>,
}

fn is_wildcard_key(field: &str) -> bool {
    field == "*" || field == "wildcard"
}

impl Modes {
    /// No field named: every field is omitted, which means `any` on each field that allows it.
    pub fn new() -> Modes {
        Modes::default()
    }

    /// Sets the mode of `field` (`*` and `wildcard` name every field).
    pub fn set(&mut self, field: impl Into<String>, mode: FieldMode) -> &mut Modes {
        let field = field.into();
        if is_wildcard_key(&field) {
            self.wildcard = Some(mode);
        } else {
            self.fields.insert(field, mode);
        }
        self
    }

    /// The mode given to `field`, if any.
    pub fn get(&self, field: &str) -> Option<FieldMode> {
        if is_wildcard_key(field) { self.wildcard } else { self.fields.get(field).copied() }
    }

    /// Builds modes from `(field, mode name)` pairs, e.g. a JSON object's members.
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Result<Modes, CompileError>
    where
        K: Into<String>,
        V: AsRef<str>,
    {
        let mut modes = Modes::new();
        for (field, mode) in pairs {
            let field = field.into();
            let mode = mode
                .as_ref()
                .parse()
                .map_err(|e: UnknownMode| CompileError::UnknownMode { field: field.clone(), mode: e.mode })?;
            modes.set(field, mode);
        }
        Ok(modes)
    }

    /// Adds one `FIELD=MODE` assignment, as the command line writes it (`room=exact`). The
    /// last `=` separates them, so a field name may itself contain `=` only if it is refused
    /// later anyway.
    pub fn parse_assignment(&mut self, text: &str) -> Result<&mut Modes, CompileError> {
        let Some((field, mode)) = text.rsplit_once('=') else {
            return Err(CompileError::InvalidAssignment { text: text.to_owned() });
        };
        let mode = mode
            .parse()
            .map_err(|e: UnknownMode| CompileError::UnknownMode { field: field.to_owned(), mode: e.mode })?;
        Ok(self.set(field, mode))
    }
}

impl<'de> serde::Deserialize<'de> for Modes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Modes, D::Error> {
        let pairs = BTreeMap::<String, String>::deserialize(deserializer)?;
        Modes::from_pairs(pairs).map_err(serde::de::Error::custom)
    }
}

/// Why a pattern could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompileError {
    /// The sample is a scalar.
    #[error("the sample is a JSON {kind}: give an object or an array")]
    NotContainer {
        /// `string`, `number`, `boolean` or `null`.
        kind: &'static str,
    },
    /// The sample is `{}` or `[]`.
    #[error("the sample has no field to build a pattern from")]
    EmptySample,
    /// A mode name is unknown.
    #[error("field '{field}': unknown mode '{mode}': use exact, any (or *, wildcard, all) or omit")]
    UnknownMode {
        /// The field.
        field: String,
        /// The mode as given.
        mode: String,
    },
    /// A `FIELD=MODE` assignment has no `=`.
    #[error("'{text}' is not FIELD=MODE")]
    InvalidAssignment {
        /// The assignment as given.
        text: String,
    },
    /// The `*` / `wildcard` field key was given `exact`; it always means `any`.
    #[error("the field key '*' (or 'wildcard') means any on every field: give it mode any, not exact")]
    ExactWildcard,
    /// A mode names a field the sample does not have.
    #[error("field '{field}' is not in the sample")]
    UnknownField {
        /// The field.
        field: String,
    },
    /// `exact` on an object or array value.
    #[error("field '{field}' holds a nested value: it can be omit or any, not exact")]
    ExactOnNested {
        /// The field.
        field: String,
    },
    /// `any` on an array position.
    #[error("array position {field} can be exact or omit, not any")]
    AnyOnPosition {
        /// The position.
        field: String,
    },
    /// An object key that is an array position, such as `"0"`.
    #[error("object key '{field}' is numeric: numeric keys are reserved for array positions")]
    NumericKey {
        /// The key.
        field: String,
    },
    /// The empty object key.
    #[error("the empty object key cannot be part of a pattern")]
    EmptyKey,
    /// A key or exact value containing `/`, `=` or `*`.
    #[error("field '{field}': '{character}' cannot appear in a pattern's keys or values")]
    ReservedCharacter {
        /// The field.
        field: String,
        /// The character.
        character: char,
    },
    /// `exact` on an empty string (`key=` would mean presence).
    #[error("field '{field}' is an empty string: use any, not exact")]
    EmptyValue {
        /// The field.
        field: String,
    },
    /// Every field is omitted and none allows `any`.
    #[error("the pattern would have no segment: mark at least one field exact")]
    NoSegments,
    /// More than [`MAX_FIELDS`] fields are selected.
    #[error("the pattern names {count} fields, more than the limit of {limit}")]
    TooManyFields {
        /// Fields selected.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The pattern is not a valid path (it would be too long).
    #[error("the compiled pattern is not a valid path: {0}")]
    Path(#[from] PathError),
}

struct Field<'a> {
    name: String,
    value: &'a Json,
    position: Option<usize>,
}

fn kind_of(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Number(_) => "number",
        Json::String(_) => "string",
        Json::Array(_) => "array",
        Json::Object(_) => "object",
    }
}

fn reserved(text: &str) -> Option<char> {
    text.chars().find(|c| matches!(c, '/' | '=' | '*'))
}

/// Why an object key cannot appear in a pattern, if it cannot.
fn key_problem(field: &Field<'_>) -> Option<CompileError> {
    if field.position.is_some() {
        return None;
    }
    let name = &field.name;
    if name.is_empty() {
        return Some(CompileError::EmptyKey);
    }
    if is_position(name.as_bytes()) {
        return Some(CompileError::NumericKey { field: name.clone() });
    }
    reserved(name).map(|character| CompileError::ReservedCharacter { field: name.clone(), character })
}

fn allows_any(field: &Field<'_>) -> bool {
    field.position.is_none() && key_problem(field).is_none()
}

/// Compiles a pattern from `sample` and `modes` (see the module documentation).
pub fn compile(sample: &Json, modes: &Modes) -> Result<Path, CompileError> {
    let fields: Vec<Field<'_>> = match sample {
        Json::Object(map) => {
            map.iter().map(|(k, v)| Field { name: k.clone(), value: v, position: None }).collect()
        }
        Json::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| Field { name: i.to_string(), value: v, position: Some(i) })
            .collect(),
        other => return Err(CompileError::NotContainer { kind: kind_of(other) }),
    };
    if fields.is_empty() {
        return Err(CompileError::EmptySample);
    }
    if modes.wildcard == Some(FieldMode::Exact) {
        return Err(CompileError::ExactWildcard);
    }
    if let Some(unknown) = modes.fields.keys().find(|name| !fields.iter().any(|f| &f.name == *name)) {
        return Err(CompileError::UnknownField { field: unknown.clone() });
    }
    let mut chosen: Vec<(&Field<'_>, FieldMode)> = fields
        .iter()
        .map(|f| {
            let implicit =
                if modes.wildcard.is_some() && allows_any(f) { FieldMode::Any } else { FieldMode::Omit };
            (f, modes.fields.get(&f.name).copied().unwrap_or(implicit))
        })
        .collect();
    if chosen.iter().all(|(_, m)| *m == FieldMode::Omit) {
        for (f, mode) in &mut chosen {
            if allows_any(f) {
                *mode = FieldMode::Any;
            }
        }
    }
    let mut segments: Vec<(Option<usize>, &str, String)> = Vec::new();
    for (field, mode) in chosen {
        let value = match mode {
            FieldMode::Omit => continue,
            FieldMode::Any => {
                if field.position.is_some() {
                    return Err(CompileError::AnyOnPosition { field: field.name.clone() });
                }
                "*".to_owned()
            }
            FieldMode::Exact => exact_text(field)?,
        };
        if let Some(problem) = key_problem(field) {
            return Err(problem);
        }
        segments.push((field.position, &field.name, value));
    }
    if segments.is_empty() {
        return Err(CompileError::NoSegments);
    }
    if segments.len() > MAX_FIELDS {
        return Err(CompileError::TooManyFields { count: segments.len(), limit: MAX_FIELDS });
    }
    segments.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    let text: String = segments.iter().map(|(_, k, v)| format!("/{k}={v}")).collect();
    Ok(Path::parse(&text)?)
}

fn exact_text(field: &Field<'_>) -> Result<String, CompileError> {
    let name = || field.name.clone();
    let text = match field.value {
        Json::Object(_) | Json::Array(_) => return Err(CompileError::ExactOnNested { field: name() }),
        Json::String(s) if s.is_empty() => return Err(CompileError::EmptyValue { field: name() }),
        Json::String(s) => s.clone(),
        // The text serde_json writes, which is what a sender serialising the sample sends.
        Json::Number(n) => n.to_string(),
        Json::Bool(b) => b.to_string(),
        Json::Null => "null".to_owned(),
    };
    match reserved(&text) {
        Some(character) => Err(CompileError::ReservedCharacter { field: name(), character }),
        None => Ok(text),
    }
}
