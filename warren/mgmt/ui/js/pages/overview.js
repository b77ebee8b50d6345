// Overview: charts of queued messages and message rates over the last minute, the node
// (memory, disk, alarms, file descriptors, uptime), totals and listeners.
//
// Each update reads GET /api/overview with the sample range (the node keeps the history,
// so the charts are full at once) and GET /api/nodes/{node}. A user without the monitoring
// tag is shown neither the node nor the listeners, as in RabbitMQ.

import { Refused, apiPath, get } from "../api.js";
import { MESSAGE_RATES, RANGE_QUERY, lengthsChart, ratesChart } from "../chart.js";
import { bytes, count, duration, facts, h, section, table } from "../dom.js";

export const title = "Overview";

export const QUEUED = [
  ["Ready", "#2f6fb0", "messages_ready"],
  ["Unacked", "#c77c1b", "messages_unacknowledged"],
  ["Total", "#555", "messages"],
];

export function render(root) {
  const charts = h("div", { class: "charts" });
  const node = h("div");
  const totals = h("div");
  const listeners = h("div");
  root.append(
    h("h1", {}, title),
    charts,
    section("Node", node),
    section("Totals", totals),
    section("Ports and contexts", listeners),
  );
  return async () => {
    const overview = await get(`overview?${RANGE_QUERY}`);
    charts.replaceChildren(
      lengthsChart("Queued messages", QUEUED, overview.queue_totals),
      ratesChart("Message rates", MESSAGE_RATES, overview.message_stats),
    );
    node.replaceChildren(await nodePanel(overview.node));
    totals.replaceChildren(totalsFacts(overview));
    listeners.replaceChildren(
      table(
        "Listeners",
        [
          { label: "Protocol", cell: (l) => l.protocol },
          { label: "Bound to", cell: (l) => l.ip_address },
          { label: "Port", cell: (l) => l.port, numeric: true },
        ],
        overview.listeners ?? [],
      ),
    );
  };
}

async function nodePanel(name) {
  const refused = h("p", { class: "notice" }, "The node's resources need the monitoring tag.");
  if (!name) return refused;
  let node;
  try {
    node = await get(apiPath("nodes", name));
  } catch (error) {
    if (error instanceof Refused) return refused;
    throw error;
  }
  const alarms = [node.mem_alarm && "memory", node.disk_free_alarm && "disk"].filter(Boolean);
  return h(
    "div",
    { class: "node", role: "group", "aria-label": "Node resources" },
    gauge("Memory", `${bytes(node.mem_used)} used`, limit(node.mem_limit, "high watermark"), [
      node.mem_used,
      node.mem_limit,
      node.mem_alarm,
    ]),
    gauge(
      "Disk space",
      `${bytes(node.disk_free)} free`,
      limit(node.disk_free_limit, "low watermark"),
      [node.disk_free_limit, node.disk_free, node.disk_free_alarm],
    ),
    gauge("File descriptors", `${count(node.fd_used)} used`, `${count(node.fd_total)} available`, [
      node.fd_used,
      node.fd_total,
      false,
    ]),
    h(
      "div",
      { class: alarms.length ? "gauge alarm" : "gauge", role: "group", "aria-label": "Alarms" },
      h("h3", {}, "Alarms"),
      h("p", { class: "value" }, alarms.length ? `${alarms.join(", ")} alarm` : "none"),
      h("p", {}, alarms.length ? "Publishers are blocked." : "Publishers may publish."),
    ),
    h(
      "div",
      { class: "gauge", role: "group", "aria-label": "Uptime" },
      h("h3", {}, "Uptime"),
      h("p", { class: "value" }, duration(node.uptime ?? 0)),
      h("p", {}, node.name),
    ),
  );
}

function limit(value, what) {
  return value ? `${bytes(value)} ${what}` : `no ${what}`;
}

// One resource: its heading, value, limit and a bar of how much of the limit is used
// (`[used, limit, alarm]`; for disk, the limit over what is free: fuller as space runs out).
function gauge(title, value, below, [used, of, alarm]) {
  const fraction = of ? Math.min(1, used / of) : 0;
  return h(
    "div",
    { class: alarm ? "gauge alarm" : "gauge", role: "group", "aria-label": title },
    h("h3", {}, title),
    h("p", { class: "value" }, value),
    h("meter", { min: 0, max: 1, high: 0.8, value: fraction.toFixed(3) }),
    h("p", {}, below),
  );
}

function totalsFacts(overview) {
  const objects = overview.object_totals ?? {};
  return facts([
    ["Node", overview.node],
    ["Product", `${overview.product_name ?? ""} ${overview.product_version ?? ""}`],
    ["RabbitMQ compatibility", overview.rabbitmq_version],
    ["Connections", count(objects.connections)],
    ["Channels", count(objects.channels)],
    ["Exchanges", count(objects.exchanges)],
    ["Queues", count(objects.queues)],
    ["Consumers", count(objects.consumers)],
  ]);
}
