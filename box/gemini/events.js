// The Gemini CLI's stream-json events (`gemini -p … --output-format stream-json`, one
// JSON object a line on stdout) as steps for agent-render. The events, as 0.61 prints
// them: init; message (role user: the prompt; role assistant: a piece of the model's
// text, delta true); tool_use {tool_name, tool_id, parameters}; tool_result {tool_id,
// status success|error, output, error {message}}; error {severity, message} (a warning
// the CLI carries on after); result {status, error {message}, stats}.
//
// No event marks a model turn: a turn is the model's text and tool calls up to the first
// tool result (the CLI asks for every call of a turn before running any), and the next
// one is asked for once every call has its result. The CLI reports tokens only for the
// whole session (result.stats), so a turn has none of its own. The answer is the text of
// the last turn of a run that ends in success.
"use strict";

function createParser(steps) {
  let asking = false; // a model turn is under way: its text and calls are being collected
  let said = "";
  let calls = [];
  const names = new Map(); // tool_id -> tool_name
  let open = 0; // calls of the last turn still without a result
  let lastSaid = "";

  const start = () => {
    steps.turnStart();
    asking = true;
    said = "";
    calls = [];
  };
  const end = (fields) => {
    steps.turn({ tokens: null, calls: calls.length, said, ...fields });
    for (const call of calls) steps.tool(call.name, call.args);
    open = calls.length;
    lastSaid = said;
    asking = false;
  };
  const resultText = (ev) => {
    if (typeof ev.output === "string" && ev.output) return ev.output;
    if (ev.error && typeof ev.error.message === "string") return ev.error.message;
    return "";
  };
  return {
    event(ev) {
      switch (ev.type) {
        case "init":
          start();
          return;
        case "message":
          if (ev.role !== "assistant" || typeof ev.content !== "string") return;
          if (!asking) start();
          said += ev.content;
          return;
        case "tool_use": {
          if (!asking) start();
          const name = String(ev.tool_name || "?");
          names.set(ev.tool_id, name);
          calls.push({ name, args: ev.parameters });
          return;
        }
        case "tool_result": {
          if (asking) end({});
          steps.result(names.get(ev.tool_id) || "?", resultText(ev), {
            isError: ev.status !== "success",
          });
          open -= 1;
          // Every call has its result: the CLI asks the model again now.
          if (open === 0) start();
          return;
        }
        case "result": {
          const failed = ev.status !== "success";
          const message = failed
            ? `error: ${(ev.error && ev.error.message) || "no message"}`
            : null;
          if (asking) end(failed ? { error: message } : {});
          if (!failed) steps.answer(lastSaid);
          return;
        }
        default:
          return;
      }
    },
  };
}

module.exports = { source: "stdout", createParser };
