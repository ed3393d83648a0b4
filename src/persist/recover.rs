//! Start-up: read `state.db` back into the broker.
//!
//! Sessions come back offline, with their subscriptions, queued and in-flight messages (in their
//! original order, with their packet ids), and incoming QoS 2 ids; their expiry counts from when
//! their connection ended, on the wall clock, so time spent down counts. Retained messages and
//! delayed wills come back with their deadlines. Whatever expired while the broker was down is
//! dropped (and deleted from the store); a will whose session expired meanwhile is published.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mesgd_core::acl::Acl;
use mesgd_core::broker::{Broker, RestoredEntry, RestoredSession};
use mesgd_core::model::{Delivery, SessionExpiry, SessionKey, SharedRoute, SubscribeOptions, Will};
use mesgd_core::model::{Message, Origin};
use mesgd_core::mqtt::{QoS, RetainHandling};
use mesgd_core::session::OutboundState;
use mesgd_core::topic::{SubscriptionFilter, TopicName};
use rusqlite::Connection;

use super::record::{acl_from_json, ids_from_json, ms_to_instant, properties_from_json};
use super::schema::StoreError;

/// What was read, for the log and the writer's bookkeeping.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    pub(crate) sessions: usize,
    pub(crate) messages: usize,
    pub(crate) retained: usize,
    pub(crate) wills: usize,
    /// Queue entry → stored message id, for the writer's reference counts.
    pub(crate) entries: Vec<((Arc<str>, u64), i64)>,
    /// The relay's offline queues and alias bindings.
    pub(crate) relay: crate::relay::Restored,
}

struct Reader<'a> {
    path: &'a std::path::Path,
    now: Instant,
    wall: SystemTime,
}

impl Reader<'_> {
    fn corrupt(&self, message: impl Into<String>) -> StoreError {
        StoreError::Corrupt { path: self.path.to_owned(), message: message.into() }
    }

    fn db(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Database { path: self.path.to_owned(), source }
    }

    fn qos(&self, n: i64) -> Result<QoS, StoreError> {
        u8::try_from(n)
            .ok()
            .and_then(|n| QoS::try_from(n).ok())
            .ok_or_else(|| self.corrupt(format!("QoS {n}")))
    }

    fn topic(&self, t: String) -> Result<TopicName, StoreError> {
        TopicName::try_from(t).map_err(|e| self.corrupt(format!("topic: {e}")))
    }

    fn expiry(&self, s: i64) -> SessionExpiry {
        match s {
            -1 => SessionExpiry::Never,
            0 => SessionExpiry::OnDisconnect,
            s => SessionExpiry::After(Duration::from_secs(s.unsigned_abs())),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn message(
        &self,
        topic: String,
        payload: Vec<u8>,
        qos: i64,
        retain: bool,
        properties: Option<&str>,
        expires_at_ms: Option<i64>,
        origin: Option<String>,
    ) -> Result<Message, StoreError> {
        let mut m = Message::new(
            self.topic(topic)?,
            Bytes::from(payload),
            self.qos(qos)?,
            retain,
            Origin { session: None, client_id: origin.map(Arc::from), node: None },
        );
        m.properties = properties_from_json(properties).map_err(|e| self.corrupt(e))?;
        m.expires_at = expires_at_ms.map(|ms| ms_to_instant(ms, self.now, self.wall));
        Ok(m)
    }
}

/// Reads everything into `broker`, and deletes what expired while the broker was down.
pub(crate) fn recover(
    conn: &Connection,
    path: &std::path::Path,
    broker: &Broker,
) -> Result<Recovered, StoreError> {
    let r = Reader { path, now: Instant::now(), wall: SystemTime::now() };
    let mut out = Recovered::default();
    let db = |e| r.db(e);

    // Messages referenced by queues, shared between sessions as they were.
    let mut messages: HashMap<i64, Arc<Message>> = HashMap::new();
    {
        let mut stmt = conn
            .prepare(
                "SELECT id, topic, payload, qos, retain, properties, expires_at_ms, origin FROM messages",
            )
            .map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let m = r.message(
                row.get(1).map_err(db)?,
                row.get(2).map_err(db)?,
                row.get(3).map_err(db)?,
                row.get(4).map_err(db)?,
                row.get::<_, Option<String>>(5).map_err(db)?.as_deref(),
                row.get(6).map_err(db)?,
                row.get(7).map_err(db)?,
            )?;
            messages.insert(row.get(0).map_err(db)?, Arc::new(m));
        }
    }

    let mut sessions: HashMap<Arc<str>, RestoredSession> = HashMap::new();
    {
        let mut stmt =
            conn.prepare("SELECT client_id, expiry_s, disconnected_at_ms FROM sessions").map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let client_id: Arc<str> = Arc::from(row.get::<_, String>(0).map_err(db)?);
            let expiry = r.expiry(row.get(1).map_err(db)?);
            // A session that was connected when the broker stopped was disconnected then.
            let at: Option<i64> = row.get(2).map_err(db)?;
            let disconnected_at = at.map_or(r.now, |ms| ms_to_instant(ms, r.now, r.wall));
            sessions.insert(
                client_id.clone(),
                RestoredSession::new(SessionKey::mqtt(client_id), expiry, disconnected_at),
            );
        }
    }
    {
        let mut stmt = conn
            .prepare(
                "SELECT client_id, filter, qos, no_local, retain_as_published, retain_handling, subscription_id
                 FROM subscriptions",
            )
            .map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let client_id: String = row.get(0).map_err(db)?;
            let Some(s) = sessions.get_mut(client_id.as_str()) else { continue };
            let text: String = row.get(1).map_err(db)?;
            let filter =
                SubscriptionFilter::parse(&text).map_err(|e| r.corrupt(format!("filter {text:?}: {e}")))?;
            let retain_handling = match row.get::<_, i64>(5).map_err(db)? {
                0 => RetainHandling::SendAtSubscribe,
                1 => RetainHandling::SendIfNew,
                _ => RetainHandling::DoNotSend,
            };
            let options = SubscribeOptions {
                qos: r.qos(row.get(2).map_err(db)?)?,
                no_local: row.get(3).map_err(db)?,
                retain_as_published: row.get(4).map_err(db)?,
                retain_handling,
                subscription_id: row.get(6).map_err(db)?,
            };
            s.subscriptions.push((filter, options));
        }
    }
    let mut expired_entries = Vec::new();
    {
        let mut stmt = conn
            .prepare(
                "SELECT client_id, entry, message_id, qos, retain, subscription_ids, shared_group,
                        shared_subscription, packet_id, state
                 FROM queue ORDER BY client_id, entry",
            )
            .map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let client_id: String = row.get(0).map_err(db)?;
            let entry: i64 = row.get(1).map_err(db)?;
            let message_id: i64 = row.get(2).map_err(db)?;
            let Some(s) = sessions.get_mut(client_id.as_str()) else { continue };
            let message = messages
                .get(&message_id)
                .cloned()
                .ok_or_else(|| r.corrupt(format!("queue entry {entry} of {client_id:?} has no message")))?;
            let state: i64 = row.get(9).map_err(db)?;
            // Expired messages are dropped, unless PUBREL is owed (the message itself is delivered).
            if message.is_expired(r.now) && state != 2 {
                expired_entries.push((s.key.id.clone(), entry));
                continue;
            }
            let shared = match (
                row.get::<_, Option<String>>(6).map_err(db)?,
                row.get::<_, Option<String>>(7).map_err(db)?,
            ) {
                (Some(group), Some(subscription)) => {
                    Some(SharedRoute { group: group.into(), subscription: subscription.into() })
                }
                _ => None,
            };
            let ids = ids_from_json(row.get::<_, Option<String>>(5).map_err(db)?.as_deref())
                .map_err(|e| r.corrupt(e))?;
            let delivery = Delivery {
                message,
                qos: r.qos(row.get(3).map_err(db)?)?,
                retain: row.get(4).map_err(db)?,
                subscription_ids: ids.into_iter().collect(),
                shared,
            };
            let packet_id: Option<u16> = row.get(8).map_err(db)?;
            let inflight = match (state, packet_id) {
                (1, Some(id)) if delivery.qos == QoS::AtLeastOnce => Some((id, OutboundState::AwaitPubAck)),
                (1, Some(id)) => Some((id, OutboundState::AwaitPubRec)),
                (2, Some(id)) => Some((id, OutboundState::AwaitPubComp)),
                _ => None,
            };
            out.entries.push(((s.key.id.clone(), entry.unsigned_abs()), message_id));
            s.entries.push(RestoredEntry { delivery, entry: entry.unsigned_abs(), inflight });
            out.messages += 1;
        }
    }
    {
        let mut stmt = conn.prepare("SELECT client_id, packet_id, digest FROM incoming_qos2").map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let client_id: String = row.get(0).map_err(db)?;
            if let Some(s) = sessions.get_mut(client_id.as_str()) {
                let digest: Option<i64> = row.get(2).map_err(db)?;
                s.incoming_qos2.push((row.get(1).map_err(db)?, digest.map(|d| d as u64)));
            }
        }
    }

    // Wills first, so a session that expired while the broker was down can send its will.
    let mut wills = Vec::new();
    {
        let mut stmt = conn
            .prepare(
                "SELECT client_id, topic, payload, qos, retain, properties, expiry_interval, fire_at_ms, acl FROM wills",
            )
            .map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let client_id: Arc<str> = Arc::from(row.get::<_, String>(0).map_err(db)?);
            let message = r.message(
                row.get(1).map_err(db)?,
                row.get(2).map_err(db)?,
                row.get(3).map_err(db)?,
                row.get(4).map_err(db)?,
                row.get::<_, Option<String>>(5).map_err(db)?.as_deref(),
                None,
                Some(client_id.to_string()),
            )?;
            let source = acl_from_json(&row.get::<_, String>(8).map_err(db)?).map_err(|e| r.corrupt(e))?;
            let will = Will {
                message,
                expiry_interval: row.get(6).map_err(db)?,
                delay: Duration::ZERO,
                acl: Acl::compile(source.rules.as_deref(), source.username.as_deref(), &source.client_id),
            };
            let at = ms_to_instant(row.get(7).map_err(db)?, r.now, r.wall);
            wills.push((client_id, will, at));
        }
    }

    {
        let mut stmt = conn
            .prepare("SELECT topic, payload, qos, properties, expires_at_ms, origin FROM retained")
            .map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let m = r.message(
                row.get(0).map_err(db)?,
                row.get(1).map_err(db)?,
                row.get(2).map_err(db)?,
                true,
                row.get::<_, Option<String>>(3).map_err(db)?.as_deref(),
                row.get(4).map_err(db)?,
                row.get(5).map_err(db)?,
            )?;
            if !m.is_expired(r.now) {
                broker.restore_retained(&Arc::new(m));
                out.retained += 1;
            }
        }
    }
    conn.execute(
        "DELETE FROM retained WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?1",
        [super::record::system_to_ms(r.wall)],
    )
    .map_err(db)?;

    out.sessions = sessions.len();
    for (_, session) in sessions {
        broker.restore_session(session, r.now);
    }
    out.wills = wills.len();
    for (client_id, will, at) in wills {
        broker.restore_will(client_id, will, at);
    }
    // Delete expired entries now, so the store matches memory.
    for (client_id, entry) in expired_entries {
        conn.execute(
            "DELETE FROM queue WHERE client_id = ?1 AND entry = ?2",
            rusqlite::params![&*client_id, entry],
        )
        .map_err(db)?;
    }
    conn.execute("DELETE FROM messages WHERE id NOT IN (SELECT message_id FROM queue)", []).map_err(db)?;
    out.relay = recover_relay(conn, &r)?;
    Ok(out)
}

/// Reads the relay's offline queues (oldest first per address; what expired while the broker
/// was down is deleted) and alias bindings.
fn recover_relay(conn: &Connection, r: &Reader<'_>) -> Result<crate::relay::Restored, StoreError> {
    use mesgd_core::relay::EntryId;
    use mesgd_core::relay::store::Entry;
    let db = |e| r.db(e);
    let wall_now = super::record::system_to_ms(r.wall);
    conn.execute("DELETE FROM relay_queue WHERE expires_at_ms <= ?1", [wall_now]).map_err(db)?;
    let mut restored = crate::relay::Restored::default();
    {
        let mut stmt = conn
            .prepare("SELECT entry, addr, payload, expires_at_ms FROM relay_queue ORDER BY addr, entry")
            .map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let entry: i64 = row.get(0).map_err(db)?;
            let addr: String = row.get(1).map_err(db)?;
            let payload: Vec<u8> = row.get(2).map_err(db)?;
            let expires_at = ms_to_instant(row.get(3).map_err(db)?, r.now, r.wall);
            let entry =
                Entry { id: EntryId(entry.unsigned_abs()), payload: Bytes::from(payload), expires_at };
            match restored.queues.last_mut() {
                Some((last, entries)) if **last == *addr => entries.push(entry),
                _ => restored.queues.push((Arc::from(addr), vec![entry])),
            }
        }
    }
    {
        let mut stmt = conn.prepare("SELECT alias, key_digest FROM relay_aliases").map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            let alias: String = row.get(0).map_err(db)?;
            let digest: Vec<u8> = row.get(1).map_err(db)?;
            let digest: [u8; 32] = digest
                .try_into()
                .map_err(|_| r.corrupt(format!("alias binding {alias:?}: the key digest is not 32 bytes")))?;
            restored.aliases.push((Arc::from(alias), digest));
        }
    }
    Ok(restored)
}
