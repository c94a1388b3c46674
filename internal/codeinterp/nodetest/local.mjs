// An unchanged code-interpreter program, configured only by E2B_API_URL,
// E2B_API_KEY and E2B_SANDBOX_URL (names the SDK reads), against an agent
// that answers the SDK's control-plane calls (--e2b-api, as make run
// starts it). Run by the Go test TestE2BCodeInterpreterLocalPath.
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const sbx = await Sandbox.create()
const ex = await sbx.runCode('x = 6 * 7; x')
assert.equal(ex.text, '42')
assert.equal((await sbx.runCode('x + 1')).text, '43')
await sbx.kill()
console.log('local path ok:', sbx.sandboxId)
