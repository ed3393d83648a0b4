//! Integration tests of the providers against real components: SQLite files in temporary
//! directories, a local HTTP webhook, tokens signed by a real JWT library.

mod builtin;
mod cli;
mod http;
mod jwt;
mod registry;
mod support;
