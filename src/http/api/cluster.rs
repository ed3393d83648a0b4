//! With `[cluster]`: the console's browser sessions on every node. The session table becomes
//! the node's copy of the cluster's sessions (`browser_sessions`, and `mesgd-cluster`'s
//! `console` for the NATS side), and login CSRF tokens are signed with a key every node
//! shares, so that a load balancer may send each request of the console to any node.
//! `docs/cluster.md` ("Console sessions on every node") has the design.

use std::sync::{Arc, Weak};
use std::time::Duration;

use hmac::{Hmac, Mac as _};
use mesgd_core::cluster::console::{Applied, Change, LocalConsole};
use sha2::Sha256;

use crate::context::ServerContext;

/// What the login CSRF key is derived for, from the cluster's login key (a key of its own for
/// this use: a login CSRF token is never a login session).
const LOGIN_CSRF_KEY_LABEL: &[u8] = b"mesgd console login CSRF token v1";

/// This node's session table, as the cluster layer sees it.
#[derive(Debug)]
struct LocalSessions(Weak<ServerContext>);

impl LocalConsole for LocalSessions {
    fn apply(&self, id: &str, change: Change) -> Applied {
        self.0.upgrade().map_or(Applied::Stale, |ctx| ctx.api.sessions.apply(id, change))
    }

    fn revisions(&self) -> Vec<(String, u64)> {
        self.0.upgrade().map_or_else(Vec::new, |ctx| ctx.api.sessions.revisions())
    }
}

/// Takes the console's sessions across nodes: the login CSRF key derived from the cluster's
/// login key (adopted by then), the sessions' bucket followed into the table, which writes to
/// it from now on. Before the listeners open.
pub(crate) async fn attach(
    ctx: &Arc<ServerContext>,
    cluster: &mesgd_cluster::Cluster,
) -> Result<(), mesgd_cluster::StartError> {
    if let Some(logins) = ctx.services().get::<mesgd_providers::sessions::Sessions>() {
        let mut mac = Hmac::<Sha256>::new_from_slice(&logins.shared_key())
            .unwrap_or_else(|_| unreachable!("any key length"));
        mac.update(LOGIN_CSRF_KEY_LABEL);
        ctx.api.share_login_key(mac.finalize().into_bytes().into());
    }
    let local = Arc::new(LocalSessions(Arc::downgrade(ctx)));
    // Records outlive the idle timeout twice over, then go by themselves (a session in use is
    // written again long before).
    let max_age = ctx.api.sessions.idle().saturating_mul(2).max(Duration::from_secs(1));
    let seam = cluster.attach_console(local, max_age).await?;
    ctx.api.sessions.set_cluster(seam);
    Ok(())
}
