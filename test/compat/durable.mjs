// The official npm e2b SDK pausing, resuming, forking and snapshotting sandboxes of a real
// `cove server` across a crash of the server. test/restart (sdk_test.go) runs it in two
// phases around a kill -9 and a restart of the server:
//
//   node durable.mjs before   # prints one JSON line: what phase `after` checks
//   node durable.mjs after '<that line>'
//
// with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set. It exits non-zero naming what failed.

import assert from 'node:assert/strict'

import { Sandbox, Volume } from 'e2b'

const opts = { apiKey: process.env.E2B_API_KEY, apiUrl: process.env.E2B_API_URL, sandboxUrl: process.env.E2B_SANDBOX_URL }

// holder keeps a random value only in its memory and writes it to /tmp/answer on SIGUSR1.
const holder = `v=$(head -c8 /dev/urandom | od -An -tx1 | tr -d ' \\n'); echo $v > /tmp/v; trap 'echo $v > /tmp/answer' USR1; while :; do sleep 0.1; done`

async function answer(sbx, pid) {
  const r = await sbx.commands.run(`rm -f /tmp/answer; kill -USR1 ${pid} && for i in $(seq 100); do [ -s /tmp/answer ] && break; sleep 0.1; done; cat /tmp/answer`)
  return r.stdout.trim()
}

async function before() {
  const paused = await Sandbox.create('base', { ...opts, timeoutMs: 600_000, lifecycle: { onTimeout: 'pause' } })
  const running = await Sandbox.create('base', { ...opts, timeoutMs: 600_000 })
  const out = { paused: paused.sandboxId, running: running.sandboxId }
  for (const [name, sbx] of [['paused', paused], ['running', running]]) {
    // No timeout (the SDK's default kills a command after 60 s), and let go of its stream.
    const h = await sbx.commands.run(holder, { background: true, timeoutMs: 0 })
    await h.disconnect()
    for (let i = 0; i < 100 && !(await sbx.files.exists('/tmp/v')); i++) await new Promise((r) => setTimeout(r, 100))
    out[name + 'Pid'] = h.pid
    out[name + 'Value'] = (await sbx.files.read('/tmp/v')).trim()
  }
  await paused.commands.run('head -c 32M /dev/urandom > /dev/shm/blob && sha256sum /dev/shm/blob > /tmp/shmsum')
  assert.equal(await paused.pause(), true, 'pause answers true')
  assert.equal((await Sandbox.getInfo(paused.sandboxId, opts)).state, 'paused', 'the sandbox is paused')
  console.log(JSON.stringify(out))
}

async function after(state) {
  const s = JSON.parse(state)
  // The running sandbox survived the crash with its process and memory.
  const running = await Sandbox.connect(s.running, opts)
  assert.equal(await answer(running, s.runningPid), s.runningValue, 'the running sandbox kept its process and memory')
  // The paused one resumes with its process, memory and /dev/shm.
  const paused = await Sandbox.connect(s.paused, opts)
  assert.equal(await paused.isRunning(), true, 'connect resumed the paused sandbox')
  assert.equal(await answer(paused, s.pausedPid), s.pausedValue, 'the paused sandbox kept its process and memory')
  assert.match((await paused.commands.run('sha256sum -c /tmp/shmsum')).stdout, /blob: OK/, '/dev/shm survived')
  // fork({ count: 2 }): two copies with the same memory, independent after.
  const forks = await paused.fork({ count: 2 })
  assert.equal(forks.length, 2, 'two forks')
  for (const f of forks) {
    assert.ok(f.sandboxId, `fork failed: ${f}`)
    const kid = await Sandbox.connect(f.sandboxId, opts)
    assert.equal(await answer(kid, s.pausedPid), s.pausedValue, 'a fork has the parent\'s memory')
  }
  const first = await Sandbox.connect(forks[0].sandboxId, opts)
  await first.files.write('/tmp/mine', 'only in the first fork')
  assert.equal(await paused.files.exists('/tmp/mine'), false, 'a fork is independent of its parent')
  // createSnapshot + Sandbox.create(snapshotId): a copy with the same memory.
  const snap = await paused.createSnapshot()
  assert.ok(snap.snapshotId, 'createSnapshot returns an id')
  const listed = []
  for (const p = Sandbox.listSnapshots({ ...opts, sandboxId: s.paused }); p.hasNext; ) listed.push(...(await p.nextItems()))
  assert.ok(listed.some((x) => x.snapshotId === snap.snapshotId), 'listSnapshots lists it')
  const fromSnap = await Sandbox.create(snap.snapshotId, { ...opts, timeoutMs: 120_000 })
  assert.equal(await answer(fromSnap, s.pausedPid), s.pausedValue, 'a sandbox from the snapshot has its memory')
  for (const id of [s.running, s.paused, forks[0].sandboxId, forks[1].sandboxId, fromSnap.sandboxId]) await Sandbox.kill(id, opts)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts), true, 'deleteSnapshot deletes it')
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId, opts), false, 'deleteSnapshot of a deleted snapshot is false')
  // A volume outlives the sandbox it was mounted in.
  const vol = await Volume.create(`sdk-vol-${Date.now()}`, opts)
  const a = await Sandbox.create('base', { ...opts, timeoutMs: 120_000, volumeMounts: { '/mnt/v': vol } })
  await a.files.write('/mnt/v/f', 'kept')
  await a.kill()
  const b = await Sandbox.create('base', { ...opts, timeoutMs: 120_000, volumeMounts: { '/mnt/v': vol.name } })
  assert.equal(await b.files.read('/mnt/v/f'), 'kept', 'the volume kept the file')
  assert.ok((await Volume.list(opts)).some((v) => v.volumeId === vol.volumeId), 'Volume.list lists it')
  await b.kill()
  assert.equal(await Volume.destroy(vol.volumeId, opts), true, 'Volume.destroy deletes it')
  console.log('ok')
}

const [phase, state] = process.argv.slice(2)
if (phase === 'before') await before()
else if (phase === 'after') await after(state)
else throw new Error(`phase ${phase}: want before or after`)
