//! ACL rules and their evaluation.

use serde::{Deserialize, Serialize};

/// What a rule grants (or, for [`Permission::Deny`], refuses) on the topics its pattern matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Subscribe and receive.
    Read,
    /// Publish.
    Write,
    /// Both read and write.
    #[serde(alias = "rw", alias = "all")]
    ReadWrite,
    /// Neither: the first matching `deny` rule hides the topic.
    Deny,
}

/// One ACL rule: a topic filter pattern (which may contain `%u` and `%c`) and a permission.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A topic filter; `%u` is replaced by the username and `%c` by the client id.
    pub pattern: String,
    /// What the rule grants or refuses.
    pub permission: Permission,
}
