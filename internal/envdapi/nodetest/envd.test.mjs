// Drives rayito-agent's envd-compatible API with the real e2b SDK. Run by
// TestSDK (../node_test.go), which starts the agents and a fake E2B API
// and passes their addresses in the environment.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { Sandbox, CommandExitError, AuthenticationError, FileNotFoundError, FilesystemEventType, InvalidArgumentError } from 'e2b'

const openURL = process.env.RAYITO_OPEN_URL // --envd-open, debug mode
const securedURL = process.env.RAYITO_SECURED_URL // token required
const apiURL = process.env.RAYITO_API_URL // fake E2B API, and test probes
const token = process.env.RAYITO_TOKEN // the agents' token
const tmp = process.env.RAYITO_TMP

const sbx = await Sandbox.create({ debug: true, sandboxUrl: openURL })

// waitFor polls cond until it holds; the bound only stops a broken run.
async function waitFor(cond, what) {
  const deadline = Date.now() + 30000
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`)
    await new Promise((r) => setTimeout(r, 10))
  }
}

test('commands.run: stdout and stderr', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.deepEqual([r.exitCode, r.stdout, r.stderr, r.error], [0, 'out\n', 'err\n', undefined])
})

test('commands.run: a non-zero exit is a CommandExitError', async () => {
  await assert.rejects(sbx.commands.run('echo partial; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError, `${e}`)
    assert.deepEqual([e.exitCode, e.error, e.stdout], [3, 'exit status 3', 'partial\n'])
    return true
  })
})

test('commands.run: envs, cwd and user', async () => {
  const r = await sbx.commands.run('echo "$FOO"; pwd', { envs: { FOO: 'bar baz' }, cwd: '/tmp' })
  assert.equal(r.stdout, 'bar baz\n/tmp\n')
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  assert.equal((await sbx.commands.run('whoami', { user: 'nobody', cwd: '/' })).stdout, 'nobody\n')
})

test('commands.run: 1 MB of output', async () => {
  let streamed = 0
  const r = await sbx.commands.run("head -c 1000000 /dev/zero | tr '\\0' x", { onStdout: (d) => { streamed += d.length } })
  assert.equal(r.stdout.length, 1000000)
  assert.match(r.stdout, /^x+$/)
  assert.equal(streamed, 1000000)
})

test('background command: onStdout, connect, list, sendStdin, closeStdin', async () => {
  let first = ''
  const h = await sbx.commands.run('while read line; do echo "got $line"; done; echo bye', {
    background: true, stdin: true, onStdout: (d) => { first += d },
  })
  const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid)
  assert.ok(listed, 'the command is listed')
  assert.equal(listed.cmd, '/bin/bash')
  assert.match(listed.args.at(-1), /^while read line/)

  await sbx.commands.sendStdin(h.pid, 'a\n')
  await waitFor(() => first.includes('got a\n'), 'the first line')
  let second = ''
  const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => { second += d } })
  await sbx.commands.sendStdin(h.pid, 'b\n')
  await waitFor(() => second.includes('got b\n'), 'the second line on the second handle')
  await sbx.commands.closeStdin(h.pid)
  const [r1, r2] = await Promise.all([h.wait(), h2.wait()])
  assert.deepEqual([r1.exitCode, r1.stdout], [0, 'got a\ngot b\nbye\n'])
  // The second handle streams from the moment it connected.
  assert.deepEqual([r2.exitCode, r2.stdout], [0, 'got b\nbye\n'])
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === h.pid), 'an ended command is not listed')
})

test('kill', async () => {
  const h = await sbx.commands.run('sleep 1000', { background: true })
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), (e) => {
    assert.ok(e instanceof CommandExitError, `${e}`)
    assert.deepEqual([e.exitCode, e.error], [-1, 'signal: killed'])
    return true
  })
  assert.equal(await sbx.commands.kill(h.pid), false)
})

test('pty: create, sendInput, resize, kill', async () => {
  let out = ''
  const dec = new TextDecoder()
  const t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) } })
  const enc = new TextEncoder()
  await sbx.pty.sendInput(t.pid, enc.encode('stty size\n'))
  await waitFor(() => out.includes('24 80'), 'the size 24 80')
  await sbx.pty.resize(t.pid, { cols: 100, rows: 40 })
  await sbx.pty.sendInput(t.pid, enc.encode('stty size\n'))
  await waitFor(() => out.includes('40 100'), 'the size 40 100')
  assert.equal(await sbx.pty.kill(t.pid), true)
  await assert.rejects(t.wait(), (e) => e instanceof CommandExitError && e.error === 'signal: killed')
})

test('files: write and read text, overwrite, relative paths', async () => {
  const p = `${tmp}/files/deep/er/hello.txt`
  const info = await sbx.files.write(p, 'hello')
  assert.deepEqual(info, { name: 'hello.txt', path: p, type: 'file', metadata: undefined })
  assert.equal(await sbx.files.read(p), 'hello')
  await sbx.files.write(p, 'hello again', { useOctetStream: true })
  assert.equal(await sbx.files.read(p), 'hello again')
  await sbx.files.write(p, 'zipped', { gzip: true })
  assert.equal(await sbx.files.read(p), 'zipped')
  await sbx.files.write(p, '')
  assert.equal(await sbx.files.read(p), '')
  // Relative to the user's home.
  const home = (await sbx.commands.run('echo $HOME', { user: 'root' })).stdout.trim()
  const rel = `rayito-envd-node-${process.pid}.txt`
  const relInfo = await sbx.files.write(rel, 'at home', { user: 'root' })
  assert.equal(relInfo.path, `${home}/${rel}`)
  assert.equal(await sbx.files.read(rel, { user: 'root' }), 'at home')
  await sbx.files.remove(rel, { user: 'root' })
  await assert.rejects(sbx.files.read(`${tmp}/files/missing`), (e) => e instanceof FileNotFoundError)
  await assert.rejects(sbx.files.read(`${tmp}/files`), (e) => e instanceof InvalidArgumentError)
})

test('files: 10 MB of binary, whole', async () => {
  const data = randomBytes(10 << 20)
  const sum = createHash('sha256').update(data).digest('hex')
  const p = `${tmp}/files/blob.bin`
  await sbx.files.write(p, data.buffer.slice(data.byteOffset, data.byteOffset + data.length))
  const onDisk = (await sbx.commands.run(`sha256sum ${p}`)).stdout.split(' ')[0]
  assert.equal(onDisk, sum)
  const back = await sbx.files.read(p, { format: 'bytes' })
  assert.equal(back.length, data.length)
  assert.equal(createHash('sha256').update(back).digest('hex'), sum)
})

test('files: multi-file write', async () => {
  const a = `${tmp}/files/multi/a.txt`
  const b = `${tmp}/files/multi/sub/b.txt`
  const infos = await sbx.files.write([{ path: a, data: 'A' }, { path: b, data: new Blob(['B']) }])
  assert.deepEqual(infos.map((i) => [i.name, i.path, i.type]), [['a.txt', a, 'file'], ['b.txt', b, 'file']])
  assert.equal(await sbx.files.read(a), 'A')
  assert.equal(await sbx.files.read(b), 'B')
})

test('files: list, exists, getInfo, makeDir, rename, remove', async () => {
  const d = `${tmp}/files/ops`
  assert.equal(await sbx.files.makeDir(`${d}/sub`), true)
  assert.equal(await sbx.files.makeDir(`${d}/sub`), false)
  await sbx.files.write(`${d}/a.txt`, 'abc')
  await sbx.files.write(`${d}/sub/b.txt`, 'b')
  await sbx.commands.run(`ln -s a.txt ${d}/link`)

  const names = (await sbx.files.list(d)).map((e) => [e.name, e.type])
  assert.deepEqual(names, [['a.txt', 'file'], ['link', 'symlink'], ['sub', 'dir']])
  const deep = (await sbx.files.list(d, { depth: 2 })).map((e) => e.path)
  assert.deepEqual(deep, [`${d}/a.txt`, `${d}/link`, `${d}/sub`, `${d}/sub/b.txt`])
  await assert.rejects(sbx.files.list(`${d}/missing`), (e) => e instanceof FileNotFoundError)

  assert.equal(await sbx.files.exists(`${d}/a.txt`), true)
  assert.equal(await sbx.files.exists(`${d}/nope`), false)

  const info = await sbx.files.getInfo(`${d}/a.txt`)
  assert.equal(info.name, 'a.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.path, `${d}/a.txt`)
  assert.equal(info.size, 3)
  assert.equal(info.permissions, '-rw-r--r--')
  assert.equal(info.mode, 0o644)
  assert.equal(info.owner, 'root')
  assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime - Date.now()) < 600000, `${info.modifiedTime}`)
  const link = await sbx.files.getInfo(`${d}/link`)
  assert.deepEqual([link.type, link.symlinkTarget], ['symlink', `${d}/a.txt`])
  assert.equal((await sbx.files.getInfo(d)).type, 'dir')
  await assert.rejects(sbx.files.getInfo(`${d}/nope`), (e) => e instanceof FileNotFoundError)

  const moved = await sbx.files.rename(`${d}/a.txt`, `${d}/new/place/c.txt`)
  assert.deepEqual([moved.name, moved.path, moved.type], ['c.txt', `${d}/new/place/c.txt`, 'file'])
  assert.equal(await sbx.files.exists(`${d}/a.txt`), false)
  assert.equal(await sbx.files.read(`${d}/new/place/c.txt`), 'abc')
  await assert.rejects(sbx.files.rename(`${d}/a.txt`, `${d}/x`), (e) => e instanceof FileNotFoundError)

  await sbx.files.remove(`${d}/sub`)
  assert.equal(await sbx.files.exists(`${d}/sub`), false)
  await sbx.files.remove(`${d}/sub`) // gone already: no error, as with envd
})

test('files: metadata', async () => {
  const d = `${tmp}/files/meta`
  const metadata = { author: 'mish', purpose: 'upload' }
  const info = await sbx.files.write(`${d}/a.txt`, 'x', { metadata })
  assert.deepEqual(info.metadata, metadata)
  assert.deepEqual((await sbx.files.getInfo(`${d}/a.txt`)).metadata, metadata)
  assert.deepEqual((await sbx.files.list(d))[0].metadata, metadata)
  assert.deepEqual((await sbx.files.rename(`${d}/a.txt`, `${d}/b.txt`)).metadata, metadata)
  const octet = await sbx.files.write(`${d}/c.txt`, 'x', { metadata, useOctetStream: true })
  assert.deepEqual(octet.metadata, metadata)
  const many = await sbx.files.write([{ path: `${d}/1`, data: '1' }, { path: `${d}/2`, data: '2' }], { metadata: { source: 'test' } })
  assert.deepEqual(many.map((i) => i.metadata), [{ source: 'test' }, { source: 'test' }])
  // A rewrite without metadata clears it.
  assert.equal((await sbx.files.write(`${d}/b.txt`, 'y')).metadata, undefined)
  assert.equal((await sbx.files.getInfo(`${d}/b.txt`)).metadata, undefined)
})

test('files: as another user, with envd\'s rights', async () => {
  // envd runs as root: whichever user the SDK names, files go where root
  // may put them, and what is created is that user's (E2B's base image has
  // a user "user"; this machine has nobody).
  const d = `${tmp}/files/roots`
  await sbx.commands.run(`mkdir -p ${d} && chmod 755 ${tmp}/.. ${tmp} ${tmp}/files && chmod 700 ${d}`)
  const written = await sbx.files.write([
    { path: `${d}/0/multi_test_file0.txt`, data: 'zero' },
    { path: `${d}/0/multi_test_file1.txt`, data: 'one' },
  ], { user: 'nobody' })
  assert.equal(written.length, 2)
  for (const w of written) assert.equal((await sbx.files.getInfo(w.path)).owner, 'nobody')
  assert.equal((await sbx.files.getInfo(`${d}/0`)).owner, 'nobody', 'the directory it made')
  assert.equal((await sbx.files.getInfo(d)).owner, 'root', 'the directory that was there')
  assert.equal(await sbx.files.read(`${d}/0/multi_test_file0.txt`, { user: 'nobody' }), 'zero')
  assert.equal(await sbx.files.makeDir(`${d}/dir/sub`, { user: 'nobody' }), true)
  assert.equal((await sbx.files.getInfo(`${d}/dir/sub`)).owner, 'nobody')
  await sbx.files.write(`${d}/root-only`, 'secret')
  await sbx.commands.run(`chmod 600 ${d}/root-only`)
  assert.equal(await sbx.files.read(`${d}/root-only`, { user: 'nobody' }), 'secret')
  // A replaced file keeps its owner.
  await sbx.files.write(`${d}/root-only`, 'rewritten', { user: 'nobody' })
  assert.equal((await sbx.files.getInfo(`${d}/root-only`)).owner, 'root')
  // Commands still run as the user: nobody's own cat may not read it.
  await assert.rejects(sbx.commands.run(`cat ${d}/root-only`, { user: 'nobody' }), (e) => e.exitCode === 1)
})

test('watchDir events', async () => {
  const dir = `${tmp}/watched`
  await sbx.commands.run(`mkdir -p ${dir}`)
  const seen = new Set()
  const w = await sbx.files.watchDir(dir, (e) => seen.add(`${e.type} ${e.name}`), { recursive: true })
  await sbx.commands.run(`touch ${dir}/a && mkdir ${dir}/sub`)
  // A new directory is watched from its create event on.
  await waitFor(() => seen.has(`${FilesystemEventType.CREATE} sub`), 'the create of sub')
  await sbx.commands.run(`cd ${dir} && echo x > sub/b && mv a c && chmod 600 c && rm c`)
  await waitFor(() => seen.has(`${FilesystemEventType.REMOVE} c`), 'the remove of c')
  for (const e of ['create a', 'create sub', 'create sub/b', 'write sub/b', 'rename a', 'create c', 'chmod c', 'remove c']) {
    assert.ok(seen.has(e), `event ${e} in ${[...seen]}`)
  }
  await w.stop()
})

test('watchDir: entries, and files.write seen as envd writes', async () => {
  const dir = `${tmp}/watched-entries`
  await sbx.files.makeDir(dir)
  await sbx.files.write(`${dir}/old.txt`, 'old')
  const events = []
  const w = await sbx.files.watchDir(dir, (e) => events.push(e), { includeEntry: true })
  // Waiting for a WRITE of the file, as E2B's own tests do.
  await sbx.files.write(`${dir}/old.txt`, 'rewritten')
  await sbx.files.write(`${dir}/new.txt`, 'brand new')
  await waitFor(() => events.some((e) => e.type === FilesystemEventType.WRITE && e.name === 'new.txt'), 'the write of new.txt')
  await sbx.files.remove(`${dir}/new.txt`)
  await waitFor(() => events.some((e) => e.type === FilesystemEventType.REMOVE), 'the remove')
  await w.stop()
  assert.deepEqual(events.map((e) => `${e.type} ${e.name}`),
    ['create old.txt', 'write old.txt', 'create new.txt', 'write new.txt', 'remove new.txt'])
  const write = events.find((e) => e.type === FilesystemEventType.WRITE && e.name === 'new.txt')
  assert.deepEqual([write.entry.name, write.entry.path, write.entry.type, write.entry.size], ['new.txt', `${dir}/new.txt`, 'file', 9])
  assert.equal(events.at(-1).entry, undefined)
})

test('secured: the token from the API is sent; none is refused with 401', async () => {
  const sec = await Sandbox.create({ apiUrl: apiURL, apiKey: 'e2b_test', sandboxUrl: securedURL })
  assert.equal((await sec.commands.run('echo secured')).stdout, 'secured\n')

  const anon = await Sandbox.create({ debug: true, sandboxUrl: securedURL })
  await assert.rejects(anon.commands.run('echo never'), (e) => e instanceof AuthenticationError)
  await assert.rejects(anon.commands.list(), (e) => e instanceof AuthenticationError)
  const r = await fetch(`${securedURL}/process.Process/List`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' }, body: '{}',
  })
  assert.equal(r.status, 401)
  assert.equal((await r.json()).code, 'unauthenticated')

  // Files through the token, and through signed URLs, which need none.
  const f = `${tmp}/secured/file.txt`
  await sec.files.write(f, 'signed content')
  assert.equal(await sec.files.read(f), 'signed content')
  await assert.rejects(anon.files.read(f), (e) => e instanceof AuthenticationError)
  await assert.rejects(anon.files.write(f, 'never'), (e) => e instanceof AuthenticationError)

  const down = new URL(await sec.downloadUrl(f, { useSignatureExpiration: 600 }))
  let r2 = await fetch(down)
  assert.equal(r2.status, 200)
  assert.equal(await r2.text(), 'signed content')
  const up = await sec.uploadUrl(`${tmp}/secured/uploaded.txt`, { user: 'root' })
  const form = new FormData()
  form.append('file', new Blob(['via a signed URL']), 'ignored-name')
  r2 = await fetch(up, { method: 'POST', body: form })
  assert.equal(r2.status, 200)
  assert.deepEqual((await r2.json()).map((x) => x.path), [`${tmp}/secured/uploaded.txt`])
  assert.equal(await sec.files.read(`${tmp}/secured/uploaded.txt`), 'via a signed URL')

  // Unsigned, altered, or used for the other operation: refused.
  const unsigned = new URL(down)
  unsigned.searchParams.delete('signature')
  assert.equal((await fetch(unsigned)).status, 401)
  const moved = new URL(down)
  moved.searchParams.set('path', '/etc/shadow')
  assert.equal((await fetch(moved)).status, 401)
  assert.equal((await fetch(down, { method: 'POST', body: form })).status, 401)
})

// Last: a resume cuts every stream of the open agent.
test('a resume in the middle: the stream ends whole, connect(pid) works', async () => {
  const n = 200000
  let expected = ''
  for (let i = 1; i <= n; i++) expected += `${i}\n`
  let before = ''
  const h = await sbx.commands.run(`seq 1 ${n}; read x; echo after $x`, {
    background: true, stdin: true, onStdout: (d) => { before += d },
  })
  // The resume comes once all the output is in the agent's stream (the
  // test's probe reads its cursor), whether or not it has arrived here.
  await waitFor(async () => (await (await fetch(`${apiURL}/test/stdout?pid=${h.pid}`)).json()).cursor === expected.length,
    'all output in the stream')
  const res = await fetch(`${openURL}/v1/resume`, {
    method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: '{}',
  })
  assert.equal(res.status, 200)
  assert.ok((await res.json()).resume_generation >= 1)
  await assert.rejects(h.wait(), (e) => /unavailable/.test(e.message) && /resumed/.test(e.message))
  assert.equal(before.length, expected.length)
  assert.ok(before === expected, 'the output before the cut arrived whole and in order')

  let after = ''
  const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => { after += d } })
  await sbx.commands.sendStdin(h.pid, 'x\n')
  const r = await h2.wait()
  assert.deepEqual([r.exitCode, after], [0, 'after x\n'])
})
