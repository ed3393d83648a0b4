//! ACL rules and their evaluation: which topics a client may read (subscribe to and receive)
//! and write (publish to).
//!
//! A client's ACL is an ordered list of [`Rule`]s, each a topic-filter pattern and a
//! [`Permission`]. The pattern may contain `%u` (the username) and `%c` (the client id), which
//! are substituted once per connection when the rules are compiled into an [`Acl`].
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
use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::topic::{TopicError, TopicFilter, TopicName};

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

/// A client's ACL, compiled once per connection from its rules, username and client id.
///
/// Cloning is cheap (the rules are behind an `Arc`). The compiled form keeps, per access, only
/// the rules that can decide it, so [`Acl::allows`] scans no rule it could skip anyway.
#[derive(Clone)]
pub struct Acl {
    /// `None` = unrestricted.
    rules: Option<Arc<Compiled>>,
    /// What it was compiled from, so that it can be stored and compiled again (a pending will's
    /// ACL survives a restart this way).
    source: Option<Arc<AclSource>>,
}

/// The inputs an [`Acl`] was compiled from.
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

#[derive(Debug)]
struct Compiled {
    /// Unique per compilation, so that a decision cached under this ACL is never mistaken for
    /// one made under another (see [`Acl::stamp`]).
    stamp: u64,
    /// The rules that decide reads (read, readwrite, deny), in order.
    read: Box<[Entry]>,
    /// The rules that decide writes (write, readwrite, deny), in order.
    write: Box<[Entry]>,
    /// The most levels of any read rule (for [`Acl::allows_subscribe`]).
    max_levels: usize,
    /// The levels of read rules that could collide with a fresh level of
    /// [`Acl::allows_subscribe`] (those starting with `x`; usually none).
    x_levels: Box<[Box<str>]>,
}

#[derive(Clone, Debug)]
struct Entry {
    filter: TopicFilter,
    allow: bool,
}

impl Acl {
    /// The ACL of a client with no rule list: everything is allowed.
    pub fn unrestricted() -> Acl {
        Acl { rules: None, source: None }
    }

    /// What this ACL was compiled from (`None` when it is unrestricted).
    pub fn source(&self) -> Option<&AclSource> {
        self.source.as_deref()
    }

    /// Compiles `rules` for one client: substitutes `%u` and `%c` and parses the patterns.
    /// `None` is unrestricted; `Some(&[])` denies everything. A rule whose substitution or
    /// pattern is invalid matches nothing (see the [module documentation](self)).
    pub fn compile(rules: Option<&[Rule]>, username: Option<&str>, client_id: &str) -> Acl {
        // Unrestricted needs no source: there is nothing to recompile.
        let Some(rules) = rules else { return Acl::unrestricted() };
        let source = Some(Arc::new(AclSource {
            rules: Some(rules.to_vec()),
            username: username.map(str::to_owned),
            client_id: client_id.to_owned(),
        }));
        let mut read = Vec::new();
        let mut write = Vec::new();
        for rule in rules {
            let Some(filter) = substituted_filter(rule, username, client_id) else { continue };
            let entry = Entry { filter, allow: rule.permission != Permission::Deny };
            if rule.permission.decides(Access::Read) {
                read.push(entry.clone());
            }
            if rule.permission.decides(Access::Write) {
                write.push(entry);
            }
        }
        let max_levels = read.iter().map(|e| e.filter.level_count()).max().unwrap_or(0);
        let x_levels = read
            .iter()
            .flat_map(|e| e.filter.levels())
            .filter(|l| l.starts_with('x'))
            .map(Box::from)
            .collect();
        Acl {
            rules: Some(Arc::new(Compiled {
                stamp: NEXT_STAMP.fetch_add(1, Ordering::Relaxed),
                read: read.into(),
                write: write.into(),
                max_levels,
                x_levels,
            })),
            source,
        }
    }

    /// Whether this ACL allows everything (the client had no rule list).
    pub fn is_unrestricted(&self) -> bool {
        self.rules.is_none()
    }

    /// Identifies this compilation: equal stamps mean the same compiled rules. A decision
    /// cached with a stamp (see [`Acl::allows_every`]) holds while the session's ACL has that
    /// stamp. Stamps are never reused; the unrestricted ACL, which needs no caching, has 0.
    pub fn stamp(&self) -> u64 {
        self.rules.as_ref().map_or(0, |compiled| compiled.stamp)
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
        let Some(compiled) = &self.rules else { return true };
        if let Some(topic) = filter.to_topic_name() {
            return self.allows(Access::Read, &topic);
        }
        for entry in compiled.read.iter() {
            if covers(&entry.filter, filter) {
                return entry.allow;
            }
            if !entry.allow && may_intersect(&entry.filter, filter) {
                return false;
            }
        }
        false
    }

    /// Whether `access` to `topic` is allowed: the check on the publish and delivery path.
    /// Synchronous and allocation-free.
    pub fn allows(&self, access: Access, topic: &TopicName) -> bool {
        let Some(compiled) = &self.rules else { return true };
        let entries = match access {
            Access::Read => &compiled.read,
            Access::Write => &compiled.write,
        };
        entries.iter().find(|entry| entry.filter.matches(topic)).is_some_and(|entry| entry.allow)
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
        let Some(compiled) = &self.rules else { return true };
        if let Some(topic) = filter.to_topic_name() {
            return self.allows(Access::Read, &topic);
        }
        let filter_levels: Levels<'_> = filter.levels().collect();
        let max_levels = compiled.max_levels.max(filter_levels.len());
        let fresh = fresh_level(filter_levels.iter().copied().chain(compiled.x_levels.iter().map(|l| &**l)));
        let mut candidate = String::new();
        for rule in compiled.read.iter().filter(|entry| entry.allow) {
            let rule_levels: Levels<'_> = rule.filter.levels().collect();
            let (filter_min, filter_max) = length_range(&filter_levels, max_levels + 1);
            let (rule_min, rule_max) = length_range(&rule_levels, max_levels + 1);
            for len in filter_min.max(rule_min)..=filter_max.min(rule_max) {
                generic_topic(&filter_levels, &rule_levels, len, &fresh, &mut candidate);
                // The one-level topic whose level is empty is the empty string: not a topic.
                if candidate.is_empty() {
                    continue;
                }
                if filter.matches_str(&candidate) && first_match_allows(&compiled.read, &candidate) {
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
fn covers(pattern: &TopicFilter, filter: &TopicFilter) -> bool {
    let mut p = pattern.levels();
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
fn may_intersect(a: &TopicFilter, b: &TopicFilter) -> bool {
    let mut a = a.levels();
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

/// The first-match rule over the text of a topic.
fn first_match_allows(entries: &[Entry], topic: &str) -> bool {
    entries.iter().find(|entry| entry.filter.matches_str(topic)).is_some_and(|entry| entry.allow)
}

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

/// Replaces `%u` and `%c` in one pass; `None` if a value that the pattern uses is missing or
/// could change the pattern's structure.
fn substitute<'p>(pattern: &'p str, username: Option<&str>, client_id: &str) -> Option<Cow<'p, str>> {
    if !pattern.contains('%') {
        return Some(Cow::Borrowed(pattern));
    }
    let safe = |value: &str| !value.is_empty() && !value.contains(['/', '+', '#', '\0']);
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let value = match after.as_bytes().first() {
            Some(b'u') => Some(username.filter(|u| safe(u))?),
            Some(b'c') => Some(Some(client_id).filter(|c| safe(c))?),
            _ => None,
        };
        match value {
            Some(value) => {
                out.push_str(value);
                rest = &after[1..];
            }
            None => {
                out.push('%');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Some(Cow::Owned(out))
}

impl fmt::Debug for Acl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.rules {
            None => f.write_str("Acl(unrestricted)"),
            Some(compiled) => {
                let rules = |entries: &[Entry]| {
                    entries
                        .iter()
                        .map(|e| format!("{} {}", if e.allow { "allow" } else { "deny" }, e.filter))
                        .collect::<Vec<_>>()
                };
                f.debug_struct("Acl")
                    .field("read", &rules(&compiled.read))
                    .field("write", &rules(&compiled.write))
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
