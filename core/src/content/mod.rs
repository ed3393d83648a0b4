//! Content-based routing: listeners register a path of conditions on a JSON message's top
//! level, and each message reaches every listener whose path it matches.
//!
//! Sans-I/O: the HTTP and WebSocket side registers listeners and hands messages in; this module
//! parses paths, scans messages, indexes the paths, decides coverage for grants, and compiles
//! patterns from sample messages. The rules are written out in `docs/content.md`.
//!
//! - [`Path`]: parse (`Path::parse`, `Path::from_url_path`), canonical `Display`,
//!   [`Path::matches`] against a scanned [`Message`], [`Path::covers`] for grants.
//! - [`Message`]: a validated JSON object or array, reduced to its top-level members.
//! - [`Matcher`]: the index of listener paths, matched without locks, sub-linear in listeners.
//! - [`compile`]: builds a path from a sample message and per-field [`Modes`].

mod compile;
mod coverage;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod hash;
mod matcher;
mod message;
mod path;
mod percent;
mod scan;
#[cfg(test)]
mod tests;

pub use compile::{CompileError, FieldMode, MAX_FIELDS, Modes, UnknownMode, compile};
pub use matcher::{MAX_LISTENERS, Matcher, MatcherFull};
pub use message::{Message, Shape, Value};
pub use path::{Constraint, Key, MAX_PATH_LEN, MAX_SEGMENTS, Path, PathError, Segment};
pub use scan::{MAX_DEPTH, MAX_MESSAGE_LEN, ScanError, SyntaxError};
