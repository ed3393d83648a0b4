// A real OpenID provider (panva's oidc-provider) for tests/accounts_oauth.rs.
//
// It listens on a free loopback port and prints `issuer URL`; it then reads one line from its
// standard input, the redirect URI of the mesgd server under test, registers one confidential
// client with it (client id `mesgd`, secret `mesgd-secret`, client_secret_post) and prints
// `ready`. Logins go through oidc-provider's development interactions: any login name is
// accepted and becomes the ID token's `sub`.
import http from 'node:http';
import readline from 'node:readline';
import Provider from 'oidc-provider';

let handler = (_req, res) => {
  res.statusCode = 503;
  res.end('not ready');
};
const server = http.createServer((req, res) => handler(req, res));
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  console.log(`issuer ${issuer}`);
  const lines = readline.createInterface({ input: process.stdin });
  lines.once('line', (redirectUri) => {
    const provider = new Provider(issuer, {
      clients: [
        {
          client_id: 'mesgd',
          client_secret: 'mesgd-secret',
          redirect_uris: [redirectUri.trim()],
          token_endpoint_auth_method: 'client_secret_post',
          grant_types: ['authorization_code'],
          response_types: ['code'],
        },
      ],
      pkce: { required: () => true },
      features: { devInteractions: { enabled: true } },
    });
    handler = provider.callback();
    console.log('ready');
  });
  // The test closes stdin (or dies): stop with it.
  process.stdin.on('end', () => process.exit(0));
});
