// OpenCode's JSON event stream (`opencode run --format json`: one JSON object a line on
// stdout) as steps for agent-render. A model turn is a step: step_start when the model's
// answer starts, text for each finished text part, tool_use for each tool call once it
// has run (OpenCode reports a call only with its result), step_finish with the token
// usage and why the step ended ("tool-calls", "stop", "length"). A model call that failed
// for good (after the retries the image's retry-cap plugin allows) is an error event.
// The turn's line is printed at step_finish, before the calls it made, as for every agent.
"use strict";

function createParser(steps) {
  let waiting = false; // a model call is under way (turnStart was called)
  let said = [];
  let calls = [];

  const ask = () => {
    if (!waiting) steps.turnStart();
    waiting = true;
  };
  const tokensOf = (part) => {
    const tokens = part && part.tokens;
    if (!tokens || typeof tokens !== "object") return null;
    if (Number.isFinite(tokens.total) && tokens.total > 0) return tokens.total;
    const sum = [tokens.input, tokens.output, tokens.reasoning].filter(Number.isFinite);
    return sum.length ? sum.reduce((a, b) => a + b, 0) : null;
  };
  const showCall = (part) => {
    const state = (part && part.state) || {};
    const name = String(part.tool || "tool");
    steps.tool(name, state.input === undefined ? {} : state.input);
    if (state.status === "error") {
      steps.result(name, String(state.error || ""), { isError: true });
      return;
    }
    const attachments = Array.isArray(state.attachments) ? state.attachments : [];
    const images = attachments.filter((a) => a && String(a.mime || "").startsWith("image/")).length;
    steps.result(name, typeof state.output === "string" ? state.output : "", { images });
  };
  const finishStep = (part) => {
    const reason = String((part && part.reason) || "");
    const text = said.join("\n");
    waiting = false;
    steps.turn({ tokens: tokensOf(part), calls: calls.length, said: text, cutOff: reason === "length" });
    for (const call of calls) showCall(call);
    if (!calls.length && reason !== "length" && text.trim()) steps.answer(text);
    said = [];
    calls = [];
    // The next model call starts as soon as a step with tool calls ends.
    if (reason === "tool-calls") ask();
  };
  const failed = (ev) => {
    const error = (ev && ev.error) || {};
    const data = error.data || {};
    const message = String(data.message || error.message || error.name || "unknown error");
    const status = Number.isFinite(data.statusCode) ? `${data.statusCode} ` : "";
    steps.turn({ error: `error: ${status}${message}` });
    for (const call of calls) showCall(call);
    waiting = false;
    said = [];
    calls = [];
  };
  return {
    event(ev) {
      const part = ev.part || {};
      switch (ev.type) {
        case "step_start":
          ask();
          return;
        case "text":
          if (typeof part.text === "string") said.push(part.text);
          return;
        case "tool_use":
          calls.push(part);
          return;
        case "step_finish":
          finishStep(part);
          return;
        case "error":
          failed(ev);
          return;
        default:
          return;
      }
    },
  };
}

module.exports = { source: "stdout", createParser };
