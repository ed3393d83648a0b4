//! `limits.exempt`: networks whose clients the per-address limits and the per-address login
//! throttle leave alone — a load balancer or TLS-terminating proxy that every client comes
//! through, a health checker. Empty by default: every address is limited.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

/// Why an entry of `limits.exempt` is not a network.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExemptError {
    /// Neither `address/prefix` nor a bare address.
    #[error("{entry:?} is not a network (`192.0.2.0/24`, `2001:db8::/32`) or an address")]
    NotANetwork {
        /// The entry as written.
        entry: String,
    },
    /// An `address/prefix` with bits set after the prefix (`10.0.0.1/8`), which usually means
    /// a typo in the prefix length.
    #[error("{entry:?} has host bits set; did you mean {network}?")]
    HostBits {
        /// The entry as written.
        entry: String,
        /// The network the prefix selects.
        network: IpNet,
    },
}

/// A list of networks; an address is exempt when one of them contains it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exempt(Vec<IpNet>);

impl Exempt {
    /// Parses each entry: `address/prefix`, or a bare address (a network of one).
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Exempt, ExemptError> {
        entries.iter().map(|e| parse_entry(e.as_ref())).collect::<Result<_, _>>().map(Exempt)
    }

    /// Whether `addr` (an IPv4-mapped IPv6 address counts as its IPv4 address) is exempt.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        self.0.iter().any(|net| net.contains(&addr))
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn parse_entry(entry: &str) -> Result<IpNet, ExemptError> {
    let text = entry.trim();
    if let Ok(addr) = text.parse::<IpAddr>() {
        return Ok(IpNet::from(addr.to_canonical()));
    }
    let net: IpNet = text.parse().map_err(|_| ExemptError::NotANetwork { entry: entry.to_owned() })?;
    if net.trunc() != net {
        return Err(ExemptError::HostBits { entry: entry.to_owned(), network: net.trunc() });
    }
    Ok(net)
}

impl fmt::Display for Exempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self.0.iter().map(IpNet::to_string).collect();
        write!(f, "[{}]", list.join(", "))
    }
}

impl<'de> Deserialize<'de> for Exempt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = Vec::<String>::deserialize(deserializer)?;
        Exempt::parse(&entries).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_and_addresses_table() {
        let exempt = Exempt::parse(&["127.0.0.0/8", "10.1.2.3", "2001:db8::/32", " ::1 "]).unwrap();
        for inside in ["127.0.0.1", "127.255.0.9", "10.1.2.3", "2001:db8::7", "::1", "::ffff:127.0.0.1"] {
            assert!(exempt.contains(inside.parse().unwrap()), "{inside}");
        }
        for outside in ["128.0.0.1", "10.1.2.4", "2001:db9::1", "::2", "::ffff:10.1.2.4"] {
            assert!(!exempt.contains(outside.parse().unwrap()), "{outside}");
        }
        assert!(!Exempt::default().contains("127.0.0.1".parse().unwrap()));
    }

    #[test]
    fn malformed_entries_are_refused_with_the_entry() {
        for (entry, message) in [
            ("127.0.0.0/33", "not a network"),
            ("localhost", "not a network"),
            ("", "not a network"),
            ("10.0.0.0/8/8", "not a network"),
            ("10.0.0.1/8", "did you mean 10.0.0.0/8"),
            ("2001:db8::1/32", "did you mean 2001:db8::/32"),
        ] {
            let error = Exempt::parse(&[entry]).unwrap_err().to_string();
            assert!(error.contains(message) && error.contains(entry), "{entry:?}: {error}");
        }
    }
}
