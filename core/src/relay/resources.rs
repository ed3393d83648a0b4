//! The reserved topic namespace through which ACL rules cover relay resources: addresses, rooms
//! and games are checked as topics under `$relay/`, so one rule language (and one ACL engine)
//! covers MQTT topics and relay resources alike.
//!
//! | resource | topic | register / join / enter | send / ack / open_pipe / room_send |
//! |---|---|---|---|
//! | address `A` | `$relay/addr/A` | `register` needs **read** | `send`, `ack`, `open_pipe` to `A` need **write** |
//! | room `R` | `$relay/room/R` | `join_room` needs **read** | `room_send` needs **write** |
//! | game `G` | `$relay/game/G` | `find_match` needs **write** | — |
//!
//! Holding an address means receiving what is sent to it, so claiming it is a *read*; sending
//! to it writes into it. That way `{"$relay/addr/%u", read}` plus `{"$relay/addr/#", write}`
//! says "may hold only its own address, may send to anyone", which a single access could not.
//! Entering matchmaking announces the caller to a stranger, like a publish, so it is a write.
//!
//! # Escaping
//!
//! Names are 1–256 characters of anything. `/` is kept as the level separator, so hierarchical
//! names (`devices/42`) can be matched level by level (`$relay/addr/devices/#`). The characters
//! a topic name cannot hold, and the escape character itself, are percent-escaped with
//! uppercase hex: `%` → `%25`, `+` → `%2B`, `#` → `%23`, U+0000 → `%00`. The mapping is
//! injective (two names never share a topic) and leaves every other character as it is. An ACL
//! rule names an escaped resource the same way: the room `a+b` is `$relay/room/a%2Bb`.
//!
//! The whole `$relay/` namespace is reserved like `$SYS/`: no client publish may go there
//! ([`crate::broker::is_reserved_topic`]), and a wildcard-first pattern such as `#` does not
//! match it (MQTT's `$` rule), so only rules that name `$relay/…` grant relay resources.

use crate::topic::TopicName;

/// The first level of the reserved relay namespace.
pub const RELAY_TOPIC_ROOT: &str = "$relay";

/// A relay resource an ACL rule can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource<'a> {
    /// An address (`$relay/addr/…`).
    Address(&'a str),
    /// A room (`$relay/room/…`).
    Room(&'a str),
    /// A matchmaking game tag (`$relay/game/…`).
    Game(&'a str),
}

impl Resource<'_> {
    /// The level after `$relay/` that names the resource's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Resource::Address(_) => "addr",
            Resource::Room(_) => "room",
            Resource::Game(_) => "game",
        }
    }

    fn name(&self) -> &str {
        match self {
            Resource::Address(n) | Resource::Room(n) | Resource::Game(n) => n,
        }
    }

    /// The topic the ACL checks for this resource: `$relay/<kind>/<escaped name>`.
    pub fn topic(&self) -> TopicName {
        let name = self.name();
        let mut topic = String::with_capacity(RELAY_TOPIC_ROOT.len() + 6 + name.len());
        topic.push_str(RELAY_TOPIC_ROOT);
        topic.push('/');
        topic.push_str(self.kind());
        topic.push('/');
        escape_into(name, &mut topic);
        // Escaping removes every character a topic name refuses, and a relay name is at most
        // 256 characters (1 KiB), far below the 65,535-byte limit: this cannot fail. Should it
        // ever, the fallback topic names no resource and matches no rule that names one.
        TopicName::try_from(topic)
            .unwrap_or_else(|_| TopicName::try_from(format!("{RELAY_TOPIC_ROOT}/invalid")).expect("valid"))
    }
}

/// Appends `name` with `%`, `+`, `#` and U+0000 percent-escaped.
pub fn escape_into(name: &str, out: &mut String) {
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '+' => out.push_str("%2B"),
            '#' => out.push_str("%23"),
            '\0' => out.push_str("%00"),
            c => out.push(c),
        }
    }
}

/// Whether `topic` is in the reserved relay namespace (`$relay` or below).
pub fn is_relay_topic(topic: &str) -> bool {
    topic == RELAY_TOPIC_ROOT
        || topic.strip_prefix(RELAY_TOPIC_ROOT).is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::acl::{Access, Acl, Permission, Rule};

    #[test]
    fn topics_of_each_kind() {
        let cases = [
            (Resource::Address("alice"), "$relay/addr/alice"),
            (Resource::Address("devices/42"), "$relay/addr/devices/42"),
            (Resource::Address("a+b#c%d\0e"), "$relay/addr/a%2Bb%23c%25d%00e"),
            (Resource::Room("lobby"), "$relay/room/lobby"),
            (Resource::Game("chess/blitz"), "$relay/game/chess/blitz"),
            (Resource::Address("/"), "$relay/addr//"),
            (Resource::Room("😀"), "$relay/room/😀"),
        ];
        for (resource, topic) in cases {
            assert_eq!(resource.topic().as_str(), topic, "{resource:?}");
        }
    }

    #[test]
    fn the_reserved_prefix() {
        assert!(is_relay_topic("$relay"));
        assert!(is_relay_topic("$relay/addr/x"));
        assert!(!is_relay_topic("$relayx"));
        assert!(!is_relay_topic("relay/x"));
        assert!(!is_relay_topic("$SYS/x"));
    }

    #[test]
    fn rules_name_resources_the_documented_way() {
        let rules = [
            Rule::new("$relay/addr/%u", Permission::Read),
            Rule::new("$relay/addr/#", Permission::Write),
            Rule::new("$relay/room/a%2Bb", Permission::ReadWrite),
            Rule::new("#", Permission::ReadWrite),
        ];
        let acl = Acl::compile(Some(&rules), Some("alice"), "alice");
        let allows = |access, r: Resource<'_>| acl.allows(access, &r.topic());
        assert!(allows(Access::Read, Resource::Address("alice")));
        assert!(!allows(Access::Read, Resource::Address("bob")), "may hold only its own address");
        assert!(allows(Access::Write, Resource::Address("bob")), "may send to anyone");
        assert!(allows(Access::Read, Resource::Room("a+b")));
        assert!(!allows(Access::Read, Resource::Room("ab")), "`#` does not reach into `$relay`");
        assert!(!allows(Access::Write, Resource::Game("chess")));
    }

    proptest! {
        /// Two different names never map to the same topic, and every name maps to a valid one.
        #[test]
        fn escaping_is_injective(a in "[a%+#/\\x00b]{1,12}", b in "[a%+#/\\x00b]{1,12}") {
            let (ta, tb) = (Resource::Room(&a).topic(), Resource::Room(&b).topic());
            prop_assert_eq!(ta == tb, a == b);
            prop_assert!(ta.as_str().starts_with("$relay/room/"));
        }
    }
}
