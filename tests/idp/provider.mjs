// The identity provider Relay's integration and console tests run against: npm `oidc-provider` (a certified
// OpenID Provider) on a port the test chose, with the keys the test generated (so the test can also sign bad
// tokens with the same kid). Started by tests/support/idp.py:
//
//   node tests/idp/provider.mjs --port P --issuer http://127.0.0.1:P --jwks KEYS.json --config CONFIG.json
//
// KEYS.json is a JWKS of private keys (the first RS256 key signs). CONFIG.json: audience, resource, the two
// clients and the lifetimes (see `settings` below). Test-only routes, never part of a real provider:
//   POST /__test/reconfigure  (body: {"jwks": a JWKS of private keys, "settings": {...}}, either optional)
//                        replaces the signing keys (new tokens carry the new kid; jwks_uri publishes only the
//                        new public keys) and/or settings (the console's redirect URIs). Sessions, grants and
//                        refresh tokens survive (one in-memory store serves every Provider instance).
//   GET  /__test/health  answers 200 once the provider serves.
// Logins: the built-in development pages (devInteractions) accept any login and password; the account id is
// the login typed, its e-mail `<login>@example.com` (a login containing "@" is its own e-mail).
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import Provider, { errors } from 'oidc-provider';
// Not part of the package's documented API (the version is pinned exactly): its development in-memory adapter,
// made once here so that every Provider instance of this process (see reconfigure) shares one store.
import { createMemoryAdapter } from 'oidc-provider/lib/adapters/memory_adapter.js';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string' },
    issuer: { type: 'string' },
    jwks: { type: 'string' },
    config: { type: 'string' },
    host: { type: 'string', default: '127.0.0.1' },
  },
});
for (const name of ['port', 'issuer', 'jwks', 'config']) {
  if (!args[name]) {
    console.error(`provider.mjs: --${name} is required`);
    process.exit(2);
  }
}

const settings = {
  audience: 'relay-api',
  resource: 'urn:relay:api',
  resourceScope: 'relay',
  consoleClientId: 'relay-console',
  consoleRedirectUris: [],
  consolePostLogoutRedirectUris: [],
  deviceClientId: 'relay-cli',
  accessTokenTtl: 300,
  idTokenTtl: 300,
  refreshTokenTtl: 3600,
  deviceCodeTtl: 300,
  sessionTtl: 3600,
  ...JSON.parse(readFileSync(args.config, 'utf8')),
};

// Cookie signing keys: fresh per run (nothing a test needs to know).
const cookieKeys = [randomBytes(32).toString('hex')];
const sharedAdapter = createMemoryAdapter();

function emailOf(login) {
  return login.includes('@') ? login : `${login}@example.com`;
}

function personClaims(accountId) {
  return { email: emailOf(accountId), email_verified: true, name: accountId };
}

function configuration(jwks) {
  return {
    jwks,
    adapter: sharedAdapter,
    cookies: { keys: cookieKeys },
    clients: [
      {
        client_id: settings.consoleClientId,
        client_name: 'Relay console',
        application_type: 'web',
        token_endpoint_auth_method: 'none',
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        redirect_uris: settings.consoleRedirectUris,
        post_logout_redirect_uris: settings.consolePostLogoutRedirectUris,
      },
      {
        client_id: settings.deviceClientId,
        client_name: 'Relay CLI',
        application_type: 'native',
        token_endpoint_auth_method: 'none',
        grant_types: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'],
        response_types: [],
        redirect_uris: [],
        scope: `openid offline_access email profile ${settings.resourceScope}`,
      },
    ],
    scopes: ['openid', 'offline_access', 'email', 'profile', settings.resourceScope],
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    // Relay's access tokens are for its resource, not for userinfo: the ID token carries the person's claims.
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    clientBasedCORS: () => false,
    async findAccount(_ctx, sub) {
      return { accountId: sub, async claims() { return { sub, ...personClaims(sub) }; } };
    },
    // Conductor's tokens carry `email`: so do these JWT access tokens (next to iss, aud, sub, iat, exp).
    async extraTokenClaims(_ctx, token) {
      return token.kind === 'AccessToken' && token.accountId ? personClaims(token.accountId) : undefined;
    },
    features: {
      devInteractions: { enabled: true },
      deviceFlow: { enabled: true },
      revocation: { enabled: true },
      rpInitiatedLogout: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // A request without `resource` is for Relay's API all the same (one resource server here).
        defaultResource: (_ctx, _client, oneOf) => (oneOf ? oneOf[0] : settings.resource),
        useGrantedResource: () => true,
        getResourceServerInfo(_ctx, indicator) {
          if (indicator !== settings.resource) throw new errors.InvalidTarget();
          return {
            scope: settings.resourceScope,
            audience: settings.audience,
            accessTokenTTL: settings.accessTokenTtl,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
    // offline_access without prompt=consent: the device flow's client asks for it and gets a refresh token.
    issueRefreshToken: (_ctx, client, code) => client.grantTypeAllowed('refresh_token')
      && code.scopes.has('offline_access'),
    ttl: {
      AccessToken: settings.accessTokenTtl,
      IdToken: settings.idTokenTtl,
      RefreshToken: settings.refreshTokenTtl,
      DeviceCode: settings.deviceCodeTtl,
      Session: settings.sessionTtl,
      Grant: settings.sessionTtl,
      Interaction: 600,
      AuthorizationCode: 60,
    },
  };
}

function makeProvider(jwks) {
  const provider = new Provider(args.issuer, configuration(jwks));
  // Why a request failed, for the log a failing test quotes (error names and details only, never tokens).
  for (const event of ['grant.error', 'authorization.error', 'device_authorization.error',
    'code_verification.error', 'end_session.error', 'revocation.error', 'server_error']) {
    provider.on(event, (_ctx, err) => console.error(`${event}: ${err.name} ${err.message} ${err.error_detail || ''}`));
  }
  return { provider, handle: provider.callback() };
}


function readBody(req, limit = 1 << 20) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > limit) reject(new Error('body too large'));
      else chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function answer(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

let currentJwks = JSON.parse(readFileSync(args.jwks, 'utf8'));

// Body: {"jwks": {...}} and/or {"settings": {...}} (merged over the current settings). A new Provider instance
// takes over: oidc-provider cannot change keys or clients at runtime; the shared adapter carries sessions,
// grants and refresh tokens over.
let current = makeProvider(currentJwks);

async function reconfigure(req, res) {
  try {
    const body = JSON.parse(await readBody(req));
    const jwks = body.jwks || currentJwks;
    const next = { ...settings, ...(body.settings || {}) };
    const previous = { ...settings };
    Object.assign(settings, next);
    try {
      current = makeProvider(jwks);
    } catch (err) {
      Object.assign(settings, previous);
      throw err;
    }
    currentJwks = jwks;
    answer(res, 200, { kids: jwks.keys.map((key) => key.kid) });
  } catch (err) {
    answer(res, 400, { error: String(err.message || err) });
  }
}

const server = createServer((req, res) => {
  const path = req.url.split('?')[0];
  if (path === '/__test/reconfigure' && req.method === 'POST') {
    reconfigure(req, res);
  } else if (path === '/__test/health') {
    answer(res, 200, { ok: true });
  } else {
    current.handle(req, res);
  }
});

server.listen(Number(args.port), args.host, () => {
  console.log(`oidc-provider listening on ${args.host}:${args.port}, issuer ${args.issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => process.exit(0));
}
