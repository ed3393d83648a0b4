//! A plugin that misbehaves on request, so that the tests can check that mesgd contains every
//! kind of failure: its `config` picks the behaviour of the instance (`{"mode": "..."}`):
//!
//! | mode | what `authenticate` does |
//! |---|---|
//! | `panic` | panics |
//! | `hang` | never returns |
//! | `fail` | returns an error |
//! | `bad-acl` | allows with an ACL rule whose pattern is not a topic filter |
//! | `panic-unless-good` | allows a client whose username is `good`, panics for every other |
//!
//! and `{"mode": "panic-in-create"}` / `{"mode": "fail-in-create"}` fail `create` itself. It is
//! built by the tests, never shipped.

use mesgd_plugin_api::{AclRule, BoxError, Permission, Plugin, Request, Response};

enum Mode {
    Panic,
    Hang,
    Fail,
    BadAcl,
    PanicUnlessGood,
}

struct Misbehaving {
    mode: Mode,
}

impl Plugin for Misbehaving {
    const NAME: &'static str = "misbehaving";

    fn create(config: mesgd_plugin_api::serde_json::Value) -> Result<Self, BoxError> {
        let mode = match config.get("mode").and_then(|m| m.as_str()) {
            Some("panic") => Mode::Panic,
            Some("hang") => Mode::Hang,
            Some("fail") => Mode::Fail,
            Some("bad-acl") => Mode::BadAcl,
            Some("panic-unless-good") => Mode::PanicUnlessGood,
            Some("panic-in-create") => panic!("create was told to panic"),
            Some("fail-in-create") => return Err("create was told to fail".into()),
            other => return Err(format!("unknown mode {other:?}").into()),
        };
        Ok(Misbehaving { mode })
    }

    fn authenticate(&self, request: &Request) -> Result<Response, BoxError> {
        match self.mode {
            Mode::Panic => panic!("authenticate was told to panic"),
            Mode::Hang => loop {
                // Parking can wake spuriously; the loop makes the hang real.
                std::thread::park();
            },
            Mode::Fail => Err("the backend is unreachable".into()),
            Mode::BadAcl => {
                Ok(Response::allow().with_acl(Some(vec![AclRule::new("a/#/b", Permission::Read)])))
            }
            Mode::PanicUnlessGood if request.username.as_deref() == Some("good") => Ok(Response::allow()),
            Mode::PanicUnlessGood => panic!("not good"),
        }
    }
}

mesgd_plugin_api::export_plugin!(Misbehaving);
