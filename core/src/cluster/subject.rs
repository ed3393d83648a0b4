//! The MQTT topic and filter → NATS subject mapping, and back.
//!
//! NATS subjects are `.`-separated tokens; a token is never empty, holds no whitespace, and the
//! whole tokens `*` (one token) and `>` (one or more trailing tokens) are wildcards. MQTT topic
//! levels may hold any of that (`a.b`, `*`, `>`, empty levels, spaces, any Unicode), so each
//! level is escaped into one token, and nothing a client writes can become a NATS wildcard: the
//! topic `a/*` is the subject `mq.a.%2A`, which never matches `mq.a.b` (nats-server issue #8225
//! is what happens otherwise).
//!
//! # The mapping
//!
//! - Every MQTT level becomes one token. ASCII letters, digits, `-` and `_` stand for
//!   themselves; every other byte of the level's UTF-8 (`.`, `*`, `>`, `$`, `%`, whitespace,
//!   control characters, non-ASCII) is written `%XX`, two upper-case hex digits. An empty level
//!   is the token `%` alone (which no escape can produce).
//! - A topic whose first level starts with `$` lives under a prefix of its own
//!   ([`SubjectSpace::dollar`]), every other topic under [`SubjectSpace::plain`]: a filter whose
//!   first level is a wildcard maps into the plain space only, so NATS applies MQTT's rule that
//!   such a filter never matches a `$` topic [MQTT-4.7.2-1] by itself.
//! - In a filter, `+` becomes `*`; `#` becomes two subjects, its parent and the parent followed
//!   by `>` (`a/#` matches `a` itself, NATS's `a.>` does not); `#` alone is `<plain>.>`.
//!
//! The mapping is a bijection between topic names and the subjects it produces:
//! [`SubjectSpace::parse_topic`] accepts only the canonical form (upper-case hex, no escape of a
//! byte that stands for itself), so `topic → subject → topic` and `subject → topic → subject`
//! are both the identity, and a NATS match of mapped filters and topics is exactly MQTT's match
//! (the property tests check both).

use std::fmt::Write as _;

use smallvec::SmallVec;

use crate::topic::{TopicFilter, TopicName};

/// The longest subject the mapping produces, in bytes. nats-server's control line (the `PUB`
/// or `MSG` line that carries the subject) is limited to 4 KiB by default; a topic whose
/// subject would be longer is not sent to other nodes (counted by the caller).
pub const MAX_SUBJECT_LEN: usize = 3072;

/// Why a topic or filter has no subject, or a subject is not one the mapping produced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubjectError {
    /// The escaped subject would exceed [`MAX_SUBJECT_LEN`] bytes.
    #[error("the topic's NATS subject would be {len} bytes, more than the limit of {MAX_SUBJECT_LEN}")]
    TooLong {
        /// The length it would have.
        len: usize,
    },
    /// The subject does not start with this space's plain or `$` prefix and a `.`.
    #[error("subject {subject:?} is outside the mesgd subject space {prefix:?}")]
    WrongPrefix {
        /// The subject (cut to 64 bytes).
        subject: String,
        /// The space's plain prefix.
        prefix: &'static str,
    },
    /// A token is empty (`a..b`, a trailing `.`).
    #[error("subject has an empty token at position {token}")]
    EmptyToken {
        /// The token's position after the prefix, from 0.
        token: usize,
    },
    /// A token is a NATS wildcard (`*` or `>`), which no topic maps to.
    #[error("subject has the wildcard {wildcard:?} at token {token}; a topic has none")]
    Wildcard {
        /// The wildcard.
        wildcard: char,
        /// The token's position after the prefix, from 0.
        token: usize,
    },
    /// A byte that the mapping always escapes appears as itself, or an escape is not `%` and two
    /// upper-case hex digits, or escapes a byte that stands for itself.
    #[error("subject has a non-canonical byte or escape at token {token}, byte {offset}")]
    BadEscape {
        /// The token's position after the prefix, from 0.
        token: usize,
        /// The byte offset inside the token.
        offset: usize,
    },
    /// The unescaped bytes are not UTF-8.
    #[error("subject's unescaped topic is not UTF-8")]
    NotUtf8,
    /// The unescaped text is not a valid topic name (a NUL, a wildcard, or a `$` topic in the
    /// plain space / a plain topic in the `$` space).
    #[error("subject's unescaped text is not a topic of this space: {0}")]
    NotATopic(String),
}

/// Where a family of subjects lives: one prefix for topics that start with `$`, one for all
/// others. Live messages and the retained stream use different spaces, so a live wildcard
/// subscription never matches a retained-stream subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubjectSpace {
    /// The prefix token of topics whose first level does not start with `$`.
    pub plain: &'static str,
    /// The prefix token of topics whose first level starts with `$`.
    pub dollar: &'static str,
}

/// Live messages between nodes.
pub const LIVE: SubjectSpace = SubjectSpace { plain: "mq", dollar: "mqd" };

/// The retained-message stream.
pub const RETAINED: SubjectSpace = SubjectSpace { plain: "mqr", dollar: "mqrd" };

/// The durable stream's subjects (QoS 1/2 messages stored before their acknowledgement).
pub const DURABLE: SubjectSpace = SubjectSpace { plain: "mqs", dollar: "mqsd" };

/// The subjects one filter maps to: one, or two for a filter that ends in `#` after a level.
pub type FilterSubjects = SmallVec<[String; 2]>;

/// Whether byte `b` stands for itself in a token.
fn is_literal(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

fn push_level(out: &mut String, level: &str) {
    if level.is_empty() {
        out.push('%');
        return;
    }
    for &b in level.as_bytes() {
        if is_literal(b) {
            out.push(char::from(b));
        } else {
            // Infallible: writing to a String.
            let _ = write!(out, "%{b:02X}");
        }
    }
}

fn check_len(s: String) -> Result<String, SubjectError> {
    if s.len() > MAX_SUBJECT_LEN { Err(SubjectError::TooLong { len: s.len() }) } else { Ok(s) }
}

impl SubjectSpace {
    /// Both prefixes followed by `>`: every subject of the space (the retained stream's
    /// subjects).
    pub fn everything(&self) -> [String; 2] {
        [format!("{}.>", self.plain), format!("{}.>", self.dollar)]
    }

    fn prefix_for(&self, first_level: &str) -> &'static str {
        if first_level.starts_with('$') { self.dollar } else { self.plain }
    }

    /// The subject of a topic name.
    pub fn topic(&self, topic: &TopicName) -> Result<String, SubjectError> {
        let mut out = String::with_capacity(topic.as_str().len() + 8);
        let mut levels = topic.levels();
        let first = levels.next().unwrap_or("");
        out.push_str(self.prefix_for(first));
        out.push('.');
        push_level(&mut out, first);
        for level in levels {
            out.push('.');
            push_level(&mut out, level);
        }
        check_len(out)
    }

    /// The subjects a NATS subscription needs to receive what `filter` matches: `+` is `*`,
    /// a final `#` is the parent subject plus the parent followed by `>`, and `#` alone is
    /// `<plain>.>`.
    pub fn filter(&self, filter: &TopicFilter) -> Result<FilterSubjects, SubjectError> {
        let mut levels: SmallVec<[&str; 8]> = filter.levels().collect();
        let hash = levels.last() == Some(&"#");
        if hash {
            levels.pop();
        }
        let Some(first) = levels.first() else {
            // `#` alone: every topic that does not start with '$'.
            return Ok(SmallVec::from_iter([format!("{}.>", self.plain)]));
        };
        let mut parent = String::with_capacity(filter.as_str().len() + 8);
        parent.push_str(if *first == "+" { self.plain } else { self.prefix_for(first) });
        for level in &levels {
            parent.push('.');
            if *level == "+" {
                parent.push('*');
            } else {
                push_level(&mut parent, level);
            }
        }
        if !hash {
            return Ok(SmallVec::from_iter([check_len(parent)?]));
        }
        let all_below = check_len(format!("{parent}.>"))?;
        Ok(SmallVec::from_iter([parent, all_below]))
    }

    /// The topic name a subject of this space stands for; only the canonical form the mapping
    /// produces is accepted.
    pub fn parse_topic(&self, subject: &str) -> Result<TopicName, SubjectError> {
        let (prefix, rest) = subject.split_once('.').ok_or_else(|| self.wrong_prefix(subject))?;
        let dollar = if prefix == self.plain {
            false
        } else if prefix == self.dollar {
            true
        } else {
            return Err(self.wrong_prefix(subject));
        };
        let mut bytes = Vec::with_capacity(rest.len());
        for (i, token) in rest.split('.').enumerate() {
            if i > 0 {
                bytes.push(b'/');
            }
            decode_token(token, i, &mut bytes)?;
        }
        let text = String::from_utf8(bytes).map_err(|_| SubjectError::NotUtf8)?;
        if text.starts_with('$') != dollar {
            return Err(SubjectError::NotATopic(format!(
                "a topic {} '$' belongs under prefix {:?}",
                if dollar { "not starting with" } else { "starting with" },
                if dollar { self.plain } else { self.dollar },
            )));
        }
        TopicName::try_from(text).map_err(|e| SubjectError::NotATopic(e.to_string()))
    }

    fn wrong_prefix(&self, subject: &str) -> SubjectError {
        let mut cut = subject.len().min(64);
        while !subject.is_char_boundary(cut) {
            cut -= 1;
        }
        SubjectError::WrongPrefix { subject: subject[..cut].to_owned(), prefix: self.plain }
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn decode_token(token: &str, index: usize, out: &mut Vec<u8>) -> Result<(), SubjectError> {
    match token {
        "" => return Err(SubjectError::EmptyToken { token: index }),
        "*" => return Err(SubjectError::Wildcard { wildcard: '*', token: index }),
        ">" => return Err(SubjectError::Wildcard { wildcard: '>', token: index }),
        // An empty level.
        "%" => return Ok(()),
        _ => {}
    }
    let t = token.as_bytes();
    let mut i = 0;
    while i < t.len() {
        let bad = SubjectError::BadEscape { token: index, offset: i };
        if is_literal(t[i]) {
            out.push(t[i]);
            i += 1;
            continue;
        }
        if t[i] != b'%' {
            return Err(bad);
        }
        let (Some(hi), Some(lo)) =
            (t.get(i + 1).and_then(|&b| hex_value(b)), t.get(i + 2).and_then(|&b| hex_value(b)))
        else {
            return Err(bad);
        };
        let byte = hi << 4 | lo;
        // A byte that stands for itself is never escaped, and a level never holds '/' (it
        // separates levels, which are tokens): `a%2Fb` would read back as two levels.
        if is_literal(byte) || byte == b'/' {
            return Err(bad);
        }
        out.push(byte);
        i += 3;
    }
    Ok(())
}

/// The NATS queue group of shared subscription `$share/<group>/<filter>`: one token of the
/// mapping's alphabet (`-`, `_`, letters, digits, `%XX`), distinct for every group and filter.
pub fn queue_name(group: &str, filter: &TopicFilter) -> String {
    // A share name holds no '/', so the first (escaped) '/' ends it.
    let mut out = String::from("mesgd_");
    push_level(&mut out, &format!("{group}/{filter}"));
    out
}

/// NATS subject matching: whether subscription subject `pattern` (with `*` and `>` wildcards)
/// matches the literal `subject`, as nats-server decides it. The mapping's tests use it as the
/// oracle; the cluster uses it nowhere on the hot path.
pub fn nats_matches(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// The MQTT filter that matches exactly the topics a subject of this space's subscriptions
/// matches (`*` is `+`, `>` is `+/#`), so a subscription trie can tell which of a node's NATS
/// subscriptions a message arrived on. `None` for a subject the mapping does not produce.
pub fn subject_as_filter(space: &SubjectSpace, pattern: &str) -> Option<TopicFilter> {
    let (prefix, rest) = pattern.split_once('.')?;
    if prefix != space.plain && prefix != space.dollar {
        return None;
    }
    let mut text = Vec::with_capacity(rest.len());
    let mut tokens = rest.split('.').enumerate().peekable();
    while let Some((i, token)) = tokens.next() {
        if i > 0 {
            text.push(b'/');
        }
        match token {
            "*" => text.push(b'+'),
            ">" if tokens.peek().is_none() => text.extend_from_slice(b"+/#"),
            _ => decode_token(token, i, &mut text).ok()?,
        }
    }
    let text = String::from_utf8(text).ok()?;
    TopicFilter::try_from(text).ok()
}
