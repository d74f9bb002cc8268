// The official npm e2b SDK driving a real `cove server`, unchanged. test/e2e (sdk_test.go)
// starts the server and runs this file with `node --test`; by hand:
//
//   E2B_API_URL=http://ADDR E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=<key> node --test server.test.mjs
//
// Every scenario makes its own sandboxes from the `base` template and kills them at the end.

import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { NotFoundError, Sandbox, TimeoutError } from 'e2b'

function requireEnv(name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set: run this through test/e2e or see the comment at the top`)
  return value
}

const apiUrl = requireEnv('E2B_API_URL')
const sandboxUrl = requireEnv('E2B_SANDBOX_URL')
const apiKey = requireEnv('E2B_API_KEY')
const opts = { apiKey, apiUrl, sandboxUrl }

const TIMEOUT = { timeout: 120_000 }
const run = randomBytes(4).toString('hex')
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

const made = []
/** create makes a sandbox from `base` that is killed when the file ends. */
async function create(extra = {}) {
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 120_000, ...extra })
  made.push(sbx.sandboxId)
  return sbx
}

after(async () => {
  for (const id of made) await Sandbox.kill(id, opts).catch(() => {})
})

/** rest calls the control plane directly, the way the SDK would, and returns status and JSON. */
async function rest(method, path, body) {
  const res = await fetch(apiUrl + path, {
    method,
    headers: { 'X-API-Key': apiKey, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  let json
  try {
    json = text ? JSON.parse(text) : undefined
  } catch {
    json = { raw: text }
  }
  return { status: res.status, json }
}

/** envdCall calls envd's process.List through the proxy with the given extra headers. */
async function envdCall(sandboxId, headers = {}) {
  const res = await fetch(sandboxUrl + '/process.Process/List', {
    method: 'POST',
    headers: {
      'E2b-Sandbox-Id': sandboxId,
      'E2b-Sandbox-Port': '49983',
      'Content-Type': 'application/json',
      'Connect-Protocol-Version': '1',
      ...headers,
    },
    body: '{}',
  })
  return { status: res.status, body: await res.text() }
}

test('Sandbox.create makes a running sandbox that keeps its metadata', TIMEOUT, async () => {
  const sbx = await create({ metadata: { suite: `create-${run}`, owner: 'e2e' } })
  assert.match(sbx.sandboxId, /^[a-z0-9]+$/)
  assert.equal(await sbx.isRunning(), true)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { suite: `create-${run}`, owner: 'e2e' })
})

test('commands.run returns stdout, stderr and exit code 0', TIMEOUT, async () => {
  const sbx = await create()
  const res = await sbx.commands.run('echo out-line; echo err-line >&2; whoami', { user: 'root' })
  assert.equal(res.exitCode, 0)
  assert.equal(res.stdout, 'out-line\nroot\n')
  assert.equal(res.stderr, 'err-line\n')
})

test('files.write, files.read and files.list round-trip a file', TIMEOUT, async () => {
  const sbx = await create()
  const dir = `/tmp/e2e-${run}`
  await sbx.files.makeDir(dir)
  const content = `hello ${run}\n`.repeat(100)
  await sbx.files.write(`${dir}/a.txt`, content)
  assert.equal(await sbx.files.read(`${dir}/a.txt`), content)
  const names = (await sbx.files.list(dir)).map((e) => e.name)
  assert.deepEqual(names, ['a.txt'])
  const viaShell = await sbx.commands.run(`wc -c < ${dir}/a.txt`)
  assert.equal(viaShell.stdout.trim(), String(Buffer.byteLength(content)))
})

test('Sandbox.list filtered by metadata finds exactly the matching sandboxes', TIMEOUT, async () => {
  const tag = `list-${run}`
  const a = await create({ metadata: { suite: tag, which: 'a' } })
  const b = await create({ metadata: { suite: tag, which: 'b' } })
  await create({ metadata: { suite: `other-${run}` } })
  const paginator = Sandbox.list({ ...opts, query: { metadata: { suite: tag } } })
  const found = []
  while (paginator.hasNext) found.push(...(await paginator.nextItems()))
  assert.deepEqual(found.map((s) => s.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort())
  const onlyA = Sandbox.list({ ...opts, query: { metadata: { suite: tag, which: 'a' } } })
  assert.deepEqual((await onlyA.nextItems()).map((s) => s.sandboxId), [a.sandboxId])
})

test('Sandbox.list pages by one in both orders, newest first by default, by template and startedAfter', TIMEOUT, async () => {
  const tag = `order-${run}`
  const before = new Date(Date.now() - 1000)
  const a = await create({ metadata: { suite: tag } })
  const b = await create({ metadata: { suite: tag } })
  const all = async (extra) => {
    const paginator = Sandbox.list({ ...opts, limit: 1, ...extra, query: { metadata: { suite: tag }, ...extra.query } })
    const ids = []
    while (paginator.hasNext) ids.push(...(await paginator.nextItems()).map((s) => s.sandboxId))
    return ids
  }
  assert.deepEqual(await all({}), [b.sandboxId, a.sandboxId])
  assert.deepEqual(await all({ order: 'asc' }), [a.sandboxId, b.sandboxId])
  assert.deepEqual(await all({ order: 'desc', query: { template: 'base', startedAfter: before } }), [b.sandboxId, a.sandboxId])
  assert.deepEqual(await all({ query: { startedAfter: new Date(Date.now() + 3600_000) } }), [])
})

test('pause makes isRunning false; Sandbox.connect resumes it and commands work again', TIMEOUT, async () => {
  const sbx = await create()
  await sbx.files.write('/tmp/kept.txt', 'kept across pause')
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.isRunning(), false)
  assert.equal((await sbx.getInfo()).state, 'paused')
  const again = await Sandbox.connect(sbx.sandboxId, opts)
  assert.equal(await again.isRunning(), true)
  assert.equal((await again.getInfo()).state, 'running')
  const res = await again.commands.run('cat /tmp/kept.txt')
  assert.equal(res.stdout, 'kept across pause')
})

test('a sandbox past its timeout is killed: SDK calls fail and GET says "was killed: timeout"', TIMEOUT, async () => {
  const sbx = await create({ timeoutMs: 3000 })
  assert.equal(await sbx.isRunning(), true)
  await sleep(5000)
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(sbx.commands.run('echo still-here', { requestTimeoutMs: 10_000 }))
  await assert.rejects(sbx.getInfo())
  const got = await rest('GET', `/sandboxes/${sbx.sandboxId}`)
  assert.equal(got.status, 404, JSON.stringify(got.json))
  assert.equal(got.json.code, 404)
  assert.match(got.json.message, /was killed: timeout/)
})

test('calls to a killed or paused sandbox raise NotFoundError with Cove\'s reason and request id', TIMEOUT, async () => {
  const killed = await create()
  assert.equal(await Sandbox.kill(killed.sandboxId, opts), true)
  const isKilled = (err) => {
    assert.ok(err instanceof NotFoundError, `${err?.name}: ${err?.message}`)
    assert.match(err.message, new RegExp(`sandbox ${killed.sandboxId} was killed: request`))
    assert.match(err.message, /request id /)
    return true
  }
  await assert.rejects(killed.commands.run('true'), isKilled) // a server stream
  await assert.rejects(killed.files.list('/'), isKilled) // a unary call

  const paused = await create()
  assert.equal(await paused.pause(), true)
  await assert.rejects(paused.commands.run('true'), (err) => {
    assert.ok(err instanceof NotFoundError, `${err?.name}: ${err?.message}`)
    assert.match(err.message, new RegExp(`sandbox ${paused.sandboxId} is paused`))
    assert.match(err.message, /request id /)
    return true
  })
})

test('a secure sandbox refuses envd calls without its token, and the SDK works since it carries it', TIMEOUT, async () => {
  const sbx = await create({ secure: true })
  const token = sbx.envdAccessToken
  assert.ok(token, 'create returned an envd access token')
  const got = await rest('GET', `/sandboxes/${sbx.sandboxId}`)
  assert.equal(got.json.envdAccessToken, token, 'GET /sandboxes/{id} returns the same token')
  const none = await envdCall(sbx.sandboxId)
  assert.equal(none.status, 401, `without X-Access-Token: ${none.status} ${none.body}`)
  const wrong = await envdCall(sbx.sandboxId, { 'X-Access-Token': 'not-the-token' })
  assert.equal(wrong.status, 401, `with a wrong X-Access-Token: ${wrong.status} ${wrong.body}`)
  const right = await envdCall(sbx.sandboxId, { 'X-Access-Token': token })
  assert.equal(right.status, 200, `with the token: ${right.status} ${right.body}`)
  const res = await sbx.commands.run('echo secure-ok')
  assert.equal(res.stdout, 'secure-ok\n')
})

test('two sandboxes at once see only their own files', TIMEOUT, async () => {
  const [a, b] = await Promise.all([create(), create()])
  await Promise.all([a.files.write('/tmp/who', 'a'), b.files.write('/tmp/who', 'b')])
  await a.files.write('/tmp/only-a', 'x')
  assert.equal(await a.files.read('/tmp/who'), 'a')
  assert.equal(await b.files.read('/tmp/who'), 'b')
  assert.equal(await b.files.exists('/tmp/only-a'), false)
  const [ra, rb] = await Promise.all([a.commands.run('cat /tmp/who'), b.commands.run('cat /tmp/who')])
  assert.equal(ra.stdout + rb.stdout, 'ab')
})

test('killing a sandbox during a running command: the SDK raises its TimeoutError naming the kill, and isRunning is false', TIMEOUT, async () => {
  const sbx = await create()
  const started = Date.now()
  const running = sbx.commands.run('echo started; sleep 60')
  const outcome = running.then(
    (r) => ({ ok: r }),
    (err) => ({ err }),
  )
  await sleep(1500)
  const killedAt = Date.now()
  assert.equal(await Sandbox.kill(sbx.sandboxId, opts), true)
  const { ok, err } = await outcome
  const endedAfterKill = Date.now() - killedAt
  assert.equal(ok, undefined, 'the command must not complete')
  // The open stream ends with a Connect end-stream error the SDK reads as a terminated
  // connection: it probes /health (502) and raises its TimeoutError, Cove's message in front.
  assert.ok(err instanceof TimeoutError, `${err?.name}: ${err?.message}`)
  assert.match(err.message, new RegExp(`sandbox ${sbx.sandboxId} was killed: request at `), err.message)
  assert.match(err.message, /request id /)
  assert.match(err.message, /The sandbox was killed or reached its end of life while the request was in flight/)
  console.log(`# the stream ended ${endedAfterKill} ms after the kill call returned`)
  assert.ok(Date.now() - started < 20_000, 'the command fails promptly, not at its 60 s end')
  assert.equal(await sbx.isRunning(), false)
})

test('setTimeout moves the sandbox end time', TIMEOUT, async () => {
  const sbx = await create({ timeoutMs: 30_000 })
  const before = new Date((await sbx.getInfo()).endAt).getTime()
  await sbx.setTimeout(600_000)
  const after = new Date((await sbx.getInfo()).endAt).getTime()
  assert.ok(after - before > 500_000, `endAt moved by ${after - before} ms`)
  assert.ok(Math.abs(after - (Date.now() + 600_000)) < 10_000, `endAt ${new Date(after).toISOString()} is now + 600 s`)
  await sbx.setTimeout(5_000)
  const shorter = new Date((await sbx.getInfo()).endAt).getTime()
  assert.ok(Math.abs(shorter - (Date.now() + 5_000)) < 5_000, `endAt ${new Date(shorter).toISOString()} is now + 5 s`)
})

test('Sandbox.kill returns true for a running sandbox, then false', TIMEOUT, async () => {
  const sbx = await create()
  assert.equal(await Sandbox.kill(sbx.sandboxId, opts), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId, opts), false)
  assert.equal(await sbx.isRunning(), false)
})

test('the base template is what E2B users expect: user 1000 with passwordless sudo, python, pip, git, curl', TIMEOUT, async () => {
  const sbx = await create()
  const id = await sbx.commands.run('id -u; id -un; echo $HOME')
  assert.equal(id.stdout, '1000\nuser\n/home/user\n', 'commands run as user (uid 1000, home /home/user) by default')
  const sudo = await sbx.commands.run('sudo -n true && sudo -n id -u')
  assert.equal(sudo.stdout, '0\n', `sudo -n works without a password: ${sudo.stderr}`)
  const tools = await sbx.commands.run(
    'python -c "print(6*7)" && python3 --version && pip --version && git --version && curl --version | head -1 && ps -p 1 -o comm= && ip -br link show lo',
  )
  assert.match(tools.stdout, /^42\nPython 3\.\d+\.\d+\npip \d+.*\ngit version .*\ncurl .*\n\S+\nlo\s/, tools.stdout)
})

test('getMetrics returns E2B\'s SandboxMetrics for a running sandbox, and the list endpoint its newest sample', TIMEOUT, async () => {
  const sbx = await create()
  await sbx.commands.run('head -c 8M /dev/zero > /tmp/fill')
  let metrics = []
  for (let i = 0; i < 60 && metrics.length === 0; i++) {
    metrics = await sbx.getMetrics()
    if (metrics.length === 0) await sleep(250)
  }
  assert.ok(metrics.length > 0, 'the sampler wrote at least one sample within 15 s')
  const m = metrics.at(-1)
  assert.ok(m.timestamp instanceof Date && !Number.isNaN(m.timestamp.getTime()), `timestamp ${m.timestamp}`)
  for (const k of ['cpuUsedPct', 'cpuCount', 'memUsed', 'memTotal', 'memCache', 'diskUsed', 'diskTotal']) {
    assert.equal(typeof m[k], 'number', `${k} is a number: ${JSON.stringify(m)}`)
  }
  assert.ok(m.cpuCount >= 1 && m.memTotal > 0 && m.memUsed > 0 && m.diskTotal > 0, JSON.stringify(m))
  const byStatic = await Sandbox.getMetrics(sbx.sandboxId, opts)
  assert.ok(byStatic.length >= metrics.length, 'Sandbox.getMetrics(id) sees the same samples')
  const list = await rest('GET', `/sandboxes/metrics?sandbox_ids=${sbx.sandboxId},inot-mine`)
  assert.equal(list.status, 200, JSON.stringify(list.json))
  assert.deepEqual(Object.keys(list.json.sandboxes), [sbx.sandboxId], 'unknown ids are left out')
  assert.equal(typeof list.json.sandboxes[sbx.sandboxId].timestampUnix, 'number')
})
