// Codex's event stream (`codex exec --json`, one JSON object a line on stdout) as steps
// for agent-render.
//
// Codex 0.171 prints thread.started, turn.started (its "turn" is the whole task), then
// item.started / item.updated / item.completed for each item, and turn.completed (with
// the task's token usage) or turn.failed (after an `error` event). Items: agent_message
// and reasoning (the model's text), command_execution (its exec_command tool: the command
// as Codex ran it, `bash -c '…'`, its output and exit code), file_change (apply_patch:
// the paths and kinds, no content), mcp_tool_call, web_search, todo_list (its plan) and
// error (a warning that does not stop the task).
//
// The stream does not mark model requests. A model turn here is what one reply of the
// model shows: its text, then the tool call it asked for; the next request goes out when
// that call's result is in. Calls a model asked for together in one reply are run one
// after another, so each shows as a turn of its own. A command still running when
// exec_command returns its first output to the model stays one item until it exits: the
// model's write_stdin polls in between show no step. Usage comes only for the whole task,
// so a turn's tokens are not known ("no usage").
"use strict";

// The command inside Codex's `/usr/bin/bash -c '…'` (or -lc) wrapper, unquoted; the
// whole string when it is not one shell word after -c.
function innerCommand(command) {
  const match = /^\S*\b(?:ba|z)?sh -l?c (.*)$/s.exec(String(command));
  if (!match) return String(command);
  const word = unquoteWord(match[1]);
  return word === null ? String(command) : word;
}

// One POSIX shell word without its quotes, or null when `text` is not exactly one word.
function unquoteWord(text) {
  let out = "";
  let i = 0;
  while (i < text.length) {
    const ch = text[i];
    if (ch === "'") {
      const end = text.indexOf("'", i + 1);
      if (end === -1) return null;
      out += text.slice(i + 1, end);
      i = end + 1;
    } else if (ch === '"') {
      i += 1;
      for (;;) {
        if (i >= text.length) return null;
        const c = text[i];
        if (c === '"') break;
        if (c === "\\" && i + 1 < text.length && '$`"\\\n'.includes(text[i + 1])) {
          out += text[i + 1];
          i += 2;
        } else {
          out += c;
          i += 1;
        }
      }
      i += 1;
    } else if (ch === "\\" && i + 1 < text.length) {
      out += text[i + 1];
      i += 2;
    } else if (/\s/.test(ch)) {
      return null;
    } else {
      out += ch;
      i += 1;
    }
  }
  return out;
}

function fileChanges(item) {
  const changes = Array.isArray(item.changes) ? item.changes : [];
  return changes
    .filter((change) => change && typeof change.path === "string")
    .map((change) => `${change.kind || "change"} ${change.path}`);
}

function mcpResultText(item) {
  if (item.error && typeof item.error.message === "string") return item.error.message;
  const content = item.result && Array.isArray(item.result.content) ? item.result.content : [];
  return content
    .filter((part) => part && typeof part.text === "string")
    .map((part) => part.text)
    .join("\n");
}

function todoText(item) {
  const items = Array.isArray(item.items) ? item.items : [];
  return items
    .filter((entry) => entry && typeof entry.text === "string")
    .map((entry) => `[${entry.completed ? "x" : " "}] ${entry.text}`)
    .join("\n");
}

// What a tool item calls itself and shows as its arguments, or null for model text.
function toolOf(item) {
  switch (item.type) {
    case "command_execution":
      return { name: "exec_command", args: { command: innerCommand(item.command || "") } };
    case "file_change":
      return { name: "apply_patch", args: { path: fileChanges(item).join(", ") } };
    case "mcp_tool_call":
      return { name: `${item.server || "mcp"}.${item.tool || "tool"}`, args: item.arguments };
    case "web_search":
      return { name: "web_search", args: { query: String(item.query || "") } };
    case "todo_list":
      return { name: "update_plan", args: { items: todoText(item).split("\n").length } };
    default:
      return null;
  }
}

function resultOf(item) {
  switch (item.type) {
    case "command_execution": {
      const failed = item.status === "failed" || (item.exit_code !== null && item.exit_code !== 0);
      return { text: String(item.aggregated_output || ""), isError: failed };
    }
    case "file_change":
      return { text: fileChanges(item).join("\n"), isError: item.status === "failed" };
    case "mcp_tool_call":
      return { text: mcpResultText(item), isError: Boolean(item.error) || item.status === "failed" };
    case "todo_list":
      return { text: todoText(item), isError: false };
    default:
      return { text: "", isError: item.status === "failed" };
  }
}

function createParser(steps) {
  // The model's text since the last tool result (the reply being read), whether a
  // request is out (its turn not yet shown), the tools started and not yet ended, and
  // the last thing the model said (the answer, once the task completes).
  let said = [];
  let asked = false;
  const running = new Set();
  let answer = "";
  let lastError = null;

  const ask = () => {
    if (asked) return;
    asked = true;
    steps.turnStart();
  };
  const endTurn = (fields) => {
    if (!asked) steps.turnStart();
    asked = false;
    steps.turn({ tokens: null, said: said.join("\n"), ...fields });
    said = [];
  };
  const toolStarted = (item) => {
    const tool = toolOf(item);
    if (tool === null || running.has(item.id)) return;
    running.add(item.id);
    endTurn({ calls: 1 });
    steps.tool(tool.name, tool.args);
  };
  const toolEnded = (item) => {
    const tool = toolOf(item);
    if (tool === null) return;
    // An item Codex reports only once it is done (a patch applied at once) starts too.
    if (!running.has(item.id)) toolStarted(item);
    running.delete(item.id);
    const { text, isError } = resultOf(item);
    steps.result(tool.name, text, { isError });
    if (running.size === 0) ask();
  };

  return {
    event(ev) {
      const item = ev.item && typeof ev.item === "object" ? ev.item : null;
      switch (ev.type) {
        case "turn.started":
          ask();
          return;
        case "item.started":
          if (item) toolStarted(item);
          return;
        case "item.completed":
          if (!item) return;
          if (item.type === "agent_message" && typeof item.text === "string") {
            said.push(item.text);
            answer = item.text;
          } else {
            toolEnded(item);
          }
          return;
        case "error":
          lastError = typeof ev.message === "string" ? ev.message : lastError;
          return;
        case "turn.completed":
          endTurn({});
          steps.answer(answer);
          return;
        case "turn.failed": {
          const message = (ev.error && ev.error.message) || lastError || "no message";
          if (/max_output_tokens/.test(message)) endTurn({ cutOff: true });
          else endTurn({ error: message });
          return;
        }
        default:
          return;
      }
    },
  };
}

module.exports = { source: "stdout", createParser, innerCommand };
