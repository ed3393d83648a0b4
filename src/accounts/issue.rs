//! Issuing a grant token: the one function behind `POST /auth/admin/issue` (an admin API
//! token) and `POST /api/v1/users/{name}/grant-token` (any admin credential of the REST API,
//! e.g. the console's browser session), so both carry exactly the same patterns and expiry.

use std::time::SystemTime;

use mesgd_providers::builtin::UserDirectory;
use mesgd_providers::grants::GrantError;

use crate::context::ServerContext;

/// Why no grant token was issued.
#[derive(Debug)]
pub(crate) enum IssueRefusal {
    /// No user of that name.
    NoUser(String),
    /// The account may not hold one (disabled, or no pattern assigned).
    Refused(GrantError),
    /// The signing keys are not open.
    Unavailable,
}

/// A grant token for `user`, carrying the patterns assigned at this moment, and its expiry
/// (seconds since the Unix epoch).
pub(crate) async fn grant_token(
    ctx: &ServerContext,
    directory: &UserDirectory,
    user: &str,
) -> Result<(String, u64), IssueRefusal> {
    // The patterns assigned at this moment, whoever changed them last.
    directory.catch_up().await;
    let Some(record) = directory.find_user(user).await else {
        return Err(IssueRefusal::NoUser(user.to_owned()));
    };
    let issued = ctx
        .content
        .with_keys(move |keys| mesgd_providers::grants::issue_grant(keys, &record, SystemTime::now()))
        .await;
    match issued {
        Some(Ok(token)) => Ok(token),
        Some(Err(e)) => Err(IssueRefusal::Refused(e)),
        None => Err(IssueRefusal::Unavailable),
    }
}
