//! With `[cluster]`: content routing's side of the cluster seams. [`Link`] tells the cluster
//! layer which distinct listener paths this node has (reference-counted: a path is published
//! when its first listener opens and withdrawn when its last closes) and hands it each local
//! message after local delivery; [`LocalListeners`] gives messages from other nodes to this
//! node's listeners. Without `[cluster]` the link is empty and costs one check per message.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;
use mesgd_core::cluster::content::{ContentCluster, LocalContent, Reach};
use mesgd_core::content::{Message, Path};
use mesgd_core::sync::lock;
use tokio_tungstenite::tungstenite::Utf8Bytes;

use super::registry::Role;
use crate::context::ServerContext;

/// The registry's link to the cluster layer.
#[derive(Debug, Default)]
pub(crate) struct Link {
    cluster: OnceLock<Arc<dyn ContentCluster>>,
    /// Listeners per canonical path on this node.
    paths: Mutex<HashMap<Path, usize>>,
}

impl Link {
    /// A listener opened on `path`.
    pub(super) fn opened(&self, path: &Path) {
        let Some(cluster) = self.cluster.get() else { return };
        let mut paths = lock(&self.paths);
        let count = paths.entry(path.clone()).or_insert(0);
        *count += 1;
        if *count == 1 {
            cluster.path_added(path);
        }
    }

    /// A listener on `path` closed.
    pub(super) fn closed(&self, path: &Path) {
        let Some(cluster) = self.cluster.get() else { return };
        let mut paths = lock(&self.paths);
        if let Some(count) = paths.get_mut(path) {
            *count -= 1;
            if *count == 0 {
                paths.remove(path);
                cluster.path_removed(path);
            }
        }
    }

    /// A local sender's message, after local delivery: to the nodes with a listener it reaches.
    pub(super) fn forward(&self, message: &Message<'_>, text: &Utf8Bytes, role: &Role, patterns: &[Path]) {
        let Some(cluster) = self.cluster.get() else { return };
        let reach = match role {
            Role::Listener(_) => Reach::All,
            Role::FilteredSender => Reach::Covered(patterns),
        };
        cluster.forward(message, &Bytes::from(text.clone()), reach);
    }
}

/// This node's listeners, as the cluster layer sees them.
#[derive(Debug)]
pub(crate) struct LocalListeners(Weak<ServerContext>);

impl LocalContent for LocalListeners {
    fn deliver(&self, message: &Message<'_>, text: &Bytes, reach: Reach<'_>) -> usize {
        let Some(ctx) = self.0.upgrade() else { return 0 };
        let Ok(text) = Utf8Bytes::try_from(text.clone()) else { return 0 };
        let patterns = match reach {
            Reach::All => None,
            Reach::Covered(p) => Some(p),
        };
        ctx.content.registry.deliver_remote(message, &text, patterns)
    }
}

/// Takes content routing across nodes (at start, before the listeners open).
pub(crate) async fn attach(
    ctx: &Arc<ServerContext>,
    cluster: &mesgd_cluster::Cluster,
) -> Result<(), mesgd_cluster::StartError> {
    let seam = cluster.attach_content(Arc::new(LocalListeners(Arc::downgrade(ctx)))).await?;
    let _ = ctx.content.registry.cluster.cluster.set(seam);
    Ok(())
}
