// The npm e2b SDK watching a directory while it uploads into it, against `cove envd`:
// envdwatch_test.go starts envd and the fixture control plane and runs this file with
// `node --test` (same environment as envd.test.mjs). The SDK's own watch tests wait for a
// WRITE event on the uploaded file, which E2B's envd gives because it writes in place.

import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import { FilesystemEventType, Sandbox } from 'e2b'

function requireEnv(name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set: run this through envdwatch_test.go`)
  return value
}

const TIMEOUT = { timeout: 30_000 }
let sbx
const root = `/tmp/cove-compat-watch-${randomBytes(4).toString('hex')}`

before(async () => {
  sbx = await Sandbox.connect(requireEnv('COVE_SANDBOX_ID'), {
    apiKey: requireEnv('E2B_API_KEY'),
    apiUrl: requireEnv('E2B_API_URL'),
    sandboxUrl: requireEnv('E2B_SANDBOX_URL'),
  })
  await sbx.commands.run(`mkdir -p ${root} && chmod 777 ${root}`, { user: 'root' })
})

after(async () => {
  if (sbx) await sbx.commands.run(`rm -rf ${root}`, { user: 'root' }).catch(() => {})
})

/** Waits until pred() holds over the events seen, or fails naming them. */
async function waitForEvent(what, events, pred, ms = 10_000) {
  const deadline = Date.now() + ms
  while (!events.some(pred)) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}; events: ${JSON.stringify(events)}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

test('files.write over an existing file: watchDir sees WRITE on its name, and never REMOVE', TIMEOUT, async () => {
  const dir = `${root}/existing`
  await sbx.files.makeDir(dir)
  await sbx.files.write(`${dir}/f.txt`, 'old')
  const events = []
  const handle = await sbx.files.watchDir(dir, (e) => events.push(e))
  try {
    await sbx.files.write(`${dir}/f.txt`, 'new content')
    await waitForEvent('a WRITE event for f.txt', events, (e) => e.name === 'f.txt' && e.type === FilesystemEventType.WRITE)
    await sbx.files.write(`${dir}/zz-marker`, '')
    await waitForEvent('an event for the marker', events, (e) => e.name === 'zz-marker')
    const seen = events.filter((e) => e.name === 'f.txt').map((e) => e.type)
    assert.ok(!seen.includes(FilesystemEventType.REMOVE), `f.txt was removed and made again: ${seen}`)
    assert.equal(await sbx.files.read(`${dir}/f.txt`), 'new content')
  } finally {
    await handle.stop()
  }
})

test('files.write of a new file: watchDir sees CREATE, then WRITE', TIMEOUT, async () => {
  const dir = `${root}/new`
  await sbx.files.makeDir(dir)
  const events = []
  const handle = await sbx.files.watchDir(dir, (e) => events.push(e))
  try {
    await sbx.files.write(`${dir}/g.txt`, 'fresh')
    await waitForEvent('a WRITE event for g.txt', events, (e) => e.name === 'g.txt' && e.type === FilesystemEventType.WRITE)
    const seen = events.filter((e) => e.name === 'g.txt').map((e) => e.type)
    assert.equal(seen[0], FilesystemEventType.CREATE, `g.txt events ${seen}`)
  } finally {
    await handle.stop()
  }
})
