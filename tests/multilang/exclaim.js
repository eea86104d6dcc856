// A multilang bolt in JavaScript (node, no packages): [id, text] -> [id, text + "!"].
// A minimal client of Storm's multilang protocol: JSON messages each followed by "end".
"use strict";
const fs = require("fs");
const path = require("path");

let buffer = "";
let lines = [];
let setupDone = false;
const pendingTaskIds = [];

function send(message) {
  process.stdout.write(JSON.stringify(message) + "\nend\n");
}

function handle(message) {
  if (!setupDone) {
    setupDone = true;
    fs.closeSync(fs.openSync(path.join(message.pidDir, String(process.pid)), "w"));
    send({ pid: process.pid });
    return;
  }
  if (Array.isArray(message)) {
    pendingTaskIds.push(message);
    return;
  }
  if (message.stream === "__heartbeat") {
    send({ command: "sync" });
    return;
  }
  const [id, text] = message.tuple;
  send({ command: "log", msg: "exclaiming in node", level: 2 });
  send({ command: "emit", anchors: [message.id], tuple: [id, text + "!"], need_task_ids: false });
  send({ command: "ack", id: message.id });
}

process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  buffer += chunk;
  let newline;
  while ((newline = buffer.indexOf("\n")) >= 0) {
    const line = buffer.slice(0, newline);
    buffer = buffer.slice(newline + 1);
    if (line === "end") {
      handle(JSON.parse(lines.join("\n")));
      lines = [];
    } else {
      lines.push(line);
    }
  }
});
process.stdin.on("end", () => process.exit(0));
