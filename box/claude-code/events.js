// Claude Code's JSON event stream on stdout (claude -p --output-format stream-json
// --verbose --include-partial-messages) as steps for agent-render.
//
// What Claude Code 2.1 prints, one JSON object a line:
//   {"type":"system","subtype":"status","status":"requesting"}  the model is asked now
//   {"type":"stream_event","event":{...}}  the API's own stream: message_start (input
//       usage), content_block_* (ignored here), message_delta (stop_reason, output
//       usage), message_stop (the reply is complete)
//   {"type":"assistant","message":{"content":[<block>]}}  each finished content block
//       (text or tool_use {id, name, input}), before that reply's message_stop; a failed
//       request is one such message with model "<synthetic>" and the error as its text
//   {"type":"user","message":{"content":[{"type":"tool_result","tool_use_id",
//       "content","is_error"}]}}  a tool's result
//   {"type":"result","is_error":false,"result":"<answer>"}  the end
// Events of a subagent carry a parent_tool_use_id; the adapter offers no subagent tool,
// and any such event is left out rather than counted as the imp's own turn.
"use strict";

function tokensOf(usage) {
  const keys = [
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
  ];
  const counts = keys.map((key) => usage[key]).filter((n) => Number.isFinite(n));
  return counts.length ? counts.reduce((a, b) => a + b, 0) : null;
}

function createParser(steps, { textOf }) {
  // The reply being streamed: its finished blocks, usage so far and stop reason.
  let reply = null;
  // tool_use id -> tool name, to name each result.
  const toolNames = new Map();
  // Results that came while their reply was still streaming: Claude Code may run a tool
  // as soon as its block is complete, so a fast tool's result can come before the
  // reply's message_stop. They are shown after the reply's turn and calls.
  let early = [];

  const finishReply = () => {
    if (reply === null) return;
    const { blocks, usage, stopReason } = reply;
    reply = null;
    const calls = blocks.filter((block) => block.type === "tool_use");
    steps.turn({
      tokens: tokensOf(usage),
      calls: calls.length,
      said: textOf(blocks),
      cutOff: stopReason === "max_tokens",
    });
    for (const call of calls) {
      toolNames.set(call.id, call.name);
      steps.tool(call.name, call.input);
    }
    showEarly();
  };

  const showResult = (part) => {
    const parts = Array.isArray(part.content) ? part.content : [];
    const images = parts.filter((p) => p && p.type === "image").length;
    const name = toolNames.get(part.tool_use_id) || "tool";
    steps.result(name, textOf(part.content), { isError: Boolean(part.is_error), images });
  };

  const showEarly = () => {
    const waiting = early;
    early = [];
    for (const part of waiting) showResult(part);
  };

  const streamEvent = (ev) => {
    switch (ev.type) {
      case "message_start": {
        const usage = ev.message && ev.message.usage ? { ...ev.message.usage } : {};
        reply = { blocks: [], usage, stopReason: null };
        return;
      }
      case "message_delta":
        if (reply === null) return;
        Object.assign(reply.usage, ev.usage || {});
        if (ev.delta && ev.delta.stop_reason) reply.stopReason = ev.delta.stop_reason;
        return;
      case "message_stop":
        finishReply();
        return;
      default:
        return;
    }
  };

  const assistant = (message) => {
    const content = Array.isArray(message.content) ? message.content : [];
    if (message.model === "<synthetic>") {
      // No reply came: Claude Code reports the failed request (after its retries).
      reply = null;
      steps.turn({ error: textOf(content) || "the request failed" });
      showEarly();
      return;
    }
    if (reply !== null) reply.blocks.push(...content.filter((block) => block && block.type));
  };

  const toolResults = (message) => {
    const content = Array.isArray(message.content) ? message.content : [];
    for (const part of content) {
      if (!part || part.type !== "tool_result") continue;
      if (reply !== null) early.push(part);
      else showResult(part);
    }
  };

  return {
    event(ev) {
      if (ev.parent_tool_use_id) return;
      switch (ev.type) {
        case "system":
          if (ev.subtype === "status" && ev.status === "requesting") steps.turnStart();
          return;
        case "stream_event":
          if (ev.event && typeof ev.event === "object") streamEvent(ev.event);
          return;
        case "assistant":
          if (ev.message && typeof ev.message === "object") assistant(ev.message);
          return;
        case "user":
          if (ev.message && typeof ev.message === "object") toolResults(ev.message);
          return;
        case "result":
          showEarly(); // a reply that never ended still shows what its tools returned
          if (!ev.is_error && typeof ev.result === "string") steps.answer(ev.result);
          return;
        default:
          return;
      }
    },
  };
}

module.exports = { source: "stdout", createParser };
