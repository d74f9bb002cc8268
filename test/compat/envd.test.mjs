// The official npm e2b SDK driving `cove envd`, unchanged. compat_test.go starts envd and a
// fixture control plane and runs this file with `node --test`; it can also be run by hand
// against any envd (see README.md).
//
// Environment: E2B_API_URL (control plane), E2B_SANDBOX_URL (envd), E2B_API_KEY (e2b_<hex>),
// COVE_SANDBOX_ID, and optionally COVE_DEFAULT_USER (whom envd runs a command as when the SDK
// names no user) and COVE_OTHER_USER (an unprivileged account that exists, e.g. nobody).

import { after, before, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'

import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  InvalidArgumentError,
  Sandbox,
  TimeoutError,
} from 'e2b'

function requireEnv(name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set: run this through compat_test.go or see README.md`)
  return value
}

const apiUrl = requireEnv('E2B_API_URL')
const sandboxUrl = requireEnv('E2B_SANDBOX_URL')
const apiKey = requireEnv('E2B_API_KEY')
const sandboxId = requireEnv('COVE_SANDBOX_ID')
const defaultUser = process.env.COVE_DEFAULT_USER || ''
const otherUser = process.env.COVE_OTHER_USER || ''

const TIMEOUT = { timeout: 30_000 }
const enc = new TextEncoder()
const dec = new TextDecoder()

/** @type {Sandbox} */
let sbx
// Every file scenario works under its own fresh directory.
const root = `/tmp/cove-compat-${randomBytes(4).toString('hex')}`

before(async () => {
  sbx = await Sandbox.connect(sandboxId, { apiKey, apiUrl, sandboxUrl })
  await sbx.commands.run(`mkdir -p ${root} && chmod 777 ${root}`, { user: 'root' })
})

after(async () => {
  if (!sbx) return
  // A failed scenario may leave a process whose open stream would keep node alive until its
  // 60 s Connect timeout: kill whatever is still running.
  for (const p of await sbx.commands.list().catch(() => [])) await sbx.commands.kill(p.pid).catch(() => {})
  await sbx.commands.run(`rm -rf ${root}`, { user: 'root' }).catch(() => {})
})

/** Polls pred every 25 ms until it is true or ms have passed; show() adds what was seen. */
async function waitFor(what, pred, ms = 10_000, show = () => '') {
  const deadline = Date.now() + ms
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what} ${show()}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

test('Sandbox.connect talks to envd: isRunning reads GET /health', TIMEOUT, async () => {
  assert.equal(sbx.sandboxId, sandboxId)
  assert.equal(await sbx.isRunning(), true)
  // getInfo is the control plane's (the fixture's, until cove server exists).
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sandboxId)
  assert.equal(info.state, 'running')
})

test('commands.run returns stdout, stderr and exit code 0, streaming to onStdout/onStderr', TIMEOUT, async () => {
  const seenOut = []
  const seenErr = []
  const res = await sbx.commands.run('echo out-line; echo err-line >&2', {
    onStdout: (d) => seenOut.push(d),
    onStderr: (d) => seenErr.push(d),
  })
  assert.equal(res.exitCode, 0)
  assert.equal(res.stdout, 'out-line\n')
  assert.equal(res.stderr, 'err-line\n')
  assert.equal(res.error, undefined)
  assert.equal(seenOut.join(''), 'out-line\n')
  assert.equal(seenErr.join(''), 'err-line\n')
})

test('commands.run with a non-zero exit rejects with CommandExitError carrying code and output', TIMEOUT, async () => {
  await assert.rejects(sbx.commands.run('echo partial; echo oops >&2; exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, `want CommandExitError, got ${err?.name}: ${err?.message}`)
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    assert.equal(err.stderr, 'oops\n')
    return true
  })
})

test('commands.run starts bash as a login shell with stdin closed', TIMEOUT, async () => {
  // The SDK sends cmd=/bin/bash args=[-l -c <cmd>] stdin=false: reading stdin gets EOF at once.
  const res = await sbx.commands.run('shopt -q login_shell && echo login; cat; echo after-cat')
  assert.equal(res.stdout, 'login\nafter-cat\n')
})

test('commands.run delivers large output whole, in order, across many chunks', TIMEOUT, async () => {
  // 250 000 bytes is several 32 KiB data events on stdout and on stderr.
  const res = await sbx.commands.run("seq -w 1 50000 | tr -d '\\n'; seq -w 1 50000 | tr -d '\\n' >&2")
  const want = Array.from({ length: 50000 }, (_, i) => String(i + 1).padStart(5, '0')).join('')
  assert.equal(res.stdout.length, 250000)
  assert.equal(res.stdout, want)
  assert.equal(res.stderr, want)
})

test('commands.run past its timeoutMs is killed and rejects with TimeoutError', TIMEOUT, async () => {
  const started = Date.now()
  await assert.rejects(sbx.commands.run('sleep 20', { timeoutMs: 700 }), (err) => {
    assert.ok(err instanceof TimeoutError, `want TimeoutError, got ${err?.name}: ${err?.message}`)
    return true
  })
  assert.ok(Date.now() - started < 10_000, 'the deadline ended the stream, not the command')
  // The SDK rejects on its own timer; envd learns of the deadline a moment later and kills.
  await waitFor('the command killed when Connect-Timeout-Ms passes', async () =>
    (await sbx.commands.list()).filter((p) => p.args?.[2] === 'sleep 20').length === 0, 3000)
})

test('background command survives disconnect; commands.connect by pid gets its later output and exit', TIMEOUT, async () => {
  const early = []
  const handle = await sbx.commands.run('echo early; sleep 1.5; echo late; exit 7', {
    background: true,
    onStdout: (d) => early.push(d),
  })
  assert.ok(handle.pid > 0, `pid ${handle.pid}`)
  await waitFor('the first line', () => early.join('').includes('early'))
  await handle.disconnect()

  const late = []
  const again = await sbx.commands.connect(handle.pid, { onStdout: (d) => late.push(d) })
  assert.equal(again.pid, handle.pid)
  await assert.rejects(again.wait(), (err) => {
    assert.ok(err instanceof CommandExitError, `want CommandExitError, got ${err?.name}: ${err?.message}`)
    assert.equal(err.exitCode, 7)
    return true
  })
  assert.ok(late.join('').includes('late\n'), `output after reconnect: ${JSON.stringify(late.join(''))}`)
  assert.ok(!early.join('').includes('late'), 'the disconnected handle must not see later output')
})

test('commands.connect to a command that already exited still gets its exit code', TIMEOUT, async () => {
  const handle = await sbx.commands.run('exit 5', { background: true })
  await handle.disconnect()
  await new Promise((r) => setTimeout(r, 500)) // it has exited by now
  const late = await sbx.commands.connect(handle.pid)
  await assert.rejects(late.wait(), (err) => {
    assert.ok(err instanceof CommandExitError, `want CommandExitError, got ${err?.name}: ${err?.message}`)
    assert.equal(err.exitCode, 5)
    return true
  })
})

test('sendStdin reaches the command; closeStdin ends cat with exit 0', TIMEOUT, async () => {
  let out = ''
  const handle = await sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => (out += d) })
  await handle.sendStdin('hello\n')
  await waitFor('cat to echo the first line', () => out === 'hello\n', 10_000, () => `; stdout: ${JSON.stringify(out)}`)
  await sbx.commands.sendStdin(handle.pid, 'world\n') // the pid form of the same call
  await waitFor('cat to echo the second line', () => out === 'hello\nworld\n', 10_000, () => `; stdout: ${JSON.stringify(out)}`)
  await handle.closeStdin()
  const res = await handle.wait()
  assert.equal(res.exitCode, 0)
  assert.equal(res.stdout, 'hello\nworld\n')
})

test('commands.closeStdin by pid ends a command reading stdin', TIMEOUT, async () => {
  const handle = await sbx.commands.run('wc -c', { background: true, stdin: true })
  await sbx.commands.sendStdin(handle.pid, 'abcd')
  await sbx.commands.closeStdin(handle.pid)
  const res = await handle.wait()
  assert.equal(res.stdout.trim(), '4')
})

test('kill: handle.kill() SIGKILLs a running command, wait() rejects, a second kill finds nothing', TIMEOUT, async () => {
  const handle = await sbx.commands.run('sleep 60', { background: true })
  assert.equal(await handle.kill(), true)
  await assert.rejects(handle.wait(), (err) => {
    assert.ok(err instanceof CommandExitError, `want CommandExitError, got ${err?.name}: ${err?.message}`)
    assert.notEqual(err.exitCode, 0)
    return true
  })
  assert.equal(await sbx.commands.kill(handle.pid), false, 'kill of an exited pid answers not_found')
  const pids = (await sbx.commands.list()).map((p) => p.pid)
  assert.ok(!pids.includes(handle.pid), `killed pid ${handle.pid} still listed: ${pids}`)
})

test('commands.kill of a pid that never existed returns false', TIMEOUT, async () => {
  assert.equal(await sbx.commands.kill(999_999), false)
})

test('commands.list shows a running command with its cmd, args, envs and cwd', TIMEOUT, async () => {
  const handle = await sbx.commands.run('sleep 30', {
    background: true,
    envs: { COVE_LIST_MARK: 'listed' },
    cwd: '/tmp',
  })
  try {
    const procs = await sbx.commands.list()
    const p = procs.find((x) => x.pid === handle.pid)
    assert.ok(p, `pid ${handle.pid} not in list ${JSON.stringify(procs)}`)
    assert.equal(p.cmd, '/bin/bash')
    assert.deepEqual(p.args, ['-l', '-c', 'sleep 30'])
    assert.equal(p.envs.COVE_LIST_MARK, 'listed')
    assert.equal(p.cwd, '/tmp')
  } finally {
    await handle.kill()
  }
})

test('per-command envs reach the command and do not leak into the next one', TIMEOUT, async () => {
  const res = await sbx.commands.run('echo "$FOO|$BAR"', { envs: { FOO: 'foo value', BAR: 'x=y' } })
  assert.equal(res.stdout, 'foo value|x=y\n')
  const next = await sbx.commands.run('echo "[$FOO]"')
  assert.equal(next.stdout, '[]\n')
})

test('cwd sets the working directory of the command', TIMEOUT, async () => {
  assert.equal((await sbx.commands.run('pwd', { cwd: root })).stdout, `${root}\n`)
  assert.equal((await sbx.commands.run('pwd', { cwd: '/' })).stdout, '/\n')
})

test('user root: whoami, USER, HOME and LOGNAME are root', TIMEOUT, async () => {
  const res = await sbx.commands.run('whoami; echo "$USER $HOME $LOGNAME"; id -u', { user: 'root' })
  assert.equal(res.stdout, 'root\nroot /root root\n0\n')
})

test('no user named: the command runs as the default user', TIMEOUT, async (t) => {
  if (!defaultUser) return t.skip('COVE_DEFAULT_USER not set')
  const res = await sbx.commands.run('whoami')
  assert.equal(res.stdout, `${defaultUser}\n`)
})

test('another existing user: the command runs as that account', TIMEOUT, async (t) => {
  if (!otherUser) return t.skip('COVE_OTHER_USER not set: no unprivileged account on this machine')
  // cwd is given because nobody's home (/nonexistent) does not exist on most machines.
  const res = await sbx.commands.run('whoami; echo "$USER"; id -u', { user: otherUser, cwd: '/tmp' })
  const [who, envUser, uid] = res.stdout.trim().split('\n')
  assert.equal(who, otherUser)
  assert.equal(envUser, otherUser)
  assert.notEqual(uid, '0')
})

test('an unknown user is rejected with AuthenticationError, on RPC and on /files', TIMEOUT, async () => {
  // E2B's envd answers unauthenticated (Connect) and 401 (HTTP) for a user it cannot look up.
  const user = 'no-such-user-cove'
  const want = (err) => {
    assert.ok(err instanceof AuthenticationError, `want AuthenticationError, got ${err?.name}: ${err?.message}`)
    return true
  }
  await assert.rejects(sbx.commands.run('true', { user }), want)
  await assert.rejects(sbx.files.list('/tmp', { user }), want)
  await assert.rejects(sbx.files.read('/etc/hostname', { user }), want)
  await assert.rejects(sbx.files.write(`${root}/by-nobody-known`, 'x', { user }), want)
})

test('files.write then files.read round-trips text, bytes and an empty file', TIMEOUT, async () => {
  const path = `${root}/rw/nested/hello.txt` // parents are created by write
  const info = await sbx.files.write(path, 'hello, cove\n')
  assert.equal(info.path, path)
  assert.equal(info.name, 'hello.txt')
  assert.equal(info.type, 'file')
  assert.equal(await sbx.files.read(path), 'hello, cove\n')

  const bin = new Uint8Array([0, 1, 2, 255, 254, 10, 13])
  await sbx.files.write(`${root}/rw/bin`, bin)
  assert.deepEqual(await sbx.files.read(`${root}/rw/bin`, { format: 'bytes' }), bin)

  await sbx.files.write(`${root}/rw/empty`, '')
  assert.equal(await sbx.files.read(`${root}/rw/empty`), '')

  const cat = await sbx.commands.run(`cat ${path}`)
  assert.equal(cat.stdout, 'hello, cove\n', 'the file written over HTTP is visible to commands')
})

test('files.write of several files at once returns one entry per file', TIMEOUT, async () => {
  const infos = await sbx.files.write([
    { path: `${root}/multi/a.txt`, data: 'A' },
    { path: `${root}/multi/b.txt`, data: 'B' },
  ])
  assert.deepEqual(infos.map((i) => i.path).sort(), [`${root}/multi/a.txt`, `${root}/multi/b.txt`])
  assert.equal(await sbx.files.read(`${root}/multi/b.txt`), 'B')
})

test('files.write as application/octet-stream, plain and gzip-encoded, and files.read with gzip', TIMEOUT, async () => {
  const text = 'octet '.repeat(10_000)
  const plain = await sbx.files.write(`${root}/octet/plain.txt`, text, { useOctetStream: true })
  assert.equal(plain.path, `${root}/octet/plain.txt`)
  assert.equal(plain.type, 'file')
  assert.equal(await sbx.files.read(`${root}/octet/plain.txt`), text)

  const gz = await sbx.files.write(`${root}/octet/gz.txt`, text, { gzip: true })
  assert.equal(gz.path, `${root}/octet/gz.txt`)
  assert.equal(await sbx.files.read(`${root}/octet/gz.txt`, { gzip: true }), text)
  assert.equal((await sbx.files.getInfo(`${root}/octet/gz.txt`)).size, text.length, 'stored decompressed')
})

test('files.write with metadata stores it; write, getInfo and list return it', TIMEOUT, async () => {
  const path = `${root}/meta.txt`
  const info = await sbx.files.write(path, 'm', { metadata: { owner: 'team-a', 'x.y': '1 2' } })
  assert.deepEqual(info.metadata, { owner: 'team-a', 'x.y': '1 2' })
  assert.deepEqual((await sbx.files.getInfo(path)).metadata, { owner: 'team-a', 'x.y': '1 2' })
  const listed = (await sbx.files.list(root)).find((e) => e.name === 'meta.txt')
  assert.deepEqual(listed?.metadata, { owner: 'team-a', 'x.y': '1 2' })
  await sbx.files.write(`${root}/no-meta.txt`, 'n')
  assert.equal((await sbx.files.getInfo(`${root}/no-meta.txt`)).metadata, undefined)
})

test('files.read of a missing file rejects with FileNotFoundError', TIMEOUT, async () => {
  await assert.rejects(sbx.files.read(`${root}/no-such-file`), FileNotFoundError)
})

test('files.read of a directory rejects with InvalidArgumentError', TIMEOUT, async () => {
  await assert.rejects(sbx.files.read(root), InvalidArgumentError)
})

test('files.list and files.rename of a missing path reject with FileNotFoundError', TIMEOUT, async () => {
  await assert.rejects(sbx.files.list(`${root}/no-such-dir`), FileNotFoundError)
  await assert.rejects(sbx.files.rename(`${root}/no-such-file`, `${root}/whatever`), FileNotFoundError)
})

test('files.write as another user creates a file that user owns', TIMEOUT, async (t) => {
  if (!otherUser) return t.skip('COVE_OTHER_USER not set')
  const path = `${root}/owned-by-${otherUser}`
  await sbx.files.write(path, 'mine', { user: otherUser })
  const info = await sbx.files.getInfo(path)
  assert.equal(info.owner, otherUser)
  assert.equal(await sbx.files.read(path, { user: otherUser }), 'mine')
})

test('files.makeDir creates a directory once and answers false when it exists', TIMEOUT, async () => {
  assert.equal(await sbx.files.makeDir(`${root}/made/deep/er`), true)
  assert.equal(await sbx.files.makeDir(`${root}/made/deep/er`), false)
  const info = await sbx.files.getInfo(`${root}/made/deep/er`)
  assert.equal(info.type, 'dir')
})

test('files.list returns names, types and paths; depth 2 reaches one level deeper', TIMEOUT, async () => {
  const dir = `${root}/listing`
  await sbx.files.makeDir(`${dir}/sub`)
  await sbx.files.write(`${dir}/f.txt`, '12345')
  await sbx.files.write(`${dir}/sub/g.txt`, 'g')

  const entries = await sbx.files.list(dir)
  const byName = Object.fromEntries(entries.map((e) => [e.name, e]))
  assert.deepEqual(Object.keys(byName).sort(), ['f.txt', 'sub'])
  assert.equal(byName['f.txt'].type, 'file')
  assert.equal(byName['f.txt'].path, `${dir}/f.txt`)
  assert.equal(byName['f.txt'].size, 5)
  assert.equal(byName.sub.type, 'dir')

  const deep = await sbx.files.list(dir, { depth: 2 })
  assert.deepEqual(deep.map((e) => e.path).sort(), [`${dir}/f.txt`, `${dir}/sub`, `${dir}/sub/g.txt`])
})

test('files.exists and files.getInfo describe a file', TIMEOUT, async () => {
  const path = `${root}/info.txt`
  assert.equal(await sbx.files.exists(path), false)
  await sbx.files.write(path, 'abc')
  assert.equal(await sbx.files.exists(path), true)
  await sbx.commands.run(`chmod 640 ${path}`, { user: 'root' })

  const info = await sbx.files.getInfo(path)
  assert.equal(info.name, 'info.txt')
  assert.equal(info.path, path)
  assert.equal(info.type, 'file')
  assert.equal(info.size, 3)
  assert.equal(info.mode & 0o777, 0o640)
  assert.equal(info.permissions, '-rw-r-----')
  assert.ok(info.owner, 'owner is set')
  assert.ok(info.group, 'group is set')
  assert.ok(info.modifiedTime instanceof Date && Math.abs(Date.now() - info.modifiedTime) < 60_000,
    `modifiedTime ${info.modifiedTime}`)
  await assert.rejects(sbx.files.getInfo(`${root}/missing`), FileNotFoundError)
})

test('files.rename moves a file and returns its new entry', TIMEOUT, async () => {
  const from = `${root}/before.txt`
  const to = `${root}/after.txt`
  await sbx.files.write(from, 'moving')
  const info = await sbx.files.rename(from, to)
  assert.equal(info.path, to)
  assert.equal(info.name, 'after.txt')
  assert.equal(await sbx.files.exists(from), false)
  assert.equal(await sbx.files.read(to), 'moving')
})

test('files.remove deletes a file and a non-empty directory', TIMEOUT, async () => {
  await sbx.files.write(`${root}/gone/x/y.txt`, 'y')
  await sbx.files.write(`${root}/gone.txt`, 'z')
  await sbx.files.remove(`${root}/gone.txt`)
  await sbx.files.remove(`${root}/gone`)
  assert.equal(await sbx.files.exists(`${root}/gone.txt`), false)
  assert.equal(await sbx.files.exists(`${root}/gone`), false)
})

test('files.watchDir reports an event for a file written into the directory', TIMEOUT, async () => {
  const dir = `${root}/watched`
  await sbx.files.makeDir(dir)
  const events = []
  const handle = await sbx.files.watchDir(dir, (e) => events.push(e))
  try {
    await sbx.files.write(`${dir}/new.txt`, 'fresh')
    await waitFor('a watch event for new.txt', () => events.some((e) => e.name === 'new.txt'), 5_000, () => `; events: ${JSON.stringify(events)}`)
    const types = events.filter((e) => e.name === 'new.txt').map((e) => e.type)
    assert.ok(types.includes('create') || types.includes('write'), `event types ${types}`)
  } finally {
    await handle.stop()
  }
})

test('files.remove of a missing path succeeds, as in E2B', TIMEOUT, async () => {
  await sbx.files.remove(`${root}/never-was`)
  await sbx.files.remove(`${root}/never-was/deeper`)
})

test('files.read of a /proc file whose stat size is 0 returns its content', TIMEOUT, async () => {
  const text = await sbx.files.read('/proc/self/status')
  assert.match(text, /Pid:/)
})

test('files.write of many files at once: a watcher sees only the targets\' names', TIMEOUT, async () => {
  const dir = `${root}/watched-many`
  await sbx.files.makeDir(dir)
  const names = Array.from({ length: 20 }, (_, i) => `m${i}.txt`)
  await sbx.files.write([{ path: `${dir}/m0.txt`, data: 'old' }])
  const events = []
  const handle = await sbx.files.watchDir(dir, (e) => events.push(e))
  try {
    await sbx.files.write(names.map((n) => ({ path: `${dir}/${n}`, data: 'x'.repeat(70_000) })))
    await sbx.files.write(`${dir}/zz-marker`, '')
    const show = () => `; events: ${JSON.stringify(events)}`
    await waitFor('an event for the marker', () => events.some((e) => e.name === 'zz-marker'), 10_000, show)
    const strangers = events.filter((e) => e.name !== 'zz-marker' && !names.includes(e.name))
    assert.deepEqual(strangers, [], 'events for names that were never uploaded')
    for (const n of names) assert.ok(events.some((e) => e.name === n), `no event for ${n}${show()}`)
  } finally {
    await handle.stop()
  }
})

test('files.watchDir recursive with includeEntry reports nested writes with their entry', TIMEOUT, async () => {
  const dir = `${root}/watched-deep`
  await sbx.files.makeDir(`${dir}/a/b`)
  const events = []
  const handle = await sbx.files.watchDir(dir, (e) => events.push(e), { recursive: true, includeEntry: true })
  try {
    await sbx.files.write(`${dir}/a/b/deep.txt`, 'deep!')
    const show = () => `; events: ${JSON.stringify(events)}`
    await waitFor('an event for a/b/deep.txt with its entry', () =>
      events.some((e) => e.name === 'a/b/deep.txt' && e.entry?.path === `${dir}/a/b/deep.txt`), 5_000, show)
    const e = events.find((x) => x.name === 'a/b/deep.txt' && x.entry)
    assert.equal(e.entry.type, 'file')
    assert.equal(e.entry.name, 'deep.txt')
  } finally {
    await handle.stop()
  }
})

test('pty: create, sendInput, resize and kill, output through onData', TIMEOUT, async (t) => {
  let out = ''
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += dec.decode(d)) })
  t.after(() => term.kill().catch(() => {}))
  assert.ok(term.pid > 0)

  await sbx.pty.sendInput(term.pid, enc.encode('echo "pty says $((6*7))"\n'))
  await waitFor('the shell to echo 42', () => out.includes('pty says 42'), 10_000, () => `; pty output: ${JSON.stringify(out)}`)

  await sbx.pty.sendInput(term.pid, enc.encode('stty size\n'))
  await waitFor('stty to report 24 80', () => out.includes('24 80'), 10_000, () => `; pty output: ${JSON.stringify(out)}`)

  await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(term.pid, enc.encode('stty size; tty\n'))
  await waitFor('stty to report 30 100 and tty a /dev/pts name',
    () => out.includes('30 100') && /\/dev\/pts\/\d+/.test(out), 10_000, () => `; pty output: ${JSON.stringify(out)}`)

  assert.equal(await term.kill(), true)
  await assert.rejects(term.wait(), CommandExitError)
  const pids = (await sbx.commands.list()).map((p) => p.pid)
  assert.ok(!pids.includes(term.pid), `killed pty ${term.pid} still listed`)
})
