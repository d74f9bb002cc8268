// The official npm e2b SDK against a `cove server --tls-self-signed` over https: the SDK
// derives every sandbox URL from the domain create returns ({port}-{id}.cove.localhost:PORT)
// and fetches it over https, trusting Cove's CA (NODE_EXTRA_CA_CERTS). test/server
// (tls_test.go) starts the server and runs this file with localhost.mjs preloaded; by hand:
//
//   NODE_EXTRA_CA_CERTS=<data>/tls/ca.pem NODE_OPTIONS="--import ./localhost.mjs" \
//   E2B_API_URL=https://ADDR E2B_API_KEY=<key> node --test tls.test.mjs

import { after, test } from 'node:test'
import assert from 'node:assert/strict'

import { Sandbox } from 'e2b'

const apiUrl = process.env.E2B_API_URL
const apiKey = process.env.E2B_API_KEY
if (!apiUrl?.startsWith('https://') || !apiKey) throw new Error('E2B_API_URL (https) and E2B_API_KEY must be set: see the comment at the top')
assert.ok(!process.env.E2B_SANDBOX_URL, 'E2B_SANDBOX_URL must be unset: the SDK is to use the sandbox hosts')
const opts = { apiKey, apiUrl }
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

/** serve starts a web server on port 8000 in sbx and waits until its host answers. */
async function serve(sbx, headers = {}) {
  await sbx.commands.run('mkdir -p /tmp/www && echo hello-over-tls > /tmp/www/index.html')
  await sbx.commands.run('cd /tmp/www && python3 -m http.server 8000 >/dev/null 2>&1', { background: true })
  const url = `https://${sbx.getHost(8000)}/`
  for (let i = 0; i < 100; i++) {
    const res = await fetch(url, { headers })
    if (res.status === 200) return url
    await sleep(100)
  }
  throw new Error(`${url} never answered 200`)
}

const stateOf = async (id) => (await Sandbox.getInfo(id, opts)).state

test('the SDK reaches envd at https://49983-{id}.{domain} and a port at https://{getHost(port)}', TIMEOUT, async () => {
  const sbx = await create()
  assert.match(sbx.getHost(8000), new RegExp(`^8000-${sbx.sandboxId}\\.cove\\.localhost:\\d+$`))
  const res = await sbx.commands.run('echo over-tls')
  assert.equal(res.stdout, 'over-tls\n')
  await sbx.files.write('/tmp/f.txt', 'file over tls')
  assert.equal(await sbx.files.read('/tmp/f.txt'), 'file over tls')
  const url = await serve(sbx)
  assert.equal(await (await fetch(url)).text(), 'hello-over-tls\n')
})

test('a request to a paused sandbox\'s host resumes it (auto-resume), with its access token', TIMEOUT, async () => {
  const sbx = await create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
  const token = { 'X-Access-Token': sbx.envdAccessToken }
  const url = await serve(sbx)
  assert.equal(await sbx.pause(), true)
  assert.equal(await stateOf(sbx.sandboxId), 'paused')
  const refused = await fetch(url)
  assert.equal(refused.status, 401, 'a secure sandbox resumes only for its access token')
  assert.equal(await stateOf(sbx.sandboxId), 'paused')
  const res = await fetch(url, { headers: token })
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'hello-over-tls\n')
  assert.equal(await stateOf(sbx.sandboxId), 'running')
})

test('allowPublicTraffic: false keeps the https host behind the traffic token', TIMEOUT, async () => {
  const sbx = await create({ network: { allowPublicTraffic: false } })
  const token = { 'e2b-traffic-access-token': sbx.trafficAccessToken }
  const url = await serve(sbx, token)
  assert.equal((await fetch(url)).status, 403)
  const res = await fetch(url, { headers: token })
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'hello-over-tls\n')
})
