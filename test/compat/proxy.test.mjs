// The official npm e2b SDK and plain fetch against Cove's proxy: what a killed sandbox's
// open stream, a gone sandbox's host and a user's server in a sandbox see.
// test/server (proxy_sdk_test.go) starts the server and runs this file; by hand:
//
//   E2B_API_URL=http://ADDR E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=<key> node --test proxy.test.mjs

import { after, test } from 'node:test'
import assert from 'node:assert/strict'

import { Sandbox, TimeoutError } from 'e2b'

function requireEnv(name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set: run this through test/server or see the comment at the top`)
  return value
}

const apiUrl = requireEnv('E2B_API_URL')
const sandboxUrl = requireEnv('E2B_SANDBOX_URL')
const apiKey = requireEnv('E2B_API_KEY')
const opts = { apiKey, apiUrl, sandboxUrl }
const TIMEOUT = { timeout: 120_000 }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

const made = []
async function create(extra = {}) {
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 120_000, ...extra })
  made.push(sbx.sandboxId)
  return sbx
}

after(async () => {
  for (const id of made) await Sandbox.kill(id, opts).catch(() => {})
})

/** port fetches path from port of sandbox id through the proxy. */
function port(id, p, path = '/', headers = {}) {
  return fetch(sandboxUrl + path, { headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': String(p), ...headers } })
}

test('a sandbox killed while cmd.wait() runs raises the SDK\'s TimeoutError, with Cove\'s kill reason in front', TIMEOUT, async () => {
  const sbx = await create()
  const handle = await sbx.commands.run('sleep 60', { background: true })
  const outcome = handle.wait().then((r) => ({ ok: r }), (err) => ({ err }))
  await sleep(500)
  assert.equal(await Sandbox.kill(sbx.sandboxId, opts), true)
  const { ok, err } = await outcome
  assert.equal(ok, undefined, 'the command must not complete')
  assert.ok(err instanceof TimeoutError, `${err?.name}: ${err?.message}`)
  assert.match(err.message, /The sandbox was killed or reached its end of life while the request was in flight/)
  assert.match(err.message, new RegExp(`sandbox ${sbx.sandboxId} was killed: request at `))
  assert.equal(await sbx.isRunning(), false)
})

test('a gone sandbox\'s port answers E2B\'s exact 502 body; Cove\'s reason is in detail and X-Cove-Reason', TIMEOUT, async () => {
  const sbx = await create()
  assert.equal(await Sandbox.kill(sbx.sandboxId, opts), true)
  for (const id of [sbx.sandboxId, 'inotasandbox000000000']) {
    const res = await port(id, 8000)
    assert.equal(res.status, 502)
    const body = await res.json()
    assert.equal(body.message, 'The sandbox was not found')
    assert.equal(body.sandboxId, id)
    assert.equal(body.code, 502)
    assert.ok(body.detail, `no detail: ${JSON.stringify(body)}`)
    assert.equal(res.headers.get('x-cove-reason'), body.detail)
  }
  // Its owner (a secure sandbox's owner shows its access token) learns why.
  const killed = await (await port(sbx.sandboxId, 8000, '/', { 'X-Access-Token': sbx.envdAccessToken })).json()
  assert.match(killed.detail, new RegExp(`sandbox ${sbx.sandboxId} was killed: request at `))
})

test('a server in the sandbox never sees the team\'s API key, Bearer or cookie, but sees the user\'s own', TIMEOUT, async () => {
  const sbx = await create()
  const server = [
    'import http.server, json',
    'class H(http.server.BaseHTTPRequestHandler):',
    '    def do_GET(self):',
    '        b = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()',
    '        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)',
    'http.server.HTTPServer(("0.0.0.0", 8000), H).serve_forever()',
  ].join('\n')
  await sbx.files.write('/tmp/h.py', server)
  await sbx.commands.run('python3 /tmp/h.py >/dev/null 2>&1', { background: true })
  const ask = (headers) => port(sbx.sandboxId, 8000, '/', headers)
  let res
  for (let i = 0; i < 100; i++) {
    res = await ask({})
    if (res.status === 200) break
    await sleep(100)
  }
  assert.equal(res.status, 200)
  const cases = [
    [{ 'X-API-Key': apiKey }, ['x-api-key']],
    [{ Authorization: `Bearer ${apiKey}` }, ['authorization']],
    [{ 'X-Access-Token': sbx.envdAccessToken ?? 'token' }, ['x-access-token']],
    [{ Cookie: 'cove_session=s3cret' }, ['cookie']],
  ]
  for (const [headers, gone] of cases) {
    const seen = await (await ask(headers)).json()
    for (const h of gone) assert.equal(seen[h], undefined, `${JSON.stringify(headers)}: the server saw ${h}: ${seen[h]}`)
  }
  const own = await (await ask({ Authorization: 'Bearer my-app-token', Cookie: 'theme=dark; cove_session=s3cret' })).json()
  assert.equal(own.authorization, 'Bearer my-app-token')
  assert.equal(own.cookie, 'theme=dark')
})
