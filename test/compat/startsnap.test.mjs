// The official npm e2b SDK: a template's start command runs once, at build, and sandboxes
// of the template start from a snapshot taken after its ready check (Cove's start
// snapshots). test/template (startsnap_test.go) runs this file on a server that can
// checkpoint; by hand:
//
//   E2B_API_URL=http://ADDR E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=<key> node --test startsnap.test.mjs

import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { Sandbox, Template, waitForPort } from 'e2b'

function requireEnv (name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set: run this through test/template or see the comment at the top`)
  return value
}

const opts = { apiKey: requireEnv('E2B_API_KEY'), apiUrl: requireEnv('E2B_API_URL'), sandboxUrl: requireEnv('E2B_SANDBOX_URL') }
const TIMEOUT = { timeout: 240_000 }
const run = randomBytes(4).toString('hex')

const made = []
after(async () => {
  for (const s of made) await s.kill().catch(() => {})
})

// The start command records its PID and start time once, then serves the port as that PID.
const start = 'echo "$$ $(date +%s%N)" > /tmp/started && exec python3 -m http.server 8124'
const look = "cat /tmp/started; pgrep -xf 'python3 -m http.server 8124'; curl -s -o /dev/null -w '%{http_code}\\n' http://127.0.0.1:8124/"

test('sandboxes of a setStartCmd template share the one start made at build, already listening', TIMEOUT, async () => {
  const name = `sdk-startsnap-${run}`
  const logs = []
  await Template.build(Template().fromTemplate('base').setStartCmd(start, waitForPort(8124)), name,
    { ...opts, onBuildLogs: (e) => logs.push(e.toString()) })
  const text = logs.join('\n')
  assert.match(text, /==> start snapshot: [\d.]+ MiB, ready check passed in \d+ ms/, 'the build log shows the snapshot')

  const seen = []
  for (let i = 0; i < 2; i++) {
    const sbx = await Sandbox.create(name, opts)
    made.push(sbx)
    const r = await sbx.commands.run(look)
    const [pid, at, serving, status] = r.stdout.trim().split(/\s+/)
    assert.equal(serving, pid, 'the port is served by the start command\'s own process')
    assert.equal(status, '200', 'the port answers right after create')
    seen.push(`${pid} ${at}`)
  }
  assert.equal(seen[0], seen[1], 'both sandboxes see the marker of the one start at build')
})
