// The Durable Streams Node reference server (@durable-streams/server, pinned in
// tests/durable_streams/package.json) for bench/ds.py: starts it on a free loopback port, prints
// its base URL as one line on stdout, and serves until it is sent SIGTERM or SIGINT.
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
// Installed under tests/durable_streams, not beside this file: resolve it from there.
const require = createRequire(join(here, "..", "tests", "durable_streams", "package.json"))
const { DurableStreamTestServer } = require("@durable-streams/server")

const server = new DurableStreamTestServer({ host: "127.0.0.1", port: 0 })
const url = await server.start()
process.stdout.write(url + "\n")

const stop = async () => {
  await server.stop()
  process.exit(0)
}
process.on("SIGTERM", stop)
process.on("SIGINT", stop)
