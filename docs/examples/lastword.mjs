// One child turn into lastword: the SDK's events, passed on unchanged, each also written as the
// JSON line the child's CLI printed into ONE streamed request (not one request per message: the
// service assembles replies from several lines and counts each line's place in the body).
// The turn is always ended, also when the SDK throws or the caller stops early.

export const LASTWORD_URL = process.env.LASTWORD_URL ?? "http://127.0.0.1:8000";

async function post(path, body) {
  const response = await fetch(`${LASTWORD_URL}${path}`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  });
  return response.json();
}

/** Create the child's run (the same body again is a no-op). */
export const createRun = (runId, agent) => post("/v1/runs", { runId, agent });

/** The child's last word (SPEC §5): `{stopReason, isError, output, usage, error?, …}`. */
export async function lastWord(runId) {
  return (await fetch(`${LASTWORD_URL}/v1/runs/${runId}/result?wait=30`)).json();
}

/**
 * Yield `events` (the SDK's messages) unchanged while streaming them into run `runId` through
 * `POST /v1/runs/{runId}/ingest/{format}` (`claude-code` or `codex`). `signal` is the SDK's
 * AbortSignal: an abort ends the turn `cancelled`.
 */
export async function* intoLastword(events, { runId, format, signal }) {
  const lines = new TransformStream();
  const writer = lines.writable.getWriter();
  const answer = fetch(`${LASTWORD_URL}/v1/runs/${runId}/ingest/${format}`, {
    method: "POST", headers: { "content-type": "application/x-ndjson" },
    body: lines.readable.pipeThrough(new TextEncoderStream()), duplex: "half",
  }).then((response) => response.json());
  // How the turn ended if the child's own last line did not end it.
  let ending = { stopReason: "cancelled" }; // the caller left the loop early
  try {
    for await (const event of events) {
      await writer.write(JSON.stringify(event) + "\n");
      yield event;
    }
    ending = { stopReason: "error", error: { type: "no_terminal_event", message: "the child printed no last line" } };
  } catch (error) {
    ending = signal?.aborted ? { stopReason: "cancelled" }
      : { stopReason: "error", error: { type: error?.name ?? "Error", message: String(error?.message ?? error) } };
    throw error;
  } finally {
    await writer.close();
    const { stopReason } = await answer; // set when a terminal line (result, turn.*) ended the turn
    if (!stopReason) await post(`/v1/runs/${runId}/end`, ending);
  }
}
