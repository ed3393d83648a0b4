//! What the NATS server this node is connected to offers beyond nats-server 2.9, read from the
//! version it reports when the connection is made. The cluster is built on what 2.9 offers
//! (Debian's version); a newer feature is switched on only when the server reports a version
//! that has it, and every use of one falls back to the 2.9 way if the server refuses it after
//! all (a NATS cluster of mixed versions: the server a node is connected to is not the one that
//! leads a stream).

/// The features this node may use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServerFeatures {
    /// Consumers with several filter subjects (`filter_subjects`, nats-server 2.10): one
    /// consumer follows both families of a stream's subjects (plain and `$` topics) instead of
    /// one per family.
    pub(crate) multi_filter_consumers: bool,
}

impl ServerFeatures {
    /// The features of a server that reports `version` (`2.10.26`, `2.11.0-RC.1`); an
    /// unreadable version gets none.
    pub(crate) fn of(version: &str) -> ServerFeatures {
        let release = version.split(['-', '+']).next().unwrap_or("");
        let mut parts = release.split('.').map(|p| p.parse::<u64>().ok());
        let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next()) else {
            return ServerFeatures::default();
        };
        ServerFeatures { multi_filter_consumers: (major, minor) >= (2, 10) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_2_10_have_multi_filter_consumers() {
        for (version, multi) in [
            ("2.9.10", false),
            ("2.9.25", false),
            ("2.10.0", true),
            ("2.10.26", true),
            ("2.11.0-RC.1", true),
            ("3.0.0", true),
            ("1.4.1", false),
            ("", false),
            ("garbage", false),
            ("2", false),
            ("2.x.1", false),
        ] {
            assert_eq!(ServerFeatures::of(version).multi_filter_consumers, multi, "{version}");
        }
    }
}
