// The official npm e2b SDK's template builder driving a real `cove server`, unchanged.
// test/template (template_test.go) starts a server on a template store of its own and runs
// this file with `node --test`; by hand:
//
//   E2B_API_URL=http://ADDR E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=<key> node --test template.test.mjs

import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

import { Sandbox, Template, waitForFile, waitForPort, waitForProcess, waitForTimeout, waitForURL } from 'e2b'

function requireEnv(name) {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set: run this through test/template or see the comment at the top`)
  return value
}

const opts = { apiKey: requireEnv('E2B_API_KEY'), apiUrl: requireEnv('E2B_API_URL'), sandboxUrl: requireEnv('E2B_SANDBOX_URL') }
const TIMEOUT = { timeout: 240_000 }
const run = randomBytes(4).toString('hex')
const fileContextPath = path.join(path.dirname(fileURLToPath(import.meta.url)), 'template-fixture')

const made = []
after(async () => {
  for (const s of made) await s.kill().catch(() => {})
})

/** build builds t as name; a failure carries the build's log lines. */
async function build (t, name, options = {}) {
  const logs = []
  try {
    await Template.build(t, name, { ...opts, ...options, onBuildLogs: (e) => logs.push(e.toString()) })
  } catch (err) {
    console.error(`build ${name} failed: ${err.message}\nbuild log:\n${logs.join('\n')}`)
    throw err
  }
  return logs.join('\n')
}

function definition () {
  return Template({ fileContextPath })
    .fromTemplate('base')
    .copy('hello.txt', '/home/user/hello.txt', { user: 'user', mode: 0o640 })
    .copy('app', '/opt/app/', { mode: 0o755 })
    .setEnvs({ GREETING: 'hi', STAGE: 'test' })
    .runCmd('echo "$GREETING-$STAGE" > /etc/greeting && id -un > /etc/built-by', { user: 'root' })
    .runCmd('id -un > /tmp/as-user && cp /tmp/as-user /home/user/as-user')
    .setWorkdir('/home/user/work')
    .setUser('user')
    .runCmd('pwd > where && echo "$HOME" >> where')
    .setStartCmd('python3 -m http.server 8123', waitForPort(8123))
}

test('the builder makes a template from base with copy, runCmd, envs, workdir and user', TIMEOUT, async () => {
  const name = `sdk-${run}`
  const text = await build(definition(), name, { cpuCount: 1, memoryMB: 384 })
  assert.ok(await Template.exists(name, opts), 'the built template exists by name')
  assert.match(text, /RUN .*GREETING/, 'the step lines stream to onBuildLogs')

  const sbx = await Sandbox.create(name, opts)
  made.push(sbx)
  const r = await sbx.commands.run('cat /etc/greeting /etc/built-by /home/user/as-user /home/user/work/where; whoami; pwd; echo "$GREETING"; stat -c "%a %U %n" /home/user/hello.txt /opt/app/run.sh; /opt/app/run.sh ok; cat /home/user/hello.txt')
  assert.equal(r.stdout,
    'hi-test\nroot\nuser\n/home/user/work\n/home/user\nuser\n/home/user/work\nhi\n' +
    '640 user /home/user/hello.txt\n755 root /opt/app/run.sh\napp-ran ok\nhello from the context\n')
  const info = await sbx.getInfo()
  assert.equal(info.cpuCount, 1, 'the template\'s cpuCount sizes its sandboxes')
  assert.equal(info.memoryMB, 384, 'the template\'s memoryMB sizes its sandboxes')
  const web = await sbx.commands.run('curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:8123/')
  assert.equal(web.stdout, '200', 'the start command runs and passed its ready check before create returned')
})

test('a sandbox waits for its template\'s ready check', TIMEOUT, async () => {
  const name = `sdk-ready-${run}`
  const t = Template().fromTemplate('base').setStartCmd('sleep 1 && touch /tmp/ready && sleep infinity', waitForFile('/tmp/ready'))
  await build(t, name)
  const sbx = await Sandbox.create(name, opts)
  made.push(sbx)
  assert.equal(await sbx.files.exists('/tmp/ready'), true)
})

test('a rebuild with nothing changed is served from the cache', TIMEOUT, async () => {
  const name = `sdk-${run}`
  const text = await build(definition(), name)
  assert.match(text, /Skipping upload of 'hello.txt', already cached/)
  assert.match(text, /cached: layer/)
  assert.doesNotMatch(text, /copied \d+ entries/, 'no COPY ran again')
})

test('skipCache rebuilds the steps', TIMEOUT, async () => {
  const name = `sdk-${run}`
  const text = await build(definition().skipCache(), name, { skipCache: true })
  assert.doesNotMatch(text, /cached: layer/)
})

test('a failing step fails the build with its exit code and last lines', TIMEOUT, async () => {
  const t = Template().fromTemplate('base').runCmd('echo about-to-fail; exit 3')
  await assert.rejects(build(t, `sdk-bad-${run}`), (err) => {
    assert.equal(err.name, 'BuildError')
    assert.match(err.message, /exit status 3/)
    assert.match(err.message, /about-to-fail/)
    return true
  })
  assert.equal(await Template.exists(`sdk-bad-${run}`, opts), false)
})

test('every ready check and package installer produces a command the server accepts', TIMEOUT, async () => {
  for (const check of [waitForPort(8000), waitForURL('http://127.0.0.1:8000/'), waitForProcess('python3'), waitForFile('/tmp/ready'), waitForTimeout(1000)]) {
    const t = Template().fromTemplate('base').setStartCmd('sleep infinity', check)
    const json = JSON.parse(await Template.toJSON(t, false))
    assert.equal(json.fromTemplate, 'base')
    assert.ok(json.readyCmd.length > 0)
  }
  const t = Template().fromTemplate('base').aptInstall(['jq']).pipInstall(['requests']).npmInstall(['left-pad'], { g: true })
  const json = JSON.parse(await Template.toJSON(t, false))
  assert.deepEqual(json.steps.map((s) => s.type), ['RUN', 'RUN', 'RUN'])
  assert.match(json.steps[0].args[0], /apt-get install -y jq/)
})

test('fromImage pulls an image from a registry with credentials and a sandbox runs on it', { ...TIMEOUT, skip: !process.env.COVE_TEST_REGISTRY && 'COVE_TEST_REGISTRY is not set' }, async () => {
  const image = `${process.env.COVE_TEST_REGISTRY}/cove/busybox:1`
  const t = Template()
    .fromImage(image, { username: process.env.COVE_TEST_REGISTRY_USER, password: process.env.COVE_TEST_REGISTRY_PASSWORD })
    .runCmd('hello > /hello.txt && echo "$FROM_IMAGE" >> /hello.txt', { user: 'root' })
  const name = `sdk-image-${run}`
  await build(t, name)
  const sbx = await Sandbox.create(name, opts)
  made.push(sbx)
  const r = await sbx.commands.run('cat /hello.txt', { user: 'root' })
  assert.equal(r.stdout, 'hello from the image\nyes\n')

  const noCreds = Template().fromImage(image).runCmd('true')
  await assert.rejects(build(noCreds, `sdk-image-nocreds-${run}`), /unauthorized|UNAUTHORIZED|401/)
})

test('fromDockerfile builds a Dockerfile FROM a Cove template', TIMEOUT, async () => {
  const t = Template({ fileContextPath }).fromDockerfile(`FROM base
ENV FROM_DOCKERFILE=yes
WORKDIR /srv
COPY hello.txt ./
RUN cp hello.txt copied.txt && whoami > who.txt
`)
  const name = `sdk-dockerfile-${run}`
  await build(t, name)
  const sbx = await Sandbox.create(name, opts)
  made.push(sbx)
  const r = await sbx.commands.run('pwd; cat /srv/copied.txt /srv/who.txt; echo $FROM_DOCKERFILE')
  assert.equal(r.stdout, '/srv\nhello from the context\nroot\nyes\n')
})

test('tags name builds: a tagged build stays what it was when the name is rebuilt', TIMEOUT, async () => {
  const name = `sdk-tags-${run}`
  const version = (v) => Template().fromTemplate('base').runCmd(`echo ${v} > /tmp/version && cp /tmp/version /home/user/version`)
  await build(version('one'), `${name}:v1`)
  await build(version('two'), name)
  const tags = await Template.getTags(name, opts)
  assert.deepEqual(tags.map((t) => t.tag).sort(), ['default', 'v1'])

  const assigned = await Template.assignTags(`${name}:v1`, 'stable', opts)
  assert.deepEqual(assigned.tags, ['stable'])
  for (const [ref, want] of [[`${name}:v1`, 'one'], [`${name}:stable`, 'one'], [name, 'two']]) {
    const sbx = await Sandbox.create(ref, opts)
    made.push(sbx)
    assert.equal((await sbx.commands.run('cat /home/user/version')).stdout, `${want}\n`, ref)
  }
  await Template.removeTags(name, 'v1', opts)
  assert.deepEqual((await Template.getTags(name, opts)).map((t) => t.tag).sort(), ['default', 'stable'])
})

test('a template with no base builds on base, as E2B\'s default image', TIMEOUT, async () => {
  const name = `sdk-default-${run}`
  await build(Template().runCmd('echo on-the-default-base > /tmp/default && cp /tmp/default /home/user/default'), name)
  const sbx = await Sandbox.create(name, opts)
  made.push(sbx)
  assert.equal((await sbx.commands.run('cat /home/user/default')).stdout, 'on-the-default-base\n')
})
