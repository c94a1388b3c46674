// Drives the agent's code-interpreter API with the real
// @e2b/code-interpreter SDK. Run by the Go test TestE2BCodeInterpreter:
// node codeinterp_test.js CASE, with RAYITO_URL (the agent, no trailing
// slash) and RAYITO_TOKEN set. A tiny fake E2B API gives the SDK the
// agent's token as both its access token and its traffic token, as a
// platform that fronts the agent would; the SDK then sends them as it
// does to E2B's cloud. Exits non-zero with a message when a check fails.
'use strict';
const assert = require('node:assert/strict');
const http = require('node:http');
const { Sandbox } = require('@e2b/code-interpreter');

const agentUrl = process.env.RAYITO_URL;
const token = process.env.RAYITO_TOKEN;

// A PNG of one pixel.
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

function fakeAPI() {
  const server = http.createServer((req, res) => {
    const send = (status, body) => {
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(body === undefined ? '' : JSON.stringify(body));
    };
    if (req.method === 'POST' && (req.url === '/v2/sandboxes' || /^\/v2\/sandboxes\/[^/]+\/connect$/.test(req.url))) {
      return send(req.url === '/v2/sandboxes' ? 201 : 200, {
        sandboxID: 'rayito-test', templateID: 'code-interpreter-v1', clientID: 'test',
        envdVersion: '0.6.13', envdAccessToken: token, trafficAccessToken: token, domain: 'localhost'
      });
    }
    if (req.method === 'DELETE' || /\/timeout$/.test(req.url)) return send(204);
    send(404, { message: `fake API: no ${req.method} ${req.url}` });
  });
  return new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve(server)));
}

const cases = {
  // x set through runCode is read back through runCode; the Go test then
  // reads it through the native protocol.
  async state(sbx) {
    let ex = await sbx.runCode('x = 42');
    assert.equal(ex.error, undefined);
    ex = await sbx.runCode('x');
    assert.equal(ex.text, '42');
    assert.ok(ex.executionCount > 0, `executionCount ${ex.executionCount}`);
    ex = await sbx.runCode('x', { language: 'python' });
    assert.equal(ex.text, '42', 'the python language is the default context');
  },

  async streams(sbx) {
    const seen = [];
    const ex = await sbx.runCode(
      "import sys\nprint('one', flush=True)\nprint('two', file=sys.stderr, flush=True)\nprint('three', flush=True)",
      { onStdout: m => seen.push('out:' + m.line), onStderr: m => seen.push('err:' + m.line) });
    assert.deepEqual(seen, ['out:one\n', 'err:two\n', 'out:three\n']);
    assert.deepEqual(ex.logs, { stdout: ['one\n', 'three\n'], stderr: ['two\n'] });
  },

  async errors(sbx) {
    const errs = [];
    const ex = await sbx.runCode('1/0', { onError: e => errs.push(e.name) });
    assert.equal(ex.error.name, 'ZeroDivisionError');
    assert.equal(ex.error.value, 'division by zero');
    assert.match(ex.error.traceback, /ZeroDivisionError/);
    assert.deepEqual(errs, ['ZeroDivisionError']);
    // The context is still usable.
    assert.equal((await sbx.runCode('1 + 1')).text, '2');
  },

  async rich(sbx) {
    const ex = await sbx.runCode(
      "from IPython.display import display, HTML, Image\nimport base64\n" +
      "display(HTML('<b>bold</b>'))\n" +
      `display(Image(data=base64.b64decode('${PNG}')))\n` +
      "'done'");
    assert.equal(ex.error, undefined);
    assert.equal(ex.results.length, 3);
    const [html, png, main] = ex.results;
    assert.equal(html.html, '<b>bold</b>');
    assert.equal(html.isMainResult, false);
    assert.equal(png.png.replace(/\n/g, ''), PNG);
    assert.equal(main.isMainResult, true);
    assert.equal(main.text, 'done', 'quotes of a string result are stripped, as E2B does');
    assert.equal(ex.text, 'done');
  },

  async env(sbx) {
    let ex = await sbx.runCode("import os\nos.environ['RAYITO_E2B_VAR']", { envs: { RAYITO_E2B_VAR: 'for one cell' } });
    assert.equal(ex.text, 'for one cell');
    ex = await sbx.runCode("os.environ.get('RAYITO_E2B_VAR', 'gone')");
    assert.equal(ex.text, 'gone');
  },

  // A runCode whose timeout aborts it on the client's side cancels its
  // cell, as E2B's server does: the next runCode on the context answers
  // instead of queueing behind a five-minute sleep, and the state the
  // sleep never reached is not there.
  async abandoned(sbx) {
    const ctx = await sbx.createCodeContext({ language: 'python' });
    await sbx.runCode('before = 1', { context: ctx });
    await assert.rejects(
      sbx.runCode('import time\ntime.sleep(300)\nafter = 1', { context: ctx, timeoutMs: 3000 }),
      err => /timeout|timed out|abort/i.test(`${err.name} ${err.message}`));
    const ex = await sbx.runCode("('before' in globals(), 'after' in globals(), 1 + 1)", { context: ctx, timeoutMs: 60000 });
    assert.equal(ex.error, undefined);
    assert.equal(ex.text, '(True, False, 2)');
    await sbx.removeCodeContext(ctx.id);
  },

  async contexts(sbx) {
    const dir = process.env.RAYITO_CWD;
    const ctx = await sbx.createCodeContext({ cwd: dir, language: 'python' });
    assert.equal(ctx.language, 'python');
    assert.equal(ctx.cwd, dir);
    let ex = await sbx.runCode('import os\nos.getcwd()', { context: ctx });
    assert.equal(ex.text, dir);
    await sbx.runCode('only_here = 1', { context: ctx });
    ex = await sbx.runCode('only_here');
    assert.equal(ex.error.name, 'NameError', 'contexts do not share variables');

    let list = await sbx.listCodeContexts();
    assert.ok(list.some(c => c.id === ctx.id && c.cwd === dir), `context listed: ${JSON.stringify(list)}`);

    await sbx.restartCodeContext(ctx);
    ex = await sbx.runCode('only_here', { context: ctx });
    assert.equal(ex.error.name, 'NameError', 'restart cleared the context');

    await sbx.removeCodeContext(ctx.id);
    list = await sbx.listCodeContexts();
    assert.ok(!list.some(c => c.id === ctx.id), 'context removed');
    await assert.rejects(sbx.runCode('1', { context: ctx }), err => err.name === 'NotFoundError');
    await assert.rejects(sbx.runCode('1', { language: 'cobol' }), err => /400/.test(err.message));
  }
};

(async () => {
  const name = process.argv[2];
  if (!cases[name]) throw new Error(`no case ${name}; cases: ${Object.keys(cases).join(', ')}`);
  const api = await fakeAPI();
  const sbx = await Sandbox.create({
    apiKey: 'e2b_rayito_test', apiUrl: `http://127.0.0.1:${api.address().port}`, sandboxUrl: agentUrl
  });
  try {
    await cases[name](sbx);
  } finally {
    await sbx.kill();
    api.close();
  }
  console.log(`ok ${name}`);
  process.exit(0);
})().catch(err => {
  console.error(err && err.stack || err);
  process.exit(1);
});
