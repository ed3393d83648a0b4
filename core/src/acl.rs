//! ACL rules and their evaluation: which topics a client may read (subscribe to and receive)
//! and write (publish to).
//!
//! A client's ACL is an ordered list of [`Rule`]s, each a topic-filter pattern and a
//! [`Permission`]. The pattern may contain `%u` (the username) and `%c` (the client id). An
//! [`Acl`] is a rule list compiled once and shared by every client with the same list, bound to
//! one client's username and client id: `%u` and `%c` are substituted when a rule is matched,
//! and the decisions are those of substituting them into the text of every pattern.
//!
//! # Semantics
//!
//! - A rule *matches an access* (read or write) to a topic when its pattern matches the topic
//!   and its permission is `deny` or names that access: `read` for subscribe and delivery,
//!   `write` for publish, `readwrite` (aliases `rw`, `all`) for both.
//! - Rules are checked in order and the first that matches the access decides: `deny` refuses,
//!   anything else allows. No matching rule means deny.
//! - No rule list at all (`None`) means unrestricted; an empty list denies everything.
//!
//! So `[{a/#, write}, {#, read}]` lets a client read `a/x` (the write rule does not match a
//! read), and `[{test/x, deny}, {#, all}]` hides `test/x` and nothing else.
//!
//! Patterns match with MQTT filter semantics, including the `$` rule: a pattern that starts with
//! a wildcard does not match a topic that starts with `$`, so `#` does not grant `$SYS/...`. A
//! rule must name `$SYS/...` (or another `$` topic) explicitly, e.g. `{$SYS/#, read}`.
//!
//! # Substitution never widens a rule
//!
//! `%u` and `%c` are replaced by the client's values wherever they occur in the pattern, in a
//! single pass (a value that itself contains `%u` is not expanded again). If a value that the
//! pattern uses is empty, is missing (`%u` for a client without a username), or contains `/`,
//! `+`, `#` or NUL, the rule matches nothing: a username `#` must not turn `devices/%u/#` into a
//! rule for every device. Likewise, a rule whose pattern does not start with `$` matches nothing
//! if substitution makes it start with `$` (a user named `$SYS` and the rule `%u/#`): values
//! cannot move a rule into the `$` topics. A pattern that is not a valid filter after
//! substitution also matches nothing (fail closed); providers reject such patterns up front with
//! [`Rule::validate`].

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::topic::{MAX_TOPIC_LEN, TopicError, TopicFilter, TopicName};

/// What a rule grants (or, for [`Permission::Deny`], refuses) on the topics its pattern matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Subscribe and receive.
    Read,
    /// Publish.
    Write,
    /// Both read and write.
    #[serde(alias = "rw", alias = "all")]
    ReadWrite,
    /// Neither: the first matching `deny` rule hides the topic.
    Deny,
}

impl Permission {
    /// Parses a permission name: `read`, `write`, `readwrite` (or `rw`, `all`) or `deny`, in
    /// any ASCII case.
    pub fn parse(s: &str) -> Result<Permission, AclError> {
        const NAMES: [(&str, Permission); 6] = [
            ("read", Permission::Read),
            ("write", Permission::Write),
            ("readwrite", Permission::ReadWrite),
            ("rw", Permission::ReadWrite),
            ("all", Permission::ReadWrite),
            ("deny", Permission::Deny),
        ];
        NAMES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(s))
            .map(|&(_, permission)| permission)
            .ok_or_else(|| AclError::UnknownPermission(excerpt(s)))
    }

    /// The canonical name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::ReadWrite => "readwrite",
            Permission::Deny => "deny",
        }
    }

    /// Whether a matching rule with this permission decides a check of `access` (it allows it,
    /// or it is a `deny`); otherwise the rule is skipped for that access.
    fn decides(self, access: Access) -> bool {
        matches!(
            (self, access),
            (Permission::Deny | Permission::ReadWrite, _)
                | (Permission::Read, Access::Read)
                | (Permission::Write, Access::Write)
        )
    }
}

impl FromStr for Permission {
    type Err = AclError;

    fn from_str(s: &str) -> Result<Self, AclError> {
        Permission::parse(s)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One ACL rule: a topic filter pattern (which may contain `%u` and `%c`) and a permission.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A topic filter; `%u` is replaced by the username and `%c` by the client id.
    pub pattern: String,
    /// What the rule grants or refuses.
    pub permission: Permission,
}

impl Rule {
    /// A rule.
    pub fn new(pattern: impl Into<String>, permission: Permission) -> Self {
        Rule { pattern: pattern.into(), permission }
    }

    /// Checks that the pattern is a valid topic filter once `%u` and `%c` are replaced by a
    /// plain level. Providers call this when they store or receive rules, so that a typo is
    /// reported instead of silently matching nothing.
    pub fn validate(&self) -> Result<(), AclError> {
        let probe = substitute(&self.pattern, Some("u"), "c").unwrap_or(Cow::Borrowed(&self.pattern));
        match TopicFilter::try_from(&*probe) {
            Ok(_) => Ok(()),
            Err(source) => Err(AclError::InvalidPattern { pattern: excerpt(&self.pattern), source }),
        }
    }
}

/// Why a rule or a permission name is invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AclError {
    /// A permission name that is not one of the known names (the text is cut to 64 bytes).
    #[error("unknown permission {0:?}: expected read, write, readwrite (or rw, all) or deny")]
    UnknownPermission(String),
    /// A pattern that is not a valid topic filter (the text is cut to 64 bytes).
    #[error("ACL pattern {pattern:?} is not a valid topic filter: {source}")]
    InvalidPattern {
        /// The pattern, or its beginning.
        pattern: String,
        /// What is wrong with it.
        #[source]
        source: TopicError,
    },
}

/// The beginning of untrusted text for an error message, so that a huge input does not become
/// a huge log line.
fn excerpt(s: &str) -> String {
    const LIMIT: usize = 64;
    if s.len() <= LIMIT {
        return s.to_string();
    }
    let mut end = LIMIT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// An access to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Subscribe, and receive a message (delivery, retained messages).
    Read,
    /// Publish (wills included).
    Write,
}

/// A client's ACL: a rule set compiled once and shared by every client whose provider gave the
/// same rules, bound to this client's username and client id, which `%u` and `%c` stand for
/// when a rule is matched.
///
/// Cloning is cheap (one `Arc`), and so is a client: the compiled rules live in a cache keyed by
/// the rule list, so ten thousand clients with the same ten rules hold one compiled set, and
/// each holds only its binding (the shared set, the two values and a stamp). The compiled form
/// keeps, per access, only the rules that can decide it, so [`Acl::allows`] scans no rule it
/// could skip anyway.
#[derive(Clone)]
pub struct Acl(
    /// `None` = unrestricted.
    Option<Arc<Bound>>,
);

/// The inputs an [`Acl`] was compiled from, as stored with a pending will so that its ACL
/// survives a restart and can be sent to another node (see [`Acl::source`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclSource {
    /// The rules (`None` = unrestricted).
    pub rules: Option<Vec<Rule>>,
    /// The username `%u` stood for.
    pub username: Option<String>,
    /// The client id `%c` stood for.
    pub client_id: String,
}

/// Source of [`Acl::stamp`] values; 0 is never handed out.
static NEXT_STAMP: AtomicU64 = AtomicU64::new(1);

/// One client's ACL: the shared compiled rules and the values they are matched with.
struct Bound {
    rules: Arc<Compiled>,
    username: Option<Arc<str>>,
    client_id: Arc<str>,
    /// Unique per binding, so that a decision cached under this ACL is never mistaken for one
    /// made under another, not even under the same shared rules for another client (see
    /// [`Acl::stamp`]).
    stamp: u64,
    /// What the values allow: [`Values`] bits.
    values: u8,
}

/// Bits of [`Bound::values`], worked out once per binding so that a match looks at no value's
/// characters but those it compares.
struct Values;

impl Values {
    /// The username is present, non-empty and free of `/ + #` and NUL: `%u` may stand for it.
    const USER_SAFE: u8 = 1;
    /// The same for the client id and `%c`.
    const CLIENT_SAFE: u8 = 2;
    /// The username starts with `$`: a pattern that starts with `%u` matches nothing.
    const USER_DOLLAR: u8 = 4;
    /// The client id starts with `$`.
    const CLIENT_DOLLAR: u8 = 8;

    fn of(username: Option<&str>, client_id: &str) -> u8 {
        let mut bits = 0;
        if username.is_some_and(safe_value) {
            bits |= Values::USER_SAFE;
        }
        if safe_value(client_id) {
            bits |= Values::CLIENT_SAFE;
        }
        if username.is_some_and(|u| u.starts_with('$')) {
            bits |= Values::USER_DOLLAR;
        }
        if client_id.starts_with('$') {
            bits |= Values::CLIENT_DOLLAR;
        }
        bits
    }
}

/// Whether a value may stand for `%u` or `%c`: it cannot change the pattern's structure.
fn safe_value(value: &str) -> bool {
    !value.is_empty() && !value.contains(['/', '+', '#', '\0'])
}

/// A rule list compiled once for every client that has it.
struct Compiled {
    /// The rules as given: the key of [`SHARED`] and what a stored ACL is written from.
    rules: Arc<[Rule]>,
    /// The rules that decide reads (read, readwrite, deny), in order.
    read: Box<[Entry]>,
    /// The rules that decide writes (write, readwrite, deny), in order.
    write: Box<[Entry]>,
    /// The most levels of any read rule (for [`Acl::allows_subscribe`]; substitution does not
    /// change a level count).
    max_levels: usize,
    /// The levels of read rules without variables that could collide with a fresh level of
    /// [`Acl::allows_subscribe`] (those starting with `x`; usually none).
    x_levels: Box<[Box<str>]>,
}

/// The compiled rule sets that some client still holds, by rule list. An entry leaves when its
/// last client's ACL is dropped (see `Drop for Compiled`), so the cache holds no more sets than
/// are in use.
static SHARED: LazyLock<Mutex<SharedSets>> = LazyLock::new(Mutex::default);

/// The rule sets in use, by rule list.
type SharedSets = HashMap<Arc<[Rule]>, Weak<Compiled>>;

fn shared_sets() -> MutexGuard<'static, SharedSets> {
    SHARED.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Compiled {
    /// The shared compilation of `rules`: the one in use if there is one, else a new one.
    fn shared(rules: &[Rule]) -> Arc<Compiled> {
        // Compiled under the lock, so that a rule list is compiled once however many clients
        // log in with it at the same moment. No `Arc<Compiled>` is dropped while the lock is
        // held (its `Drop` takes the lock).
        let mut sets = shared_sets();
        if let Some(compiled) = sets.get(rules).and_then(Weak::upgrade) {
            return compiled;
        }
        let compiled = Arc::new(Compiled::new(rules));
        sets.insert(Arc::clone(&compiled.rules), Arc::downgrade(&compiled));
        compiled
    }

    fn new(rules: &[Rule]) -> Compiled {
        let mut read = Vec::new();
        let mut write = Vec::new();
        for rule in rules {
            let Some(pattern) = Pattern::compile(&rule.pattern) else { continue };
            let entry = Entry { pattern, allow: rule.permission != Permission::Deny };
            if rule.permission.decides(Access::Read) {
                read.push(entry.clone());
            }
            if rule.permission.decides(Access::Write) {
                write.push(entry);
            }
        }
        Compiled::of_entries(Arc::from(rules), read.into(), write.into())
    }

    fn of_entries(rules: Arc<[Rule]>, read: Box<[Entry]>, write: Box<[Entry]>) -> Compiled {
        let max_levels = read.iter().map(Entry::level_count).max().unwrap_or(0);
        let x_levels = read
            .iter()
            .filter_map(|e| match &e.pattern {
                Pattern::Filter(filter) => Some(filter.levels()),
                Pattern::Template(_) => None,
            })
            .flatten()
            .filter(|l| l.starts_with('x'))
            .map(Box::from)
            .collect();
        Compiled { rules, read, write, max_levels, x_levels }
    }
}

impl Drop for Compiled {
    fn drop(&mut self) {
        let mut sets = shared_sets();
        // Another client may have compiled the same rules again since the last reference went
        // (the dead entry then was replaced by a live one): only a dead entry is removed.
        if sets.get(&*self.rules).is_some_and(|set| set.strong_count() == 0) {
            sets.remove(&*self.rules);
        }
    }
}

#[derive(Clone)]
struct Entry {
    pattern: Pattern,
    allow: bool,
}

/// A compiled rule pattern.
#[derive(Clone)]
enum Pattern {
    /// Without `%u` and `%c`: the same filter for every client.
    Filter(TopicFilter),
    /// With `%u` or `%c`: substituted when it is matched.
    Template(Arc<Template>),
}

/// A pattern with `%u` or `%c`, by levels. Its structure is a valid filter whatever safe values
/// stand in (a value has no `/`, `+`, `#`), so the only thing a binding can change besides the
/// text is its length, checked against [`MAX_TOPIC_LEN`] at each match.
struct Template {
    /// The pattern's text before its first variable or wildcard: every topic the pattern
    /// matches starts with it, so most topics are told apart without looking further.
    prefix: Box<str>,
    levels: Box<[Level]>,
    /// The pattern's length without its `%u` and `%c`.
    fixed_len: usize,
    /// How often `%u` occurs.
    users: usize,
    /// How often `%c` occurs.
    clients: usize,
    /// The variable the pattern starts with, if it starts with one: its value must not make the
    /// pattern start with `$`.
    leading: Option<Var>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Var {
    User,
    Client,
}

/// One level of a [`Template`].
enum Level {
    Plus,
    Hash,
    /// A level that must equal the concatenation of these pieces.
    Exact(Box<[Piece]>),
}

/// Text or a variable, as [`pieces`] splits a pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(Box<str>),
    Var(Var),
}

impl Pattern {
    /// Compiles a rule's pattern, or `None` if it is not a valid filter once `%u` and `%c` are
    /// substituted, whatever they stand for (then the rule matches nothing for every client).
    fn compile(pattern: &str) -> Option<Pattern> {
        let pieces = pieces(pattern);
        if !pieces.iter().any(|p| matches!(p, Piece::Var(_))) {
            return TopicFilter::try_from(pattern).ok().map(Pattern::Filter);
        }
        // A plain level for each variable: valid exactly when every substitution of safe values
        // is, up to its length (a value is at least as long as the probe).
        TopicFilter::try_from(&*substitute(pattern, Some("u"), "c")?).ok()?;
        let count = |var| pieces.iter().filter(|p| **p == Piece::Var(var)).count();
        let leading = match pieces.first() {
            Some(Piece::Var(var)) => Some(*var),
            _ => None,
        };
        let mut levels = Vec::new();
        let mut level: Vec<Piece> = Vec::new();
        let mut close = |level: Vec<Piece>| {
            levels.push(match level.as_slice() {
                [Piece::Text(t)] if &**t == "+" => Level::Plus,
                [Piece::Text(t)] if &**t == "#" => Level::Hash,
                _ => Level::Exact(level.into()),
            });
        };
        for piece in &pieces {
            match piece {
                Piece::Var(_) => level.push(piece.clone()),
                Piece::Text(text) => {
                    let mut parts = text.split('/');
                    let first = parts.next().unwrap_or_default();
                    if !first.is_empty() {
                        level.push(Piece::Text(first.into()));
                    }
                    for part in parts {
                        close(std::mem::take(&mut level));
                        if !part.is_empty() {
                            level.push(Piece::Text(part.into()));
                        }
                    }
                }
            }
        }
        close(level);
        let prefix = match pieces.first() {
            Some(Piece::Text(text)) => &text[..text.find(['+', '#']).unwrap_or(text.len())],
            _ => "",
        };
        Some(Pattern::Template(Arc::new(Template {
            prefix: prefix.into(),
            levels: levels.into(),
            fixed_len: pieces.iter().map(|p| if let Piece::Text(t) = p { t.len() } else { 0 }).sum(),
            users: count(Var::User),
            clients: count(Var::Client),
            leading,
        })))
    }
}

impl Template {
    /// Whether this client's values leave the rule in force: each value the pattern uses is
    /// safe, the pattern does not become a `$` pattern, and it stays within the length limit.
    fn in_force(&self, bound: &Bound) -> bool {
        let has = |bit| bound.values & bit != 0;
        let lead = |var| self.leading == Some(var);
        let user_len = bound.username.as_deref().map_or(0, str::len);
        (self.users == 0 || has(Values::USER_SAFE))
            && (self.clients == 0 || has(Values::CLIENT_SAFE))
            && !(lead(Var::User) && has(Values::USER_DOLLAR))
            && !(lead(Var::Client) && has(Values::CLIENT_DOLLAR))
            && self.fixed_len + self.users * user_len + self.clients * bound.client_id.len() <= MAX_TOPIC_LEN
    }

    /// [`TopicFilter::matches_str`] of the substituted pattern, without substituting.
    fn matches(&self, bound: &Bound, topic: &str) -> bool {
        if !topic.starts_with(&*self.prefix) || !self.in_force(bound) {
            return false;
        }
        // A value never starts with a wildcard, so only the pattern's own first level counts.
        if topic.starts_with('$') && matches!(self.levels.first(), Some(Level::Plus | Level::Hash)) {
            return false;
        }
        let mut topic_levels = topic.split('/');
        for level in self.levels.iter() {
            match level {
                Level::Hash => return true,
                Level::Plus => {
                    if topic_levels.next().is_none() {
                        return false;
                    }
                }
                Level::Exact(pieces) => match topic_levels.next() {
                    Some(t) if bound.spells(pieces, t) => {}
                    _ => return false,
                },
            }
        }
        topic_levels.next().is_none()
    }

    /// Appends the substituted filter to `text`, for the checks that read a rule's levels; false
    /// (and nothing appended) when the rule is not in force for this client. What it appends is
    /// a valid filter: the probe substitution was, and the length is checked.
    fn resolve_into(&self, bound: &Bound, text: &mut String) -> bool {
        if !self.in_force(bound) {
            return false;
        }
        for (i, level) in self.levels.iter().enumerate() {
            if i > 0 {
                text.push('/');
            }
            match level {
                Level::Plus => text.push('+'),
                Level::Hash => text.push('#'),
                Level::Exact(pieces) => pieces.iter().for_each(|p| text.push_str(bound.value_of(p))),
            }
        }
        true
    }
}

impl Bound {
    /// The text a piece stands for in this client's ACL (only called for rules in force).
    fn value_of<'a>(&'a self, piece: &'a Piece) -> &'a str {
        match piece {
            Piece::Text(text) => text,
            Piece::Var(Var::User) => self.username.as_deref().unwrap_or_default(),
            Piece::Var(Var::Client) => &self.client_id,
        }
    }

    /// Whether `level` is the concatenation of `pieces`.
    fn spells(&self, pieces: &[Piece], level: &str) -> bool {
        let mut rest = level;
        for piece in pieces {
            match rest.strip_prefix(self.value_of(piece)) {
                Some(after) => rest = after,
                None => return false,
            }
        }
        rest.is_empty()
    }

    /// The text of a rule's filter for this client, substituted into `buf` if need be, or
    /// `None` if the rule matches nothing for this client: the form that the subscribe checks
    /// reason about.
    fn text_of<'b>(&self, entry: &'b Entry, buf: &'b mut String) -> Option<&'b str> {
        match &entry.pattern {
            Pattern::Filter(filter) => Some(filter.as_str()),
            Pattern::Template(template) => {
                buf.clear();
                if template.resolve_into(self, buf) { Some(buf.as_str()) } else { None }
            }
        }
    }

    /// The levels of this client's substituted read rules that start with `x` (see
    /// [`Compiled::x_levels`]); usually none, and then nothing is allocated.
    fn template_x_levels(&self) -> Vec<String> {
        let mut out = Vec::new();
        for entry in self.rules.read.iter() {
            let Pattern::Template(template) = &entry.pattern else { continue };
            if !template.in_force(self) {
                continue;
            }
            for level in template.levels.iter() {
                let Level::Exact(pieces) = level else { continue };
                if pieces.first().is_some_and(|p| self.value_of(p).starts_with('x')) {
                    out.push(pieces.iter().map(|p| self.value_of(p)).collect());
                }
            }
        }
        out
    }

    /// The first-match rule over the text of a topic, as [`Acl::allows`] reads.
    fn first_match_allows(&self, topic: &str) -> bool {
        self.rules.read.iter().find(|entry| entry.matches(self, topic)).is_some_and(|entry| entry.allow)
    }
}

impl Entry {
    fn level_count(&self) -> usize {
        match &self.pattern {
            Pattern::Filter(filter) => filter.level_count(),
            Pattern::Template(template) => template.levels.len(),
        }
    }

    fn matches(&self, bound: &Bound, topic: &str) -> bool {
        match &self.pattern {
            Pattern::Filter(filter) => filter.matches_str(topic),
            Pattern::Template(template) => template.matches(bound, topic),
        }
    }
}

impl Acl {
    /// The ACL of a client with no rule list: everything is allowed.
    pub fn unrestricted() -> Acl {
        Acl(None)
    }

    /// What this ACL was compiled from (`None` when it is unrestricted), to be stored or sent:
    /// it copies the rules.
    pub fn source(&self) -> Option<AclSource> {
        self.0.as_ref().map(|bound| AclSource {
            rules: Some(bound.rules.rules.to_vec()),
            username: bound.username.as_deref().map(str::to_owned),
            client_id: bound.client_id.to_string(),
        })
    }

    /// Whether both ACLs were compiled from the same rules, username and client id (two
    /// unrestricted ACLs have no source and are not the same source). Copies nothing.
    pub fn same_source(&self, other: &Acl) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => {
                (Arc::ptr_eq(&a.rules, &b.rules) || a.rules.rules == b.rules.rules)
                    && a.username == b.username
                    && a.client_id == b.client_id
            }
            _ => false,
        }
    }

    /// Compiles `rules` for one client (see [`Acl::for_client`]), copying the two values.
    pub fn compile(rules: Option<&[Rule]>, username: Option<&str>, client_id: &str) -> Acl {
        match rules {
            None => Acl::unrestricted(),
            Some(rules) => Acl::for_client(Some(rules), username.map(Arc::from), Arc::from(client_id)),
        }
    }

    /// The ACL of one client: `rules` compiled once for every client that has them (parsed and
    /// kept in a shared cache while some client uses them), bound to the username and client id
    /// that `%u` and `%c` stand for. `None` is unrestricted; `Some(&[])` denies everything. A
    /// rule whose substitution or pattern is invalid matches nothing (see the
    /// [module documentation](self)).
    pub fn for_client(rules: Option<&[Rule]>, username: Option<Arc<str>>, client_id: Arc<str>) -> Acl {
        // Unrestricted needs no binding: nothing is matched.
        let Some(rules) = rules else { return Acl::unrestricted() };
        let values = Values::of(username.as_deref(), &client_id);
        Acl(Some(Arc::new(Bound {
            rules: Compiled::shared(rules),
            username,
            client_id,
            stamp: NEXT_STAMP.fetch_add(1, Ordering::Relaxed),
            values,
        })))
    }

    /// Whether this ACL allows everything (the client had no rule list).
    pub fn is_unrestricted(&self) -> bool {
        self.0.is_none()
    }

    /// Identifies this ACL: equal stamps mean the same compiled rules bound to the same values.
    /// A decision cached with a stamp (see [`Acl::allows_every`]) holds while the session's ACL
    /// has that stamp. Stamps are never reused, and each [`Acl::compile`] gets its own, also
    /// when the rules are shared with other clients (a decision under `%u` = alice says nothing
    /// about bob); the unrestricted ACL, which needs no caching, has 0.
    pub fn stamp(&self) -> u64 {
        self.0.as_ref().map_or(0, |bound| bound.stamp)
    }

    /// Whether **every** topic that `filter` matches is readable, so that messages arriving
    /// through a subscription to `filter` need no check of their own. May answer false when the
    /// answer is true (the caller then checks each message); never the reverse.
    ///
    /// Why a true answer is right: let *C* be the first read rule whose pattern covers the whole
    /// filter. Every read rule before *C* that shares a topic with the filter allows (else the
    /// answer is false). For a topic *T* of the filter, the first rule matching *T* is either one
    /// of those earlier rules, which allows, or *C*, which allows.
    pub fn allows_every(&self, filter: &TopicFilter) -> bool {
        let Some(bound) = &self.0 else { return true };
        if let Some(topic) = filter.to_topic_name() {
            return self.allows(Access::Read, &topic);
        }
        let mut text = String::new();
        for entry in bound.rules.read.iter() {
            let Some(pattern) = bound.text_of(entry, &mut text) else { continue };
            if covers(pattern, filter) {
                return entry.allow;
            }
            if !entry.allow && may_intersect(pattern, filter) {
                return false;
            }
        }
        false
    }

    /// Whether `access` to `topic` is allowed: the check on the publish and delivery path.
    /// Synchronous and allocation-free; `%u` and `%c` are compared in place.
    pub fn allows(&self, access: Access, topic: &TopicName) -> bool {
        let Some(bound) = &self.0 else { return true };
        let entries = match access {
            Access::Read => &bound.rules.read,
            Access::Write => &bound.rules.write,
        };
        let topic = topic.as_str();
        entries.iter().find(|entry| entry.matches(bound, topic)).is_some_and(|entry| entry.allow)
    }

    /// Whether a subscription to `filter` may be granted: true exactly when at least one topic
    /// that `filter` matches is readable under these rules. For a filter without wildcards this
    /// is `allows(Access::Read, topic)`.
    ///
    /// # Why the answer is exact
    ///
    /// Call a level *free* in a candidate topic when neither the filter nor the rule under
    /// consideration has a literal at that position, and let φ be a level that equals no literal
    /// of any pattern and does not start with `$`. For an allow rule *R* and a length *L*, the
    /// *generic topic* has, at each position, the filter's literal if it has one, else *R*'s
    /// literal if it has one, else φ.
    ///
    /// 1. *Generic topics are the least matched.* Let *T* be any topic of length *L* matched by
    ///    the filter and by *R*; the generic topic *G* agrees with *T* at every non-free
    ///    position. If a pattern *P* matches *G*, then at each free position *P* has `+` or is
    ///    inside its `#` (φ equals no literal), which also matches *T*'s level; the lengths are
    ///    equal; and if *P* starts with a wildcard, *G*'s first level does not start with `$`,
    ///    and neither does *T*'s: either that level is free, so the filter starts with a wildcard
    ///    and matches *T*, or it is a literal that *G* and *T* share. So *P* matches *T* too.
    /// 2. *A readable topic yields an allowed generic topic.* Let *T* be matched by the filter
    ///    and allowed, and let *R* be the first read rule that matches *T* (an allow rule). No
    ///    rule before *R* matches *T*, so by (1) none matches *G*, while *R* does; so *G* is
    ///    allowed, and the filter matches *G* (same argument as for *R*).
    /// 3. *Lengths are bounded.* With *M* the most levels among the filter and the rules, all
    ///    generic topics longer than *M* + 1 behave like the one of length *M* + 1: a pattern
    ///    without `#` matches neither, and one with `#` looks only at positions below *M*, where
    ///    both have φ or the same literal.
    ///
    /// Hence: some topic is readable ⇔ some generic topic, for some allow rule and some length
    /// up to *M* + 1, is matched by the filter and allowed by [`Acl::allows`]'s first-match
    /// rule. The check tries exactly those, skipping lengths that the filter or the rule cannot
    /// have, and the one-level topic whose level is empty (it would be the empty string, which
    /// is not a topic).
    ///
    /// Cost: for each allow rule, one to three candidate lengths (the range where the filter's
    /// and the rule's lengths overlap, capped at *M* + 1), and for each candidate one pass of the
    /// filter and of each rule over it; a rule stops reading the candidate where the rule ends,
    /// so this is O(allow rules × (filter length + total rule length)): microseconds for 50
    /// rules, and bounded for a filter of thousands of levels. φ is short (`x0`, or `x1` if
    /// that is taken, ...), so a candidate is at most the filter and the rule laid over each
    /// other. The 65,535-byte limit of topic names is not taken into account; only filters and
    /// rules near that limit could tell the difference.
    pub fn allows_subscribe(&self, filter: &TopicFilter) -> bool {
        let Some(bound) = &self.0 else { return true };
        if let Some(topic) = filter.to_topic_name() {
            return self.allows(Access::Read, &topic);
        }
        let compiled = &bound.rules;
        let filter_levels: Levels<'_> = filter.levels().collect();
        let max_levels = compiled.max_levels.max(filter_levels.len());
        let template_x_levels = bound.template_x_levels();
        let fresh = fresh_level(
            filter_levels
                .iter()
                .copied()
                .chain(compiled.x_levels.iter().map(|l| &**l))
                .chain(template_x_levels.iter().map(String::as_str)),
        );
        let mut candidate = String::new();
        let mut text = String::new();
        for entry in compiled.read.iter().filter(|entry| entry.allow) {
            let Some(pattern) = bound.text_of(entry, &mut text) else { continue };
            let rule_levels: Levels<'_> = pattern.split('/').collect();
            let (filter_min, filter_max) = length_range(&filter_levels, max_levels + 1);
            let (rule_min, rule_max) = length_range(&rule_levels, max_levels + 1);
            for len in filter_min.max(rule_min)..=filter_max.min(rule_max) {
                generic_topic(&filter_levels, &rule_levels, len, &fresh, &mut candidate);
                // The one-level topic whose level is empty is the empty string: not a topic.
                if candidate.is_empty() {
                    continue;
                }
                if filter.matches_str(&candidate) && bound.first_match_allows(&candidate) {
                    return true;
                }
            }
        }
        false
    }
}

/// Which rule decides an access, as [`explain`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Explanation {
    /// There is no rule list: everything is allowed.
    Unrestricted,
    /// The rule at `index` (0-based, in the list as given) is the first that matches the access;
    /// `allowed` is false when it is a `deny` rule.
    Rule {
        /// The rule's position in the list, from 0.
        index: usize,
        /// Whether the rule allows the access.
        allowed: bool,
    },
    /// No rule matches the access: denied.
    NoMatch,
}

impl Explanation {
    /// The decision: what [`Acl::allows`] answers for the same inputs.
    pub fn allowed(self) -> bool {
        match self {
            Explanation::Unrestricted => true,
            Explanation::Rule { allowed, .. } => allowed,
            Explanation::NoMatch => false,
        }
    }
}

/// Explains the decision [`Acl::compile`]`(rules, username, client_id).allows(access, topic)`
/// makes: which rule decides it, by its position in `rules`. For operators (the REST API's ACL
/// tester); it substitutes and parses every rule it looks at, so it allocates and is not for the
/// message path. It shares the substitution with [`Acl::compile`], so a rule that matches nothing
/// there (an unsafe `%u` value, a pattern made `$`-topic by substitution) matches nothing here.
pub fn explain(
    rules: Option<&[Rule]>,
    username: Option<&str>,
    client_id: &str,
    access: Access,
    topic: &TopicName,
) -> Explanation {
    let Some(rules) = rules else { return Explanation::Unrestricted };
    rules
        .iter()
        .enumerate()
        .filter(|(_, rule)| rule.permission.decides(access))
        .find(|(_, rule)| substituted_filter(rule, username, client_id).is_some_and(|f| f.matches(topic)))
        .map_or(Explanation::NoMatch, |(index, rule)| Explanation::Rule {
            index,
            allowed: rule.permission != Permission::Deny,
        })
}

/// The filter `rule` stands for in a client's ACL once `%u` and `%c` are substituted, or `None`
/// when it matches nothing (see the [module documentation](self)).
fn substituted_filter(rule: &Rule, username: Option<&str>, client_id: &str) -> Option<TopicFilter> {
    let pattern = substitute(&rule.pattern, username, client_id)?;
    if pattern.starts_with('$') && !rule.pattern.starts_with('$') {
        return None;
    }
    TopicFilter::try_from(&*pattern).ok()
}

/// Whether `pattern` matches every topic that `filter` matches (a sufficient test: some covers
/// it does not see, such as `a/+` and `a/x` both inside `a/#`, need no special case).
fn covers(pattern: &str, filter: &TopicFilter) -> bool {
    let mut p = pattern.split('/');
    let mut f = filter.levels();
    for i in 0.. {
        match (p.next(), f.next()) {
            (Some("#"), first) => {
                // A pattern that starts with a wildcard misses `$` topics; a filter that starts
                // with a wildcard has none, one that starts with a `$` literal has only those.
                return i > 0 || !first.is_some_and(|l| l.starts_with('$'));
            }
            (None, None) => return true,
            (Some("+"), Some(level)) if level != "#" => {
                if i == 0 && level.starts_with('$') {
                    return false;
                }
            }
            (Some(pl), Some(fl)) if pl == fl && fl != "+" && fl != "#" => {}
            (Some("+"), Some("+")) => {}
            _ => return false,
        }
    }
    unreachable!()
}

/// Whether some topic may be matched by both filters: false only when none can be (a literal
/// differs, or the lengths cannot meet). Answering true for `$` topics that a leading wildcard
/// would in fact exclude is allowed: callers only lose a shortcut.
fn may_intersect(a: &str, b: &TopicFilter) -> bool {
    let mut a = a.split('/');
    let mut b = b.levels();
    loop {
        match (a.next(), b.next()) {
            (Some("#"), _) | (_, Some("#")) | (None, None) => return true,
            (Some(_), None) | (None, Some(_)) => return false,
            (Some(x), Some(y)) if x == "+" || y == "+" || x == y => {}
            _ => return false,
        }
    }
}

/// The levels of a filter; inline up to a depth that covers real filters.
type Levels<'a> = SmallVec<[&'a str; 16]>;

/// A level equal to none of `levels` and not starting with `$`: the first of `x0`, `x1`, ...
/// that is not taken. Only levels of that shape are remembered, so the usual case costs a scan.
fn fresh_level<'a>(levels: impl Iterator<Item = &'a str>) -> String {
    let taken: HashSet<&str> = levels.filter(|level| level.starts_with('x')).collect();
    // Of the first `taken.len() + 1` candidates at least one is free, so this ends.
    let mut n = 0usize;
    loop {
        let candidate = format!("x{n}");
        if !taken.contains(candidate.as_str()) {
            return candidate;
        }
        n += 1;
    }
}

/// The numbers of topic levels a filter can match, capped at `cap`: exactly its level count,
/// or, with a trailing `#`, from one less (the parent) upwards.
fn length_range(levels: &[&str], cap: usize) -> (usize, usize) {
    match levels.last() {
        Some(&"#") => ((levels.len() - 1).max(1), cap),
        _ => (levels.len(), levels.len().min(cap)),
    }
}

/// Writes into `out` the generic topic of `len` levels for a filter and a rule: at each
/// position the filter's literal, else the rule's literal, else `fresh`.
fn generic_topic(filter: &[&str], rule: &[&str], len: usize, fresh: &str, out: &mut String) {
    fn literal_at<'a>(levels: &[&'a str], i: usize) -> Option<&'a str> {
        levels.get(i).copied().filter(|l| *l != "+" && *l != "#")
    }
    out.clear();
    for i in 0..len {
        if i > 0 {
            out.push('/');
        }
        out.push_str(literal_at(filter, i).or_else(|| literal_at(rule, i)).unwrap_or(fresh));
    }
}

/// Splits a pattern into text and the variables `%u` and `%c`, in one pass from the left: a
/// `%` not followed by `u` or `c` is text, and so is whatever follows a variable (`%%u` is `%`
/// and `%u`). Adjacent text is one piece, and there is no empty text piece.
fn pieces(pattern: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = pattern;
    while let Some(i) = rest.find('%') {
        text.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let var = match after.as_bytes().first() {
            Some(b'u') => Var::User,
            Some(b'c') => Var::Client,
            _ => {
                text.push('%');
                rest = after;
                continue;
            }
        };
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text).into()));
        }
        pieces.push(Piece::Var(var));
        rest = &after[1..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Piece::Text(text.into()));
    }
    pieces
}

/// Replaces `%u` and `%c` in one pass; `None` if a value that the pattern uses is missing or
/// could change the pattern's structure.
fn substitute<'p>(pattern: &'p str, username: Option<&str>, client_id: &str) -> Option<Cow<'p, str>> {
    if !pattern.contains('%') {
        return Some(Cow::Borrowed(pattern));
    }
    let mut out = String::with_capacity(pattern.len());
    for piece in pieces(pattern) {
        match piece {
            Piece::Text(text) => out.push_str(&text),
            Piece::Var(Var::User) => out.push_str(username.filter(|u| safe_value(u))?),
            Piece::Var(Var::Client) => out.push_str(Some(client_id).filter(|c| safe_value(c))?),
        }
    }
    Some(Cow::Owned(out))
}

impl fmt::Debug for Acl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("Acl(unrestricted)"),
            Some(bound) => {
                let rules = |entries: &[Entry]| {
                    entries
                        .iter()
                        .map(|e| {
                            let pattern = match &e.pattern {
                                Pattern::Filter(filter) => Cow::Borrowed(filter.as_str()),
                                Pattern::Template(t) => {
                                    let mut text = String::new();
                                    if !t.resolve_into(bound, &mut text) {
                                        text.push_str("(nothing)");
                                    }
                                    Cow::Owned(text)
                                }
                            };
                            format!("{} {pattern}", if e.allow { "allow" } else { "deny" })
                        })
                        .collect::<Vec<_>>()
                };
                f.debug_struct("Acl")
                    .field("read", &rules(&bound.rules.read))
                    .field("write", &rules(&bound.rules.write))
                    .finish()
            }
        }
    }
}

#[cfg(any(test, feature = "fuzzing"))]
#[path = "acl_oracle.rs"]
pub mod oracle;

#[cfg(test)]
#[path = "acl_tests.rs"]
mod tests;
