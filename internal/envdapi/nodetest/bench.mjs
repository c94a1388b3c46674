// Measures the e2b SDK against rayito-agent's envd API; run by the Go
// benchmarks in ../bench_test.go as `node bench.mjs URL`. It stays up for
// a whole benchmark, so what it measures is a warm client, and answers
// each line on stdin with a JSON array of what it measured (µs):
//   run N             N x commands.run('true'), each one's latency
//   stdout B          B bytes of stdout through commands.run, the time
//   write B PATH N    N x files.write of B random bytes to PATH
//   read B PATH N     N x files.read of PATH (B bytes)
//   native-write B PATH N, native-read B PATH N: the same with Node's
//     fetch on the native /v1/files routes (PUT and GET), the token in
//     $RAYITO_TOKEN: what Node itself costs
// It exits when its stdin ends.
import { randomBytes } from 'node:crypto'
import { createInterface } from 'node:readline'
import { Sandbox } from 'e2b'

const url = process.argv[2]
const sbx = await Sandbox.create({ debug: true, sandboxUrl: url })

async function measure(mode, arg, path, times) {
  const n = Number(arg)
  const out = []
  const timed = async (f) => {
    const t = process.hrtime.bigint()
    await f()
    out.push(Number(process.hrtime.bigint() - t) / 1000)
  }
  if (mode === 'run') {
    for (let i = 0; i < n; i++) await timed(() => sbx.commands.run('true'))
  } else if (mode === 'native-write' || mode === 'native-read') {
    const target = `${url}/v1/files?path=${encodeURIComponent(path)}`
    const headers = { Authorization: `Bearer ${process.env.RAYITO_TOKEN}` }
    const data = randomBytes(n)
    for (let i = 0; i < Number(times); i++) {
      await timed(async () => {
        if (mode === 'native-write') {
          const r = await fetch(target, { method: 'PUT', headers, body: data })
          await r.arrayBuffer()
          if (!r.ok) throw new Error(`PUT: ${r.status}`)
        } else {
          const r = await fetch(target, { headers })
          const got = new Uint8Array(await r.arrayBuffer())
          if (got.length !== n) throw new Error(`read ${got.length} of ${n} bytes`)
        }
      })
    }
  } else if (mode === 'write') {
    const data = randomBytes(n)
    const body = data.buffer.slice(data.byteOffset, data.byteOffset + n)
    for (let i = 0; i < Number(times); i++) await timed(() => sbx.files.write(path, body))
  } else if (mode === 'read') {
    for (let i = 0; i < Number(times); i++) {
      await timed(async () => {
        const got = await sbx.files.read(path, { format: 'bytes' })
        if (got.length !== n) throw new Error(`read ${got.length} of ${n} bytes`)
      })
    }
  } else if (mode === 'stdout') {
    let got = 0
    await timed(async () => {
      const h = await sbx.commands.run(`head -c ${n} /dev/zero`, { background: true, onStdout: (d) => { got += d.length }, timeoutMs: 0 })
      await h.wait()
    })
    if (got !== n) throw new Error(`got ${got} of ${n} bytes`)
  } else {
    throw new Error(`unknown mode ${mode}`)
  }
  return out
}

for await (const line of createInterface({ input: process.stdin })) {
  console.log(JSON.stringify(await measure(...line.split(' '))))
}
