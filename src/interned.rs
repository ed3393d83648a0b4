//! Names that many connections share, kept once: every client admitted by a provider names it,
//! and a fresh `Arc<str>` per client would cost each idle connection about 32 bytes for a name
//! that a whole fleet has in common.

use std::sync::{Arc, Mutex};

use mesgd_core::sync::lock;

/// Distinct names kept at most; names past it are still handed out, just not shared. Provider
/// names come from the configuration, so a handful is the usual count.
const MAX_NAMES: usize = 64;

/// A small set of shared names.
#[derive(Debug, Default)]
pub(crate) struct Names {
    names: Mutex<Vec<Arc<str>>>,
}

impl Names {
    /// `name` as an `Arc<str>`, the same one for every caller that asks for an equal name.
    pub(crate) fn get(&self, name: &str) -> Arc<str> {
        let mut names = lock(&self.names);
        if let Some(known) = names.iter().find(|known| ***known == *name) {
            return known.clone();
        }
        let fresh: Arc<str> = Arc::from(name);
        if names.len() < MAX_NAMES {
            names.push(fresh.clone());
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{MAX_NAMES, Names};

    #[test]
    fn equal_names_share_one_allocation_up_to_the_bound() {
        let names = Names::default();
        let a = names.get("anonymous");
        let b = names.get("anonymous");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &names.get("builtin")));
        for i in 0..MAX_NAMES {
            names.get(&format!("p{i}"));
        }
        let past = names.get("one-too-many");
        assert_eq!(&*past, "one-too-many");
        assert!(!Arc::ptr_eq(&past, &names.get("one-too-many")), "past the bound, names are not kept");
        assert!(Arc::ptr_eq(&a, &names.get("anonymous")), "names kept before stay shared");
    }
}
