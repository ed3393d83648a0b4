//! What the broker holds: sessions and clients (kick, delete), subscriptions, retained messages
//! (list with a preview, get, delete through the broker so the change is journalled), the
//! provider chain with its counters, and statistics.
//!
//! Sessions are addressed by namespace (`mqtt`, `relay`) and id, percent-encoded in the path;
//! retained messages by their topic, percent-encoded as one path segment (`a%2Fb`). A client is
//! an online session: `GET /sessions?online=true`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mesgd_core::broker::Stats;
use mesgd_core::model::{Kick, Message, Namespace, SessionExpiry, SessionKey};
use mesgd_core::session::Session;
use mesgd_core::topic::{TopicFilter, TopicName};
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiPath, ApiQuery, Page, decode_cursor, page, page_limit};
use crate::context::ServerContext;

/// The first bytes of a payload shown in lists.
const PREVIEW_BYTES: usize = 256;

fn unix_seconds(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn namespace(text: &str) -> Result<Namespace, ApiError> {
    match text {
        "mqtt" => Ok(Namespace::Mqtt),
        "relay" => Ok(Namespace::Relay),
        other => Err(ApiError::bad_request(format!("namespace {other:?}: expected mqtt or relay"))),
    }
}

/// A session, and its client when one is connected.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct SessionView {
    namespace: &'static str,
    client_id: String,
    online: bool,
    username: Option<String>,
    protocol: Option<&'static str>,
    listener: Option<String>,
    peer: Option<String>,
    provider: Option<String>,
    tls_common_name: Option<String>,
    /// Unix seconds.
    connected_since: Option<u64>,
    subscriptions: usize,
    queue_depth: usize,
    inflight: usize,
    dropped: u64,
    /// Seconds kept after disconnect: `null` ends with the connection... see `expiry`.
    expiry: &'static str,
    expiry_s: Option<u64>,
}

fn view(session: &Session) -> SessionView {
    let client = session.client();
    let (expiry, expiry_s) = match session.expiry() {
        SessionExpiry::OnDisconnect => ("on_disconnect", None),
        SessionExpiry::After(d) => ("after", Some(d.as_secs())),
        SessionExpiry::Never => ("never", None),
    };
    SessionView {
        namespace: session.key().namespace.as_str(),
        client_id: session.client_id().to_string(),
        online: session.is_online(),
        username: client.as_ref().and_then(|c| c.username.as_deref().map(str::to_owned)),
        protocol: client.as_ref().map(|c| c.protocol.as_str()),
        listener: client.as_ref().map(|c| c.listener.to_string()),
        peer: client.as_ref().and_then(|c| c.peer.map(|p| p.to_string())),
        provider: client.as_ref().map(|c| c.provider.to_string()),
        tls_common_name: client.as_ref().and_then(|c| c.tls_common_name.as_deref().map(str::to_owned)),
        connected_since: client.as_ref().map(|c| unix_seconds(c.connected_at)),
        subscriptions: session.subscription_count(),
        queue_depth: session.queue_len(),
        inflight: session.inflight_len(),
        dropped: session.dropped(),
        expiry,
        expiry_s,
    }
}

/// The sort key of a session: namespace, then id.
fn session_key(s: &SessionView) -> String {
    format!("{}\u{0}{}", s.namespace, s.client_id)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListSessions {
    limit: Option<usize>,
    cursor: Option<String>,
    /// `mqtt` or `relay`.
    #[param(pattern = "^(mqtt|relay)$")]
    namespace: Option<String>,
    online: Option<bool>,
    username: Option<String>,
    /// Only client ids that start with this.
    client_id: Option<String>,
    protocol: Option<String>,
    listener: Option<String>,
}

/// `GET /api/v1/sessions`, ordered by namespace and id.
#[utoipa::path(get, path = "/sessions", tag = "sessions", params(ListSessions), responses((status = 200, description = "A page of sessions, by namespace and id", body = Page<SessionView>)))]
pub(crate) async fn list_sessions(
    State(ctx): State<Arc<ServerContext>>,
    ApiQuery(q): ApiQuery<ListSessions>,
) -> Result<Json<Page<SessionView>>, ApiError> {
    let limit = page_limit(q.limit)?;
    let after = decode_cursor(q.cursor.as_deref())?;
    let ns = q.namespace.as_deref().map(namespace).transpose()?;
    let mut views: Vec<SessionView> = ctx
        .broker
        .sessions()
        .iter()
        .filter(|s| ns.is_none_or(|ns| s.key().namespace == ns))
        .filter(|s| q.client_id.as_deref().is_none_or(|p| s.client_id().starts_with(p)))
        .map(|s| view(s))
        .filter(|v| q.online.is_none_or(|o| v.online == o))
        .filter(|v| q.username.as_deref().is_none_or(|u| v.username.as_deref() == Some(u)))
        .filter(|v| q.protocol.as_deref().is_none_or(|p| v.protocol == Some(p)))
        .filter(|v| q.listener.as_deref().is_none_or(|l| v.listener.as_deref() == Some(l)))
        .filter(|v| after.as_deref().is_none_or(|a| session_key(v).as_str() > a))
        .collect();
    views.sort_by_key(session_key);
    views.truncate(limit + 1);
    Ok(Json(page(views, limit, session_key)))
}

fn find(ctx: &ServerContext, ns: &str, id: &str) -> Result<Arc<Session>, ApiError> {
    let key = SessionKey { namespace: namespace(ns)?, id: Arc::from(id) };
    ctx.broker.session(&key).ok_or_else(|| ApiError::not_found(format!("no {ns} session {id:?}")))
}

/// A session with its subscriptions.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct SessionDetail {
    #[serde(flatten)]
    session: SessionView,
    subscription_list: Vec<SubscriptionView>,
}

/// `GET /api/v1/sessions/{namespace}/{id}`
#[utoipa::path(get, path = "/sessions/{namespace}/{id}", tag = "sessions", params(("namespace" = String, Path, description = "mqtt or relay", pattern = "^(mqtt|relay)$"), ("id" = String, Path, description = "The client id")), responses((status = 200, description = "The session with its subscriptions", body = SessionDetail)))]
pub(crate) async fn get_session(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath((ns, id)): ApiPath<(String, String)>,
) -> Result<Json<SessionDetail>, ApiError> {
    let session = find(&ctx, &ns, &id)?;
    Ok(Json(SessionDetail { subscription_list: subscriptions_of(&session), session: view(&session) }))
}

/// `POST /api/v1/sessions/{namespace}/{id}/kick`: closes the connection (MQTT 5: 0x98).
#[utoipa::path(post, path = "/sessions/{namespace}/{id}/kick", tag = "sessions", params(("namespace" = String, Path, description = "mqtt or relay", pattern = "^(mqtt|relay)$"), ("id" = String, Path, description = "The client id")), responses((status = 204, description = "The connection is being closed"), (status = 409, description = "The session has no connection", body = super::ErrorBody)))]
pub(crate) async fn kick(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath((ns, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let session = find(&ctx, &ns, &id)?;
    if !session.is_online() {
        return Err(ApiError::conflict("the session has no connection to close"));
    }
    session.kick(Kick::Administrative);
    tracing::info!(namespace = %ns, client_id = %id, "connection closed by an administrator");
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/v1/sessions/{namespace}/{id}`: ends an offline session (its subscriptions and
/// queue go). A connected one is refused: kick it first.
#[utoipa::path(delete, path = "/sessions/{namespace}/{id}", tag = "sessions", params(("namespace" = String, Path, description = "mqtt or relay", pattern = "^(mqtt|relay)$"), ("id" = String, Path, description = "The client id")), responses((status = 204, description = "Ended"), (status = 409, description = "The session is connected", body = super::ErrorBody)))]
pub(crate) async fn delete_session(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath((ns, id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let session = find(&ctx, &ns, &id)?;
    if session.is_online() {
        return Err(ApiError::conflict("the session is connected: kick it first"));
    }
    ctx.broker.end_session(&session);
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct SubscriptionView {
    namespace: &'static str,
    client_id: String,
    filter: String,
    qos: u8,
    no_local: bool,
    retain_as_published: bool,
    subscription_id: Option<u32>,
}

fn subscriptions_of(session: &Session) -> Vec<SubscriptionView> {
    session
        .subscriptions()
        .into_iter()
        .map(|(text, record)| SubscriptionView {
            namespace: session.key().namespace.as_str(),
            client_id: session.client_id().to_string(),
            filter: text.to_string(),
            qos: record.options.qos as u8,
            no_local: record.options.no_local,
            retain_as_published: record.options.retain_as_published,
            subscription_id: record.options.subscription_id,
        })
        .collect()
}

fn subscription_key(s: &SubscriptionView) -> String {
    format!("{}\u{0}{}\u{0}{}", s.namespace, s.client_id, s.filter)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListSubscriptions {
    limit: Option<usize>,
    cursor: Option<String>,
    /// Only this exact filter text.
    filter: Option<String>,
    /// Only subscriptions that a message on this topic reaches.
    matching: Option<String>,
    client_id: Option<String>,
    /// `mqtt` or `relay`.
    #[param(pattern = "^(mqtt|relay)$")]
    namespace: Option<String>,
}

/// `GET /api/v1/subscriptions`, by filter or by client.
#[utoipa::path(get, path = "/subscriptions", tag = "sessions", params(ListSubscriptions), responses((status = 200, description = "A page of subscriptions", body = Page<SubscriptionView>)))]
pub(crate) async fn list_subscriptions(
    State(ctx): State<Arc<ServerContext>>,
    ApiQuery(q): ApiQuery<ListSubscriptions>,
) -> Result<Json<Page<SubscriptionView>>, ApiError> {
    let limit = page_limit(q.limit)?;
    let after = decode_cursor(q.cursor.as_deref())?;
    let ns = q.namespace.as_deref().map(namespace).transpose()?;
    let matching = q
        .matching
        .as_deref()
        .map(|t| TopicName::try_from(t).map_err(|e| ApiError::bad_request(format!("matching: {e}"))))
        .transpose()?;
    let mut views: Vec<SubscriptionView> = Vec::new();
    for session in ctx.broker.sessions() {
        if ns.is_some_and(|ns| session.key().namespace != ns)
            || q.client_id.as_deref().is_some_and(|c| &**session.client_id() != c)
        {
            continue;
        }
        for (text, record) in session.subscriptions() {
            if q.filter.as_deref().is_some_and(|f| f != &*text)
                || matching.as_ref().is_some_and(|t| !record.filter.filter().matches(t))
            {
                continue;
            }
            let v = SubscriptionView {
                namespace: session.key().namespace.as_str(),
                client_id: session.client_id().to_string(),
                filter: text.to_string(),
                qos: record.options.qos as u8,
                no_local: record.options.no_local,
                retain_as_published: record.options.retain_as_published,
                subscription_id: record.options.subscription_id,
            };
            if after.as_deref().is_none_or(|a| subscription_key(&v).as_str() > a) {
                views.push(v);
            }
        }
    }
    views.sort_by_key(subscription_key);
    views.truncate(limit + 1);
    Ok(Json(page(views, limit, subscription_key)))
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct RetainedView {
    topic: String,
    qos: u8,
    payload_bytes: usize,
    /// The payload's first bytes as UTF-8 (invalid sequences replaced), for lists.
    preview: String,
    truncated: bool,
    /// Seconds left before the message expires, if it does.
    expires_in_s: Option<u32>,
}

fn retained_view(m: &Message, now: std::time::Instant) -> RetainedView {
    let shown = &m.payload[..m.payload.len().min(PREVIEW_BYTES)];
    RetainedView {
        topic: m.topic.to_string(),
        qos: m.qos as u8,
        payload_bytes: m.payload.len(),
        preview: String::from_utf8_lossy(shown).into_owned(),
        truncated: m.payload.len() > PREVIEW_BYTES,
        expires_in_s: m.remaining_expiry(now),
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListRetained {
    limit: Option<usize>,
    cursor: Option<String>,
    /// A topic filter; `#` by default (which, as for subscribers, leaves out `$` topics).
    filter: Option<String>,
}

/// `GET /api/v1/retained`, ordered by topic.
#[utoipa::path(get, path = "/retained", tag = "retained", params(ListRetained), responses((status = 200, description = "A page of retained messages, by topic", body = Page<RetainedView>)))]
pub(crate) async fn list_retained(
    State(ctx): State<Arc<ServerContext>>,
    ApiQuery(q): ApiQuery<ListRetained>,
) -> Result<Json<Page<RetainedView>>, ApiError> {
    let limit = page_limit(q.limit)?;
    let after = decode_cursor(q.cursor.as_deref())?;
    let filter = TopicFilter::try_from(q.filter.as_deref().unwrap_or("#"))
        .map_err(|e| ApiError::bad_request(format!("filter: {e}")))?;
    let now = crate::clock::now();
    let found = ctx.broker.retained().page(&filter, after.as_deref(), limit + 1, now);
    let views = found.iter().map(|m| retained_view(m, now)).collect();
    Ok(Json(page(views, limit, |v: &RetainedView| v.topic.clone())))
}

fn topic(text: &str) -> Result<TopicName, ApiError> {
    TopicName::try_from(text).map_err(|e| ApiError::bad_request(format!("topic: {e}")))
}

/// One retained message, its whole payload in base64 (and as text when it is UTF-8).
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct RetainedMessage {
    #[serde(flatten)]
    summary: RetainedView,
    payload_base64: String,
    payload_text: Option<String>,
    content_type: Option<String>,
}

/// `GET /api/v1/retained/{topic}`
#[utoipa::path(get, path = "/retained/{topic}", tag = "retained", params(("topic" = String, Path, description = "The topic, percent-encoded as one segment")), responses((status = 200, description = "The message", body = RetainedMessage)))]
pub(crate) async fn get_retained(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(text): ApiPath<String>,
) -> Result<Json<RetainedMessage>, ApiError> {
    let now = crate::clock::now();
    let m = ctx
        .broker
        .retained()
        .get(&topic(&text)?, now)
        .ok_or_else(|| ApiError::not_found(format!("no retained message on {text:?}")))?;
    Ok(Json(RetainedMessage {
        summary: retained_view(&m, now),
        payload_base64: STANDARD.encode(&m.payload),
        payload_text: std::str::from_utf8(&m.payload).ok().map(str::to_owned),
        content_type: m.properties.content_type.as_deref().map(str::to_owned),
    }))
}

/// `DELETE /api/v1/retained/{topic}`: through the broker, journalled; no subscriber gets it.
#[utoipa::path(delete, path = "/retained/{topic}", tag = "retained", params(("topic" = String, Path, description = "The topic, percent-encoded as one segment")), responses((status = 204, description = "Cleared")))]
pub(crate) async fn delete_retained(
    State(ctx): State<Arc<ServerContext>>,
    ApiPath(text): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    if ctx.broker.clear_retained(&topic(&text)?) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("no retained message on {text:?}")))
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ProviderView {
    position: usize,
    name: String,
    on_error: &'static str,
    timeout_ms: u64,
    allow: u64,
    deny: u64,
    next: u64,
    error: u64,
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct ChainView {
    allow_anonymous: bool,
    providers: Vec<ProviderView>,
    anonymous_admitted: u64,
    unresolved_refused: u64,
}

/// `GET /api/v1/providers`: the chain in order, with what each provider answered.
#[utoipa::path(get, path = "/providers", tag = "broker", responses((status = 200, description = "The provider chain in order, with its counters", body = ChainView)))]
pub(crate) async fn providers(State(ctx): State<Arc<ServerContext>>) -> Json<ChainView> {
    let chain = &ctx.chain;
    let providers = chain
        .entries()
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            let counts = chain.stats().provider(i).map(|c| c.counts()).unwrap_or_default();
            ProviderView {
                position: i + 1,
                name: entry.provider.name().to_owned(),
                on_error: match entry.on_error {
                    mesgd_core::auth::OnError::Deny => "deny",
                    mesgd_core::auth::OnError::Next => "next",
                },
                timeout_ms: u64::try_from(entry.timeout.as_millis()).unwrap_or(u64::MAX),
                allow: counts.allow,
                deny: counts.deny,
                next: counts.next,
                error: counts.error,
            }
        })
        .collect();
    Json(ChainView {
        allow_anonymous: chain.allows_anonymous(),
        providers,
        anonymous_admitted: chain.stats().anonymous_admitted(),
        unresolved_refused: chain.stats().unresolved_refused(),
    })
}

#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct StatsView {
    version: &'static str,
    sessions: usize,
    clients_connected: u64,
    connections_accepted: u64,
    subscriptions: usize,
    retained: usize,
    messages_received: u64,
    messages_sent: u64,
    messages_dropped: u64,
    bytes_received: u64,
    bytes_sent: u64,
    auth_failures: u64,
    publishes_denied: u64,
    subscribes_denied: u64,
    deliveries_filtered: u64,
}

/// `GET /api/v1/stats`
#[utoipa::path(get, path = "/stats", tag = "broker", responses((status = 200, description = "Broker statistics", body = StatsView)))]
pub(crate) async fn stats(State(ctx): State<Arc<ServerContext>>) -> Json<StatsView> {
    let b = &ctx.broker;
    let s = b.stats();
    Json(StatsView {
        version: env!("CARGO_PKG_VERSION"),
        sessions: b.session_count(),
        clients_connected: Stats::get(&s.clients_connected),
        connections_accepted: Stats::get(&s.connections_total),
        subscriptions: b.router().len(),
        retained: b.retained().len(),
        messages_received: Stats::get(&s.messages_received),
        messages_sent: Stats::get(&s.messages_sent),
        messages_dropped: Stats::get(&s.messages_dropped),
        bytes_received: Stats::get(&s.bytes_received),
        bytes_sent: Stats::get(&s.bytes_sent),
        auth_failures: Stats::get(&s.auth_failures),
        publishes_denied: Stats::get(&s.publishes_denied),
        subscribes_denied: Stats::get(&s.subscribes_denied),
        deliveries_filtered: Stats::get(&s.deliveries_filtered),
    })
}
