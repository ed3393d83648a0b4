//! Locks that survive a panic elsewhere.
//!
//! Every lock in mesgd guards state that is consistent between statements (no invariant is
//! broken across a call that can panic), so a thread that panicked while holding one must not
//! take every other client down with it: the poisoned guard is taken as it is. One helper for
//! the whole workspace, so that the choice is made once.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, recovering the data if a panicking thread poisoned it.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Read-locks `l`, recovering the data if a panicking thread poisoned it.
pub fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Write-locks `l`, recovering the data if a panicking thread poisoned it.
pub fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}
