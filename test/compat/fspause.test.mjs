// The official npm e2b SDK's filesystem-only pause: sandbox.pause({ keepMemory: false }) and
// lifecycle.onTimeout { action: 'pause', keepMemory: false } keep the sandbox's files and drop
// its memory; Sandbox.connect reboots it on them. test/restart (fspause_test.go) runs this
// file against a real server; by hand:
//
//   E2B_API_URL=http://ADDR E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=<key> node --test fspause.test.mjs

import { after, test } from 'node:test'
import assert from 'node:assert/strict'

import { Sandbox } from 'e2b'

function requireEnv (name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set: run this through test/restart or see the comment at the top`)
  return value
}

const opts = { apiKey: requireEnv('E2B_API_KEY'), apiUrl: requireEnv('E2B_API_URL'), sandboxUrl: requireEnv('E2B_SANDBOX_URL') }
const TIMEOUT = { timeout: 120_000 }

const made = []
after(async () => {
  for (const s of made) await s.kill().catch(() => {})
})

test('pause({ keepMemory: false }) keeps a file, connect reboots: the file is read back, the process is gone, the env is kept', TIMEOUT, async () => {
  const sbx = await Sandbox.create('base', { ...opts, envs: { FS_PAUSE: 'kept' } })
  made.push(sbx)
  await sbx.files.write('/tmp/kept.txt', 'written before the pause')
  await sbx.commands.run('echo $$ > /tmp/sleeper.pid; exec sleep 1000', { background: true })
  await sbx.commands.run('for i in $(seq 50); do [ -s /tmp/sleeper.pid ] && break; sleep 0.1; done')

  assert.equal(await sbx.pause({ keepMemory: false }), true, 'the pause answers that it paused')
  assert.equal((await Sandbox.getInfo(sbx.sandboxId, opts)).state, 'paused')

  const back = await Sandbox.connect(sbx.sandboxId, opts)
  assert.equal(await back.files.read('/tmp/kept.txt'), 'written before the pause')
  const r = await back.commands.run('echo "env=$FS_PAUSE"; if [ -d /proc/$(cat /tmp/sleeper.pid) ] && grep -qx sleep /proc/$(cat /tmp/sleeper.pid)/comm; then echo alive; else echo gone; fi')
  assert.deepEqual(r.stdout.trim().split('\n'), ['env=kept', 'gone'], 'the env is kept and the background process did not survive the reboot')
})

test('lifecycle onTimeout { action: pause, keepMemory: false } auto-pauses keeping the files; connect reboots', TIMEOUT, async () => {
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 4_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
  made.push(sbx)
  await sbx.files.write('/tmp/auto.txt', 'kept through the auto-pause')
  let state = 'running'
  for (let i = 0; i < 100 && state !== 'paused'; i++) {
    await new Promise((resolve) => setTimeout(resolve, 200))
    state = (await Sandbox.getInfo(sbx.sandboxId, opts)).state
  }
  assert.equal(state, 'paused', 'the timeout paused it')
  const back = await Sandbox.connect(sbx.sandboxId, { ...opts, timeoutMs: 60_000 })
  assert.equal(await back.files.read('/tmp/auto.txt'), 'kept through the auto-pause')
})

test('keepMemory: false with autoResume is refused by the SDK before it reaches the server', async () => {
  await assert.rejects(Sandbox.create('base', { ...opts, lifecycle: { onTimeout: { action: 'pause', keepMemory: false }, autoResume: true } }), /autoResume/)
})
