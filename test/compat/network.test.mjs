// The official npm e2b SDK's network options against a real `cove server` whose sandboxes
// reach a fake internet (internal/sandbox/network/nettest, 198.18.0.0/15, never the real one).
// test/server (network_test.go, TestOfficialSDKNetwork) builds both and runs this file with
// `node --test`; it names the test hosts in COVE_TEST_HOST, COVE_TEST_OTHER and
// COVE_TEST_NAME (a name the fake internet's DNS answers with COVE_TEST_HOST), and its SOCKS5
// proxy in COVE_TEST_SOCKS, COVE_TEST_SOCKS_USER and COVE_TEST_SOCKS_PASSWORD.

import { after, test } from 'node:test'
import assert from 'node:assert/strict'

import { ALL_TRAFFIC, Sandbox, Secret } from 'e2b'

function requireEnv(name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set: run this through test/server (TestOfficialSDKNetwork)`)
  return value
}

const opts = { apiKey: requireEnv('E2B_API_KEY'), apiUrl: requireEnv('E2B_API_URL'), sandboxUrl: requireEnv('E2B_SANDBOX_URL') }
const host = requireEnv('COVE_TEST_HOST')
const other = requireEnv('COVE_TEST_OTHER')
const name = requireEnv('COVE_TEST_NAME')
const TIMEOUT = { timeout: 120_000 }

const made = []
async function create(extra = {}) {
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 120_000, ...extra })
  made.push(sbx.sandboxId)
  return sbx
}
after(async () => {
  for (const id of made) await Sandbox.kill(id, opts).catch(() => {})
})

/** curl runs curl in the sandbox and resolves to its exit code and output, never throwing. */
async function curl(sbx, url) {
  try {
    const r = await sbx.commands.run(`curl -sS --max-time 5 ${url}`)
    return { code: r.exitCode, out: r.stdout }
  } catch (err) {
    return { code: err.exitCode ?? -1, out: String(err.stderr ?? err) }
  }
}

test('a default sandbox reaches the test host by address and by name, and reports internet access', TIMEOUT, async () => {
  const sbx = await create()
  assert.equal((await curl(sbx, `http://${host}/`)).code, 0)
  const byName = await curl(sbx, `http://${name}/`)
  assert.equal(byName.code, 0, byName.out)
  assert.match(byName.out, new RegExp(`hello from ${name}`))
  const info = await sbx.getInfo()
  assert.equal(info.allowInternetAccess, true)
})

test('allowInternetAccess: false cuts the sandbox off and getInfo says so', TIMEOUT, async () => {
  const sbx = await create({ allowInternetAccess: false })
  assert.notEqual((await curl(sbx, `http://${host}/`)).code, 0)
  assert.equal((await sbx.getInfo()).allowInternetAccess, false)
})

test('network.denyOut ALL_TRAFFIC with allowOut lets only the allowed host through, and getInfo echoes it', TIMEOUT, async () => {
  const sbx = await create({ network: { denyOut: [ALL_TRAFFIC], allowOut: [other] } })
  assert.equal((await curl(sbx, `http://${other}/`)).code, 0)
  assert.notEqual((await curl(sbx, `http://${host}/`)).code, 0)
  const info = await sbx.getInfo()
  assert.deepEqual(info.network?.allowOut, [`${other}/32`])
  assert.deepEqual(info.network?.denyOut, ['0.0.0.0/0'])
})

test('a hostname in allowOut admits what Cove\'s resolver answered for it, not a literal address of another host', TIMEOUT, async () => {
  const sbx = await create({ network: { denyOut: [ALL_TRAFFIC], allowOut: [name] } })
  assert.notEqual((await curl(sbx, `http://${host}/`)).code, 0, 'the literal address answered before the name was resolved')
  const byName = await curl(sbx, `http://${name}/`)
  assert.equal(byName.code, 0, byName.out)
  assert.notEqual((await curl(sbx, `http://${other}/`)).code, 0)
  assert.deepEqual((await sbx.getInfo()).network?.allowOut, [name])
})

test('network.egressProxy tunnels TCP through the SOCKS5 proxy and getInfo echoes it without the password', TIMEOUT, async () => {
  const egressProxy = { address: requireEnv('COVE_TEST_SOCKS'), username: requireEnv('COVE_TEST_SOCKS_USER'), password: requireEnv('COVE_TEST_SOCKS_PASSWORD') }
  const sbx = await create({ network: { egressProxy } })
  const r = await curl(sbx, `http://${other}/`)
  assert.equal(r.code, 0, r.out)
  const info = await sbx.getInfo()
  assert.equal(info.network?.egressProxy?.address, egressProxy.address)
  assert.equal(info.network?.egressProxy?.username, egressProxy.username)
  assert.equal(JSON.stringify(info).includes(egressProxy.password), false, 'getInfo returned the proxy password')
})

test('a Secret named by a rule reaches the test host over HTTPS while the sandbox sees only the placeholder', TIMEOUT, async () => {
  const name = `compat-token-${Date.now()}`
  const value = `sk-${Math.random().toString(36).slice(2)}-planted`
  const created = await Secret.create(name, value, { ...opts, metadata: { purpose: 'test' } })
  assert.equal(created.name, name)
  assert.equal(JSON.stringify(await Secret.getInfo(name, opts)).includes(value), false)
  const sbx = await create({ network: { rules: { [requireEnv('COVE_TEST_NAME')]: [{ transform: { headers: { 'X-Api-Key': Secret.fill(name) } } }] } } })
  const r = await curl(sbx, `https://${requireEnv('COVE_TEST_NAME')}/secret`)
  assert.equal(r.code, 0, r.out)
  const env = await sbx.commands.run('env; cat /etc/resolv.conf')
  assert.equal(env.stdout.includes(value), false)
  assert.equal(JSON.stringify(await sbx.getInfo()).includes(value), false)
  assert.equal(await Secret.destroy(name, opts), true)
  assert.equal(await Secret.exists(name, opts), false)
})

test('a workload identity token (iam) a rule names reaches the test host; the sandbox sees only the placeholder', TIMEOUT, async () => {
  const host = requireEnv('COVE_TEST_NAME')
  const sbx = await create({
    iam: { tokens: { web: { audience: host, tokenType: 'JWT-SVID' } } },
    network: { rules: { [host]: [{ transform: ({ iam }) => ({ headers: { Authorization: `Bearer ${iam.tokens.web}` } }) }] } },
  })
  const r = await curl(sbx, `https://${host}/identity`)
  assert.equal(r.code, 0, r.out)
  const seen = await sbx.commands.run('env; cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"')
  assert.equal(/eyJ[\w-]+\.eyJ/.test(seen.stdout), false, 'a JWT is visible in the sandbox')
  assert.match(JSON.stringify(await sbx.getInfo()), /^(?!.*eyJ[\w-]+\.eyJ)/s)
})

test('allowPublicTraffic: false keeps the sandbox\'s ports behind its trafficAccessToken; envd still answers the SDK', TIMEOUT, async () => {
  const sbx = await create({ network: { allowPublicTraffic: false } })
  assert.ok(sbx.trafficAccessToken, 'create returned no trafficAccessToken')
  await sbx.commands.run('python3 -m http.server 8000 >/dev/null 2>&1', { background: true })
  const port = (extra = {}) => fetch(opts.apiUrl + '/', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000', ...extra } })
  let open
  for (let i = 0; i < 100; i++) { // the server inside takes a moment to listen
    open = await port({ 'E2b-Traffic-Access-Token': sbx.trafficAccessToken })
    if (open.status === 200) break
    await new Promise((r) => setTimeout(r, 100))
  }
  assert.equal(open.status, 200)
  const closed = await port()
  assert.equal(closed.status, 403)
  assert.match(await closed.text(), /trafficAccessToken/)
  assert.equal((await port({ 'E2b-Traffic-Access-Token': 'wrong' })).status, 403)
  assert.equal((await sbx.getInfo()).network?.allowPublicTraffic, false)
})

test('httpsPorts and maskRequestHost: the proxy speaks TLS to the port (self-signed) and sends the masked Host', TIMEOUT, async () => {
  const sbx = await create({ network: { httpsPorts: [8443], maskRequestHost: 'masked.example:${PORT}' } })
  const server = [
    'import http.server, ssl',
    'class H(http.server.BaseHTTPRequestHandler):',
    '    def do_GET(self):',
    '        b = ("host=" + self.headers["Host"]).encode()',
    '        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)',
    's = http.server.HTTPServer(("0.0.0.0", 8443), H)',
    'c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain("/tmp/c.pem", "/tmp/k.pem")',
    's.socket = c.wrap_socket(s.socket, server_side=True)',
    's.serve_forever()',
  ].join('\n')
  await sbx.files.write('/tmp/s.py', server)
  await sbx.commands.run('openssl req -x509 -newkey rsa:2048 -nodes -keyout /tmp/k.pem -out /tmp/c.pem -days 1 -subj /CN=sandbox 2>/dev/null')
  await sbx.commands.run('python3 /tmp/s.py >/dev/null 2>&1', { background: true })
  let res
  for (let i = 0; i < 100; i++) {
    res = await fetch(opts.apiUrl + '/', { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8443' } })
    if (res.status === 200) break
    await new Promise((r) => setTimeout(r, 100))
  }
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'host=masked.example:8443')
  const info = await sbx.getInfo()
  assert.deepEqual(info.network?.httpsPorts, [8443])
  assert.equal(info.network?.maskRequestHost, 'masked.example:${PORT}')
})

test('httpsPorts may not name envd\'s port', TIMEOUT, async () => {
  await assert.rejects(create({ network: { httpsPorts: [49983] } }), /network\.httpsPorts\[0\]/)
})

test('updateNetwork replaces the rules of a running sandbox', TIMEOUT, async () => {
  const sbx = await create()
  await sbx.updateNetwork({ denyOut: [host] })
  assert.notEqual((await curl(sbx, `http://${host}/`)).code, 0)
  assert.equal((await curl(sbx, `http://${other}/`)).code, 0)
  await sbx.updateNetwork({})
  assert.equal((await curl(sbx, `http://${host}/`)).code, 0)
  await sbx.updateNetwork({ allowInternetAccess: false })
  assert.notEqual((await curl(sbx, `http://${other}/`)).code, 0)
  assert.equal((await sbx.getInfo()).allowInternetAccess, false)
})

test('a malformed CIDR is refused with an error naming the field', TIMEOUT, async () => {
  await assert.rejects(create({ network: { denyOut: ['10.0.0.0/99'] } }), /network\.denyOut\[0\]/)
})
