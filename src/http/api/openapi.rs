//! The OpenAPI 3.1 document of the REST API, served at `GET /api/v1/openapi.json`.
//!
//! The operations come from the `#[utoipa::path]` attribute of each handler, collected by the
//! same `routes!` list that mounts them (`super::routes`), so a route cannot exist without its
//! description. This file adds what is common to every operation: the two ways to authenticate
//! and the error answers any route can give, each in the one error shape.
//!
//! The document is served without authentication (it describes the code, not the broker's
//! state), also before an administrator exists, so that tools can read it first.

use axum::body::Bytes;
use axum::http::header;
use utoipa::OpenApi as _;
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{ContentBuilder, OpenApi, PathItem, Ref, RefOr, ResponseBuilder};

use super::{ErrorBody, PREFIX};

/// Where the document is served, under [`PREFIX`].
pub(crate) const PATH: &str = "/openapi.json";

/// The served document: its content type and its JSON.
pub(crate) type Document = ([(header::HeaderName, &'static str); 1], Bytes);

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "mesgd REST API",
        description = "Users, ACL rules, sessions, subscriptions, retained messages and statistics of a \
                       mesgd broker. Authenticate with `Authorization: Bearer <API token>` or a browser \
                       session (POST /api/v1/login; state changes then need X-CSRF-Token). See docs/api.md."
    ),
    components(schemas(ErrorBody)),
    tags(
        (name = "auth", description = "Browser login and the credentials of a request"),
        (name = "users", description = "Builtin users"),
        (name = "rules", description = "ACL rules of builtin users, and the ACL tester"),
        (name = "accounts", description = "Content-routing patterns of accounts, and roles (message access)"),
        (name = "sessions", description = "Sessions, connected clients and subscriptions"),
        (name = "retained", description = "Retained messages"),
        (name = "broker", description = "The provider chain and broker statistics"),
        (name = "content", description = "Content routing: the route tester"),
    )
)]
struct Base;

/// The error answers every operation can give (and the route conditions that add more).
const COMMON_ERRORS: &[(&str, &str)] = &[
    ("400", "The request is malformed: a parameter, the body or a value in it"),
    ("401", "No valid credentials"),
    ("403", "Refused: scope, CSRF token, cross-origin, or no administrator exists yet"),
    ("500", "The user store failed"),
];

/// Builds the served document from the routes' own.
pub(crate) fn finish(routes: OpenApi) -> Document {
    let mut doc = Base::openapi().nest(PREFIX, routes);
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "bearer",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    components.add_security_scheme(
        "session",
        SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new("mesgd_session"))),
    );
    doc.security = Some(vec![
        SecurityRequirement::new("bearer", Vec::<String>::new()),
        SecurityRequirement::new("session", Vec::<String>::new()),
    ]);
    for (path, item) in doc.paths.paths.iter_mut() {
        let has_parameters = path.contains('{');
        for operation in operations(item) {
            let mut errors: Vec<(&str, &str)> = COMMON_ERRORS.to_vec();
            if has_parameters {
                errors.push(("404", "Nothing by that name"));
            }
            if operation.request_body.is_some() {
                errors.push(("413", "The body is larger than [http] max_body_bytes"));
                errors.push(("415", "The body is not JSON (Content-Type: application/json)"));
            }
            for (status, description) in errors {
                operation
                    .responses
                    .responses
                    .entry(status.to_owned())
                    .or_insert_with(|| error_response(description));
            }
        }
    }
    let json = doc.to_json().unwrap_or_else(|e| unreachable!("an OpenAPI document always serializes: {e}"));
    ([(header::CONTENT_TYPE, "application/json")], Bytes::from(json))
}

fn error_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    let content = ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build();
    RefOr::T(ResponseBuilder::new().description(description).content("application/json", content).build())
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch]
        .into_iter()
        .filter_map(Option::as_mut)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn document() -> Value {
        let (_, bytes) = finish(super::super::routes().split_for_parts().1);
        serde_json::from_slice(&bytes).expect("the document is JSON")
    }

    #[test]
    fn the_document_is_openapi_3_1_with_every_route_under_the_prefix() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().expect("paths");
        assert!(paths.keys().all(|p| p.starts_with("/api/v1/")), "{:?}", paths.keys());
        for (path, method) in [
            ("/api/v1/users", "post"),
            ("/api/v1/users/{name}/rules/{position}/move", "post"),
            ("/api/v1/sessions/{namespace}/{id}/kick", "post"),
            ("/api/v1/retained/{topic}", "delete"),
            ("/api/v1/login", "post"),
        ] {
            assert!(paths[path][method].is_object(), "{method} {path} is missing");
        }
    }

    #[test]
    fn every_operation_documents_its_errors_in_the_error_shape() {
        let doc = document();
        assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let responses = operation["responses"].as_object().unwrap();
                for status in ["400", "401", "403", "500"] {
                    let schema = &responses[status]["content"]["application/json"]["schema"]["$ref"];
                    assert_eq!(schema, "#/components/schemas/ErrorBody", "{method} {path} {status}");
                }
                if path.contains('{') {
                    assert!(responses.contains_key("404"), "{method} {path}");
                }
            }
        }
    }
}
