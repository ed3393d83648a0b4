//! From accepted socket to attached session: read CONNECT, validate it, run the authenticator
//! chain, take over or resume the session, answer CONNACK.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use mesgd_core::acl::Acl;
use mesgd_core::auth::{ConnectInfo, DenyReason, Protocol, Secret, TlsInfo, Verdict};
use mesgd_core::broker::Stats;
use mesgd_core::broker::{Admission, AdmitError, OnConflict};
use mesgd_core::cluster::registry::ClaimError;
use mesgd_core::log_text::Clipped;
use mesgd_core::model::{ClientInfo, Message, MessageProperties, Origin, SessionExpiry, SessionKey, Will};
use mesgd_core::mqtt::{
    self, ConnAck, ConnAckProperties, Connect, DecodeError, Packet, ProtocolVersion, QoS, ReasonCode,
};
use mesgd_core::topic::TopicName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::checks::{self, Fields};
use super::connection::{Accepted, Connection};
use crate::context::ServerContext;
use crate::limits::Tripped;

/// Why a connection ended before it was attached to a session.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The peer went away or sent nothing in time; nothing to answer.
    Silent(&'static str),
    /// The CONNECT could not be decoded.
    Malformed(DecodeError),
    /// A CONNACK with this code was sent.
    Answered(ReasonCode, String),
}

/// Reads the CONNECT, or fails. Bytes after it stay in `buf` for the main loop.
async fn read_connect<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    max_packet_size: u32,
) -> Result<Connect, Refused> {
    loop {
        match mqtt::decode(buf, None, max_packet_size) {
            Ok(Some(Packet::Connect(c))) => return Ok(c),
            Ok(Some(_)) => return Err(Refused::Silent("first packet was not CONNECT")),
            Ok(None) => {}
            Err(e) => return Err(Refused::Malformed(e)),
        }
        buf.reserve(1024);
        match stream.read_buf(buf).await {
            Ok(0) => return Err(Refused::Silent("closed before CONNECT")),
            Ok(_) => {}
            Err(_) => return Err(Refused::Silent("read error before CONNECT")),
        }
    }
}

async fn send_connack<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    version: ProtocolVersion,
    reason: ReasonCode,
    reason_string: Option<String>,
) {
    let packet = Packet::ConnAck(ConnAck {
        session_present: false,
        reason_code: reason,
        properties: ConnAckProperties { reason_string, ..Default::default() },
    });
    let mut out = BytesMut::new();
    if mqtt::encode(&packet, version, &mut out).is_ok() && stream.write_all(&out).await.is_ok() {
        // The connection ends here: let the client read the refusal before the socket closes.
        crate::linger::close(stream).await;
    }
}

pub(crate) fn protocol_of(version: ProtocolVersion) -> Protocol {
    match version {
        ProtocolVersion::V31 => Protocol::Mqtt31,
        ProtocolVersion::V311 => Protocol::Mqtt311,
        ProtocolVersion::V5 => Protocol::Mqtt5,
    }
}

/// Converts a wall-clock expiry (a JWT's `exp`) to the monotonic clock.
fn to_instant(at: SystemTime, now: Instant) -> Instant {
    match at.duration_since(SystemTime::now()) {
        Ok(left) => now + left,
        Err(_) => now,
    }
}

/// Runs the connect handshake. On success the session is attached and CONNACK is in the
/// returned connection's output buffer.
pub(crate) async fn handshake<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut stream: S,
    peer: SocketAddr,
    listener: Arc<str>,
    tls: Option<TlsInfo>,
    ctx: Arc<ServerContext>,
    deadline: std::time::Instant,
) -> Result<Box<Connection<S>>, Refused> {
    let settings = &ctx.mqtt;
    let mut inbuf = BytesMut::new();
    let connect = match tokio::time::timeout_at(
        tokio::time::Instant::from_std(deadline),
        read_connect(&mut stream, &mut inbuf, settings.max_packet_size),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(Refused::Malformed(DecodeError::UnsupportedProtocolVersion(level)))) => {
            // [MQTT-3.1.2-2]: answer with "unacceptable protocol level" in the 3.1.1 format.
            send_connack(&mut stream, ProtocolVersion::V311, ReasonCode::UnsupportedProtocolVersion, None)
                .await;
            return Err(Refused::Answered(
                ReasonCode::UnsupportedProtocolVersion,
                format!("unsupported protocol level {level}"),
            ));
        }
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            if let Some(more) = ctx.limits.trip(Tripped::HandshakeTimeout, crate::clock::now()) {
                tracing::info!(%peer, more_since_last_line = more, "no CONNECT within connect_timeout_ms: closing");
            }
            return Err(Refused::Silent("no CONNECT within connect_timeout_ms"));
        }
    };
    let version = connect.protocol;
    let v5 = version == ProtocolVersion::V5;
    let now = crate::clock::now();

    macro_rules! refuse {
        ($code:expr, $($msg:tt)+) => {{
            let message = format!($($msg)+);
            send_connack(&mut stream, version, $code, v5.then(|| message.clone())).await;
            return Err(Refused::Answered($code, message));
        }};
    }

    if let Some(method) = &connect.properties.authentication_method {
        refuse!(ReasonCode::BadAuthenticationMethod, "authentication method {method:?} is not supported");
    }

    // Client identifier: an empty one gets a generated id (3.x only with a clean session).
    let mut assigned = None;
    let client_id: Arc<str> = if connect.client_id.is_empty() {
        if !v5 && !connect.clean_start {
            refuse!(ReasonCode::ClientIdentifierNotValid, "an empty client id needs clean session");
        }
        let id = format!("mesgd-{:016x}", rand_u64());
        assigned = Some(id.clone());
        id.into()
    } else {
        connect.client_id.as_str().into()
    };
    tracing::Span::current().record("client_id", tracing::field::display(Clipped(&client_id)));

    // Keep-alive: MQTT 5 clients are told the server's value; 3.x clients asking for more are
    // refused, as they cannot be told.
    let mut server_keep_alive = None;
    let mut keep_alive = connect.keep_alive;
    if keep_alive > settings.max_keep_alive || (keep_alive == 0 && settings.max_keep_alive < u16::MAX) {
        if v5 {
            keep_alive = settings.max_keep_alive;
            server_keep_alive = Some(keep_alive);
        } else {
            refuse!(
                ReasonCode::ClientIdentifierNotValid,
                "keep-alive {} exceeds the server maximum {}",
                connect.keep_alive,
                settings.max_keep_alive
            );
        }
    }

    // The will: validated now with the rules of any publish, published (and checked against
    // the ACL) when it is due.
    let will = match &connect.will {
        None => None,
        Some(w) => {
            let topic = match TopicName::try_from(w.topic.clone()) {
                Ok(t) => t,
                Err(e) => refuse!(ReasonCode::TopicNameInvalid, "invalid will topic: {e}"),
            };
            let p = &w.properties;
            let fields = Fields {
                topic: &topic,
                qos: w.qos,
                retain: w.retain,
                payload_format_indicator: p.payload_format_indicator,
                payload: &w.payload,
                response_topic: p.response_topic.as_ref(),
            };
            if let Err(broken) = checks::check(settings, &fields) {
                refuse!(broken.code, "will: {}", broken.message);
            }
            let origin = Origin::client(None, client_id.clone());
            let mut message = Message::new(topic, w.payload.clone(), w.qos, w.retain, origin);
            message.properties = MessageProperties::from(p);
            let delay = Duration::from_secs(u64::from(p.delay_interval.unwrap_or(0)));
            Some((message, p.message_expiry_interval, delay))
        }
    };

    // Authentication.
    let info = ConnectInfo::new(protocol_of(version), client_id.to_string(), listener.clone())
        .with_username(connect.username.clone())
        .with_password(connect.password.as_ref().map(|p| Secret::new(p.to_vec())))
        .with_peer_addr(Some(peer))
        .with_tls(tls);
    let tls_common_name = info.tls.as_ref().and_then(|t| t.common_name.as_deref()).map(Arc::from);
    let throttle_delay = ctx.login_guard.delay_for(peer.ip(), info.username.as_deref());
    if !throttle_delay.is_zero() {
        crate::limits::LimitCounters::add(&ctx.limits.counters.logins_throttled);
        tokio::time::sleep(throttle_delay).await;
    }
    let identity = match ctx.chain.authenticate(&info).await {
        Verdict::Allowed(identity) => {
            ctx.login_guard.succeeded(peer.ip(), info.username.as_deref());
            identity
        }
        Verdict::Denied(denial) => {
            Stats::add(&ctx.broker.stats().auth_failures, 1);
            ctx.login_guard.failed(peer.ip(), info.username.as_deref());
            tracing::info!(username = ?info.username.as_deref().map(Clipped), reason = %denial.message, "authentication failed");
            let code = match denial.reason {
                DenyReason::BadCredentials => ReasonCode::BadUserNameOrPassword,
                _ => ReasonCode::NotAuthorized,
            };
            refuse!(
                code,
                "{}",
                if code == ReasonCode::NotAuthorized {
                    "not authorized"
                } else {
                    "bad user name or password"
                }
            );
        }
    };
    // One `Arc` of the username for the connection, its ACL (`%u`) and for operators; the
    // provider's name is shared by every client it admitted.
    let username: Option<Arc<str>> = identity.username.as_deref().map(Arc::from);
    let acl = Acl::for_client(identity.acl.as_deref(), username.clone(), client_id.clone());
    let identity_expires = identity.expires_at.map(|at| to_instant(at, now));
    if identity_expires.is_some_and(|at| at <= now) {
        refuse!(ReasonCode::NotAuthorized, "the credential has expired");
    }

    // Session expiry, clamped to the server maximum.
    let requested = if v5 {
        connect.properties.session_expiry_interval.unwrap_or(0)
    } else if connect.clean_start {
        0
    } else {
        u32::MAX
    };
    let granted = requested.min(settings.max_session_expiry);
    let expiry = SessionExpiry::from_interval(granted);

    // Take over an existing connection of the same client id, then open or resume the session.
    let admission = Admission {
        key: SessionKey::mqtt(client_id.clone()),
        clean_start: connect.clean_start,
        expiry,
        acl: acl.clone(),
        on_conflict: OnConflict::TakeOver,
        client: Some(
            ClientInfo::new(
                protocol_of(version),
                listener.clone(),
                ctx.provider_names.get(&identity.provider),
                SystemTime::now(),
            )
            .with_peer(Some(peer))
            .with_username(username.clone())
            .with_tls_common_name(tls_common_name),
        ),
    };
    let admitted = match ctx.broker.admit(admission, crate::clock::now()).await {
        Ok(admitted) => admitted,
        Err(e @ AdmitError::Registry(ClaimError::IdTooLong)) => {
            refuse!(ReasonCode::ClientIdentifierNotValid, "{e}")
        }
        Err(e @ AdmitError::SessionsFull) => {
            if let Some(more) = ctx.limits.trip(Tripped::Sessions, crate::clock::now()) {
                tracing::warn!(
                    sessions = ctx.broker.session_count(),
                    more_since_last_line = more,
                    "new persistent session refused: limits.max_sessions reached (raise it, or shorten max_session_expiry so abandoned sessions end sooner)"
                );
            }
            refuse!(ReasonCode::QuotaExceeded, "{e}")
        }
        // In a cluster, also the session registry out of reach: fail closed (0x88, 3.x 0x03).
        Err(e) => refuse!(ReasonCode::ServerUnavailable, "{e}"),
    };
    let will = will.map(|(message, expiry_interval, delay)| Will {
        message,
        expiry_interval,
        delay,
        acl: acl.clone(),
    });

    let properties = if v5 {
        ConnAckProperties {
            session_expiry_interval: (granted != requested).then_some(granted),
            receive_maximum: Some(settings.max_inflight),
            maximum_qos: (settings.max_qos < QoS::ExactlyOnce).then_some(settings.max_qos),
            retain_available: Some(settings.retain_available),
            maximum_packet_size: Some(settings.max_packet_size),
            assigned_client_identifier: assigned,
            topic_alias_maximum: Some(settings.max_topic_alias),
            wildcard_subscription_available: Some(settings.wildcard_subscriptions),
            subscription_identifiers_available: Some(settings.subscription_identifiers),
            shared_subscription_available: Some(settings.shared_subscriptions),
            server_keep_alive,
            ..Default::default()
        }
    } else {
        ConnAckProperties::default()
    };
    let connack = Packet::ConnAck(ConnAck {
        session_present: admitted.present,
        reason_code: ReasonCode::Success,
        properties,
    });
    tracing::debug!(
        protocol = protocol_of(version).as_str(),
        provider = %identity.provider,
        username = ?identity.username,
        present = admitted.present,
        "connected"
    );
    Ok(Box::new(Connection::new(
        stream,
        ctx.clone(),
        Accepted {
            version,
            session: admitted.session,
            generation: admitted.generation,
            username,
            identity,
            acl,
            identity_expires,
            keep_alive: Duration::from_secs(u64::from(keep_alive)),
            will,
            session_expiry_was_zero: requested == 0,
            client_receive_maximum: connect.properties.receive_maximum.unwrap_or(u16::MAX),
            client_maximum_packet_size: connect.properties.maximum_packet_size.unwrap_or(u32::MAX),
            client_topic_alias_maximum: connect.properties.topic_alias_maximum.unwrap_or(0),
            request_problem_information: connect.properties.request_problem_information.unwrap_or(true),
        },
        inbuf,
        &connack,
    )))
}

/// A random 64-bit number for generated client ids, from the standard library's randomly
/// seeded hasher (no extra dependency, and ids need to be unique, not secret).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}
