//! Which node holds each relay address: the bucket, claiming an address by compare-and-swap,
//! asking a record's node whether it still holds the address, and releasing the record.
//!
//! Revisions fence a node that lost an address: its delete is at its own revision, so it never
//! deletes a newer holder's record.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use async_nats::RequestErrorKind;
use async_nats::jetstream::kv::{self, Operation, UpdateErrorKind};
use async_nats::jetstream::{self};
use bytes::Bytes;
use mesgd_core::cluster::registry::{MAX_MESSAGE_LEN, Record};
use mesgd_core::cluster::relay::{
    AliasRule, address_token, binding_key, decode_binding, encode_binding, node_subject,
};
use mesgd_core::cluster::relay_wire::{RelayReply, RelayRequest};
use mesgd_core::relay::RelayError;
use mesgd_core::sync::lock;

use super::{RelayClusterStats, RelayNode};

/// Compare-and-swap rounds a claim tries before giving up (contention).
const MAX_ATTEMPTS: usize = 16;

/// The bucket, created if it does not exist, with the settings the KV API gives a bucket
/// (async-nats's own bucket creation reads account information in a form nats-server 2.9 does
/// not send; see the session registry).
pub(super) async fn bucket(
    js: &jetstream::Context,
    name: &str,
    replicas: usize,
    patience: Duration,
) -> Result<kv::Store, crate::StartError> {
    crate::registry::named_bucket(
        js,
        name,
        replicas,
        "mesgd relay: the node holding each relay address",
        i32::try_from(MAX_MESSAGE_LEN).unwrap_or(i32::MAX),
        Duration::ZERO,
        patience,
    )
    .await
    .map_err(crate::StartError::Relay)
}

#[derive(Debug, Clone, Copy)]
struct Holding {
    /// The revision of this node's record; 0 while the claim is in flight.
    revision: u64,
    /// When the claim began.
    since: Instant,
    /// Whether the address is in the relay's directory (`registered` was sent).
    registered: bool,
}

/// The addresses this node holds or is claiming.
#[derive(Debug, Default)]
pub(super) struct Claims {
    held: Mutex<HashMap<String, Holding>>,
}

impl Claims {
    fn begin(&self, addr: &str) {
        let holding = Holding { revision: 0, since: Instant::now(), registered: false };
        lock(&self.held).insert(addr.to_owned(), holding);
    }

    fn claimed(&self, addr: &str, revision: u64) {
        if let Some(h) = lock(&self.held).get_mut(addr) {
            h.revision = revision;
        }
    }

    pub(super) fn failed(&self, addr: &str) {
        lock(&self.held).remove(addr);
    }

    pub(super) fn registered(&self, addr: &str) {
        if let Some(h) = lock(&self.held).get_mut(addr) {
            h.registered = true;
        }
    }

    /// Whether a registration of `addr` is in progress here (begun less than `bound` ago:
    /// a registration abandoned half-way does not hold the address for ever).
    fn registering(&self, addr: &str, bound: Duration) -> bool {
        lock(&self.held).get(addr).is_some_and(|h| !h.registered && h.since.elapsed() < bound)
    }

    fn release(&self, addr: &str) -> Option<u64> {
        lock(&self.held).remove(addr).map(|h| h.revision).filter(|&r| r > 0)
    }
}

/// What the node a record names says about the address.
enum Holder {
    Holds,
    Free,
}

impl RelayNode {
    /// Whether a client of this node holds `addr` or is being registered under it.
    pub(super) fn holds(&self, addr: &str) -> bool {
        self.inner.local.holds(addr) || self.inner.claims.registering(addr, self.inner.timeout * 2)
    }

    /// Claims `addr` for this node: the compare-and-swap loop over whatever the bucket holds,
    /// refusing while another node's client holds it.
    pub(super) async fn claim_now(&self, addr: &str) -> Result<(), RelayError> {
        let me = &self.inner;
        if me.client.connection_state() != async_nats::connection::State::Connected {
            RelayClusterStats::add(&self.stats().claims_unavailable, 1);
            return Err(RelayError::Overloaded);
        }
        let key = address_token(addr);
        let since_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let record = Record {
            node: me.node.to_string(),
            instance: me.instance.clone(),
            since_ms: u64::try_from(since_ms).unwrap_or(u64::MAX),
        };
        let value = Bytes::from(record.encode());
        me.claims.begin(addr);
        for _ in 0..MAX_ATTEMPTS {
            let (expected, owner) = match me.kv.entry(&key).await {
                Ok(None) => (0, None),
                Ok(Some(e)) if e.operation == Operation::Put => (e.revision, Record::decode(&e.value).ok()),
                Ok(Some(e)) => (e.revision, None),
                Err(e) => return Err(self.unavailable(addr, &e.to_string())),
            };
            if let Some(owner) = owner.filter(|o| *o.node != *me.node) {
                match self.ask_holder(&owner.node, addr).await {
                    Ok(Holder::Holds) => {
                        me.claims.failed(addr);
                        RelayClusterStats::add(&self.stats().claims_in_use, 1);
                        return Err(RelayError::AddressInUse);
                    }
                    Ok(Holder::Free) => {}
                    Err(why) => return Err(self.unavailable(addr, &why)),
                }
            }
            match me.kv.update(&key, value.clone(), expected).await {
                Ok(revision) => {
                    me.claims.claimed(addr, revision);
                    RelayClusterStats::add(&self.stats().claims, 1);
                    return Ok(());
                }
                Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                    RelayClusterStats::add(&self.stats().conflicts, 1);
                }
                Err(e) => return Err(self.unavailable(addr, &e.to_string())),
            }
        }
        Err(self.unavailable(addr, "too many compare-and-swap conflicts"))
    }

    fn unavailable(&self, addr: &str, why: &str) -> RelayError {
        self.inner.claims.failed(addr);
        RelayClusterStats::add(&self.stats().claims_unavailable, 1);
        tracing::warn!(addr, reason = why, "cluster: cannot claim the relay address");
        RelayError::Overloaded
    }

    /// Asks `node` whether a client there holds `addr`; a node that is gone holds nothing.
    async fn ask_holder(&self, node: &str, addr: &str) -> Result<Holder, String> {
        let me = &self.inner;
        let request = RelayRequest::Held { addr: addr.to_owned() }.encode();
        match tokio::time::timeout(me.timeout, me.client.request(node_subject(node), request)).await {
            Ok(Ok(reply)) => match RelayReply::decode(&reply.payload) {
                Ok(RelayReply::Held) => Ok(Holder::Holds),
                Ok(_) => Ok(Holder::Free),
                Err(e) => {
                    RelayClusterStats::add(&self.stats().decode_errors, 1);
                    Err(e.to_string())
                }
            },
            Ok(Err(e)) if e.kind() == RequestErrorKind::NoResponders => {
                RelayClusterStats::add(&self.stats().owner_gone, 1);
                Ok(Holder::Free)
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("node {node} did not answer in time")),
        }
    }

    /// Applies the alias rule cluster-wide: an unbound alias with a key is bound to it (by
    /// create, so the first key wins), and a bound one admits only its key. Bindings are never
    /// deleted by the relay.
    pub(super) async fn check_binding(&self, addr: &str, rule: AliasRule) -> Result<(), RelayError> {
        let me = &self.inner;
        let key = binding_key(addr);
        for _ in 0..MAX_ATTEMPTS {
            let bound = match me.kv.entry(&key).await {
                Ok(Some(e)) if e.operation == Operation::Put => Some(decode_binding(&e.value)),
                Ok(Some(e)) => {
                    // A binding an operator deleted: its marker's revision is the one to replace.
                    if let AliasRule::Keyed(digest) = rule {
                        match me.kv.update(&key, Bytes::from(encode_binding(&digest)), e.revision).await {
                            Ok(_) => return Ok(()),
                            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => continue,
                            Err(e) => return Err(self.unavailable(addr, &e.to_string())),
                        }
                    }
                    None
                }
                Ok(None) => None,
                Err(e) => return Err(self.unavailable(addr, &e.to_string())),
            };
            return match (bound, rule) {
                (_, AliasRule::Derived) | (None, AliasRule::Unkeyed) => Ok(()),
                (Some(Ok(d)), AliasRule::Keyed(digest)) if d == digest => Ok(()),
                (Some(Err(_)), _) => {
                    RelayClusterStats::add(&self.stats().decode_errors, 1);
                    RelayClusterStats::add(&self.stats().alias_refused, 1);
                    Err(RelayError::AliasBound)
                }
                (Some(_), _) => {
                    RelayClusterStats::add(&self.stats().alias_refused, 1);
                    Err(RelayError::AliasBound)
                }
                (None, AliasRule::Keyed(digest)) => {
                    match me.kv.create(&key, Bytes::from(encode_binding(&digest))).await {
                        Ok(_) => {
                            RelayClusterStats::add(&self.stats().aliases_bound, 1);
                            Ok(())
                        }
                        // Bound by another node meanwhile: read it again.
                        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => continue,
                        Err(e) => Err(self.unavailable(addr, &e.to_string())),
                    }
                }
            };
        }
        Err(self.unavailable(addr, "too many alias binding conflicts"))
    }

    /// Deletes this node's record of `addr` at its revision (a newer holder's stays).
    pub(super) async fn release_now(&self, addr: &str) {
        let me = &self.inner;
        let Some(revision) = me.claims.release(addr) else { return };
        let key = address_token(addr);
        match tokio::time::timeout(me.timeout, me.kv.delete_expect_revision(&key, Some(revision))).await {
            Ok(Ok(())) => RelayClusterStats::add(&self.stats().released, 1),
            Ok(Err(e)) if e.kind() == UpdateErrorKind::WrongLastRevision => {
                RelayClusterStats::add(&self.stats().fenced, 1);
            }
            _ => {
                RelayClusterStats::add(&self.stats().release_errors, 1);
                tracing::warn!(addr, "cluster: cannot delete the relay address record");
            }
        }
    }

    /// The node a record names as holding `addr`, if any (`Err` when the bucket cannot be
    /// read in time).
    pub(super) async fn holder_of(&self, addr: &str) -> Result<Option<String>, ()> {
        Ok(self.record_of(addr).await?.map(|r| r.node))
    }

    /// The record of `addr`, if there is one that reads (`Err` when the bucket cannot be read
    /// in time).
    pub(super) async fn record_of(&self, addr: &str) -> Result<Option<Record>, ()> {
        let me = &self.inner;
        match tokio::time::timeout(me.timeout, me.kv.entry(address_token(addr))).await {
            Ok(Ok(Some(e))) if e.operation == Operation::Put => Ok(Record::decode(&e.value).ok()),
            Ok(Ok(_)) => Ok(None),
            _ => Err(()),
        }
    }
}
