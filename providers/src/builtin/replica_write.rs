//! How a record received from the cluster is written into the store: in one immediate
//! transaction that reads the store's record, compares it with what the replicator expects
//! there, and writes only if it still holds that ([`Store::replace_replicated`]).
//!
//! The store is written by more than the replicator: `mesgd user ...` and `mesgd acl ...` (other
//! processes) and the REST API commit their own transactions at any time. A replicator that
//! read the record, decided, and wrote in a second step could overwrite a local change that
//! committed in between: the change was then lost on this node, and never published, since the
//! store no longer held it when the broker looked. Inside one immediate transaction (SQLite's
//! write lock taken before the read) no other writer can come between the read and the write,
//! so a local change is either seen (and kept, to be published next) or made after the write
//! (and then published, later in the stream's order, and wins everywhere).
//!
//! Each kind of record says how it is read and written ([`Replica`], implemented next to its
//! type in [`super::replica`] and [`super::admin_replica`]).

use rusqlite::{Transaction, TransactionBehavior};

use super::replica::ReplicaError;
use super::store::{Store, StoreError};

/// A record kind the cluster replicates, as the store holds it.
pub trait Replica: PartialEq + Sized {
    /// The name the record is stored under.
    fn name(&self) -> &str;
    /// Checks every field as the store would at an edit.
    fn validate(&self) -> Result<(), ReplicaError>;
    /// Whether `held`, as the store holds it, already says all this record says (a user from an
    /// older node leaves patterns and roles out, and holds whatever the store has of them).
    fn held_by(&self, held: &Self) -> bool {
        self == held
    }
    /// Whether the store makes this record as a side effect of writing another (an empty role,
    /// made when a user that names it is written): such a record is no local change, and a
    /// record from the cluster is written over it where none was expected.
    fn is_placeholder(&self) -> bool {
        false
    }
    /// The store's record `name`, read inside `tx`.
    fn load(store: &Store, tx: &Transaction<'_>, name: &str) -> Result<Option<Self>, StoreError>;
    /// Makes the store's record `self.name()` exactly this record.
    fn write(&self, tx: &Transaction<'_>) -> rusqlite::Result<()>;
    /// Removes the record `name` (and what hangs on it).
    fn delete(tx: &Transaction<'_>, name: &str) -> rusqlite::Result<()>;
}

/// What the store must hold for a replicated record to be written over it.
#[derive(Debug)]
pub enum Expect<'a, R> {
    /// Whatever it holds: the record from the cluster wins.
    Anything,
    /// This state (`None`: no record of that name); anything else is a local change that
    /// has not gone out yet, and it is kept.
    Holds(Option<&'a R>),
}

// By hand: a derive would ask `R: Copy`, and a reference is `Copy` whatever it points to.
impl<R> Clone for Expect<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Expect<'_, R> {}

/// What [`Store::replace_replicated`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replaced {
    /// The record was written (or removed).
    Written,
    /// The store already held it: nothing was written, and the store's `data_version` did not
    /// move.
    Unchanged,
    /// The store held neither the expected state nor the wanted one: a local change, left as
    /// it is.
    KeptLocal,
}

impl Store {
    /// The store's records of these names as they travel (`None`: no such record), read in one
    /// transaction.
    pub fn replicated_records<R: Replica>(
        &self,
        names: &[String],
    ) -> Result<std::collections::HashMap<String, Option<R>>, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.db(e))?;
        names.iter().map(|name| Ok((name.clone(), R::load(self, &tx, name)?))).collect()
    }

    /// Makes the store's record `name` `wanted` (`None`: removed) if it holds what `expected`
    /// says, all in one immediate transaction (see the module documentation).
    pub fn replace_replicated<R: Replica>(
        &self,
        name: &str,
        expected: Expect<'_, R>,
        wanted: Option<&R>,
    ) -> Result<Replaced, ReplicaError> {
        if let Some(record) = wanted {
            record.validate()?;
            if record.name() != name {
                return Err(ReplicaError::Inconsistent("a record written under another's name".into()));
            }
        }
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(|e| self.db(e))?;
        let current = R::load(self, &tx, name)?;
        let holds = |state: Option<&R>| match (state, current.as_ref()) {
            (None, None) => true,
            (Some(state), Some(current)) => state.held_by(current),
            _ => false,
        };
        // Returning without a commit rolls the (unwritten) transaction back.
        if holds(wanted) {
            return Ok(Replaced::Unchanged);
        }
        if let Expect::Holds(expected) = expected {
            let placeholder = expected.is_none() && current.as_ref().is_some_and(R::is_placeholder);
            if !holds(expected) && !placeholder {
                return Ok(Replaced::KeptLocal);
            }
        }
        match wanted {
            Some(record) => record.write(&tx),
            None => R::delete(&tx, name),
        }
        .map_err(|e| self.db(e))?;
        tx.commit().map_err(|e| self.db(e))?;
        Ok(Replaced::Written)
    }
}

#[cfg(test)]
mod tests {
    use mesgd_core::acl::{Permission, Rule};

    use super::super::replica::tests::store;
    use super::super::replica::{ReplicatedRole, ReplicatedUser};
    use super::super::store::AuthType;
    use super::*;

    fn ann(store: &Store) -> ReplicatedUser {
        ReplicatedUser::of(&store.user("ann").unwrap().unwrap())
    }

    #[test]
    fn a_record_is_written_only_over_the_state_expected() {
        let (_dir, store) = store();
        store.add_user("ann", AuthType::Basic, Some(b"secret"), false).unwrap();
        let base = ann(&store);
        let mut remote = base.clone();
        remote.disabled = true;
        assert_eq!(
            store.replace_replicated("ann", Expect::Holds(Some(&base)), Some(&remote)).unwrap(),
            Replaced::Written
        );
        assert!(ann(&store).disabled);
        assert_eq!(
            store.replace_replicated("ann", Expect::Holds(Some(&base)), Some(&remote)).unwrap(),
            Replaced::Unchanged,
            "what the store holds already is not written, whatever was expected"
        );

        // A local change the replicator has not seen is kept.
        store.add_rule("ann", Rule::new("a/#", Permission::Read), None).unwrap();
        let mut later = remote.clone();
        later.disabled = false;
        assert_eq!(
            store.replace_replicated("ann", Expect::Holds(Some(&remote)), Some(&later)).unwrap(),
            Replaced::KeptLocal
        );
        let held = ann(&store);
        assert!(held.disabled);
        assert_eq!(held.rules, vec![Rule::new("a/#", Permission::Read)]);
        // So is a removal, and a record made here where the replicator expected none.
        assert_eq!(
            store.replace_replicated::<ReplicatedUser>("ann", Expect::Holds(Some(&remote)), None).unwrap(),
            Replaced::KeptLocal
        );
        assert_eq!(
            store.replace_replicated("ann", Expect::Holds(None), Some(&later)).unwrap(),
            Replaced::KeptLocal
        );
        assert!(store.user("ann").unwrap().is_some());
        assert_eq!(
            store.replace_replicated::<ReplicatedUser>("ann", Expect::Holds(Some(&held)), None).unwrap(),
            Replaced::Written
        );
        assert!(store.user("ann").unwrap().is_none());
        assert_eq!(
            store.replace_replicated::<ReplicatedUser>("ann", Expect::Holds(None), None).unwrap(),
            Replaced::Unchanged
        );

        // An empty role made by a user's write is no local change; a role with patterns is.
        store.add_role("ops").unwrap();
        let ops = ReplicatedRole { name: "ops".into(), patterns: vec!["/site=1".into()] };
        assert_eq!(
            store.replace_replicated("ops", Expect::Holds(None), Some(&ops)).unwrap(),
            Replaced::Written
        );
        let other = ReplicatedRole { name: "ops".into(), patterns: vec!["/site=2".into()] };
        assert_eq!(
            store.replace_replicated("ops", Expect::Holds(None), Some(&other)).unwrap(),
            Replaced::KeptLocal
        );
        // ... and a removal from the cluster still removes an empty role.
        store.add_role("idle").unwrap();
        let empty = ReplicatedRole { name: "idle".into(), patterns: Vec::new() };
        let removed = store.replace_replicated::<ReplicatedRole>("idle", Expect::Holds(Some(&empty)), None);
        assert_eq!(removed.unwrap(), Replaced::Written);
        assert!(store.replicated_role("idle").unwrap().is_none());

        // The record must be the one named.
        assert!(store.replace_replicated("bob", Expect::Anything, Some(&later)).is_err());
        assert!(store.user("bob").unwrap().is_none());
    }

    /// The broker's replicator and a command line (another connection to the same file) write
    /// one user at once: the command adds rules one by one while the replicator keeps applying
    /// remote changes of the user's flag. Not one of the command's rules may be lost; with the
    /// read and the write in two steps, a rule committed between them was overwritten.
    #[test]
    fn a_local_command_committing_meanwhile_is_never_overwritten() {
        const RULES: usize = 200;
        let (dir, store) = store();
        store.add_user("ann", AuthType::Basic, Some(b"secret"), false).unwrap();
        let command = Store::open(&dir.path().join("config.db")).unwrap();
        let adder = std::thread::spawn(move || {
            for i in 0..RULES {
                // The replicator below writes as fast as it can, which on a loaded machine can
                // keep the file's lock from this connection past its busy timeout: the command
                // then fails, having added nothing, and is run again, as its user would.
                loop {
                    match command.add_rule("ann", Rule::new(format!("r/{i}"), Permission::Read), None) {
                        Ok(_) => break,
                        Err(StoreError::Database { source, .. })
                            if source.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        });
        let mut base = ann(&store);
        let mut written = 0;
        while !adder.is_finished() || written == 0 {
            let mut remote = base.clone();
            remote.disabled = !remote.disabled;
            match store.replace_replicated("ann", Expect::Holds(Some(&base)), Some(&remote)).unwrap() {
                Replaced::Written => {
                    written += 1;
                    base = remote;
                }
                // The directory would notice the change and publish it; the replicator then
                // knows the store to hold it.
                Replaced::KeptLocal | Replaced::Unchanged => base = ann(&store),
            }
        }
        adder.join().unwrap();
        let rules = ann(&store).rules;
        assert_eq!(rules.len(), RULES, "every rule the command added is there");
        assert!(written > 0);
    }
}
