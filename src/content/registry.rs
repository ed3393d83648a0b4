//! The server's content connections: the shared [`Matcher`] of listener paths, each
//! connection's [`Outbox`], and delivery of one sender's message to every matching listener.
//!
//! A message is matched once, the ids collected, and each listener's outbox looked up after
//! the match (a matcher callback must be short and never block; the lookup takes a read lock
//! that a connection opening or closing can hold for a moment). The text is shared by every
//! listener: one allocation per message, whatever the fan-out.
//!
//! # Removal
//!
//! [`Registry::close`] removes the listener from the matcher (which returns only when no match
//! that could still see it is running), then from the outbox table, then closes its outbox,
//! which refuses every later push. A sender that matched the listener just before may still
//! reach its outbox, but only before `close` returns: nothing is queued after.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use mesgd_core::content::{Matcher, MatcherFull, Message, Path};
use mesgd_core::sync::{read, write};
use tokio_tungstenite::tungstenite::Utf8Bytes;

use super::outbox::{Outbox, Pushed, QueueLimits};
use super::stats::{self, ContentStats};

/// Above this many ids a connection's match buffer is given back after use, so that one huge
/// fan-out does not pin its memory for the connection's life.
const KEEP_SCRATCH: usize = 4096;

/// What a connection's messages reach, and whether it listens.
#[derive(Clone, Debug)]
pub(crate) enum Role {
    /// Registered on its URL path; its messages reach every listener they match.
    Listener(Path),
    /// Not registered (it receives nothing); each of its messages reaches only the matching
    /// listeners whose path one of the patterns given with it covers: a grant connection, whose
    /// patterns are re-checked before every message (`super::grant`).
    FilteredSender,
}

/// One open connection, as the registry knows it.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Its id in the matcher and the outbox table.
    pub(crate) id: u64,
    /// What it sends to and whether it listens.
    pub(crate) role: Role,
    /// What is waiting to be written to it.
    pub(crate) outbox: Arc<Outbox>,
}

/// Every content connection of a server.
#[derive(Debug)]
pub(crate) struct Registry {
    matcher: Matcher<u64>,
    outboxes: RwLock<HashMap<u64, Arc<Outbox>>>,
    next_id: AtomicU64,
    limits: QueueLimits,
    echo: bool,
    pub(crate) stats: ContentStats,
    /// With `[cluster]`: this node's paths published, messages to and from other nodes.
    pub(crate) cluster: super::cluster::Link,
}

impl Registry {
    /// An empty registry for at most `max_listeners` listeners.
    pub(crate) fn new(max_listeners: usize, limits: QueueLimits, echo: bool) -> Registry {
        Registry {
            matcher: Matcher::with_max_listeners(max_listeners),
            outboxes: RwLock::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            limits,
            echo,
            stats: ContentStats::default(),
            cluster: super::cluster::Link::default(),
        }
    }

    /// Registers a connection: its outbox, and for a listener its path.
    pub(crate) fn open(&self, role: Role) -> Result<Entry, MatcherFull> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let outbox = Arc::new(Outbox::new(self.limits));
        // The outbox first: a match that finds the id must find its outbox.
        write(&self.outboxes).insert(id, outbox.clone());
        if let Role::Listener(path) = &role {
            if let Err(full) = self.matcher.insert(id, path.clone()) {
                write(&self.outboxes).remove(&id);
                return Err(full);
            }
            self.cluster.opened(path);
        }
        stats::add(&self.stats.connections, 1);
        Ok(Entry { id, role, outbox })
    }

    /// Unregisters a connection. When this returns, nothing more is queued for it.
    pub(crate) fn close(&self, entry: &Entry) {
        if let Role::Listener(path) = &entry.role {
            self.matcher.remove(entry.id);
            self.cluster.closed(path);
        }
        write(&self.outboxes).remove(&entry.id);
        entry.outbox.close();
        stats::sub_one(&self.stats.connections);
    }

    /// Hands `text` (already scanned as `message`) from `from` to every listener it reaches;
    /// returns how many. A [`Role::FilteredSender`] reaches only listeners whose path one of
    /// `patterns` covers (none, without patterns). `scratch` is the sender's reusable buffer of
    /// matched ids.
    pub(crate) fn deliver(
        &self,
        from: &Entry,
        patterns: &[Path],
        message: &Message<'_>,
        text: &Utf8Bytes,
        scratch: &mut Vec<u64>,
    ) -> usize {
        scratch.clear();
        match &from.role {
            Role::Listener(_) => self.matcher.for_each_match(message, |id| scratch.push(id)),
            Role::FilteredSender if patterns.is_empty() => {}
            Role::FilteredSender => self.matcher.for_each_match_with_path(message, |id, path| {
                if patterns.iter().any(|p| p.covers(path)) {
                    scratch.push(id);
                }
            }),
        }
        stats::add(&self.stats.messages_in, 1);
        let skip = (!self.echo).then_some(from.id);
        let reached = self.hand_out(skip, text, scratch);
        self.cluster.forward(message, text, &from.role, patterns);
        reached
    }

    /// Hands a message from another node (`text` scanned as `message`) to every local
    /// listener it reaches (only those whose path one of `patterns` covers, when given);
    /// returns how many.
    pub(crate) fn deliver_remote(
        &self,
        message: &Message<'_>,
        text: &Utf8Bytes,
        patterns: Option<&[Path]>,
    ) -> usize {
        let mut scratch = Vec::new();
        match patterns {
            None => self.matcher.for_each_match(message, |id| scratch.push(id)),
            Some(patterns) => self.matcher.for_each_match_with_path(message, |id, path| {
                if patterns.iter().any(|p| p.covers(path)) {
                    scratch.push(id);
                }
            }),
        }
        self.hand_out(None, text, &mut scratch)
    }

    /// Pushes `text` to the outboxes of the matched ids (`skip`: the sender, without echo),
    /// counting; returns how many were reached.
    fn hand_out(&self, skip: Option<u64>, text: &Utf8Bytes, scratch: &mut Vec<u64>) -> usize {
        let (mut reached, mut dropped, mut overflowed) = (0u64, 0u64, 0u64);
        {
            let outboxes = read(&self.outboxes);
            for id in scratch.iter() {
                if Some(*id) == skip {
                    continue;
                }
                let Some(outbox) = outboxes.get(id) else { continue };
                reached += 1;
                match outbox.push(text) {
                    Pushed::Queued => {}
                    Pushed::Overflowed => {
                        dropped += 1;
                        overflowed += 1;
                    }
                    Pushed::Refused => dropped += 1,
                }
            }
        }
        if scratch.capacity() > KEEP_SCRATCH {
            *scratch = Vec::new();
        }
        stats::add(&self.stats.matches, reached);
        if dropped > 0 {
            stats::add(&self.stats.dropped, dropped);
        }
        if overflowed > 0 {
            stats::add(&self.stats.slow_disconnects, overflowed);
        }
        reached as usize
    }

    /// How many listeners are registered.
    pub(crate) fn listeners(&self) -> usize {
        self.matcher.len()
    }

    /// The route tester: the distinct listener paths `message` would reach, each with its
    /// number of listeners, sorted by path, at most `max` of them (and whether more were cut).
    /// Nothing is delivered and no counter moves.
    pub(crate) fn reached_paths(&self, message: &Message<'_>, max: usize) -> (Vec<(String, usize)>, bool) {
        let mut paths = std::collections::BTreeMap::<String, usize>::new();
        let mut cut = false;
        self.matcher.for_each_match_with_path(message, |_, path| {
            let text = path.to_string();
            if let Some(n) = paths.get_mut(&text) {
                *n += 1;
            } else if paths.len() < max {
                paths.insert(text, 1);
            } else {
                cut = true;
            }
        });
        (paths.into_iter().collect(), cut)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::AtomicBool;

    use super::*;

    fn registry(echo: bool) -> Registry {
        Registry::new(1000, QueueLimits { messages: 1_000_000, bytes: usize::MAX }, echo)
    }

    fn listener(r: &Registry, path: &str) -> Entry {
        r.open(Role::Listener(Path::parse(path).unwrap())).unwrap()
    }

    fn send(r: &Registry, from: &Entry, json: &str) -> usize {
        send_as(r, from, &[], json)
    }

    fn send_as(r: &Registry, from: &Entry, patterns: &[Path], json: &str) -> usize {
        let text = Utf8Bytes::from(json.to_owned());
        let message = Message::scan(text.as_bytes()).unwrap();
        r.deliver(from, patterns, &message, &text, &mut Vec::new())
    }

    async fn queued(e: &Entry) -> Vec<String> {
        let mut batch = VecDeque::new();
        if e.outbox.push(&Utf8Bytes::from_static("<end>")) != Pushed::Queued {
            return vec![];
        }
        e.outbox.take(&mut batch).await.unwrap();
        batch.iter().map(|t| t.to_string()).filter(|t| t != "<end>").collect()
    }

    #[tokio::test]
    async fn delivers_by_content_and_not_back_to_the_sender() {
        let r = registry(false);
        let chat = listener(&r, "/kind=chat");
        let lobby = listener(&r, "/kind=chat/room=lobby");
        let other = listener(&r, "/kind=news");
        assert_eq!(send(&r, &chat, r#"{"kind":"chat","room":"lobby"}"#), 1);
        assert_eq!(queued(&chat).await, Vec::<String>::new());
        assert_eq!(queued(&lobby).await, [r#"{"kind":"chat","room":"lobby"}"#]);
        assert_eq!(queued(&other).await, Vec::<String>::new());
        assert_eq!(ContentStats::get(&r.stats.matches), 1);
    }

    #[tokio::test]
    async fn the_route_tester_lists_each_reached_path_once_with_its_listeners_and_delivers_nothing() {
        let r = registry(false);
        let (a, b) = (listener(&r, "/kind=chat/room=lobby"), listener(&r, "/kind=chat/room=lobby"));
        let any = listener(&r, "/kind=chat");
        let _news = listener(&r, "/kind=news");
        let message = Message::scan(br#"{"kind":"chat","room":"lobby","text":"hi"}"#).unwrap();
        let (paths, cut) = r.reached_paths(&message, 10);
        assert_eq!(paths, [("/kind=chat".to_owned(), 1), ("/kind=chat/room=lobby".to_owned(), 2)]);
        assert!(!cut);
        let (paths, cut) = r.reached_paths(&message, 1);
        assert_eq!(paths.len(), 1, "capped at the limit");
        assert!(cut, "and says so");
        for e in [&a, &b, &any] {
            assert_eq!(queued(e).await, Vec::<String>::new(), "nothing is delivered");
        }
        assert_eq!(ContentStats::get(&r.stats.messages_in), 0, "no counter moves");
        assert_eq!(ContentStats::get(&r.stats.matches), 0);
    }

    #[tokio::test]
    async fn echo_delivers_to_the_sender_too() {
        let r = registry(true);
        let chat = listener(&r, "/kind=chat");
        assert_eq!(send(&r, &chat, r#"{"kind":"chat"}"#), 1);
        assert_eq!(queued(&chat).await, [r#"{"kind":"chat"}"#]);
    }

    #[tokio::test]
    async fn a_filtered_sender_reaches_only_covered_listeners_and_does_not_listen() {
        let r = registry(false);
        let lobby = listener(&r, "/room=lobby/from=ann");
        let any_room = listener(&r, "/room=*");
        let grant = [Path::parse("/room=lobby").unwrap()];
        let sender = r.open(Role::FilteredSender).unwrap();
        assert_eq!(r.listeners(), 2);
        assert_eq!(send_as(&r, &sender, &grant, r#"{"room":"lobby","from":"ann"}"#), 1);
        assert_eq!(queued(&lobby).await.len(), 1);
        assert_eq!(queued(&any_room).await.len(), 0, "/room=lobby does not cover /room=*");
        assert_eq!(send_as(&r, &sender, &[], r#"{"room":"lobby","from":"ann"}"#), 0, "no pattern, no reach");
    }

    #[tokio::test]
    async fn an_overflowing_listener_is_counted_and_dropped() {
        let r = Registry::new(10, QueueLimits { messages: 2, bytes: usize::MAX }, false);
        let sender = listener(&r, "/never");
        let slow = listener(&r, "/k");
        for _ in 0..4 {
            send(&r, &sender, r#"{"k":1}"#);
        }
        assert!(slow.outbox.overflowed());
        assert_eq!(ContentStats::get(&r.stats.slow_disconnects), 1);
        assert_eq!(ContentStats::get(&r.stats.dropped), 2);
    }

    #[test]
    fn closing_unregisters() {
        let r = registry(false);
        let a = listener(&r, "/k");
        let b = listener(&r, "/k");
        r.close(&a);
        assert_eq!(r.listeners(), 1);
        assert_eq!(send(&r, &b, r#"{"k":1}"#), 0);
        assert_eq!(ContentStats::get(&r.stats.connections), 1);
    }

    /// The removal guarantee under a concurrent sender, with an ordered marker: every message
    /// carries a sequence number taken before it is delivered, and a consumer drains the
    /// victim's queue as its connection would; no number taken after `close` returned may
    /// ever reach the consumer.
    #[test]
    fn nothing_is_queued_for_a_listener_after_close_returns() {
        for _round in 0..20 {
            let r = Arc::new(registry(false));
            let sender = Arc::new(listener(&r, "/sender"));
            let victim = listener(&r, "/k");
            let seq = Arc::new(AtomicU64::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let worker = {
                let (r, sender, seq, stop) = (r.clone(), sender.clone(), seq.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut scratch = Vec::new();
                    while !stop.load(Ordering::Acquire) {
                        let n = seq.fetch_add(1, Ordering::SeqCst);
                        let text = Utf8Bytes::from(format!(r#"{{"k":{n}}}"#));
                        let message = Message::scan(text.as_bytes()).unwrap();
                        r.deliver(&sender, &[], &message, &text, &mut scratch);
                    }
                })
            };
            let outbox = victim.outbox.clone();
            let taken = Arc::new(AtomicU64::new(0));
            let consumed = taken.clone();
            let consumer = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
                let mut seen = Vec::new();
                let mut batch = VecDeque::new();
                while rt.block_on(outbox.take(&mut batch)).is_ok() {
                    for t in batch.drain(..) {
                        let n: u64 =
                            t.as_str().trim_start_matches(r#"{"k":"#).trim_end_matches('}').parse().unwrap();
                        seen.push(n);
                    }
                    consumed.store(seen.len() as u64, Ordering::Release);
                }
                seen
            });
            while taken.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
            r.close(&victim);
            let after = seq.load(Ordering::SeqCst);
            while seq.load(Ordering::SeqCst) < after + 200 {
                std::thread::yield_now();
            }
            stop.store(true, Ordering::Release);
            worker.join().unwrap();
            let seen = consumer.join().unwrap();
            assert!(seen.windows(2).all(|w| w[0] < w[1]), "one sender's messages arrive in order");
            let late: Vec<u64> = seen.iter().copied().filter(|n| *n >= after).collect();
            assert!(late.is_empty(), "delivered after close returned: {late:?} (close at {after})");
        }
    }
}
