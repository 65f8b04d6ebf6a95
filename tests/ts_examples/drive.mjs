// Drives one child turn through an example of docs/examples the way a parent would, and prints
// one JSON line: what the SDK itself answered or threw, and lastword's result for the run.
//   node drive.mjs claude|codex RUN_ID PROMPT [abort-at-tool|break-at-tool]
// With `abort-at-tool` the parent aborts the child (AbortController) as soon as the child has
// started a tool call: the explicit signal that it is mid-run, whatever the machine's speed;
// with `break-at-tool` it leaves its loop there instead.
import * as claude from "../../docs/examples/claude-agent-sdk.mjs";
import * as codex from "../../docs/examples/codex-sdk.mjs";
import { createRun, lastWord } from "../../docs/examples/lastword.mjs";

const [sdk, runId, prompt, atTool] = process.argv.slice(2);
const controller = new AbortController();
// sdkAnswer: Claude's `result` message, Codex's last agent message; turnFailed: Codex's `turn.failed`.
const seen = { sdkAnswer: null, turnFailed: null, threw: null, aborted: false, left: false, events: 0 };

/** Take one event; true when the parent stops here (a tool call has started). */
function onEvent(event) {
  seen.events += 1;
  let toolCall;
  if (sdk === "claude") {
    if (event.type === "result") seen.sdkAnswer = event.result ?? null;
    toolCall = event.type === "assistant" && event.message.content.some((block) => block.type === "tool_use");
  } else {
    if (event.type === "item.completed" && event.item.type === "agent_message") seen.sdkAnswer = event.item.text;
    if (event.type === "turn.failed") seen.turnFailed = event.error.message;
    toolCall = event.type === "item.started";
  }
  if (toolCall && atTool === "abort-at-tool") controller.abort();
  seen.aborted = controller.signal.aborted;
  return toolCall && atTool === "break-at-tool";
}

await createRun(runId, sdk);
try {
  const events = sdk === "claude" ? claude.child(runId, prompt, controller) : codex.child(runId, prompt, controller.signal);
  for await (const event of events) {
    if (onEvent(event)) {
      seen.left = true;
      break;
    }
  }
} catch (error) {
  seen.threw = `${error.name}: ${error.message}`;
}
console.log(JSON.stringify({ ...seen, lastword: await lastWord(runId) }));
