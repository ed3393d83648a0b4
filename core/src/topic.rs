//! Validated topic names and topic filters, shared-subscription names, and filter matching.
//!
//! Every topic string that enters mesgd from a client (an MQTT PUBLISH or SUBSCRIBE, a relay
//! `publish`, an ACL pattern) is checked once, here, against the rules of MQTT 3.1.1 and 5.0
//! §4.7, and from then on travels as a [`TopicName`] or [`TopicFilter`]. Matching, the
//! subscription trie and the ACL engine therefore never see an unvalidated string, and both types
//! are a reference-counted `Arc<str>` so that handing a topic to many subscribers is a pointer
//! copy.
//!
//! The rules:
//!
//! - Both are non-empty UTF-8 of at most 65,535 bytes (the length prefix of an MQTT string) and
//!   contain no U+0000. Other control characters are allowed: the specifications only say a
//!   sender *should not* use them.
//! - A topic level is the text between `/` separators; empty levels are real levels (`a//b` has
//!   three levels, `/finance` has two, the first empty).
//! - A topic name contains no wildcard.
//! - In a filter, `+` must be a whole level and `#` must be the whole last level.
//! - A filter whose first level is a wildcard does not match a topic whose name starts with `$`
//!   [MQTT-4.7.2-1], so `#` never delivers `$SYS/...`; only a filter that names the `$` level
//!   does.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest topic name or filter, in bytes: the range of the 16-bit length prefix.
pub const MAX_TOPIC_LEN: usize = 65_535;

/// The prefix that marks a shared subscription (MQTT 5.0 §4.8.2).
pub const SHARE_PREFIX: &str = "$share/";

/// Why a string is not a valid topic name, topic filter or shared-subscription filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum TopicError {
    /// The string is empty; a topic has at least one character.
    #[error("the topic is empty; a topic name or filter needs at least one character")]
    Empty,
    /// The string is longer than [`MAX_TOPIC_LEN`] bytes.
    #[error("the topic is longer than the limit of 65535 bytes")]
    TooLong,
    /// A topic name contains `+` or `#`, which only filters may use.
    #[error("a topic name may not contain the wildcard characters '+' or '#'")]
    Wildcard,
    /// The string contains the character U+0000.
    #[error("the topic contains the NUL character (U+0000)")]
    Nul,
    /// A filter uses `+` or `#` inside a level, or `#` before the last level.
    #[error("misplaced wildcard: '+' must be a whole level and '#' the whole last level of a filter")]
    InvalidWildcard,
    /// A `$share/` filter whose share name is empty or contains `/`, `+` or `#`.
    #[error(
        "invalid shared subscription: the share name after '$share/' must be non-empty and free of '+' and '#'"
    )]
    InvalidShareName,
    /// A `$share/{name}` with no `/` and topic filter after the share name.
    #[error("invalid shared subscription: '$share/{{name}}' must be followed by '/' and a topic filter")]
    MissingShareFilter,
}

/// Checks what names and filters have in common: non-empty, not too long, no NUL.
fn check_common(s: &str) -> Result<(), TopicError> {
    if s.is_empty() {
        return Err(TopicError::Empty);
    }
    if s.len() > MAX_TOPIC_LEN {
        return Err(TopicError::TooLong);
    }
    if s.as_bytes().contains(&0) {
        return Err(TopicError::Nul);
    }
    Ok(())
}

fn check_name(s: &str) -> Result<(), TopicError> {
    check_common(s)?;
    if s.bytes().any(|b| b == b'+' || b == b'#') {
        return Err(TopicError::Wildcard);
    }
    Ok(())
}

fn check_filter(s: &str) -> Result<(), TopicError> {
    check_common(s)?;
    let mut levels = s.split('/').peekable();
    while let Some(level) = levels.next() {
        let is_last = levels.peek().is_none();
        match level {
            "+" => {}
            "#" if is_last => {}
            _ if level.bytes().any(|b| b == b'+' || b == b'#') => return Err(TopicError::InvalidWildcard),
            _ => {}
        }
    }
    Ok(())
}

/// Implements the traits that topic names and filters share, over their `Arc<str>`.
macro_rules! topic_string_type {
    ($ty:ident, $check:ident, $expecting:literal) => {
        impl $ty {
            /// The topic as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The shared text, for code that keeps an `Arc<str>` (a clone is a reference count).
            pub fn as_arc(&self) -> &Arc<str> {
                &self.0
            }

            /// The levels (the text between `/` separators), in order. Does not allocate.
            pub fn levels(&self) -> impl DoubleEndedIterator<Item = &str> + Clone + '_ {
                self.0.split('/')
            }

            /// The number of levels: one more than the number of `/`.
            pub fn level_count(&self) -> usize {
                self.0.bytes().filter(|&b| b == b'/').count() + 1
            }

            /// Whether the first level starts with `$` (`$SYS/...`): such topics are hidden from
            /// filters that start with a wildcard.
            pub fn is_dollar(&self) -> bool {
                self.0.starts_with('$')
            }
        }

        impl TryFrom<&str> for $ty {
            type Error = TopicError;

            fn try_from(s: &str) -> Result<Self, TopicError> {
                $check(s)?;
                Ok($ty(Arc::from(s)))
            }
        }

        impl TryFrom<String> for $ty {
            type Error = TopicError;

            fn try_from(s: String) -> Result<Self, TopicError> {
                $check(&s)?;
                Ok($ty(Arc::from(s)))
            }
        }

        impl TryFrom<Arc<str>> for $ty {
            type Error = TopicError;

            fn try_from(s: Arc<str>) -> Result<Self, TopicError> {
                $check(&s)?;
                Ok($ty(s))
            }
        }

        impl FromStr for $ty {
            type Err = TopicError;

            fn from_str(s: &str) -> Result<Self, TopicError> {
                $ty::try_from(s)
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        // Hash and Eq of an `Arc<str>` are those of the `str`, so map lookups by `&str` agree.
        impl Borrow<str> for $ty {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(stringify!($ty)).field(&&*self.0).finish()
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let s = String::deserialize(deserializer)?;
                $ty::try_from(s).map_err(|e| serde::de::Error::custom(format_args!("{}: {e}", $expecting)))
            }
        }
    };
}

/// A valid topic name: what a message is published to. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicName(Arc<str>);

topic_string_type!(TopicName, check_name, "invalid topic name");

/// A valid topic filter: what a client subscribes to, and the form of ACL patterns. May contain
/// the wildcards `+` (exactly one level) and `#` (any number of levels, including none, at the
/// end). Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicFilter(Arc<str>);

topic_string_type!(TopicFilter, check_filter, "invalid topic filter");

impl TopicFilter {
    /// Whether the filter contains `+` or `#`.
    pub fn has_wildcards(&self) -> bool {
        self.0.bytes().any(|b| b == b'+' || b == b'#')
    }

    /// Whether this filter matches `topic`, including the rule that a filter starting with a
    /// wildcard does not match a topic starting with `$`. `a/#` matches `a` itself. Does not
    /// allocate.
    pub fn matches(&self, topic: &TopicName) -> bool {
        self.matches_str(topic.as_str())
    }

    /// [`TopicFilter::matches`] over the text of a topic name. `topic` must satisfy the rules of
    /// [`TopicName`]; for any other text the answer is unspecified (but there is one).
    ///
    /// One pass over both strings, level by level, with no splitting: this runs for every ACL
    /// rule on every delivery.
    pub(crate) fn matches_str(&self, topic: &str) -> bool {
        let (filter, topic) = (self.0.as_bytes(), topic.as_bytes());
        if topic.first() == Some(&b'$') && matches!(filter.first(), Some(b'+' | b'#')) {
            return false;
        }
        // `f` and `t` are at the start of a level of the filter and of the topic.
        let (mut f, mut t) = (0, 0);
        loop {
            match filter.get(f) {
                // Validation made `#` the whole last level: it matches whatever is left.
                Some(b'#') => return true,
                // And `+` a whole level: it consumes one topic level, whatever it holds.
                Some(b'+') => {
                    f += 1;
                    while t < topic.len() && topic[t] != b'/' {
                        t += 1;
                    }
                }
                _ => {
                    while f < filter.len() && filter[f] != b'/' {
                        if topic.get(t) != Some(&filter[f]) {
                            return false;
                        }
                        f += 1;
                        t += 1;
                    }
                    if t < topic.len() && topic[t] != b'/' {
                        return false;
                    }
                }
            }
            // Both are now at a '/' or at their end.
            match (f == filter.len(), t == topic.len()) {
                (true, true) => return true,
                (true, false) => return false,
                // The topic ended but the filter goes on: only a final "/#" also matches the
                // parent level ("a/#" matches "a").
                (false, true) => return &filter[f..] == b"/#",
                (false, false) => {
                    f += 1;
                    t += 1;
                }
            }
        }
    }

    /// The same text as a topic name, if the filter has no wildcard. Does not copy the text.
    pub fn to_topic_name(&self) -> Option<TopicName> {
        (!self.has_wildcards()).then(|| TopicName(Arc::clone(&self.0)))
    }
}

/// Every topic name is a filter that matches exactly itself.
impl From<TopicName> for TopicFilter {
    fn from(name: TopicName) -> Self {
        TopicFilter(name.0)
    }
}

/// What a client subscribes to: a plain filter, or a filter shared by the members of a group
/// (`$share/{group}/{filter}`, MQTT 5.0 §4.8.2), each message of which goes to one member.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SubscriptionFilter {
    /// An ordinary subscription.
    Plain(TopicFilter),
    /// A shared subscription.
    Shared {
        /// The share name: non-empty, without `/`, `+` or `#`.
        group: Arc<str>,
        /// The filter the group subscribes to.
        filter: TopicFilter,
    },
}

impl SubscriptionFilter {
    /// Parses the text of a SUBSCRIBE entry. Anything that starts with `$share/` is a shared
    /// subscription and must have a valid share name, then `/`, then a valid filter; anything
    /// else is a plain filter.
    pub fn parse(s: &str) -> Result<Self, TopicError> {
        check_common(s)?;
        let Some(rest) = s.strip_prefix(SHARE_PREFIX) else {
            return TopicFilter::try_from(s).map(SubscriptionFilter::Plain);
        };
        let Some((group, filter)) = rest.split_once('/') else {
            return Err(if rest.is_empty() || rest.contains(['+', '#']) {
                TopicError::InvalidShareName
            } else {
                TopicError::MissingShareFilter
            });
        };
        if group.is_empty() || group.contains(['+', '#']) {
            return Err(TopicError::InvalidShareName);
        }
        if filter.is_empty() {
            return Err(TopicError::MissingShareFilter);
        }
        Ok(SubscriptionFilter::Shared { group: Arc::from(group), filter: TopicFilter::try_from(filter)? })
    }

    /// The topic filter that selects the messages, without the share prefix.
    pub fn filter(&self) -> &TopicFilter {
        match self {
            SubscriptionFilter::Plain(filter) | SubscriptionFilter::Shared { filter, .. } => filter,
        }
    }

    /// The share name of a shared subscription.
    pub fn group(&self) -> Option<&str> {
        match self {
            SubscriptionFilter::Plain(_) => None,
            SubscriptionFilter::Shared { group, .. } => Some(group),
        }
    }

    /// Whether this is a shared subscription.
    pub fn is_shared(&self) -> bool {
        matches!(self, SubscriptionFilter::Shared { .. })
    }

    /// The text as the client sent it. Borrowed for a plain filter; a shared one is rebuilt
    /// from its parts (parsing is lossless, so this is the original text).
    pub fn as_str(&self) -> Cow<'_, str> {
        match self {
            SubscriptionFilter::Plain(filter) => Cow::Borrowed(filter.as_str()),
            SubscriptionFilter::Shared { .. } => Cow::Owned(self.to_string()),
        }
    }
}

impl fmt::Display for SubscriptionFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubscriptionFilter::Plain(filter) => f.write_str(filter.as_str()),
            SubscriptionFilter::Shared { group, filter } => write!(f, "{SHARE_PREFIX}{group}/{filter}"),
        }
    }
}

impl TryFrom<&str> for SubscriptionFilter {
    type Error = TopicError;

    fn try_from(s: &str) -> Result<Self, TopicError> {
        SubscriptionFilter::parse(s)
    }
}

impl FromStr for SubscriptionFilter {
    type Err = TopicError;

    fn from_str(s: &str) -> Result<Self, TopicError> {
        SubscriptionFilter::parse(s)
    }
}

#[cfg(any(test, feature = "fuzzing"))]
#[path = "topic_fuzzing.rs"]
pub mod fuzzing;

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> TopicName {
        TopicName::try_from(s).unwrap()
    }

    fn filter(s: &str) -> TopicFilter {
        TopicFilter::try_from(s).unwrap()
    }

    #[test]
    fn spec_matching_examples() {
        // (filter, topic, matches) from MQTT 3.1.1 / 5.0 §4.7.
        let cases = [
            ("sport/tennis/player1/#", "sport/tennis/player1", true),
            ("sport/tennis/player1/#", "sport/tennis/player1/ranking", true),
            ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", true),
            ("sport/#", "sport", true),
            ("#", "sport/tennis", true),
            ("sport/tennis/#", "sport/tennis", true),
            ("sport/tennis/#", "sport", false),
            ("sport/tennis/+", "sport/tennis/player1", true),
            ("sport/tennis/+", "sport/tennis/player2", true),
            ("sport/tennis/+", "sport/tennis/player1/ranking", false),
            ("sport/+", "sport", false),
            ("sport/+", "sport/", true),
            ("+/+", "/finance", true),
            ("/+", "/finance", true),
            ("+", "/finance", false),
            ("+/tennis/#", "sport/tennis/x", true),
            ("#", "$SYS/x", false),
            ("+/monitor/Clients", "$SYS/monitor/Clients", false),
            ("$SYS/#", "$SYS/x", true),
            ("$SYS/monitor/+", "$SYS/monitor/Clients", true),
            ("$SYS/#", "$SYS", true),
            ("a/+/c", "a//c", true),
            ("a/$x", "a/$x", true),
            ("a/+", "a/$x", true),
            ("a/#", "a/$x/y", true),
            ("a/b", "a/b", true),
            ("a/b", "a/b/", false),
            ("a/b", "A/b", false),
        ];
        for (f, t, expected) in cases {
            assert_eq!(filter(f).matches(&name(t)), expected, "filter {f:?} topic {t:?}");
        }
    }

    /// The definition, level by level, as a reference for the byte-level matcher.
    fn reference_matches(filter: &str, topic: &str) -> bool {
        let mut topic_levels = topic.split('/');
        for (i, level) in filter.split('/').enumerate() {
            let dollar_hidden = i == 0 && topic.starts_with('$');
            match level {
                "#" => return !dollar_hidden,
                "+" if dollar_hidden => return false,
                "+" if topic_levels.next().is_none() => return false,
                "+" => {}
                literal if topic_levels.next() != Some(literal) => return false,
                _ => {}
            }
        }
        topic_levels.next().is_none()
    }

    proptest::proptest! {
        #[test]
        fn matcher_agrees_with_the_level_definition(
            f in proptest::collection::vec(
                proptest::sample::select(vec!["a", "ab", "b", "", "$x", "+"]), 1..5),
            hash in proptest::bool::ANY,
            t in proptest::collection::vec(proptest::sample::select(vec!["a", "ab", "b", "", "$x", "c"]), 1..6),
        ) {
            let mut f = f.join("/");
            if hash {
                f.push_str(if f.is_empty() { "#" } else { "/#" });
            }
            let t = t.join("/");
            if let (Ok(flt), Ok(topic)) = (TopicFilter::try_from(f.as_str()), TopicName::try_from(t.as_str())) {
                proptest::prop_assert_eq!(flt.matches(&topic), reference_matches(&f, &t), "{} {}", f, t);
            }
        }

        #[test]
        fn arbitrary_text_never_panics(s in "[a$/+#\\x00é]{0,12}") {
            let name = TopicName::try_from(s.as_str());
            let filter = TopicFilter::try_from(s.as_str());
            let _ = SubscriptionFilter::parse(&s);
            if let Ok(name) = name {
                // Every topic name is a filter that matches itself.
                let as_filter = filter.expect("a valid name is a valid filter");
                proptest::prop_assert!(as_filter.matches(&name));
            }
        }
    }

    #[test]
    fn malformed_topic_names() {
        let long = "a".repeat(MAX_TOPIC_LEN + 1);
        let cases: &[(&str, TopicError)] = &[
            ("", TopicError::Empty),
            (&long, TopicError::TooLong),
            ("a/+", TopicError::Wildcard),
            ("#", TopicError::Wildcard),
            ("a#b", TopicError::Wildcard),
            ("sport+", TopicError::Wildcard),
            ("a\0b", TopicError::Nul),
            ("\0", TopicError::Nul),
        ];
        for (input, expected) in cases {
            assert_eq!(TopicName::try_from(*input), Err(*expected), "input {:?}", input.get(..20));
            assert_eq!(TopicName::try_from(input.to_string()), Err(*expected));
            assert_eq!(TopicName::try_from(Arc::<str>::from(*input)), Err(*expected));
        }
        let longest = "a".repeat(MAX_TOPIC_LEN);
        assert_eq!(TopicName::try_from(longest.as_str()).unwrap().as_str().len(), MAX_TOPIC_LEN);
        for ok in ["/", "//", "a", "$SYS", " ", "ä/ö", "a\u{1}b", "$share/x/y"] {
            assert_eq!(name(ok).as_str(), ok);
        }
    }

    #[test]
    fn malformed_topic_filters() {
        let long = "#".repeat(MAX_TOPIC_LEN + 1);
        let cases: &[(&str, TopicError)] = &[
            ("", TopicError::Empty),
            (&long, TopicError::TooLong),
            ("a\0/#", TopicError::Nul),
            ("sport/tennis#", TopicError::InvalidWildcard),
            ("sport/tennis/#/ranking", TopicError::InvalidWildcard),
            ("#/", TopicError::InvalidWildcard),
            ("##", TopicError::InvalidWildcard),
            ("sport+", TopicError::InvalidWildcard),
            ("+a/b", TopicError::InvalidWildcard),
            ("a/++", TopicError::InvalidWildcard),
            ("a/+#", TopicError::InvalidWildcard),
        ];
        for (input, expected) in cases {
            assert_eq!(TopicFilter::try_from(*input), Err(*expected), "input {:?}", input.get(..20));
        }
        for ok in ["#", "+", "+/+", "/#", "a//+/#", "$SYS/#", "+/", "/", "a\u{7f}"] {
            assert_eq!(filter(ok).as_str(), ok);
        }
    }

    #[test]
    fn malformed_shared_subscriptions() {
        let cases: &[(&str, TopicError)] = &[
            ("", TopicError::Empty),
            ("$share/", TopicError::InvalidShareName),
            ("$share//a", TopicError::InvalidShareName),
            ("$share/g+/a", TopicError::InvalidShareName),
            ("$share/#", TopicError::InvalidShareName),
            ("$share/+/a", TopicError::InvalidShareName),
            ("$share/g", TopicError::MissingShareFilter),
            ("$share/g/", TopicError::MissingShareFilter),
            ("$share/g/a#", TopicError::InvalidWildcard),
            ("$share/g/a/#/b", TopicError::InvalidWildcard),
            ("$share/g/a\0", TopicError::Nul),
            ("a/b#", TopicError::InvalidWildcard),
        ];
        for (input, expected) in cases {
            assert_eq!(SubscriptionFilter::parse(input), Err(*expected), "input {input:?}");
        }
    }

    #[test]
    fn shared_subscriptions_parse_and_round_trip() {
        let shared = SubscriptionFilter::parse("$share/workers/jobs/+/#").unwrap();
        assert!(shared.is_shared());
        assert_eq!(shared.group(), Some("workers"));
        assert_eq!(shared.filter(), &filter("jobs/+/#"));
        assert_eq!(shared.as_str(), "$share/workers/jobs/+/#");

        // Only the exact prefix makes a shared subscription.
        for plain in ["$share", "$SHARE/g/a", "a/$share/g/b", "$sharex/g/a"] {
            let parsed = SubscriptionFilter::parse(plain).unwrap();
            assert_eq!(parsed, SubscriptionFilter::Plain(filter(plain)));
            assert_eq!(parsed.group(), None);
            assert_eq!(parsed.as_str(), plain);
        }
        // The filter of a share may itself start with '/' or be '#'.
        let slash = SubscriptionFilter::parse("$share/g//a").unwrap();
        assert_eq!(slash.filter(), &filter("/a"));
        assert_eq!(slash.to_string(), "$share/g//a");
    }

    #[test]
    fn levels_and_counts() {
        let t = name("/a//b/");
        assert_eq!(t.levels().collect::<Vec<_>>(), ["", "a", "", "b", ""]);
        assert_eq!(t.level_count(), 5);
        assert!(!t.is_dollar());
        assert!(name("$SYS/x").is_dollar());
        let f = filter("a/+/#");
        assert_eq!(f.level_count(), 3);
        assert!(f.has_wildcards());
        assert!(!filter("a/b").has_wildcards());
        assert_eq!(filter("a/b").to_topic_name(), Some(name("a/b")));
        assert_eq!(f.to_topic_name(), None);
        assert_eq!(TopicFilter::from(name("x/y")), filter("x/y"));
    }

    #[test]
    fn serde_validates() {
        use serde::de::value::{Error, MapDeserializer};

        #[derive(Debug, Deserialize)]
        struct Holder {
            name: TopicName,
            filter: TopicFilter,
        }
        fn load(name: &'static str, filter: &'static str) -> Result<Holder, Error> {
            Holder::deserialize(MapDeserializer::<_, Error>::new(
                [("name", name), ("filter", filter)].into_iter(),
            ))
        }
        let v = load("a/b", "a/#").unwrap();
        assert_eq!((v.name.as_str(), v.filter.as_str()), ("a/b", "a/#"));
        let err = load("a/+", "a/#").unwrap_err().to_string();
        assert!(err.contains("invalid topic name") && err.contains("wildcard"), "{err}");
        let err = load("a/b", "a/#/b").unwrap_err().to_string();
        assert!(err.contains("invalid topic filter"), "{err}");
    }
}
