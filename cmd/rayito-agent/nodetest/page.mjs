// What a page does with the agent: the real clients, as a page loads them
// (bundled for the browser by browser.mjs with esbuild), called from
// another origin than the agent's. browser.mjs runs each case in headless
// Chromium through window.rayito; a case throws when what it saw is wrong.
import { Sandbox } from 'e2b'
import { ServerConnection, KernelManager } from '@jupyterlab/services'

function check(ok, what) {
  if (!ok) throw new Error(what)
}

async function waitFor(cond, what, ms = 60000) {
  const deadline = Date.now() + ms
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

function hex(buf) {
  return [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('')
}

// The e2b SDK finds the agent through the page's own origin, which plays
// E2B's API and hands out the agent's token (browser.mjs serves it).
function sandbox(agent) {
  return Sandbox.create({ apiUrl: location.origin, apiKey: 'e2b_test', sandboxUrl: agent })
}

function kernels(agent, token) {
  const serverSettings = ServerConnection.makeSettings({
    baseUrl: agent + '/', wsUrl: agent.replace(/^http/, 'ws') + '/', token,
    // The client puts the token in the websocket's URL only when the
    // server's host differs from the page's; here both are 127.0.0.1
    // (on other ports), so ask for it.
    appendToken: true,
  })
  return new KernelManager({ serverSettings })
}

// execute runs code on a @jupyterlab/services kernel and collects what a
// notebook would show.
async function execute(kernel, code, onStdin) {
  const out = { results: [], streams: '', errors: [] }
  const future = kernel.requestExecute({ code, allow_stdin: !!onStdin })
  future.onIOPub = (msg) => {
    const t = msg.header.msg_type
    if (t === 'execute_result') out.results.push(msg.content.data['text/plain'])
    if (t === 'stream') out.streams += msg.content.text
    if (t === 'error') out.errors.push(msg.content.ename)
  }
  if (onStdin) future.onStdin = (msg) => { if (msg.header.msg_type === 'input_request') onStdin(msg) }
  out.reply = await future.done
  return out
}

// The state the resume cases share: what was started before the resume.
const kept = {}

const cases = {
  // The e2b SDK: a command, a background command's output, 1 MiB written
  // and read back, and a watch seeing a command's file.
  async e2b({ agent, dir }) {
    const sbx = await sandbox(agent)
    const r = await sbx.commands.run('echo hi')
    check(r.exitCode === 0 && r.stdout === 'hi\n', `echo hi gave ${JSON.stringify(r)}`)

    let streamed = ''
    const h = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.05; done', {
      background: true, onStdout: (d) => { streamed += d },
    })
    const bg = await h.wait()
    check(bg.exitCode === 0 && streamed === 'line1\nline2\nline3\n', `background command streamed ${JSON.stringify(streamed)}`)

    const data = new Uint8Array(1 << 20)
    for (let i = 0; i < data.length; i += 65536) crypto.getRandomValues(data.subarray(i, i + 65536))
    const want = hex(await crypto.subtle.digest('SHA-256', data))
    await sbx.files.write(`${dir}/one-mib.bin`, data.buffer)
    const back = await sbx.files.read(`${dir}/one-mib.bin`, { format: 'bytes' })
    check(back.length === data.length, `read ${back.length} bytes back`)
    check(hex(await crypto.subtle.digest('SHA-256', back)) === want, 'the file read back differs from the one written')
    const sum = await sbx.commands.run(`sha256sum ${dir}/one-mib.bin`)
    check(sum.stdout.startsWith(want), `the agent's file hashes to ${sum.stdout}, the page's data to ${want}`)

    const events = []
    const w = await sbx.files.watchDir(dir, (ev) => events.push(ev))
    await sbx.commands.run(`echo made > ${dir}/made-by-a-command`)
    await waitFor(() => events.some((ev) => ev.name === 'made-by-a-command'), 'the watch seeing the new file')
    await w.stop()
    return { pid: h.pid, events: events.length }
  },

  // @jupyterlab/services: a result, an input() answered, an interrupt.
  async jupyter({ agent, token }) {
    const km = kernels(agent, token)
    await km.ready
    const kernel = await km.startNew({ name: 'python3' })
    let out = await execute(kernel, 'x = 6*7; x')
    check(out.reply.content.status === 'ok' && out.results[0] === '42', `x = 6*7; x gave ${JSON.stringify(out)}`)

    out = await execute(kernel, "name = input('name? ')\nprint('hello', name)", (msg) => {
      check(msg.content.prompt === 'name? ', `prompt ${msg.content.prompt}`)
      kernel.sendInputReply({ status: 'ok', value: 'page' }, msg.header)
    })
    check(out.streams === 'hello page\n', `input() cell printed ${JSON.stringify(out.streams)}`)

    // Interrupt once the cell says it runs (an interrupt before the user's
    // code lands in ipykernel's own machinery).
    let started
    const running = new Promise((r) => { started = r })
    const future = kernel.requestExecute({ code: "import time; print('sleeping', flush=True); time.sleep(60)" })
    const errors = []
    future.onIOPub = (msg) => {
      if (msg.header.msg_type === 'stream') started()
      if (msg.header.msg_type === 'error') errors.push(msg.content.ename)
    }
    await running
    await kernel.interrupt()
    const reply = await future.done
    check(reply.content.status === 'error' && errors[0] === 'KeyboardInterrupt', `interrupted cell: ${reply.content.status} ${errors}`)
    await kernel.shutdown()
    km.dispose()
    return { kernel: kernel.id }
  },

  // The native protocol over the browser's WebSocket: exec echo hi and
  // read its binary OUT frames.
  async native({ agent, token }) {
    const ws = new WebSocket(agent.replace(/^http/, 'ws') + '/v1/connect?access_token=' + encodeURIComponent(token))
    ws.binaryType = 'arraybuffer'
    const control = []
    let stdout = ''
    let failed = null
    ws.onerror = () => { failed = 'the websocket failed' }
    ws.onmessage = (m) => {
      if (typeof m.data === 'string') { control.push(JSON.parse(m.data)); return }
      const b = new Uint8Array(m.data)
      // type, uvarint stream, channel, uvarint offset, payload
      let i = 1
      while (b[i] & 0x80) i++
      i++
      const channel = b[i++]
      while (b[i] & 0x80) i++
      i++
      if (b[0] === 1 && channel === 1) stdout += new TextDecoder().decode(b.subarray(i))
    }
    await waitFor(() => failed || control.some((c) => c.event === 'hello'), 'the hello event', 10000)
    check(!failed, failed)
    ws.send(JSON.stringify({ id: 1, op: 'exec', argv: ['echo', 'hi'] }))
    await waitFor(() => failed || control.some((c) => c.event === 'end'), 'the end of echo hi', 30000)
    check(!failed, failed)
    const res = control.find((c) => c.id === 1)
    const end = control.find((c) => c.event === 'end')
    check(res && res.result && res.result.stream === end.stream, `exec answered ${JSON.stringify(res)}`)
    check(stdout === 'hi\n' && end.exit_code === 0, `echo hi: stdout ${JSON.stringify(stdout)}, end ${JSON.stringify(end)}`)
    ws.close()
    return { stream: end.stream }
  },

  // Before a resume: a background command waiting for a line, a kernel
  // holding a variable.
  async beforeResume({ agent, token }) {
    kept.sbx = await sandbox(agent)
    kept.out = ''
    kept.cmd = await kept.sbx.commands.run('read line; echo "got $line"', {
      background: true, stdin: true, onStdout: (d) => { kept.out += d },
    })
    kept.km = kernels(agent, token)
    await kept.km.ready
    kept.kernel = await kept.km.startNew({ name: 'python3' })
    const out = await execute(kept.kernel, 'y = 7*6')
    check(out.reply.content.status === 'ok', 'y = 7*6 failed')
    kept.statuses = []
    kept.kernel.connectionStatusChanged.connect((_, s) => kept.statuses.push(s))
    return { pid: kept.cmd.pid }
  },

  // After the resume: the e2b stream ended with the resume's error and
  // connect(pid) carries on; the kernel websocket reconnected by itself
  // and the kernel kept its variable.
  async afterResume() {
    let err = null
    try { await kept.cmd.wait() } catch (e) { err = e }
    check(err && /resumed/.test(err.message), `the command's stream ended with ${err}`)
    let after = ''
    const h = await kept.sbx.commands.connect(kept.cmd.pid, { onStdout: (d) => { after += d } })
    await kept.sbx.commands.sendStdin(kept.cmd.pid, 'after the resume\n')
    const r = await h.wait()
    check(r.exitCode === 0 && after === 'got after the resume\n', `after connect: ${r.exitCode} ${JSON.stringify(after)}`)

    await waitFor(() => kept.statuses.includes('connecting') && kept.kernel.connectionStatus === 'connected', 'the kernel websocket reconnecting')
    const out = await execute(kept.kernel, 'y')
    check(out.results[0] === '42', `y after the resume: ${JSON.stringify(out)}`)
    await kept.kernel.shutdown()
    kept.km.dispose()
    return { statuses: kept.statuses }
  },

  // An agent whose --allowed-origins leaves this page out: every client's
  // call fails in the browser, the token notwithstanding.
  async refused({ agent, token }) {
    const failures = {}
    try {
      const sbx = await sandbox(agent)
      await sbx.commands.run('echo hi')
    } catch (e) { failures.e2b = String(e) }
    try {
      const km = kernels(agent, token)
      await km.startNew({ name: 'python3' })
    } catch (e) { failures.jupyter = String(e) }
    try {
      const r = await fetch(agent + '/health')
      await r.text()
    } catch (e) { failures.fetch = String(e) }
    failures.websocket = await new Promise((resolve) => {
      const ws = new WebSocket(agent.replace(/^http/, 'ws') + '/v1/connect?access_token=' + encodeURIComponent(token))
      ws.onopen = () => { ws.close(); resolve(null) }
      ws.onerror = () => resolve('refused')
    })
    for (const k of ['e2b', 'jupyter', 'fetch', 'websocket']) check(failures[k], `${k} reached an agent that refuses this origin`)
    return failures
  },
}

window.rayito = { cases }
