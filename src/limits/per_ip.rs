//! `limits.max_connections_per_ip`: open connections per source address, so that one host
//! cannot take every connection slot of the server.
//!
//! IPv4 addresses count one by one. IPv6 addresses count per /64, the smallest network one
//! subscriber normally gets: a host that owns a /64 could otherwise open the limit from each
//! of its 2^64 addresses. IPv4-mapped IPv6 addresses count as their IPv4 address. The table
//! holds only addresses with open connections, so it is bounded by `limits.max_connections`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use mesgd_core::sync::lock;

/// Open connections per source address (or IPv6 /64).
#[derive(Debug)]
pub struct PerIpConnections {
    max: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// Held by a connection for as long as it is open; its address's count drops with it.
#[derive(Debug)]
pub struct IpSlot {
    key: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// The address a connection from `addr` counts against.
pub fn counted_as(addr: IpAddr) -> IpAddr {
    match addr.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

impl PerIpConnections {
    /// At most `max` open connections per address.
    pub fn new(max: usize) -> Self {
        PerIpConnections { max, open: Arc::default() }
    }

    /// The limit.
    pub fn max(&self) -> usize {
        self.max
    }

    /// A slot for one more connection from `addr`, unless its address has `max` open.
    pub fn try_open(&self, addr: IpAddr) -> Option<IpSlot> {
        let key = counted_as(addr);
        let mut open = lock(&self.open);
        let count = open.entry(key).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(IpSlot { key, open: Arc::clone(&self.open) })
    }

    /// How many connections `addr`'s address has open.
    pub fn open_from(&self, addr: IpAddr) -> usize {
        lock(&self.open).get(&counted_as(addr)).copied().unwrap_or(0)
    }

    /// How many addresses have connections open.
    pub fn addresses(&self) -> usize {
        lock(&self.open).len()
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn each_address_gets_the_limit_and_closing_frees_it() {
        let limit = PerIpConnections::new(2);
        let a1 = limit.try_open(ip("192.0.2.1")).unwrap();
        let _a2 = limit.try_open(ip("192.0.2.1")).unwrap();
        assert!(limit.try_open(ip("192.0.2.1")).is_none());
        assert!(limit.try_open(ip("::ffff:192.0.2.1")).is_none(), "the mapped form is the same host");
        let _b = limit.try_open(ip("192.0.2.2")).unwrap();
        drop(a1);
        assert_eq!(limit.open_from(ip("192.0.2.1")), 1);
        let _a3 = limit.try_open(ip("192.0.2.1")).unwrap();
        assert_eq!(limit.addresses(), 2);
    }

    #[test]
    fn ipv6_counts_per_64_and_the_table_empties() {
        let limit = PerIpConnections::new(1);
        let slot = limit.try_open(ip("2001:db8:1:2::1")).unwrap();
        assert!(limit.try_open(ip("2001:db8:1:2:ffff::9")).is_none(), "same /64");
        let other = limit.try_open(ip("2001:db8:1:3::1")).unwrap();
        drop((slot, other));
        assert_eq!(limit.addresses(), 0);
    }
}
