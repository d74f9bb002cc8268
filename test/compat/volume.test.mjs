// The official npm e2b SDK's Volume class against a real `cove server`: the volume content
// API (list, makeDir, getInfo, exists, updateMetadata, readFile, writeFile, remove) with the
// volume's token, what a sandbox mounting the volume sees, the size quota and the one
// read-write mount. test/server (volume_test.go, TestOfficialSDKVolumes) runs this file with
// `node --test` against a server started with --volume-size-mb 32, and points the SDK's
// volume client at it with E2B_VOLUME_API_URL.

import { after, test } from 'node:test'
import assert from 'node:assert/strict'

import { AuthenticationError, Sandbox, Volume, VolumeError, VolumeFileType, VolumeNotFoundError, VolumePathNotFoundError } from 'e2b'

function requireEnv(name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set: run this through test/server (TestOfficialSDKVolumes)`)
  return value
}

const opts = { apiKey: requireEnv('E2B_API_KEY'), apiUrl: requireEnv('E2B_API_URL'), sandboxUrl: requireEnv('E2B_SANDBOX_URL') }
requireEnv('E2B_VOLUME_API_URL')
const TIMEOUT = { timeout: 120_000 }

const sandboxes = []
const volumes = []
async function create(extra = {}) {
  const sbx = await Sandbox.create('base', { ...opts, timeoutMs: 120_000, ...extra })
  sandboxes.push(sbx.sandboxId)
  return sbx
}
async function volume(prefix) {
  const vol = await Volume.create(`${prefix}-${Date.now()}`, opts)
  volumes.push(vol.volumeId)
  return vol
}
after(async () => {
  for (const id of sandboxes) await Sandbox.kill(id, opts).catch(() => {})
  for (const id of volumes) await Volume.destroy(id, opts).catch(() => {})
})

test('the content API makes, writes, reads, lists, updates and removes with the volume token', TIMEOUT, async () => {
  const made = await volume('content')
  assert.ok(made.token, 'Volume.create returns the token')
  // A Volume built from its id, name and token alone: no API key involved.
  const vol = new Volume(made.volumeId, made.name, made.token)

  const dir = await vol.makeDir('/docs')
  assert.equal(dir.type, VolumeFileType.DIRECTORY)
  assert.equal(dir.path, '/docs')
  const written = await vol.writeFile('/docs/a.txt', 'hello volume')
  assert.equal(written.type, VolumeFileType.FILE)
  assert.equal(written.size, 12)
  assert.equal(written.uid, 1000, "new files belong to the sandboxes' default user")
  assert.ok(written.mtime instanceof Date && !Number.isNaN(written.mtime.getTime()), 'mtime is a date')

  assert.equal(await vol.readFile('/docs/a.txt'), 'hello volume')
  assert.deepEqual(Buffer.from(await vol.readFile('/docs/a.txt', { format: 'bytes' })).toString(), 'hello volume')
  assert.equal(await vol.exists('/docs/a.txt'), true)
  assert.equal(await vol.exists('/docs/none'), false)
  assert.equal((await vol.getInfo('/docs')).type, VolumeFileType.DIRECTORY)

  await vol.makeDir('/deep/er/est', { force: true })
  const top = await vol.list('/')
  assert.deepEqual(top.map((e) => e.name), ['deep', 'docs'])
  const all = await vol.list('/', { depth: 3 })
  assert.deepEqual(all.map((e) => e.path), ['/deep', '/deep/er', '/deep/er/est', '/docs', '/docs/a.txt'])

  // Streams both ways: a chunked upload without a length, a streamed read, a Blob.
  const chunks = ['stream', 'ed ', 'upload']
  const body = new ReadableStream({ pull(c) { const next = chunks.shift(); next ? c.enqueue(new TextEncoder().encode(next)) : c.close() } })
  assert.equal((await vol.writeFile('/docs/streamed.txt', body)).size, 15)
  const stream = await vol.readFile('/docs/streamed.txt', { format: 'stream' })
  assert.equal(await new Response(stream).text(), 'streamed upload')
  assert.equal(await (await vol.readFile('/docs/streamed.txt', { format: 'blob' })).text(), 'streamed upload')
  await vol.remove('/docs/streamed.txt')

  const updated = await vol.updateMetadata('/docs/a.txt', { mode: 0o600 })
  assert.equal(updated.mode, 0o600)

  await vol.remove('/deep')
  assert.equal(await vol.exists('/deep/er'), false)
})

test('missing paths are VolumePathNotFoundError, escaping ones a 400, a wrong token unauthorized', TIMEOUT, async () => {
  const vol = await volume('errors')
  await assert.rejects(vol.readFile('/nope'), VolumePathNotFoundError)
  await assert.rejects(vol.getInfo('/nope'), VolumePathNotFoundError)
  await assert.rejects(vol.remove('/nope'), VolumePathNotFoundError)
  await assert.rejects(vol.list('/nope'), VolumePathNotFoundError)
  await assert.rejects(vol.makeDir('/a/b'), VolumePathNotFoundError, 'makeDir without force needs the parent')
  await assert.rejects(vol.readFile('/../../etc/passwd'), (err) => err instanceof VolumeError && /^400: .*leads out of the volume/.test(err.message))
  await assert.rejects(vol.list('/', { token: 'not-the-token' }), AuthenticationError)
  // The team's API key is accepted as the token too.
  assert.deepEqual(await vol.list('/', { token: opts.apiKey }), [])
  await assert.rejects(Volume.getInfo('vol-0000000000000000', opts), VolumeNotFoundError)
})

test('a sandbox mounting the volume sees what the content API wrote, and the other way round', TIMEOUT, async () => {
  const vol = await volume('shared')
  await vol.writeFile('/from-api.txt', 'api')
  const sbx = await create({ volumeMounts: { '/mnt/v': vol } })
  assert.deepEqual((await sbx.getInfo()).volumeMounts, [{ name: vol.name, path: '/mnt/v' }], 'getInfo names its mounts')
  assert.equal(await sbx.files.read('/mnt/v/from-api.txt'), 'api')
  await sbx.commands.run('echo sandbox > /mnt/v/from-sandbox.txt && ln -s /etc/passwd /mnt/v/escape')
  assert.equal(await vol.readFile('/from-sandbox.txt'), 'sandbox\n')
  const link = await vol.getInfo('/escape')
  assert.equal(link.type, VolumeFileType.SYMLINK)
  assert.equal(link.target, '/etc/passwd')
  await assert.rejects(vol.readFile('/escape'), (err) => err instanceof VolumeError && /^400: /.test(err.message), "a link out of the volume is not followed to the host's files")
})

test('a second read-write mount of a volume in use is refused naming it', TIMEOUT, async () => {
  const vol = await volume('writer')
  const first = await create({ volumeMounts: { '/mnt/v': vol } })
  await assert.rejects(create({ volumeMounts: { '/data': vol.name } }), (err) => /409/.test(err.message) && err.message.includes(vol.name))
  await first.kill()
  const next = await create({ volumeMounts: { '/data': vol.name } })
  await next.commands.run('echo ok > /data/f')
})

test('the size quota: ENOSPC inside the sandbox, an upload past it a 507', TIMEOUT, async () => {
  const vol = await volume('quota')
  const sbx = await create({ volumeMounts: { '/mnt/v': vol } })
  const r = await sbx.commands.run('dd if=/dev/zero of=/mnt/v/big bs=1M count=48 2>&1; echo exit=$?; rm -f /mnt/v/big', { timeoutMs: 60_000 })
  assert.match(r.stdout, /No space left on device/)
  assert.doesNotMatch(r.stdout, /exit=0/)
  await vol.writeFile('/keep.txt', 'kept')
  await assert.rejects(vol.writeFile('/keep.txt', new Uint8Array(40 << 20)), (err) => err instanceof VolumeError && /^507: /.test(err.message))
  assert.equal(await vol.readFile('/keep.txt'), 'kept', 'a failed upload leaves the file as it was')
})
