//! OAuth login against a real OpenID provider: panva's `oidc-provider` (tests/oidc/, installed
//! by `npm ci --prefix tests/oidc`) on a loopback port, one client registered with this
//! server's `/auth/oauth/complete`. The whole authorization-code flow with PKCE is stepped
//! through by hand (the provider's development login and consent forms), and the session it
//! ends in opens `GET /account`. Refusals: an unknown provider, a tampered state, a reused
//! state, an account that does not exist here.

#[path = "common/content.rs"]
mod content;
#[path = "common/npm.rs"]
#[allow(unreachable_pub)]
mod npm;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

use content::{ContentServer, within};
use mesgd_providers::builtin::{AuthType, Store, config_db_path};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The running provider (killed when dropped) and the mesgd server using it.
struct Setup {
    _provider: Child,
    _lines: Lines<BufReader<ChildStdout>>,
    server: ContentServer,
    secrets: tempfile::TempDir,
    issuer: String,
    web: reqwest::Client,
}

async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>, what: &str) -> String {
    within(what, lines.next_line()).await.expect("read the provider's output").unwrap_or_else(|| {
        panic!("the provider exited before {what} (see its output above; is tests/oidc installed?)")
    })
}

/// Starts tests/oidc/provider.mjs, then a mesgd server with it as `[[auth.oauth]]` "local"
/// and the accounts alice (enabled) and bob (disabled), then registers the server's redirect
/// URI at the provider.
async fn setup() -> Setup {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc");
    npm::ensure(&dir, "oidc-provider");
    let mut provider = Command::new("node")
        .arg(dir.join("provider.mjs"))
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run node (install nodejs, as .ci/run does): {e}"));
    let mut lines = BufReader::new(provider.stdout.take().expect("stdout")).lines();
    let first = next_line(&mut lines, "the issuer line").await;
    let issuer = first.strip_prefix("issuer ").unwrap_or_else(|| panic!("unexpected: {first}")).to_owned();

    let secrets = tempfile::tempdir().unwrap();
    let secret_file = secrets.path().join("client-secret");
    std::fs::write(&secret_file, "mesgd-secret\n").unwrap();
    let server = ContentServer::start(&format!(
        "[[auth.oauth]]\nname = \"local\"\nissuer = {issuer:?}\nclient_id = \"mesgd\"\nclient_secret_file = {:?}\n",
        secret_file.display().to_string()
    ))
    .await;
    let st = Store::open(&config_db_path(&server.storage())).unwrap();
    st.set_pbkdf2_iterations(1000).unwrap();
    st.add_user("alice", AuthType::Basic, Some(b"pw"), false).unwrap();
    st.add_user("bob", AuthType::Basic, Some(b"pw"), false).unwrap();

    let stdin = provider.stdin.as_mut().expect("stdin");
    let redirect = format!("http://{}/auth/oauth/complete\n", server.addr);
    stdin.write_all(redirect.as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    assert_eq!(next_line(&mut lines, "the provider's ready line").await, "ready");
    let web = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    Setup { _provider: provider, _lines: lines, server, secrets, issuer, web }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// A browser's cookies for the provider (one host; the paths do not matter to it here).
#[derive(Default)]
struct Jar(BTreeMap<String, String>);

impl Jar {
    fn keep(&mut self, answer: &reqwest::Response) {
        for set in answer.headers().get_all(reqwest::header::SET_COOKIE) {
            let pair = set.to_str().unwrap().split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() {
                self.0.remove(name);
            } else {
                self.0.insert(name.to_owned(), value.to_owned());
            }
        }
    }

    fn header(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }
}

impl Setup {
    /// `GET /auth/oauth/start?provider=local`: the provider's authorization URL it redirects to.
    async fn start(&self) -> String {
        let answer = self
            .web
            .get(format!("http://{}/auth/oauth/start?provider=local", self.server.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 302);
        let location = answer.headers()[reqwest::header::LOCATION].to_str().unwrap().to_owned();
        assert!(location.starts_with(&self.issuer), "{location}");
        location
    }

    /// A URL the provider sent, made absolute.
    fn absolute(&self, url: &str) -> String {
        if url.starts_with('/') { format!("{}{url}", self.issuer) } else { url.to_owned() }
    }

    /// Follows the provider's redirects from `url`, sending `form` first if given, until it
    /// redirects out of the provider (answering that URL) or shows a page (answering its
    /// form's action and `None`).
    async fn browse(
        &self,
        jar: &mut Jar,
        mut url: String,
        mut form: Option<String>,
    ) -> Result<String, String> {
        for _ in 0..10 {
            let request = match form.take() {
                Some(body) => {
                    self.web.post(&url).header("content-type", "application/x-www-form-urlencoded").body(body)
                }
                None => self.web.get(&url),
            };
            let answer = within("the provider", request.header("cookie", jar.header()).send()).await.unwrap();
            jar.keep(&answer);
            if answer.status().is_redirection() {
                let next = answer.headers()[reqwest::header::LOCATION].to_str().unwrap();
                url = self.absolute(next);
                if !url.starts_with(&self.issuer) {
                    return Ok(url);
                }
                continue;
            }
            let status = answer.status();
            let page = answer.text().await.unwrap();
            assert_eq!(status, 200, "{url}: {page}");
            let action = page.split("action=\"").nth(1).and_then(|r| r.split('"').next());
            let action = action.unwrap_or_else(|| panic!("{url}: a page without a form: {page}"));
            return Err(self.absolute(action));
        }
        panic!("more than 10 redirects at the provider");
    }

    /// Logs in at the provider as `who` from the authorization URL and consents: the URL the
    /// provider redirects back to (this server's `/auth/oauth/complete?code&state`).
    async fn authorize(&self, authorization: String, who: &str) -> String {
        let mut jar = Jar::default();
        let login = self.browse(&mut jar, authorization, None).await.expect_err("the login form");
        let form = format!("prompt=login&login={who}&password=anything");
        let consent = self.browse(&mut jar, login, Some(form)).await.expect_err("the consent form");
        let back =
            self.browse(&mut jar, consent, Some("prompt=consent".into())).await.expect("back to mesgd");
        assert!(back.starts_with(&format!("http://{}/auth/oauth/complete?", self.server.addr)), "{back}");
        assert!(back.contains("code=") && back.contains("state="), "{back}");
        back
    }

    /// GET on this server: the status and JSON body.
    async fn get(&self, url: &str, headers: &str) -> (u16, serde_json::Value) {
        let path = url.split_once(&self.server.addr.to_string()).map_or(url, |(_, p)| p);
        let (status, body) = self.server.http("GET", path, headers, "").await;
        (status, json(&body))
    }
}

fn state_of(url: &str) -> String {
    let query = url.split_once('?').unwrap().1;
    let state = query.split('&').find_map(|kv| kv.strip_prefix("state=")).unwrap();
    state.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oauth_login_gets_a_session_that_opens_the_account_and_its_state_works_once() {
    let s = setup().await;
    let authorization = s.start().await;
    for part in ["code_challenge_method=S256", "code_challenge=", "nonce=", "client_id=mesgd", "scope=openid"]
    {
        assert!(authorization.contains(part), "{part} in {authorization}");
    }
    let back = s.authorize(authorization, "alice").await;
    let (status, body) = s.get(&back, "").await;
    assert_eq!(status, 200, "{body}");
    let token = body["token"].as_str().unwrap();
    assert!(body["expires_at"].as_u64().is_some(), "{body}");
    let (status, account) = s.get("/account", &format!("authorization: Bearer {token}\r\n")).await;
    assert_eq!((status, account["name"].as_str()), (200, Some("alice")), "{account}");

    let (status, body) = s.get(&back, "").await;
    assert_eq!(status, 400, "a state is good once: {body}");
    assert!(body["error"].as_str().unwrap().contains("state"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_state_is_refused_and_leaves_the_login_to_its_holder() {
    let s = setup().await;
    let back = s.authorize(s.start().await, "alice").await;
    let state = state_of(&back);
    let (id, secret) = state.split_once('.').unwrap();
    let flipped: String = secret
        .chars()
        .enumerate()
        .map(|(i, c)| if i == 0 { if c == 'A' { 'B' } else { 'A' } } else { c })
        .collect();
    let tampered = back.replace(&state, &format!("{id}.{flipped}"));
    assert_ne!(tampered, back);
    let (status, body) = s.get(&tampered, "").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = s.get("/auth/oauth/complete?state=nonsense&code=x", "").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = s.get(&back, "").await;
    assert_eq!(status, 200, "the real state still completes: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_that_does_not_exist_or_is_disabled_is_refused() {
    let s = setup().await;
    let back = s.authorize(s.start().await, "mallory").await;
    let (status, body) = s.get(&back, "").await;
    assert_eq!(status, 403, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("mallory") && error.contains("no such account"), "{error}");

    Store::open(&config_db_path(&s.server.storage())).unwrap().set_disabled("bob", true).unwrap();
    let back = s.authorize(s.start().await, "bob").await;
    let (status, body) = s.get(&back, "").await;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"].as_str().unwrap().contains("disabled"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_client_secret_fails_the_code_exchange() {
    let s = setup().await;
    let back = s.authorize(s.start().await, "alice").await;
    // Read at each exchange: the provider refuses the client, so no session.
    std::fs::write(s.secrets.path().join("client-secret"), "not-the-secret\n").unwrap();
    let (status, body) = s.get(&back, "").await;
    assert_eq!(status, 401, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("code exchange failed") && !error.contains("not-the-secret"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_provider_is_refused() {
    let s = setup().await;
    let (status, body) = s.get("/auth/oauth/start?provider=elsewhere", "").await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("elsewhere"), "{body}");
    let (status, _) = s.get("/auth/oauth/start", "").await;
    assert_eq!(status, 400);
}
