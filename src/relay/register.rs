//! The asynchronous half of a `register`: the provider chain (with the login guard), the ACL
//! check on the address, and admission through the broker, whose session registry is the
//! address registry. The synchronous checks before it (load, address and key, key proof) and
//! the relay's own part after it (alias binding, backlog flush) are the client's
//! (`super::client`) and the hub's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use mesgd_core::acl::{Access, Acl};
use mesgd_core::auth::{ConnectInfo, Identity, Protocol, Verdict};
use mesgd_core::broker::{Admission, AdmitError, OnConflict, Stats};
use mesgd_core::model::{ClientInfo, SessionExpiry, SessionKey};
use mesgd_core::relay::{Claim, RelayError, Resource};
use mesgd_core::session::Session;

use super::stats::RelayStats;
use crate::context::ServerContext;

/// A client the broker admitted under its address.
pub(crate) struct Admitted {
    pub(crate) claim: Claim,
    pub(crate) session: Arc<Session>,
    pub(crate) generation: u64,
    pub(crate) identity: Identity,
    pub(crate) acl: Acl,
    pub(crate) identity_expires: Option<Instant>,
    /// With `[cluster]`: the address's backlog taken from the cluster's queue.
    pub(crate) backlog: Vec<bytes::Bytes>,
}

/// Runs the provider chain for `info` (whose client id is the claimed address), checks that
/// the identity may hold the address (read on `$relay/addr/<addr>`), and admits it: `not
/// authorized` for a refusal of either kind, `address in use` while another connection holds
/// the address.
pub(crate) async fn admit(
    ctx: Arc<ServerContext>,
    info: ConnectInfo,
    claim: Claim,
) -> Result<Admitted, RelayError> {
    let relay = &ctx.relay;
    let peer: Option<SocketAddr> = info.peer_addr;
    let ip = peer.map(|p| p.ip()).unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
    let delay = ctx.login_guard.delay_for(ip, info.username.as_deref());
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let identity = match ctx.chain.authenticate(&info).await {
        Verdict::Allowed(identity) => {
            ctx.login_guard.succeeded(ip, info.username.as_deref());
            identity
        }
        Verdict::Denied(denial) => {
            Stats::add(&ctx.broker.stats().auth_failures, 1);
            RelayStats::add(&relay.stats().registers_denied, 1);
            ctx.login_guard.failed(ip, info.username.as_deref());
            tracing::info!(username = ?info.username, reason = %denial.message, "relay register: authentication failed");
            return Err(RelayError::NotAuthorized);
        }
    };
    let addr = claim.address();
    let acl = Acl::compile(identity.acl.as_deref(), identity.username.as_deref(), addr);
    let now = crate::clock::now();
    let identity_expires = identity.expires_at.map(|at| match at.duration_since(SystemTime::now()) {
        Ok(left) => now + left,
        Err(_) => now,
    });
    if identity_expires.is_some_and(|at| at <= now)
        || !acl.allows(Access::Read, &Resource::Address(addr).topic())
    {
        RelayStats::add(&relay.stats().registers_denied, 1);
        tracing::info!(username = ?identity.username, "relay register: the address is not allowed");
        return Err(RelayError::NotAuthorized);
    }
    let client = ClientInfo::new(
        Protocol::Relay,
        info.listener.clone(),
        ctx.provider_names.get(&identity.provider),
        SystemTime::now(),
    )
    .with_peer(peer)
    .with_username(identity.username.as_deref().map(Arc::from))
    .with_tls_common_name(info.tls.as_ref().and_then(|t| t.common_name.as_deref()).map(Arc::from));
    let admission = Admission {
        key: SessionKey::relay(addr),
        clean_start: true,
        expiry: SessionExpiry::OnDisconnect,
        acl: acl.clone(),
        on_conflict: OnConflict::Refuse,
        client: Some(client),
    };
    match ctx.broker.admit(admission, crate::clock::now()).await {
        Ok(admitted) => {
            // Clustered: the address is claimed cluster-wide too (`address in use` while a
            // client on another node holds it), and its backlog taken from the cluster.
            let backlog = match relay.cluster() {
                None => Vec::new(),
                Some(cluster) => {
                    let claimed = match relay.check_alias(&claim) {
                        Ok(()) => cluster.claim(Arc::from(addr), alias_rule(&claim)).await,
                        Err(e) => Err(e),
                    };
                    match claimed {
                        Ok(backlog) => backlog,
                        Err(e) => {
                            ctx.broker.connection_closed(
                                &admitted.session,
                                admitted.generation,
                                None,
                                crate::clock::now(),
                            );
                            return Err(e);
                        }
                    }
                }
            };
            Ok(Admitted {
                claim,
                session: admitted.session,
                generation: admitted.generation,
                identity,
                acl,
                identity_expires,
                backlog,
            })
        }
        Err(AdmitError::InUse) => Err(RelayError::AddressInUse),
        Err(_) => Err(RelayError::AddressInUse),
    }
}

/// What `claim` says about its alias binding, for the cluster-wide check.
fn alias_rule(claim: &Claim) -> mesgd_core::cluster::relay::AliasRule {
    use mesgd_core::cluster::relay::AliasRule;
    match claim {
        Claim::Derived { .. } => AliasRule::Derived,
        Claim::Plain { .. } => AliasRule::Unkeyed,
        Claim::Alias { key, .. } => AliasRule::Keyed(*key.digest()),
    }
}
