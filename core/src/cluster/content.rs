//! Content routing's seams to the cluster: the content front end tells the cluster layer which
//! listener paths this node has and hands it each message after local delivery
//! ([`ContentCluster`]); the cluster layer hands messages from other nodes back
//! ([`LocalContent`]). Without `[cluster]` neither is installed.
//!
//! Each node publishes its distinct listener paths; every node matches a message against the
//! other nodes' paths with the indexed [`Matcher`](crate::content::Matcher) and sends it only
//! to the nodes with a matching listener. `docs/cluster.md` ("Content routing across nodes")
//! has the design.

use std::fmt;

use bytes::Bytes;

use crate::content::{Message, Path};

/// Which listeners a message may reach.
#[derive(Clone, Copy, Debug)]
pub enum Reach<'a> {
    /// Every listener whose path the message matches (a listener's own message).
    All,
    /// Only matching listeners whose path one of these patterns covers (a grant sender's).
    Covered(&'a [Path]),
}

/// The content front end's view of the cluster.
pub trait ContentCluster: Send + Sync + fmt::Debug {
    /// This node now has a listener on `path` (canonical), and had none.
    fn path_added(&self, path: &Path);
    /// This node's last listener on `path` left.
    fn path_removed(&self, path: &Path);
    /// A message from a sender of this node (`text` scanned as `message`), after local
    /// delivery: sent to the nodes with a listener it reaches. Never waits.
    fn forward(&self, message: &Message<'_>, text: &Bytes, reach: Reach<'_>);
}

/// The cluster layer's view of this node's content listeners.
pub trait LocalContent: Send + Sync + fmt::Debug {
    /// Hands a message from another node to this node's listeners it reaches; returns how
    /// many. `text` is valid UTF-8 JSON, scanned as `message`.
    fn deliver(&self, message: &Message<'_>, text: &Bytes, reach: Reach<'_>) -> usize;
}

/// The subject a node receives content messages on: `mesgd.content.<node>`.
pub fn node_subject(node: &str) -> String {
    format!("mesgd.content.{node}")
}

/// The KV key of `node`'s listener path `path`: `<node>.<32 hex digits of the SHA-256 of the
/// canonical text>` (two tokens; the value holds the text itself).
pub fn path_key(node: &str, path: &Path) -> String {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, path.to_string().as_bytes());
    let mut key = String::with_capacity(node.len() + 33);
    key.push_str(node);
    key.push('.');
    for b in &digest.as_ref()[..16] {
        key.push_str(&format!("{b:02x}"));
    }
    key
}

/// The header that carries a grant sender's patterns to other nodes.
pub const REACH_HEADER: &str = "Mesgd-Reach";

/// Encodes patterns for [`REACH_HEADER`]: their canonical texts, each percent-encoded (so no
/// pattern holds a space, a control character or a non-ASCII byte), separated by spaces.
pub fn encode_reach(patterns: &[Path]) -> String {
    let mut out = String::new();
    for (i, p) in patterns.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        for b in p.to_string().bytes() {
            if b.is_ascii_graphic() && b != b'%' {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// Why a [`REACH_HEADER`] value could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReachError {
    /// More patterns than [`MAX_REACH_PATTERNS`].
    #[error("more than {MAX_REACH_PATTERNS} patterns in the reach header")]
    TooMany,
    /// A pattern that is not a valid content path (percent-decoded); the index is 0-based.
    #[error("pattern {index} of the reach header is not a valid content path: {reason}")]
    Pattern {
        /// Which pattern.
        index: usize,
        /// Why.
        reason: String,
    },
}

/// The most patterns a reach header may carry.
pub const MAX_REACH_PATTERNS: usize = 256;

/// Reads a [`REACH_HEADER`] value written by [`encode_reach`]. An empty value is no pattern.
pub fn decode_reach(value: &str) -> Result<Vec<Path>, ReachError> {
    let mut patterns = Vec::new();
    for (index, piece) in value.split(' ').filter(|p| !p.is_empty()).enumerate() {
        if index >= MAX_REACH_PATTERNS {
            return Err(ReachError::TooMany);
        }
        let path =
            Path::from_url_path(piece).map_err(|e| ReachError::Pattern { index, reason: e.to_string() })?;
        patterns.push(path);
    }
    Ok(patterns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reach_round_trips() {
        let patterns: Vec<Path> = ["/room=*", "/kind=chat/room=lobby one", "/a=é%/b", "/"]
            .iter()
            .map(|p| Path::parse(p).unwrap())
            .collect();
        let header = encode_reach(&patterns);
        assert!(header.bytes().all(|b| b.is_ascii_graphic() || b == b' '), "{header}");
        assert_eq!(decode_reach(&header), Ok(patterns));
        assert_eq!(decode_reach(""), Ok(vec![]));
    }

    #[test]
    fn malformed_reach_headers_get_typed_errors() {
        assert!(matches!(decode_reach("/a=b=c"), Err(ReachError::Pattern { index: 0, .. })));
        assert!(matches!(decode_reach("/a=1 /%zz"), Err(ReachError::Pattern { index: 1, .. })));
        assert!(matches!(decode_reach("/a=1 /%C3%28"), Err(ReachError::Pattern { index: 1, .. })));
        assert!(matches!(decode_reach("/a=1/a=2"), Err(ReachError::Pattern { index: 0, .. })));
        assert_eq!(decode_reach(&vec!["/a"; 257].join(" ")), Err(ReachError::TooMany));
    }

    #[test]
    fn path_keys_are_two_tokens() {
        let p = Path::parse("/kind=chat/room=a.b c").unwrap();
        let key = path_key("node-1", &p);
        assert_eq!(key.split('.').count(), 2);
        assert_eq!(key.len(), "node-1.".len() + 32);
        assert_eq!(key, path_key("node-1", &Path::parse("/room=a.b c/kind=chat").unwrap()));
        assert_ne!(key, path_key("node-1", &Path::parse("/kind=chat").unwrap()));
        assert_eq!(node_subject("b"), "mesgd.content.b");
    }
}
