//! ACL rules that arrive as JSON: the `acl` claim of a JWT and the `acl` of a webhook answer.
//!
//! Every rule is checked with [`Rule::validate`] (its pattern must be a valid topic filter once
//! `%u` and `%c` are filled in), so a malformed rule refuses the answer instead of silently
//! matching nothing. Only the documented object form is read, and the array is bounded.

use mesgd_core::acl::Rule;
use serde::Deserialize as _;

/// The most rules one identity may carry from a token or a webhook answer: enough for any real
/// policy, small enough that a hostile answer cannot make every ACL check slow.
pub(crate) const MAX_EXTERNAL_RULES: usize = 1_000;

/// Reads a JSON array of `{pattern, permission}` objects into validated rules.
pub(crate) fn rules_from_json(value: &serde_json::Value) -> Result<Vec<Rule>, String> {
    let Some(items) = value.as_array() else {
        return Err("the ACL must be an array of {pattern, permission} objects".to_owned());
    };
    if items.len() > MAX_EXTERNAL_RULES {
        return Err(format!("the ACL has {} rules, more than the {MAX_EXTERNAL_RULES} allowed", items.len()));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            // serde would also take `["pattern", "read"]`; only the documented object form is
            // accepted, so that a rule always says which field is which.
            if !item.is_object() {
                return Err(format!("rule {}: not a {{pattern, permission}} object", i + 1));
            }
            let rule = Rule::deserialize(item).map_err(|e| format!("rule {}: {e}", i + 1))?;
            rule.validate().map_err(|e| format!("rule {}: {e}", i + 1))?;
            Ok(rule)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesgd_core::acl::Permission;
    use serde_json::json;

    #[test]
    fn patterns_table() {
        let good = ["#", "+", "a/b", "devices/%u/#", "+/+/x", "/", "a//b", "$SYS/#", "%c", "a b/ü"];
        let check = |pattern: &str| rules_from_json(&json!([{"pattern": pattern, "permission": "read"}]));
        for pattern in good {
            assert!(check(pattern).is_ok(), "{pattern:?} refused: {:?}", check(pattern));
        }
        let long = "a".repeat(65_536);
        let bad = ["", "a/#/b", "a#", "#/", "a/b+", "+a/b", "a\0b", "##", long.as_str()];
        for pattern in bad {
            assert!(check(pattern).is_err(), "{pattern:?} accepted");
        }
    }

    #[test]
    fn json_rules_table() {
        let ok = rules_from_json(&json!([
            {"pattern": "a/%u/#", "permission": "read"},
            {"pattern": "b", "permission": "rw"},
            {"pattern": "c", "permission": "all"},
            {"pattern": "#", "permission": "deny"},
        ]))
        .expect("valid rules");
        let permissions: Vec<_> = ok.iter().map(|r| r.permission).collect();
        assert_eq!(
            permissions,
            [Permission::Read, Permission::ReadWrite, Permission::ReadWrite, Permission::Deny]
        );
        assert_eq!(rules_from_json(&json!([])), Ok(vec![]));

        let too_many: Vec<_> =
            (0..=MAX_EXTERNAL_RULES).map(|_| json!({"pattern": "a", "permission": "read"})).collect();
        let bad = [
            json!({"pattern": "a", "permission": "read"}),
            json!("a"),
            json!(null),
            json!([{"pattern": "a"}]),
            json!([{"pattern": "a", "permission": "write-only"}]),
            json!([{"pattern": "a", "permission": "read", "extra": 1}]),
            json!([{"pattern": 5, "permission": "read"}]),
            json!([{"pattern": "a/#/b", "permission": "read"}]),
            json!([["a", "read"]]),
            json!(too_many),
        ];
        for value in bad {
            assert!(rules_from_json(&value).is_err(), "{value} accepted");
        }
    }
}
