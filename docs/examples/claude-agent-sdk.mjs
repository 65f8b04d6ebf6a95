// A parent driving a child with the Claude Agent SDK; lastword keeps the child's last word.
//   node claude-agent-sdk.mjs RUN_ID "PROMPT"
import { query } from "@anthropic-ai/claude-agent-sdk";
import { createRun, intoLastword, lastWord } from "./lastword.mjs";

/** One child turn: the SDK's messages as `query()` yields them, streamed into run `runId`. */
export function child(runId, prompt, abortController = new AbortController()) {
  const messages = query({
    prompt,
    options: { abortController, allowedTools: ["Bash"], permissionMode: "bypassPermissions" },
  });
  return intoLastword(messages, { runId, format: "claude-code", signal: abortController.signal });
}

if (import.meta.filename === process.argv[1]) {
  const [runId, prompt] = process.argv.slice(2);
  await createRun(runId, "claude");
  try {
    for await (const message of child(runId, prompt)) {
      if (message.type === "result") console.error(`the SDK's answer: ${message.result}`);
    }
  } catch (error) {
    console.error(`the SDK threw: ${error.message}`); // on every error result, max tokens included
  }
  console.log(JSON.stringify(await lastWord(runId)));
}
