//! Coverage: does a granted pattern allow a narrower path?
//!
//! `a.covers(b)` holds exactly when every message that `b` matches is matched by `a` too. For
//! the path language that is a check segment by segment, because every valid path can match
//! some message (conflicting values and mixed positions and names are refused when parsing):
//!
//! - `/` covers every path;
//! - `key=value` in `a` needs the same `key=value` in `b`;
//! - `key=*` in `a` needs `key` in `b`, with any condition;
//! - an array position `n=*` in `a` also follows from any position `m ≥ n` in `b`, since an
//!   array with an element at `m` has one at `n`.
//!
//! So `/room=lobby` covers `/room=lobby/from=ann` but not `/room=*`, and `/room=*` covers
//! `/room=lobby`. A `*` segment ends a path, so `/room=lobby/*` is `/room=lobby`, and a pattern
//! such as `/*/room=lobby` is `/`, which covers everything.

use super::path::{Constraint, Key, Path};

impl Path {
    /// Whether this pattern allows `narrower`: every message `narrower` matches, this matches.
    pub fn covers(&self, narrower: &Path) -> bool {
        self.segments().all(|seg| match (seg.key, seg.constraint) {
            (Key::Position(n), Constraint::Present) => {
                narrower.segments().any(|s| matches!(s.key, Key::Position(m) if m >= n))
            }
            (_, Constraint::Present) => narrower.segments().any(|s| s.key == seg.key),
            (_, Constraint::Equals(v)) => {
                narrower.segments().any(|s| s.key == seg.key && s.constraint == Constraint::Equals(v))
            }
        })
    }
}
