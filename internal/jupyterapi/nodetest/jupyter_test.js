// Drives the agent's jupyter_server API with the real @jupyterlab/services
// client. Run by the Go test TestJupyterLabServices: node jupyter_test.js
// CASE, with RAYITO_URL, RAYITO_TOKEN and RAYITO_PROTOCOL (the websocket
// subprotocol the agent is expected to select: v1 or legacy) set. It exits
// non-zero with a message when a check fails.
'use strict';
const assert = require('node:assert/strict');
const WebSocket = require('ws');
const {
  ServerConnection, KernelSpecManager, KernelManager, SessionManager, KernelAPI
} = require('@jupyterlab/services');

const baseUrl = process.env.RAYITO_URL;
const token = process.env.RAYITO_TOKEN;
const wantProtocol = process.env.RAYITO_PROTOCOL === 'v1' ? 'v1.kernel.websocket.jupyter.org' : '';

// Records the subprotocol of every websocket that opened, to check the
// framing the client ended up speaking.
const selected = [];
class RecordingWebSocket extends WebSocket {
  constructor(url, protocols) {
    super(url, protocols);
    this.on('open', () => selected.push(this.protocol));
  }
}

const serverSettings = ServerConnection.makeSettings({
  baseUrl, token, appendToken: true, WebSocket: RecordingWebSocket
});

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms); })
  ]).finally(() => clearTimeout(timer));
}

// execute runs code and collects what its iopub said, and its reply.
async function execute(kernel, code) {
  const out = { results: [], streams: [], errors: [], reply: null };
  const future = kernel.requestExecute({ code });
  future.onIOPub = msg => {
    switch (msg.header.msg_type) {
      case 'execute_result': out.results.push(msg.content.data['text/plain']); break;
      case 'stream': out.streams.push(msg.content.name + ':' + msg.content.text); break;
      case 'error': out.errors.push(msg.content.ename); break;
    }
  };
  out.reply = await withTimeout(future.done, 60000, `execute ${code}`);
  return out;
}

function checkProtocols() {
  assert.ok(selected.length > 0, 'no websocket opened');
  for (const p of selected) {
    assert.equal(p, wantProtocol, `websocket subprotocol ${JSON.stringify(p)}, want ${JSON.stringify(wantProtocol)}`);
  }
}

const cases = {
  async specs() {
    const ksm = new KernelSpecManager({ serverSettings });
    await ksm.ready;
    await ksm.refreshSpecs();
    const specs = ksm.specs;
    assert.equal(specs.default, 'python3');
    const py = specs.kernelspecs.python3;
    assert.ok(py, 'python3 is listed');
    assert.equal(py.language, 'python');
    assert.ok(py.argv.length > 0);
    assert.ok(py.resources['logo-64x64'], 'the logo is a resource');
    const logo = await ServerConnection.makeRequest(baseUrl + py.resources['logo-64x64'].replace(/^\//, ''), {}, serverSettings);
    assert.equal(logo.status, 200);
    ksm.dispose();
  },

  async kernel() {
    const km = new KernelManager({ serverSettings });
    await km.ready;
    const kernel = await km.startNew({ name: 'python3' });

    let out = await execute(kernel, 'x = 42; x');
    assert.equal(out.reply.content.status, 'ok');
    assert.deepEqual(out.results, ['42']);

    out = await execute(kernel, "print('hello from the kernel')");
    assert.deepEqual(out.streams, ['stdout:hello from the kernel\n']);

    // Interrupt a busy kernel once the cell is running. The cell says so
    // itself: an interrupt that lands between execute_input and the user's
    // code hits ipykernel's own machinery, which then sends no reply.
    const busy = { results: [], errors: [] };
    const future = kernel.requestExecute({ code: "import time; print('sleeping', flush=True); time.sleep(30)" });
    const started = new Promise(resolve => {
      future.onIOPub = msg => {
        if (msg.header.msg_type === 'stream') resolve();
        if (msg.header.msg_type === 'error') busy.errors.push(msg.content.ename);
      };
    });
    await withTimeout(started, 60000, 'the sleep to start');
    await kernel.interrupt();
    const reply = await withTimeout(future.done, 60000, 'the interrupted cell');
    assert.equal(reply.content.status, 'error');
    assert.deepEqual(busy.errors, ['KeyboardInterrupt']);

    // The model follows the kernel's state and counts this client.
    const model = await KernelAPI.getKernelModel(kernel.id, serverSettings);
    assert.equal(model.name, 'python3');
    assert.ok(model.connections >= 1, `connections ${model.connections}`);
    assert.ok(!Number.isNaN(Date.parse(model.last_activity)), `last_activity ${model.last_activity}`);

    await withTimeout(kernel.restart(), 60000, 'restart');
    out = await execute(kernel, 'x');
    assert.deepEqual(out.errors, ['NameError'], 'restart cleared x');
    out = await execute(kernel, '6 * 7');
    assert.deepEqual(out.results, ['42'], 'the restarted kernel works');

    const id = kernel.id;
    await kernel.shutdown();
    await km.refreshRunning();
    assert.ok(![...km.running()].some(m => m.id === id), 'the kernel is no longer listed');
    assert.equal(await KernelAPI.getKernelModel(id, serverSettings), undefined);
    checkProtocols();
    km.dispose();
  },

  // The agent cuts the kernel's websocket with 1012 as after a snapshot
  // resume (the Go test does it when this prints "cut for resume"); the
  // client reconnects on its own and finds its kernel as it was.
  async resume() {
    const km = new KernelManager({ serverSettings });
    await km.ready;
    const kernel = await km.startNew({ name: 'python3' });
    let out = await execute(kernel, 'x = 42');
    assert.equal(out.reply.content.status, 'ok');
    const opened = selected.length;

    const statuses = [];
    const back = new Promise(resolve => {
      kernel.connectionStatusChanged.connect((_, status) => {
        statuses.push(status);
        if (status === 'connected') resolve();
      });
    });
    console.log('cut for resume');
    await withTimeout(back, 60000, 'the reconnect after the cut');
    assert.deepEqual(statuses, ['connecting', 'connected']);
    assert.ok(selected.length > opened, 'no new websocket opened');

    out = await execute(kernel, 'x');
    assert.equal(out.reply.content.status, 'ok');
    assert.deepEqual(out.results, ['42'], 'the kernel kept x across the cut');

    await kernel.shutdown();
    checkProtocols();
    km.dispose();
  },

  // A cell waits in input() when the agent cuts the kernel's websocket as
  // a resume does; the client reconnects on its own, then answers the
  // input_request, and the cell gets that answer once.
  async inputResume() {
    const km = new KernelManager({ serverSettings });
    await km.ready;
    const kernel = await km.startNew({ name: 'python3' });
    await execute(kernel, '1');
    const back = new Promise(resolve => {
      kernel.connectionStatusChanged.connect((_, status) => { if (status === 'connected') resolve(); });
    });
    let asked;
    const askedP = new Promise(resolve => { asked = resolve; });
    const future = kernel.requestExecute({ code: "name = input('name? ')\nprint('hello ' + name)", allow_stdin: true });
    const stdout = [];
    future.onIOPub = msg => { if (msg.header.msg_type === 'stream') stdout.push(msg.content.text); };
    future.onStdin = msg => { if (msg.header.msg_type === 'input_request') asked(msg); };
    const req = await withTimeout(askedP, 60000, 'the input_request');
    console.log('cut for resume');
    await withTimeout(back, 60000, 'the reconnect after the cut');
    kernel.sendInputReply({ status: 'ok', value: 'ada' }, req.header);
    const reply = await withTimeout(future.done, 60000, 'the cell after the reply');
    assert.equal(reply.content.status, 'ok');
    assert.equal(stdout.join(''), 'hello ada\n');
    const out = await execute(kernel, 'name');
    assert.deepEqual(out.results, ["'ada'"], 'answered once');
    await kernel.shutdown();
    checkProtocols();
    km.dispose();
  },

  async session() {
    const km = new KernelManager({ serverSettings });
    const sm = new SessionManager({ serverSettings, kernelManager: km });
    await sm.ready;
    const session = await sm.startNew({ path: 'work/analysis.ipynb', name: 'analysis.ipynb', type: 'notebook', kernel: { name: 'python3' } });
    assert.equal(session.path, 'work/analysis.ipynb');
    const out = await execute(session.kernel, '6*7');
    assert.deepEqual(out.results, ['42']);

    await sm.refreshRunning();
    assert.ok([...sm.running()].some(m => m.id === session.id), 'the session is listed');
    const again = await sm.findByPath('work/analysis.ipynb');
    assert.equal(again.id, session.id);

    const id = session.id, kernelId = session.kernel.id;
    await session.shutdown();
    await sm.refreshRunning();
    assert.ok(![...sm.running()].some(m => m.id === id), 'the session is gone');
    assert.equal(await KernelAPI.getKernelModel(kernelId, serverSettings), undefined, 'its kernel is gone');
    checkProtocols();
    sm.dispose();
    km.dispose();
  }
};

(async () => {
  const name = process.argv[2];
  if (!cases[name]) throw new Error(`no case ${name}; cases: ${Object.keys(cases).join(', ')}`);
  await cases[name]();
  console.log(`ok ${name}`);
  process.exit(0);
})().catch(err => {
  console.error(err && err.stack || err);
  process.exit(1);
});
