//! Which node instances are alive, as this node's lease watcher (`wills`) sees the node
//! leases: each node's current instance, and whether its lease was taken over (it died).
//!
//! A node instance is *gone* once the lease of its node names another instance (the node
//! restarted) or was taken over by another node (it stopped renewing it for `lease_ms`), or
//! was deleted. What the relay keeps about other nodes (pipe ends, their figures) follows this,
//! so that a dead node's leftovers end within the lease takeover's bound without a protocol
//! of their own. A node not seen yet is not gone: it may have just started.

use std::collections::HashMap;

use tokio::sync::watch;

/// What the lease of one node says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeLease {
    /// The instance that wrote it.
    pub(crate) instance: u64,
    /// False once it was taken over (or deleted): that instance is dead.
    pub(crate) alive: bool,
}

/// The leases as last seen, by node name; watchers are woken when one changes.
#[derive(Debug)]
pub(crate) struct Liveness {
    leases: watch::Sender<HashMap<String, NodeLease>>,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness { leases: watch::channel(HashMap::new()).0 }
    }
}

impl Liveness {
    /// The lease watcher read `node`'s lease: `None` when it was deleted or cannot be read
    /// (then the instance last seen is dead). Watchers are woken only by a change (renewals
    /// rewrite the same lease every `lease_ms / 3`).
    pub(crate) fn seen(&self, node: &str, lease: Option<NodeLease>) {
        self.leases.send_if_modified(|leases| {
            let next = match (lease, leases.get(node)) {
                (Some(lease), _) => lease,
                (None, Some(last)) => NodeLease { alive: false, ..*last },
                (None, None) => return false,
            };
            leases.insert(node.to_owned(), next) != Some(next)
        });
    }

    /// Whether `instance` of `node` is gone (`None`: whichever instance `node` runs).
    pub(crate) fn is_gone(&self, node: &str, instance: Option<u64>) -> bool {
        self.leases
            .borrow()
            .get(node)
            .is_some_and(|lease| !lease.alive || instance.is_some_and(|i| i != lease.instance))
    }

    /// Whether `instance` of `node` holds a lease that was not taken over.
    pub(crate) fn is_alive(&self, node: &str, instance: u64) -> bool {
        self.leases.borrow().get(node).is_some_and(|lease| lease.alive && lease.instance == instance)
    }

    /// The nodes whose lease was not taken over, but `except`.
    pub(crate) fn alive_nodes(&self, except: &str) -> Vec<String> {
        self.leases
            .borrow()
            .iter()
            .filter(|(node, lease)| lease.alive && **node != *except)
            .map(|(node, _)| node.clone())
            .collect()
    }

    /// Woken at each change of a lease.
    pub(crate) fn subscribe(&self) -> watch::Receiver<HashMap<String, NodeLease>> {
        self.leases.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_is_gone_when_its_lease_is_taken_over_replaced_or_deleted() {
        let live = Liveness::default();
        let mut changes = live.subscribe();
        assert!(!live.is_gone("b", Some(1)), "a node not seen yet may have just started");
        live.seen("b", Some(NodeLease { instance: 1, alive: true }));
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();
        live.seen("b", Some(NodeLease { instance: 1, alive: true }));
        assert!(!changes.has_changed().unwrap(), "a renewal is no change");
        assert!(!live.is_gone("b", Some(1)) && !live.is_gone("b", None) && live.is_alive("b", 1));
        assert_eq!(live.alive_nodes("a"), ["b"]);
        assert!(live.alive_nodes("b").is_empty());

        live.seen("b", Some(NodeLease { instance: 2, alive: true }));
        assert!(live.is_gone("b", Some(1)), "restarted");
        assert!(!live.is_gone("b", Some(2)) && !live.is_alive("b", 1));

        live.seen("b", Some(NodeLease { instance: 2, alive: false }));
        assert!(live.is_gone("b", Some(2)) && live.is_gone("b", None), "taken over");
        assert!(live.alive_nodes("a").is_empty());

        live.seen("c", Some(NodeLease { instance: 7, alive: true }));
        live.seen("c", None);
        assert!(live.is_gone("c", Some(7)), "deleted");
        live.seen("d", None);
        assert!(!live.is_gone("d", None), "a delete of a lease never seen tells nothing");
    }
}
