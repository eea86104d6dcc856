// The drpc dashboard: polls /api/status every second and redraws. Plain JavaScript, no
// build step, nothing loaded from elsewhere. Every string from the server is written
// with textContent (function names and failure messages come from callers), never as markup.
"use strict";

const POLL_MS = 1000;
const STALE_MS = 5000;
const OUTCOMES = [
  "ok", "failed", "timeout", "internal_error", "busy", "unauthorized", "shutdown", "abandoned",
];
const COLORS = {
  ok: "#2e9e5b",
  failed: "#d64545",
  timeout: "#e08a1e",
  internal_error: "#8e44ad",
  busy: "#c9a227",
  unauthorized: "#4f6d8a",
  shutdown: "#8a8f96",
  abandoned: "#b0a7c4",
  commits: "#2e9e5b",
  replays: "#d64545",
  p50: "#2f6fdb",
  p99: "#d64545",
};
const SVG = "http://www.w3.org/2000/svg";
const CHART_WIDTH = 280;
const CHART_HEIGHT = 58;
const AXIS = 11; // pixels under a chart for its time labels

let lastUpdate = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function seconds(value) {
  if (value === null || value === undefined) return "—";
  if (value < 0.001) return (value * 1e6).toFixed(0) + " µs";
  if (value < 1) return (value * 1000).toFixed(value < 0.01 ? 2 : 1) + " ms";
  if (value < 60) return value.toFixed(2) + " s";
  const minutes = Math.floor(value / 60);
  return minutes + " m " + Math.floor(value - minutes * 60) + " s";
}

function age(value) {
  if (value === null || value === undefined) return "—";
  if (value < 60) return value.toFixed(1) + " s";
  return seconds(value);
}

function rate(value) {
  if (!value) return "0/s";
  return (value >= 10 ? value.toFixed(0) : value.toFixed(2)) + "/s";
}

function clock(epoch) {
  return new Date(epoch * 1000).toLocaleTimeString();
}

function sum(values) {
  return values.reduce((total, value) => total + value, 0);
}

function pill(outcome, count) {
  return el("span", { class: "pill", "data-outcome": outcome }, outcome, " ", el("b", { class: "n" }, count));
}

// An empty chart: its base line and time labels ("-10 min" … "now").
function frame(width, height, window) {
  const chart = svg("svg", { class: "chart", width, height, viewBox: `0 0 ${width} ${height}` });
  const base = height - AXIS + 0.5;
  chart.append(svg("line", { class: "axis", x1: 0, y1: base, x2: width, y2: base }));
  const span = window >= 120 ? `−${Math.round(window / 60)} min` : `−${window} s`;
  chart.append(svg("text", { class: "label", x: 0, y: height - 1 }, span));
  chart.append(svg("text", { class: "label", x: width, y: height - 1, "text-anchor": "end" }, "now"));
  return chart;
}

// Stacked bars: one bar per slot, one segment per key, heights scaled to the busiest slot.
function barChart(series, keys, width, fullHeight, unit, window) {
  const chart = frame(width, fullHeight, window);
  const height = fullHeight - AXIS;
  const totals = series.map((slot) => (slot ? sum(keys.map((key) => slot[key] || 0)) : 0));
  const peak = Math.max(1, ...totals);
  const step = width / series.length;
  series.forEach((slot, index) => {
    if (!slot) return;
    let y = height - 1;
    for (const key of keys) {
      const count = slot[key] || 0;
      if (!count) continue;
      const h = Math.max(1, (count / peak) * (height - 12));
      y -= h;
      const bar = svg("rect", {
        x: (index * step + 0.5).toFixed(1),
        y: y.toFixed(1),
        width: Math.max(1, step - 1).toFixed(1),
        height: h.toFixed(1),
        fill: COLORS[key] || "#888",
      });
      bar.append(svg("title", {}, `${count} ${key}`));
      chart.append(bar);
    }
  });
  if (Math.max(...totals) > 0) chart.append(svg("text", { class: "label", x: 2, y: 9 }, `${peak} ${unit}`));
  return chart;
}

// p50 and p99 lines on a log scale; gaps where a slot had no calls.
function latencyChart(series, width, fullHeight, window) {
  const chart = frame(width, fullHeight, window);
  const height = fullHeight - AXIS;
  const values = series.flatMap((slot) => (slot ? [slot.p50, slot.p99] : [])).filter((v) => v > 0);
  if (!values.length) return chart;
  let low = Math.log10(Math.min(...values));
  let high = Math.log10(Math.max(...values));
  if (high - low < 0.5) {
    low -= 0.25;
    high += 0.25;
  }
  const step = width / series.length;
  const y = (value) => (height - 2 - ((Math.log10(value) - low) / (high - low)) * (height - 14)).toFixed(1);
  for (const key of ["p50", "p99"]) {
    let path = "";
    let pen = false;
    series.forEach((slot, index) => {
      const value = slot ? slot[key] : null;
      if (!(value > 0)) {
        pen = false;
        return;
      }
      const x = (index * step + step / 2).toFixed(1);
      path += (pen ? " L" : " M") + x + " " + y(value);
      pen = true;
      const dot = svg("circle", { cx: x, cy: y(value), r: 1.6, fill: COLORS[key] });
      dot.append(svg("title", {}, `${key} ${seconds(value)}`));
      chart.append(dot);
    });
    if (path) {
      chart.prepend(svg("path", { d: path.trim(), fill: "none", stroke: COLORS[key], "stroke-width": 1.5 }));
    }
  }
  chart.append(svg("text", { class: "label", x: 2, y: 9 }, seconds(10 ** high)));
  return chart;
}

function fill(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows);
  document.getElementById(`${id}-empty`).hidden = rows.length > 0;
  document.getElementById(id).hidden = rows.length === 0;
}

function renderSummary(status) {
  const server = status.server || {};
  const parts = [];
  const add = (label, value) => parts.push(el("span", {}, label, " ", el("b", {}, value)), "  ·  ");
  const served = server.served || [];
  const more = (server.served_total ?? served.length) - served.length;
  add("serving", served.length ? served.join(", ") + (more > 0 ? ` and ${more} more` : "") : "no function");
  add("outstanding", server.outstanding ?? status.in_flight_total);
  add("late results", server.late_results ?? 0);
  add("up", seconds(status.uptime));
  if (status.spark_ui) {
    parts.push(el("a", { href: status.spark_ui, target: "_blank", rel: "noopener", class: "spark-ui" }, "Spark UI"), "  ·  ");
  }
  parts.pop();
  if (server.shutting_down) parts.push("  ·  ", el("span", { class: "error-banner" }, "shutting down"));
  document.getElementById("summary").replaceChildren(...parts);
}

function renderFunctions(status) {
  const minutes = status.window / 60;
  document.getElementById("functions-note").textContent =
    `rate, p50 and p99 over the last ${status.summary} s; charts over the last ${minutes} min ` +
    `in ${status.resolution} s slots`;
  const rows = status.functions.map((fn) => {
    const outcomes = OUTCOMES.filter((o) => fn.totals[o]).concat(
      Object.keys(fn.totals).filter((o) => !OUTCOMES.includes(o)),
    );
    const pills = el("div", { class: "pills" }, ...outcomes.map((o) => pill(o, fn.totals[o])));
    if (!outcomes.length) pills.append(el("span", { class: "muted" }, "no calls yet"));
    const counts = fn.series.map((slot) => (slot ? slot.outcomes : null));
    const name = el("td", { class: fn.other ? "name other" : "name" }, fn.other ? "other names" : fn.name);
    if (fn.other) name.title = "function names past the label bound, or not served";
    return el(
      "tr",
      { "data-function": fn.name },
      name,
      el("td", { class: "calls" }, el("div", { class: "total muted" }, `${fn.total} total`), pills),
      el("td", { class: "num rate" }, rate(fn.rate)),
      el("td", { class: "num p50" }, seconds(fn.p50)),
      el("td", { class: "num p99" }, seconds(fn.p99)),
      el("td", { class: "num held" }, `${fn.running} / ${fn.queued}`),
      el("td", {}, barChart(counts, OUTCOMES, CHART_WIDTH, CHART_HEIGHT, "calls max", status.window)),
      el("td", {}, latencyChart(fn.series, CHART_WIDTH, CHART_HEIGHT, status.window)),
    );
  });
  fill("functions", rows);
  const legend = document.getElementById("legend");
  if (!legend.childElementCount) {
    for (const key of [...OUTCOMES, "p50", "p99"]) {
      const swatch = svg("svg", { width: 10, height: 10 }, svg("rect", { width: 10, height: 10, rx: 2, fill: COLORS[key] }));
      legend.append(el("span", {}, swatch, " ", key));
    }
  }
}

function renderInFlight(status) {
  const shown = status.in_flight.length;
  const total = status.in_flight_total;
  document.getElementById("in-flight-note").textContent =
    total > shown ? `oldest ${shown} of ${total}` : `${total}`;
  const rows = status.in_flight.map((request) =>
    el(
      "tr",
      { "data-request": request.id },
      el("td", { class: "mono" }, request.id),
      el("td", { class: "name" }, request.function),
      el("td", { class: `state-${request.state}` }, request.state),
      el(
        "td",
        { class: "step" },
        request.step ? `${request.step} (${age(request.step_age)})` : "—",
      ),
      el("td", { class: "num" }, age(request.age)),
    ),
  );
  fill("in-flight", rows);
}

function renderFailures(status) {
  document.getElementById("failures-note").textContent = `last ${status.failures.length}, newest first`;
  const rows = status.failures.map((failure) =>
    el(
      "tr",
      { "data-outcome": failure.outcome },
      el("td", { class: "num" }, clock(failure.time)),
      el("td", { class: "name" }, failure.function),
      el("td", { class: "mono" }, failure.id ?? "—"),
      el("td", {}, el("span", { class: "pill", "data-outcome": failure.outcome }, failure.outcome)),
      el("td", { class: "reason" }, el("span", { class: "type" }, failure.type), failure.message),
      el("td", { class: "step" }, failure.step),
    ),
  );
  fill("failures", rows);
}

function renderTransactional(status) {
  const rows = status.transactional.map((tx) => {
    const inFlight = tx.in_flight.length
      ? tx.in_flight.map((batch) => `${batch.txid}#${batch.attempt} (${age(batch.age)})`).join(", ")
      : "none";
    const causes = Object.entries(tx.replays);
    const replays = causes.length
      ? el("div", { class: "pills" }, ...causes.map(([cause, count]) => pill(cause, count)))
      : el("span", { class: "muted" }, "none");
    const name = el("td", { class: "name" }, tx.topology);
    if (tx.running !== undefined) {
      const state = tx.error ? "stopped" : tx.running ? "running" : "not running";
      name.append(el("div", { class: `run-state run-${state.replace(" ", "-")}` }, state));
      if (tx.error) name.append(el("div", { class: "run-error" }, tx.error));
      if (tx.waiting) name.append(el("div", { class: "run-waiting" }, tx.waiting));
      if (tx.checkpoint) {
        name.append(el("div", { class: "run-checkpoint muted" }, checkpointLine(tx.checkpoint)));
      }
    }
    const committed = el("td", { class: "num last-committed" }, tx.last_committed ?? "—");
    if (tx.slowest) {
      committed.append(
        el(
          "div",
          { class: "slowest muted" },
          `slowest ${tx.slowest.txid}: ${seconds(tx.slowest.seconds)} (${tx.slowest.phase})`,
        ),
      );
    }
    return el(
      "tr",
      { "data-topology": tx.topology },
      name,
      committed,
      el("td", { class: "num commits" }, tx.commits),
      el("td", { class: "num" }, rate(tx.tuples_per_second)),
      el("td", { class: "num" }, seconds(tx.commit_p50)),
      el("td", { class: "mono" }, inFlight),
      el("td", { class: "replays" }, replays),
      el("td", {}, barChart(tx.series, ["commits", "replays"], CHART_WIDTH, CHART_HEIGHT, "max", status.window)),
    );
  });
  fill("transactional", rows);
}

function renderState(status) {
  const dirs = status.state || [];
  const total = status.state_total ?? dirs.length;
  document.getElementById("state-note").textContent =
    total > dirs.length ? `first ${dirs.length} of ${total} by path` : "";
  const rows = dirs.map((dir) => {
    const names = Object.keys(dir.txids);
    const txids = names.length
      ? names.map((name) =>
          el("div", { class: "txid", "data-topology": name }, name, " ", el("b", {}, dir.txids[name])),
        )
      : [el("span", { class: "muted" }, "none")];
    const version = el("td", { class: "num version" }, dir.version);
    if (dir.horizon !== null && dir.horizon !== undefined) version.title = `readable from version ${dir.horizon}`;
    const pinned = dir.oldest_pinned === null || dir.oldest_pinned === undefined
      ? el("span", { class: "muted" }, "none")
      : `${age(dir.oldest_pin_age)} (version ${dir.oldest_pinned})`;
    return el(
      "tr",
      { "data-state-dir": dir.state_dir },
      el("td", { class: "mono path" }, dir.state_dir),
      version,
      el("td", { class: "mono txids" }, ...txids),
      el("td", { class: "num pin-age" }, pinned),
      el("td", { class: "num pins" }, dir.pins),
      el("td", { class: "num undo-logs" }, dir.undo_logs),
    );
  });
  fill("state", rows);
}

function renderPartitions(status) {
  const partitions = status.partitions || [];
  const total = status.partitions_total ?? partitions.length;
  document.getElementById("partitions-note").textContent =
    total > partitions.length ? `first ${partitions.length} of ${total}` : "";
  const rows = partitions.map((partition) => {
    const owner = partition.host === null || partition.host === undefined
      ? el("span", { class: "muted" }, "unknown")
      : partition.task ? `${partition.host}, task ${partition.task}` : partition.host;
    return el(
      "tr",
      { "data-state": partition.state, "data-partition": String(partition.index) },
      el("td", { class: "name" }, partition.topology),
      el("td", { class: "name" }, partition.state),
      el("td", { class: "num" }, partition.index),
      el("td", { class: "mono owner" }, owner),
      el("td", { class: "num txid" }, partition.txid ?? "—"),
      el("td", { class: "num keys" }, partition.keys ?? "—"),
      el("td", { class: "num bytes" }, partition.bytes ?? "—"),
      el(
        "td",
        { class: "num snapshot", title: partition.snapshot_error ?? "" },
        partition.snapshot_error ? `${partition.snapshot ?? "—"} (failed)` : partition.snapshot ?? "—",
      ),
      el("td", { class: "num store-bytes" }, partition.store_bytes ?? "—"),
    );
  });
  fill("partitions", rows);
}

function renderTopologies(status) {
  const rows = (status.topologies || []).flatMap((topology) =>
    topology.components.map((component) =>
      el(
        "tr",
        { "data-topology": topology.name, "data-component": component.component },
        el("td", { class: "name" }, topology.name),
        el("td", { class: "name" }, `${component.component} (${component.kind})`),
        el("td", { class: "num tasks" }, component.tasks),
        el("td", { class: "num emitted" }, component.emitted),
        el("td", { class: "num acked" }, component.acked),
        el("td", { class: "num failed" }, component.failed),
        el(
          "td",
          { class: "num complete-latency" },
          component.complete_latency_ms === null ? "—" : seconds(component.complete_latency_ms / 1000),
        ),
      ),
    ),
  );
  fill("topologies", rows);
}

function checkpointLine(checkpoint) {
  const parts = [`store ${checkpoint.store}`, `${checkpoint.bytes ?? 0} bytes`];
  if (checkpoint.last_restore_seconds !== null && checkpoint.last_restore_seconds !== undefined) {
    parts.push(`last restore ${seconds(checkpoint.last_restore_seconds)}`);
  }
  const standbys = checkpoint.standbys ?? [];
  if (standbys.length) {
    const lags = standbys.map((copy) => copy.lag).filter((lag) => lag !== null && lag !== undefined);
    const worst = lags.length ? Math.max(...lags) : null;
    parts.push(
      `${standbys.length} standby cop${standbys.length === 1 ? "y" : "ies"}, ` +
        (worst === null ? "building" : `lag at most ${worst} commit${worst === 1 ? "" : "s"}`),
    );
  }
  if (checkpoint.last_takeover_seconds !== null && checkpoint.last_takeover_seconds !== undefined) {
    parts.push(`last takeover ${seconds(checkpoint.last_takeover_seconds)}`);
  }
  return parts.join(", ");
}

function render(status) {
  renderSummary(status);
  renderFunctions(status);
  renderInFlight(status);
  renderFailures(status);
  renderTransactional(status);
  renderTopologies(status);
  renderState(status);
  renderPartitions(status);
  lastUpdate = Date.now();
  document.getElementById("updated").textContent = clock(status.time);
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

async function poll() {
  try {
    const response = await fetch("/api/status", { cache: "no-store" });
    if (response.ok) render(await response.json());
  } catch (error) {
    // The server is unreachable (restarting or stopped): keep the last picture, mark it stale.
  }
  document.getElementById("live").classList.toggle("stale", Date.now() - lastUpdate > STALE_MS);
  setTimeout(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", poll);
