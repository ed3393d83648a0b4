//! A provider's live change to the identity of a connected client: new rules apply from the
//! next check on, a revocation closes the connection.

use std::sync::Arc;

use super::Broker;
use crate::acl::Acl;
use crate::auth::IdentityState;
use crate::model::Kick;
use crate::session::Session;

/// What a live identity change means for the connection.
#[derive(Clone, Debug)]
pub enum IdentityUpdate {
    /// The rules changed: the connection checks publishes and subscribes with this ACL from
    /// now on; the session already filters deliveries with it.
    Rules(Acl),
    /// The identity was revoked: close the connection for this reason.
    Revoked(Kick),
}

impl Broker {
    /// Applies `state`, the identity's new state from its provider, to `session` (whose
    /// connection authenticated as `username`): recompiles the ACL (`%u`, `%c`) and installs it
    /// as the receiver ACL, which also drops queued messages the new rules hide.
    pub fn refresh_identity(
        &self,
        session: &Session,
        state: IdentityState,
        username: Option<&str>,
    ) -> IdentityUpdate {
        match state {
            IdentityState::Active(rules) => {
                let acl =
                    Acl::for_client(rules.as_deref(), username.map(Arc::from), session.client_id().clone());
                session.set_acl(acl.clone());
                IdentityUpdate::Rules(acl)
            }
            IdentityState::Revoked(why) => IdentityUpdate::Revoked(Kick::Revoked(why)),
        }
    }
}
