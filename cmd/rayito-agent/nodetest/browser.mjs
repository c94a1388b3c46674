// Drives the agent from web pages in headless Chromium (Debian's, through
// puppeteer-core). Run by TestBrowsers (../browser_test.go), which starts
// the agents and Jupyter Notebook and passes their addresses in the
// environment; this script serves the page from an origin of its own,
// runs the cases of page.mjs in it, and acts as the host (POST
// /v1/resume). It prints "ok <case>" per case and the notebook kernel's
// pid; on a failure it saves a screenshot and the page's console log in
// RAYITO_ARTIFACTS and exits 1.
import http from 'node:http'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import * as esbuild from 'esbuild'
import puppeteer from 'puppeteer-core'

const env = (name) => {
  const v = process.env[name]
  if (!v) throw new Error(`${name} is not set`)
  return v
}
const agent = env('RAYITO_AGENT') // http://127.0.0.1:P, any origin allowed
const narrow = env('RAYITO_NARROW') // --allowed-origins leaves the page out
const token = env('RAYITO_TOKEN')
const artifacts = env('RAYITO_ARTIFACTS')
const here = path.dirname(fileURLToPath(import.meta.url))

// The page's bundle. e2b imports node:fs and friends at its top for its
// template builder, which a page never calls: they become empty modules,
// as a web app's bundler config would make them.
const nodeless = {
  name: 'nodeless',
  setup(b) {
    b.onResolve({ filter: /^node:/ }, (a) => ({ path: a.path, namespace: 'nodeless' }))
    b.onLoad({ filter: /.*/, namespace: 'nodeless' }, () => ({ contents: 'export default {}', loader: 'js' }))
  },
}
const bundle = (await esbuild.build({
  entryPoints: [path.join(here, 'page.mjs')], bundle: true, write: false, format: 'iife',
  platform: 'browser', target: 'chrome120', logLevel: 'error', plugins: [nodeless],
})).outputFiles[0].contents

// The page's origin also plays E2B's API (same origin: no CORS there),
// handing out the agent's token as E2B's does, so the SDK sends it.
const sandbox = {
  sandboxID: 'rayito-browser', templateID: 'base', clientID: 'test', envdVersion: '0.6.13',
  envdAccessToken: token, trafficAccessToken: null, domain: null,
}
const pages = http.createServer((req, res) => {
  const send = (status, type, body) => { res.writeHead(status, { 'Content-Type': type }); res.end(body) }
  if (req.url === '/') return send(200, 'text/html', '<!doctype html><title>rayito</title><script src="/page.js"></script>')
  if (req.url === '/page.js') return send(200, 'text/javascript', bundle)
  if (req.method === 'POST' && /^\/v2\/sandboxes(\/[^/]+\/connect)?$/.test(req.url)) return send(201, 'application/json', JSON.stringify(sandbox))
  if (req.method === 'POST' && /^\/sandboxes\/[^/]+\/timeout$/.test(req.url)) return send(204, 'text/plain', '')
  send(404, 'text/plain', 'no such page')
})
await new Promise((r) => pages.listen(0, '127.0.0.1', r))
const origin = `http://127.0.0.1:${pages.address().port}`

const browser = await puppeteer.launch({
  executablePath: env('RAYITO_CHROMIUM'),
  userDataDir: env('RAYITO_PROFILE'), // the Go test kills what runs from it
  headless: true,
  // Root (the test machine's user) needs --no-sandbox; the rest keeps
  // Chromium off the network beyond 127.0.0.1.
  args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--disable-default-apps', '--disable-features=MediaRouter,OptimizationHints,Translate'],
})
let page
const consoleLog = []
function watch(p, label) {
  p.on('console', (m) => consoleLog.push(`[${label}] ${m.type()}: ${m.text()}`))
  p.on('pageerror', (e) => consoleLog.push(`[${label}] pageerror: ${e.message}`))
  p.on('requestfailed', (r) => consoleLog.push(`[${label}] request failed: ${r.method()} ${r.url()} ${r.failure()?.errorText}`))
}

async function fail(what, err) {
  fs.mkdirSync(artifacts, { recursive: true })
  const base = path.join(artifacts, what.replace(/[^a-z0-9]+/gi, '-'))
  try { if (page) await page.screenshot({ path: base + '.png', fullPage: true }) } catch (e) { consoleLog.push(`screenshot: ${e}`) }
  fs.writeFileSync(base + '.console.log', consoleLog.join('\n') + '\n')
  console.log(`FAIL ${what}: ${err && err.stack || err}`)
  console.log(`screenshot and console log: ${base}.png, ${base}.console.log`)
  await browser.close().catch(() => {})
  pages.close()
  process.exit(1)
}

async function run(name, args) {
  const t0 = Date.now()
  try {
    const out = await page.evaluate((n, a) => window.rayito.cases[n](a), name, args)
    console.log(`ok ${name} (${Date.now() - t0} ms) ${JSON.stringify(out)}`)
    return out
  } catch (e) {
    await fail(name, e)
  }
}

try {
  page = await browser.newPage()
  watch(page, 'page')
  await page.goto(origin + '/')
  await page.waitForFunction(() => window.rayito, { timeout: 30000 })
} catch (e) {
  await fail('page load', e)
}

const dir = env('RAYITO_TMP')
await run('e2b', { agent, dir })
await run('jupyter', { agent, token })
await run('native', { agent, token })

// The same page across a resume, the host's call made from here.
await run('beforeResume', { agent, token })
const res = await fetch(agent + '/v1/resume', {
  method: 'POST', headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, body: '{}',
})
if (res.status !== 200) await fail('resume', `POST /v1/resume: ${res.status} ${await res.text()}`)
await run('afterResume', {})

await run('refused', { agent: narrow, token })

// Jupyter Notebook in gateway mode, with its kernels on the agent: open a
// notebook, type a cell, run it with shift-enter, read its output.
if (process.env.RAYITO_NOTEBOOK) {
  try {
    const nb = process.env.RAYITO_NOTEBOOK
    page = await browser.newPage()
    watch(page, 'notebook')
    await page.goto(`${nb}/notebooks/${process.env.RAYITO_NOTEBOOK_FILE}?token=${process.env.RAYITO_NOTEBOOK_TOKEN}`)
    await page.waitForFunction(() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel &&
      Jupyter.notebook.kernel.is_connected() && document.querySelector('#kernel_indicator_icon.kernel_idle_icon'), { timeout: 120000 })
    await page.click('.cell .CodeMirror')
    await page.keyboard.type('import os; print(os.getpid())')
    await page.keyboard.down('Shift')
    await page.keyboard.press('Enter')
    await page.keyboard.up('Shift')
    const handle = await page.waitForFunction(() => {
      const pre = document.querySelector('.output_area .output_stdout pre, .output_area .output_text pre')
      return pre && /^\d+\s*$/.test(pre.textContent) && pre.textContent.trim()
    }, { timeout: 120000 })
    console.log(`notebook kernel pid: ${await handle.jsonValue()}`)
  } catch (e) {
    await fail('notebook', e)
  }
}

await browser.close()
pages.close()
