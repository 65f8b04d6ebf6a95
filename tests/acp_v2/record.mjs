// Records ACP bodies as a client sees them: the protocol's own SDK (@agentclientprotocol/sdk, pinned in
// package.json) runs an agent and a client joined by two in-process pipes, and every JSON-RPC message
// that crosses them is written down in order. v1 uses the SDK's default entrypoint, v2 its
// `experimental/v2` one. Usage: `npm ci && node record.mjs` (writes fixtures/*.json); see README.md.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as v1 from "@agentclientprotocol/sdk";
import * as v2 from "@agentclientprotocol/sdk/experimental/v2";

const here = dirname(fileURLToPath(import.meta.url));
const SESSION = "sess-1";
const CWD = "/work";

// A pipe that writes down each newline-delimited JSON-RPC message passing through it.
function tappedPipe(wire) {
  const decoder = new TextDecoder();
  let pending = "";
  return new TransformStream({
    transform(bytes, controller) {
      pending += decoder.decode(bytes, { stream: true });
      let newline;
      while ((newline = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        if (line.trim()) wire.push(JSON.parse(line));
      }
      controller.enqueue(bytes);
    },
  });
}

async function record(acp, agentApp, clientOp) {
  const wire = [];
  const toAgent = tappedPipe(wire);
  const toClient = tappedPipe(wire);
  const agentConnection = agentApp.connect(acp.ndJsonStream(toClient.writable, toAgent.readable));
  const clientStream = acp.ndJsonStream(toAgent.writable, toClient.readable);
  await acp.client({ name: "lastword-recorder" }).connectWith(clientStream, clientOp);
  agentConnection.close();
  return wire;
}

const text = (value) => ({ type: "text", text: value });
const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

// -- v1: the prompt's response carries the stop reason ---------------------------------------------

function v1Agent(turn) {
  return v1.agent({ name: "lastword-fixture-agent" })
    .onRequest(v1.methods.agent.initialize, () => ({ protocolVersion: v1.PROTOCOL_VERSION, agentCapabilities: {} }))
    .onRequest(v1.methods.agent.session.new, () => ({ sessionId: SESSION }))
    .onRequest(v1.methods.agent.session.prompt, async ({ client }) => {
      const update = (u) => client.notify(v1.methods.client.session.update, { sessionId: SESSION, update: u });
      return turn(update);
    });
}

async function v1Client(ctx) {
  await ctx.request(v1.methods.agent.initialize, { protocolVersion: v1.PROTOCOL_VERSION, clientCapabilities: {} });
  await ctx.request(v1.methods.agent.session.new, { cwd: CWD, mcpServers: [] });
  await ctx.request(v1.methods.agent.session.prompt, { sessionId: SESSION, prompt: [text("What is 6 x 7?")] });
}

const v1Fixtures = {
  "v1-basic": v1Agent(async (update) => {
    await update({ sessionUpdate: "agent_thought_chunk", content: text("Multiply.") });
    await update({ sessionUpdate: "agent_message_chunk", content: text("The answer") });
    await update({ sessionUpdate: "tool_call", toolCallId: "tc-1", title: "calculator", status: "pending" });
    await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-1", status: "completed" });
    await update({ sessionUpdate: "agent_message_chunk", content: text(" is 42.") });
    return { stopReason: "end_turn", usage: { inputTokens: 12, outputTokens: 5, totalTokens: 17 } };
  }),
};

// -- v2: the prompt's response accepts the prompt; an idle state update ends the work ---------------

function v2Agent(turn) {
  return v2.agent({ name: "lastword-fixture-agent" })
    .onRequest(v2.methods.agent.initialize, () => ({
      protocolVersion: v2.PROTOCOL_VERSION, info: { name: "lastword-fixture-agent", version: "1" },
    }))
    .onRequest(v2.methods.agent.session.new, () => ({ sessionId: SESSION }))
    .onRequest(v2.methods.agent.session.prompt, ({ client, params }) => {
      const update = (u) => client.notify(v2.methods.client.session.update, { sessionId: SESSION, update: u });
      // The prompt is accepted at once; the work goes on after the response, as v2 has it.
      setTimeout(async () => {
        await update({ sessionUpdate: "user_message", messageId: "user-1", content: params.prompt });
        await update({ sessionUpdate: "state_update", state: "running" });
        await turn(update);
      }, 0);
      return { messageId: "user-1" };
    });
}

function v2Client(extraUpdates) {
  return async (ctx) => {
    await ctx.request(v2.methods.agent.initialize, {
      protocolVersion: v2.PROTOCOL_VERSION, info: { name: "lastword-recorder", version: "1" },
    });
    const session = await ctx.buildSession(CWD).start();
    await session.prompt("What is 6 x 7?");
    // Read up to the idle update, then as many more updates as the scenario sends after it.
    for (;;) if ((await session.nextUpdate()).kind === "stop") break;
    for (let i = 0; i < extraUpdates; i++) await session.nextUpdate();
    session.dispose();
  };
}

const idle = (stopReason, more = {}) => ({ sessionUpdate: "state_update", state: "idle", stopReason, ...more });

const v2Fixtures = {
  "v2-basic": [v2Agent(async (update) => {
    await update({ sessionUpdate: "agent_thought_chunk", messageId: "thought-1", content: text("Multiply.") });
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-1", content: text("The answer") });
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-1", content: text(" is 42.") });
    await update(idle("end_turn"));
  }), 0],
  // Upserts by id: chunks append, a full update replaces, an omitted field is unchanged, null clears.
  "v2-upserts": [v2Agent(async (update) => {
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-1", content: text("Let me ") });
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-1", content: text("check.") });
    await update({
      sessionUpdate: "tool_call_update", toolCallId: "tc-1", name: "calculator", title: "Multiply 6 by 7",
      kind: "other", status: "pending", rawInput: { a: 6, b: 7 },
    });
    await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-1", status: "in_progress" });
    await update({
      sessionUpdate: "tool_call_content_chunk", toolCallId: "tc-1", content: { type: "content", content: text("42") },
    });
    await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-1", status: "completed", title: null, rawOutput: 42 });
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-2", content: text("Draft: 41") });
    await update({ sessionUpdate: "agent_message", messageId: "msg-2", content: [text("The answer is 42.")] });
    await update({ sessionUpdate: "agent_message", messageId: "msg-2", _meta: { checked: true } });
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-3", content: text("Scratch that.") });
    await update({ sessionUpdate: "agent_message", messageId: "msg-3", content: null });
    await update(idle("end_turn"));
  }), 0],
  // Background work: updates after the idle one belong to no turn, and a repeated idle snapshot is no new end.
  "v2-background": [v2Agent(async (update) => {
    await update({
      sessionUpdate: "tool_call_update", toolCallId: "tc-bg", name: "subagent", title: "Research in background",
      status: "in_progress",
    });
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-1", content: text("Started a researcher; the answer is 42.") });
    await update(idle("end_turn", { background: [{ type: "tool_call", toolCallId: "tc-bg" }] }));
    await tick();
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-bg", content: text("Researcher: found 42 too.") });
    await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-bg", status: "completed" });
    await update(idle("end_turn", { background: [] }));
  }), 3],
  // An idle update without a stop reason ends nothing; a custom stop reason; content other than text;
  // a tool call's metadata patched key by key, then cleared.
  "v2-edge": [v2Agent(async (update) => {
    const image = { type: "image", mimeType: "image/png", data: "iVBORw0KGgo=" };
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-1", content: text("Here is the plot: ") });
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-1", content: image });
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-1", content: text("done.") });
    await update({ sessionUpdate: "agent_thought", messageId: "thought-1", content: [text("Plotted.")] });
    await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-1", title: "plot", _meta: { a: 1, b: 2 } });
    await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-1", _meta: { a: null, c: 3 } });
    await update({ sessionUpdate: "state_update", state: "idle" });
    await update({ sessionUpdate: "state_update", state: "running" });
    await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-1", _meta: null });
    await update({ sessionUpdate: "agent_message", messageId: "msg-2", content: [image] });
    await update(idle("_handed_off"));
  }), 4],
  "v2-max-tokens": [v2Agent(async (update) => {
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-1", content: text("The answer is") });
    await update(idle("max_tokens"));
  }), 0],
  "v2-error": [v2Agent(async (update) => {
    await update({ sessionUpdate: "agent_message_chunk", messageId: "msg-1", content: text("Working") });
    await update(idle("error", { error: { code: -32603, message: "model overloaded" } }));
  }), 0],
};

const out = join(here, "fixtures");
mkdirSync(out, { recursive: true });
const save = (name, wire) => writeFileSync(join(out, `${name}.json`), JSON.stringify(wire, null, 1) + "\n");
for (const [name, agentApp] of Object.entries(v1Fixtures)) save(name, await record(v1, agentApp, v1Client));
for (const [name, [agentApp, extra]] of Object.entries(v2Fixtures)) save(name, await record(v2, agentApp, v2Client(extra)));
