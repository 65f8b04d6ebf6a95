// Runs the Durable Streams server conformance suite (SPEC §17) against a server, through vitest's
// API: the suite's own CLI finds no test files once installed under node_modules (vitest leaves
// node_modules out of its search), so this names the suite's test file itself.
//
//   node run.mjs http://127.0.0.1:8000/ds      the server at that base URL
//   node run.mjs --reference                   the Node reference server, started here
//
// It prints one line `passed=N failed=N skipped=N total=N`, the failed cases after it (one per
// line, `FAIL name :: first line of the error`), and exits 0 whether or not cases failed: the caller judges
// the counts (tests/test_durable_streams.py). It exits 2 when the suite could not run.
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { startVitest } from "vitest/node"

const require = createRequire(import.meta.url)
const suiteDir = dirname(require.resolve("@durable-streams/server-conformance-tests/package.json"))
const testFile = join(suiteDir, "dist", "test-runner.js")

const args = process.argv.slice(2)
let reference = null
let baseUrl = args.find((arg) => !arg.startsWith("--"))
if (args.includes("--reference")) {
  const { DurableStreamTestServer } = await import("@durable-streams/server")
  reference = new DurableStreamTestServer({ host: "127.0.0.1", port: 0 })
  baseUrl = await reference.start()
}
if (!baseUrl) {
  console.error("usage: node run.mjs BASE_URL | --reference")
  process.exit(2)
}
process.env.CONFORMANCE_TEST_URL = baseUrl

let vitest
try {
  vitest = await startVitest("test", [], {
    root: suiteDir,
    dir: suiteDir,
    include: [testFile],
    exclude: [],
    watch: false,
    reporters: [process.env.DS_REPORTER ?? "dot"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  })
} catch (error) {
  console.error(error)
  process.exit(2)
}

const counts = { passed: 0, failed: 0, skipped: 0 }
const failed = []
for (const module of vitest.state.getTestModules()) {
  for (const test of module.children.allTests()) {
    const state = test.result().state
    if (state === "passed") counts.passed += 1
    else if (state === "failed") {
      counts.failed += 1
      const why = (test.result().errors ?? []).map((error) => error.message).join("; ")
      failed.push(`${test.fullName} :: ${why.split("\n")[0]}`)
    } else counts.skipped += 1
  }
}
await vitest.close()
if (reference) await reference.stop()
const total = counts.passed + counts.failed + counts.skipped
console.log(`passed=${counts.passed} failed=${counts.failed} skipped=${counts.skipped} total=${total}`)
for (const name of failed) console.log(`FAIL ${name}`)
process.exit(total === 0 ? 2 : 0)
