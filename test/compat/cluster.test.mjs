// The official npm e2b SDK against a cluster of Cove nodes (test/server/cluster_test.go starts
// them): six creates through node A, then commands, files and a PTY in every one of them,
// through node A and through node B. The Go side checks where each landed (at least two
// nodes), by their metadata. By hand:
//
//   E2B_API_URL=http://A E2B_SANDBOX_URL=http://A E2B_API_KEY=<key> COVE_OTHER_URL=http://B node --test cluster.test.mjs

import { test } from 'node:test'
import assert from 'node:assert/strict'

import { Sandbox } from 'e2b'

function requireEnv(name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set: run this through test/server (TestCluster) or see the comment at the top`)
  return value
}

const apiKey = requireEnv('E2B_API_KEY')
const nodeA = { apiKey, apiUrl: requireEnv('E2B_API_URL'), sandboxUrl: requireEnv('E2B_SANDBOX_URL') }
const other = requireEnv('COVE_OTHER_URL')
const nodeB = { apiKey, apiUrl: other, sandboxUrl: other }
const TIMEOUT = { timeout: 240_000 }

// The sandboxes stay: the Go side reads where each landed (metadata suite=cluster-npm), then
// kills them.
const made = []

test('six creates through node A; commands, files and a PTY in each through node A and node B', TIMEOUT, async () => {
  for (let i = 0; i < 6; i++) {
    const sbx = await Sandbox.create('base', { ...nodeA, timeoutMs: 300_000, metadata: { suite: 'cluster-npm', n: String(i) } })
    made.push(sbx.sandboxId)
  }
  for (const id of made) {
    for (const [name, via] of [['A', nodeA], ['B', nodeB]]) {
      const sbx = await Sandbox.connect(id, via)
      const res = await sbx.commands.run(`echo through-${name}`)
      assert.equal(res.stdout, `through-${name}\n`, `a command in ${id} through node ${name}`)
      await sbx.files.write(`/tmp/via-${name}`, `${id} via ${name}`)
      assert.equal(await sbx.files.read(`/tmp/via-${name}`), `${id} via ${name}`, `a file in ${id} through node ${name}`)
      let out = ''
      const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += new TextDecoder().decode(d) } })
      await sbx.pty.sendInput(pty.pid, new TextEncoder().encode(`echo pty-$((6*7))-${name}\nexit\n`))
      await pty.wait()
      assert.ok(out.includes(`pty-42-${name}`), `a PTY in ${id} through node ${name} printed ${JSON.stringify(out.slice(0, 300))}`)
    }
  }
})
