// Measures the e2b SDK against rayito-agent's envd API; run by the Go
// benchmarks in ../bench_test.go, which report what it prints:
//   node bench.mjs URL run N      N x commands.run('true'), latencies in µs
//   node bench.mjs URL stdout B   B bytes of stdout through commands.run, in µs
//   node bench.mjs URL write B PATH N   N x files.write of B random bytes to PATH, in µs
//   node bench.mjs URL read B PATH N    N x files.read of PATH (B bytes), in µs
//   node bench.mjs URL native-write B PATH N, native-read B PATH N: the same
//     with Node's fetch on the native /v1/files routes (PUT and GET), the
//     token in $RAYITO_TOKEN: what Node itself costs
import { randomBytes } from 'node:crypto'
import { Sandbox } from 'e2b'

const [url, mode, arg, path, times] = process.argv.slice(2)
const sbx = await Sandbox.create({ debug: true, sandboxUrl: url })
const n = Number(arg)
const out = []
if (mode === 'run') {
  await sbx.commands.run('true') // warm the connection pool
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint()
    await sbx.commands.run('true')
    out.push(Number(process.hrtime.bigint() - t) / 1000)
  }
} else if (mode === 'native-write' || mode === 'native-read') {
  const target = `${url}/v1/files?path=${encodeURIComponent(path)}`
  const headers = { Authorization: `Bearer ${process.env.RAYITO_TOKEN}` }
  const data = randomBytes(n)
  for (let i = 0; i < Number(times); i++) {
    const t = process.hrtime.bigint()
    if (mode === 'native-write') {
      const r = await fetch(target, { method: 'PUT', headers, body: data })
      await r.arrayBuffer()
      if (!r.ok) throw new Error(`PUT: ${r.status}`)
    } else {
      const r = await fetch(target, { headers })
      const got = new Uint8Array(await r.arrayBuffer())
      if (got.length !== n) throw new Error(`read ${got.length} of ${n} bytes`)
    }
    out.push(Number(process.hrtime.bigint() - t) / 1000)
  }
} else if (mode === 'write') {
  const data = randomBytes(n)
  const body = data.buffer.slice(data.byteOffset, data.byteOffset + n)
  for (let i = 0; i < Number(times); i++) {
    const t = process.hrtime.bigint()
    await sbx.files.write(path, body)
    out.push(Number(process.hrtime.bigint() - t) / 1000)
  }
} else if (mode === 'read') {
  for (let i = 0; i < Number(times); i++) {
    const t = process.hrtime.bigint()
    const got = await sbx.files.read(path, { format: 'bytes' })
    out.push(Number(process.hrtime.bigint() - t) / 1000)
    if (got.length !== n) throw new Error(`read ${got.length} of ${n} bytes`)
  }
} else {
  let got = 0
  const t = process.hrtime.bigint()
  const h = await sbx.commands.run(`head -c ${n} /dev/zero`, { background: true, onStdout: (d) => { got += d.length }, timeoutMs: 0 })
  await h.wait()
  out.push(Number(process.hrtime.bigint() - t) / 1000)
  if (got !== n) throw new Error(`got ${got} of ${n} bytes`)
}
console.log(JSON.stringify(out))
