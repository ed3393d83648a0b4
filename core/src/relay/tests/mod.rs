//! Relay codec tests that span several modules: the parser's malformed-input table, round trips
//! through serde_json, the scanner against serde_json, and the fuzz corpus replay. Each state
//! type's own tests sit beside it.

mod corpus;
mod malformed;
mod roundtrip;
mod scan;
mod text_depth;
