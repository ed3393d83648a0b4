//! Which client ids this node holds in the session registry, at which revision, and whether a
//! newer claim elsewhere has superseded it.
//!
//! Revisions are the KV bucket's stream sequences, so for one key they only grow: a takeover
//! request carrying revision `n` supersedes this node's claim exactly when this node's
//! revision is lower. The request may even arrive while this node's own claim is still in
//! flight (two nodes claiming at once, each asking the other to close); the highest revision
//! requested is kept, and once the claim lands its revision decides whether it still owns the
//! id. One entry per MQTT session on this node (or claim in progress), removed when the
//! session ends here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use mesgd_core::sync::lock;

#[derive(Debug, Default, Clone, Copy)]
struct Held {
    /// The revision of this node's record; 0 while the first claim is in flight.
    revision: u64,
    /// The highest revision another node's takeover request carried.
    superseded_by: u64,
}

impl Held {
    fn owned(self) -> bool {
        self.superseded_by <= self.revision
    }
}

/// What a takeover request means here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No claim of the id here, nothing to do.
    Unknown,
    /// This node's claim is newer than the request's: it keeps the id.
    Stale,
    /// The request's claim is newer: close the connection and end the session here.
    Superseded,
}

/// What to do with the record of a session that ended here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Delete it at this revision: this node owns it.
    Delete(u64),
    /// Nothing: a newer claim elsewhere holds it.
    Nothing,
    /// This node never claimed the id (a session restored from storage at start): the record
    /// may still name this node from before the restart.
    Unknown,
}

/// The table; cheap to share.
#[derive(Debug, Default)]
pub(crate) struct Holdings {
    held: Mutex<HashMap<Arc<str>, Held>>,
}

impl Holdings {
    /// A claim of `id` starts (with the client lock held).
    pub(crate) fn begin(&self, id: &Arc<str>) {
        lock(&self.held).entry(id.clone()).or_default();
    }

    /// The claim of `id` failed: a first claim leaves no entry; an earlier one stays.
    pub(crate) fn failed(&self, id: &str) {
        let mut held = lock(&self.held);
        if held.get(id).is_some_and(|h| h.revision == 0) {
            held.remove(id);
        }
    }

    /// The claim of `id` landed at `revision`. Returns whether this node owns the id (a newer
    /// claim's request may have come while this one was in flight).
    pub(crate) fn claimed(&self, id: &Arc<str>, revision: u64) -> bool {
        let mut held = lock(&self.held);
        let h = held.entry(id.clone()).or_default();
        h.revision = h.revision.max(revision);
        h.owned()
    }

    /// A takeover request for `id` at `revision` came.
    pub(crate) fn supersede(&self, id: &str, revision: u64) -> Verdict {
        let mut held = lock(&self.held);
        let Some(h) = held.get_mut(id) else { return Verdict::Unknown };
        h.superseded_by = h.superseded_by.max(revision);
        if revision > h.revision { Verdict::Superseded } else { Verdict::Stale }
    }

    /// Whether this node owns `id` (true for an id it never claimed: nothing says otherwise).
    pub(crate) fn still_owner(&self, id: &str) -> bool {
        lock(&self.held).get(id).is_none_or(|h| h.owned())
    }

    /// The session of `id` ended here: forgets the id, and says what to do with its record.
    pub(crate) fn release(&self, id: &str) -> Release {
        match lock(&self.held).remove(id) {
            None => Release::Unknown,
            Some(h) if h.owned() && h.revision > 0 => Release::Delete(h.revision),
            Some(_) => Release::Nothing,
        }
    }

    /// The revision at which this node owns `id`, if it does (claimed, not superseded).
    pub(crate) fn owned_revision(&self, id: &str) -> Option<u64> {
        lock(&self.held).get(id).filter(|h| h.owned() && h.revision > 0).map(|h| h.revision)
    }

    /// Whether this node has no claim of `id` (none made, none in flight).
    pub(crate) fn is_unknown(&self, id: &str) -> bool {
        !lock(&self.held).contains_key(id)
    }

    /// Forgets `id` if a newer claim superseded this node's; returns whether it did.
    pub(crate) fn forget_superseded(&self, id: &str) -> bool {
        let mut held = lock(&self.held);
        if held.get(id).is_some_and(|h| !h.owned() && h.revision > 0) {
            held.remove(id);
            return true;
        }
        false
    }

    /// Forgets every claim, made in a bucket that is gone; returns the ids held, for claiming
    /// again in the new one.
    pub(crate) fn take_all(&self) -> Vec<Arc<str>> {
        lock(&self.held).drain().map(|(id, _)| id).collect()
    }

    /// How many ids this node holds or is claiming.
    pub(crate) fn len(&self) -> usize {
        lock(&self.held).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn a_claim_is_released_at_its_revision() {
        let h = Holdings::default();
        h.begin(&id("c"));
        assert!(h.claimed(&id("c"), 5));
        assert!(h.still_owner("c"));
        assert_eq!(h.release("c"), Release::Delete(5));
        assert_eq!(h.release("c"), Release::Unknown, "forgotten");
        assert!(h.is_unknown("c"));
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn a_newer_claim_supersedes_and_an_older_request_is_stale() {
        let h = Holdings::default();
        h.begin(&id("c"));
        h.claimed(&id("c"), 5);
        assert_eq!(h.supersede("c", 3), Verdict::Stale);
        assert!(h.still_owner("c"));
        assert_eq!(h.supersede("c", 9), Verdict::Superseded);
        assert!(!h.still_owner("c"));
        assert_eq!(h.release("c"), Release::Nothing, "a superseded claim deletes nothing");
        assert_eq!(h.supersede("nobody", 9), Verdict::Unknown);
    }

    #[test]
    fn a_request_during_the_claim_decides_once_it_lands() {
        // Both nodes claim at once: the request of the newer claim arrives before ours lands.
        let h = Holdings::default();
        h.begin(&id("c"));
        assert_eq!(h.supersede("c", 8), Verdict::Superseded);
        assert!(!h.claimed(&id("c"), 7), "ours (7) is older than the request's (8)");
        assert!(h.forget_superseded("c"));
        // The other order: the request is of an older claim than ours.
        h.begin(&id("d"));
        h.supersede("d", 6);
        assert!(h.claimed(&id("d"), 7));
        assert!(!h.forget_superseded("d"));
        assert_eq!(h.release("d"), Release::Delete(7));
    }

    #[test]
    fn after_take_all_a_claim_in_the_new_bucket_counts_from_its_revisions() {
        let h = Holdings::default();
        h.begin(&id("c"));
        h.claimed(&id("c"), 500);
        h.supersede("c", 400);
        assert_eq!(h.take_all(), [id("c")]);
        assert!(h.is_unknown("c"));
        // The new bucket's revisions start again from 1: claimed there at 3, the request of a
        // newer claim there (5) supersedes it, as the old bucket's 500 would have hidden.
        h.begin(&id("c"));
        assert!(h.claimed(&id("c"), 3));
        assert_eq!(h.supersede("c", 5), Verdict::Superseded);
    }

    #[test]
    fn a_failed_first_claim_leaves_nothing_and_a_reclaim_restores_ownership() {
        let h = Holdings::default();
        h.begin(&id("c"));
        h.failed("c");
        assert_eq!(h.len(), 0);
        h.begin(&id("c"));
        h.claimed(&id("c"), 2);
        h.supersede("c", 4);
        h.begin(&id("c"));
        h.failed("c");
        assert!(!h.still_owner("c"), "an earlier claim stays as it was");
        assert!(h.claimed(&id("c"), 6), "this node claimed it back");
        assert_eq!(h.release("c"), Release::Delete(6));
    }
}
