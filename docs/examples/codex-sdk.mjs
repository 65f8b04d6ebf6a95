// A parent driving a child with the Codex SDK; lastword keeps the child's last word.
//   node codex-sdk.mjs RUN_ID "PROMPT"
import { Codex } from "@openai/codex-sdk";
import { createRun, intoLastword, lastWord } from "./lastword.mjs";

/** One child turn: the SDK's events as `runStreamed()` yields them, streamed into run `runId`. */
export async function* child(runId, prompt, signal) {
  const thread = new Codex().startThread({ skipGitRepoCheck: true });
  const { events } = await thread.runStreamed(prompt, { signal });
  yield* intoLastword(events, { runId, format: "codex", signal });
}

if (import.meta.filename === process.argv[1]) {
  const [runId, prompt] = process.argv.slice(2);
  await createRun(runId, "codex");
  let answer = "";
  try {
    for await (const event of child(runId, prompt)) {
      if (event.type === "item.completed" && event.item.type === "agent_message") answer = event.item.text;
    }
    console.error(`the SDK's answer: ${answer}`);
  } catch (error) {
    console.error(`the SDK threw: ${error.message}`); // after turn.failed, max tokens included
  }
  console.log(JSON.stringify(await lastWord(runId)));
}
