// An unchanged E2B program, configured only by E2B_API_URL, E2B_API_KEY
// and E2B_SANDBOX_URL in its environment (names the SDK reads), run
// against an agent started with --e2b-api (as make run does): the SDK's
// control-plane calls reach the agent, and so does all that follows.
// Run by the Go test TestSDKLocalPath. Exits non-zero when a check fails.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

const sbx = await Sandbox.create({ envs: { FROM_CREATE: 'yes' } })
const r = await sbx.commands.run('echo $FROM_CREATE; id -un')
assert.equal(r.stdout.split('\n')[0], 'yes', 'the envs given to Sandbox.create reach commands')
await sbx.files.write('/tmp/rayito-local-path.txt', 'written through the local path')
assert.equal(await sbx.files.read('/tmp/rayito-local-path.txt'), 'written through the local path')
await sbx.setTimeout(60_000)
assert.equal(await sbx.isRunning(), true)
const again = await Sandbox.connect(sbx.sandboxId)
assert.equal((await again.commands.run('echo again')).stdout, 'again\n')
const info = await sbx.getInfo()
assert.equal(info.sandboxId, sbx.sandboxId)
await sbx.kill()
console.log('local path ok:', sbx.sandboxId)
