// A Pi extension, loaded by pi-imp (-e): Pi's agent events as JSON lines, one per
// line, on the file descriptor IMPYARD_PI_EVENTS_FD, which agent-render reads and shows.
//
// These are the events of Pi's own JSON mode (--mode json) without the streaming
// ones: that mode also writes, for every streamed token, the whole message so far
// (message_update, tool_execution_update), which is quadratic in a reply's length.
// Measured with Pi 0.73.1 and a fast stream: a 30 KB file written in one tool call
// made 204 MB of output and took 10.5 s instead of 6.1 s, and a 60 KB one made Pi
// queue more than 2 GiB of output and die (write ENOBUFS). Here a message is written
// once, when it ends, and only the assistant's (a tool's output is in its
// tool_execution_end).
//
// Writes are synchronous: Pi waits for agent-render rather than queueing output in
// memory. Without the variable, or once the reader is gone, nothing is written.
// The tools Pi runs inherit the descriptor, so a tool can write lines there too:
// agent-render shows them like any box output, escaped and bounded.
import { writeSync } from "node:fs";

const EVENTS = ["turn_start", "message_end", "tool_execution_start", "tool_execution_end"];

function eventsFd() {
  const raw = process.env.IMPYARD_PI_EVENTS_FD || "";
  return /^[3-9]$/.test(raw) ? Number(raw) : null;
}

export default function (pi) {
  let fd = eventsFd();
  if (fd === null) return;

  const write = (text) => {
    const data = Buffer.from(text);
    let offset = 0;
    while (fd !== null && offset < data.length) {
      try {
        offset += writeSync(fd, data, offset);
      } catch (err) {
        if (err && err.code === "EAGAIN") {
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
        } else {
          fd = null; // the reader is gone: Pi goes on without it
        }
      }
    }
  };

  for (const type of EVENTS) {
    pi.on(type, (event) => {
      if (type === "message_end" && (!event.message || event.message.role !== "assistant")) {
        return;
      }
      write(JSON.stringify({ ...event, type }) + "\n");
    });
  }
}
