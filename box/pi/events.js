// Pi's agent events (handed over by the image's steps extension, steps.js, on file
// descriptor 3) as steps for agent-render; Pi prints its final answer on stdout.
"use strict";

function createParser(steps, { textOf }) {
  const modelTurn = (message) => {
    const tokens =
      message.usage && Number.isFinite(message.usage.totalTokens)
        ? message.usage.totalTokens
        : null;
    if (message.stopReason === "error" || message.stopReason === "aborted") {
      const error = `${message.stopReason}: ${message.errorMessage || "no message"}`;
      steps.turn({ tokens, error });
      return;
    }
    const content = Array.isArray(message.content) ? message.content : [];
    const calls = content.filter((part) => part && part.type === "toolCall").length;
    steps.turn({ tokens, calls, said: textOf(content), cutOff: message.stopReason === "length" });
  };
  const toolResult = (ev) => {
    const content = ev.result && Array.isArray(ev.result.content) ? ev.result.content : [];
    const images = content.filter((part) => part && part.type === "image").length;
    steps.result(ev.toolName, textOf(content), { isError: Boolean(ev.isError), images });
  };
  return {
    event(ev) {
      switch (ev.type) {
        case "turn_start":
          // The model is asked now; its reply ends with the assistant message_end.
          steps.turnStart();
          return;
        case "message_end":
          if (ev.message && ev.message.role === "assistant") modelTurn(ev.message);
          return;
        case "tool_execution_start":
          steps.tool(ev.toolName, ev.args);
          return;
        case "tool_execution_end":
          toolResult(ev);
          return;
        default:
          return;
      }
    },
  };
}

module.exports = { source: "fd3", createParser };
