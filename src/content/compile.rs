//! The pattern compiler's two interfaces, over one implementation ([`compile`]):
//!
//! - `mesgd pattern compile --sample JSON [--mode FIELD=MODE …]` prints the pattern, or exits 1
//!   with the reason;
//! - `POST /api/patterns/compile` with `{"sample": …, "modes": {"field": "exact"}}` answers
//!   `{"pattern": "/…"}`, or 400 `{"error": "…"}`.
//!
//! Fields the modes do not name are omitted (and modes that leave every field omitted mean
//! `any` on each field that allows it: the seed's "suggest" rule, `docs/content.md`).
//!
//! The HTTP endpoint needs no credential: it is a pure function of its request, reads no
//! server state (no listeners, no users, no keys) and changes none, so it reveals nothing a
//! client could not compute itself. Its request body is capped (64 KiB) and the work is linear
//! in it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::header::{self, HeaderValue};
use axum::http::{Request, Response, StatusCode};
use mesgd_core::content::{CompileError, Modes};
use serde::Deserialize;

use crate::context::ServerContext;
use crate::http::body_limit::{self, BodyRefused};

/// The fixed path of the HTTP interface.
pub(crate) const HTTP_PATH: &str = "/api/patterns/compile";

/// The largest request body the HTTP interface reads.
const MAX_BODY: usize = 64 * 1024;

/// Why a pattern could not be compiled from a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PatternError {
    /// The sample is not JSON.
    #[error("the sample is not JSON: {0}")]
    SampleNotJson(String),
    /// The request is not what the interface takes.
    #[error("invalid request: {0}")]
    Request(String),
    /// The compiler refused the sample or the modes.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// Writing the pattern out failed.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

/// Compiles the pattern for `sample` under `modes`, in its canonical text (`/kind=chat/room=*`).
pub fn compile(sample: &serde_json::Value, modes: &Modes) -> Result<String, PatternError> {
    Ok(mesgd_core::content::compile(sample, modes)?.to_string())
}

/// `mesgd pattern …`
#[derive(Clone, Debug, PartialEq, Eq, clap::Subcommand)]
#[non_exhaustive]
pub enum PatternCommand {
    /// Print the content-routing pattern built from a sample JSON message.
    Compile {
        /// The sample: a JSON object or array, e.g. '{"kind":"chat","room":"lobby"}'.
        #[arg(long, value_name = "JSON")]
        sample: String,
        /// A field's mode, FIELD=exact|any|omit (any also as *, wildcard, all); repeatable.
        /// Fields not named are omitted; a FIELD of * or wildcard means every field.
        #[arg(long = "mode", value_name = "FIELD=MODE")]
        modes: Vec<String>,
    },
}

/// Runs `mesgd pattern …`, printing the pattern and a line end on `out`.
pub fn run_pattern_command(cmd: &PatternCommand, out: &mut dyn std::io::Write) -> Result<(), PatternError> {
    match cmd {
        PatternCommand::Compile { sample, modes } => {
            let sample: serde_json::Value =
                serde_json::from_str(sample).map_err(|e| PatternError::SampleNotJson(e.to_string()))?;
            let mut parsed = Modes::new();
            for m in modes {
                parsed.parse_assignment(m)?;
            }
            writeln!(out, "{}", compile(&sample, &parsed)?)?;
            Ok(())
        }
    }
}

/// The HTTP request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompileRequest {
    sample: serde_json::Value,
    #[serde(default)]
    modes: Option<Modes>,
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Parses and compiles one request body (`{"sample", "modes"}`); the REST API's pattern
/// bodies use it too.
pub(crate) fn answer(body: &[u8]) -> Result<String, PatternError> {
    let request: CompileRequest =
        serde_json::from_slice(body).map_err(|e| PatternError::Request(e.to_string()))?;
    compile(&request.sample, &request.modes.unwrap_or_default())
}

/// `POST /api/patterns/compile`.
pub(crate) async fn route(State(_ctx): State<Arc<ServerContext>>, req: Request<Body>) -> Response<Body> {
    let body = match body_limit::read(req.into_body(), MAX_BODY).await {
        Ok(b) => b,
        Err(BodyRefused::TooLarge) => {
            let error = format!("the body is over {MAX_BODY} bytes");
            return json_response(StatusCode::PAYLOAD_TOO_LARGE, &serde_json::json!({ "error": error }));
        }
        Err(BodyRefused::Unreadable) => {
            let error = "invalid request: the body is not readable";
            return json_response(StatusCode::BAD_REQUEST, &serde_json::json!({ "error": error }));
        }
    };
    match answer(&body) {
        Ok(pattern) => json_response(StatusCode::OK, &serde_json::json!({ "pattern": pattern })),
        Err(e) => json_response(StatusCode::BAD_REQUEST, &serde_json::json!({ "error": e.to_string() })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_example_through_the_http_body() {
        let body = br#"{"sample":{"kind":"chat","room":"lobby","text":"hello"},"modes":{"kind":"exact","room":"exact"}}"#;
        assert_eq!(answer(body).unwrap(), "/kind=chat/room=lobby");
        let body = br#"{"sample":{"kind":"chat","room":"lobby","text":"hello"},"modes":{"kind":"exact","room":"any"}}"#;
        assert_eq!(answer(body).unwrap(), "/kind=chat/room=*");
    }

    #[test]
    fn malformed_requests_say_what_is_wrong() {
        let cases: [(&[u8], &str); 6] = [
            (b"", "invalid request"),
            (b"{", "invalid request"),
            (br#"{"modes":{}}"#, "missing field `sample`"),
            (br#"{"sample":{"a":"b"},"mode":{}}"#, "unknown field `mode`"),
            (br#"{"sample":{"a":"b"},"modes":{"a":"sometimes"}}"#, "unknown mode 'sometimes'"),
            (br#"{"sample":{}}"#, "no field"),
        ];
        for (body, words) in cases {
            let e = answer(body).unwrap_err().to_string();
            assert!(e.contains(words), "{:?}: {e:?} should say {words:?}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn the_command_prints_the_pattern() {
        let cmd = PatternCommand::Compile {
            sample: r#"{"kind":"chat","room":"lobby","text":"hello"}"#.into(),
            modes: vec!["kind=exact".into(), "room=any".into()],
        };
        let mut out = Vec::new();
        run_pattern_command(&cmd, &mut out).unwrap();
        assert_eq!(out, b"/kind=chat/room=*\n");
        let bad = PatternCommand::Compile { sample: "{nope".into(), modes: vec![] };
        let e = run_pattern_command(&bad, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.starts_with("the sample is not JSON"), "{e}");
    }
}
