// Overview: totals, listeners, and charts of queued messages and message rates.
//
// Each update samples GET /api/overview. Rates are RabbitMQ's `message_stats.<key>_details
// .rate` when the node sends them; when it sends only the counts, the rate is computed here
// from two successive samples. The samples outlive the page (module state), so going to
// another page and back keeps the chart's history for this tab.

import { get } from "../api.js";
import { lineChart } from "../chart.js";
import { count, facts, h, perSecond, section, table } from "../dom.js";

export const title = "Overview";

const SAMPLES_MAX = 60; // 5 minutes at the shell's 5 s refresh
const samples = []; // [{ timeMs, overview }]

const QUEUED = [
  ["Ready", "#2f6fb0", "messages_ready"],
  ["Unacked", "#c77c1b", "messages_unacknowledged"],
  ["Total", "#555", "messages"],
];
const RATES = [
  ["Publish", "#2f6fb0", "publish"],
  ["Publisher confirm", "#6a9f2f", "confirm"],
  ["Deliver / get", "#8f3fa8", "deliver_get"],
  ["Redelivered", "#c77c1b", "redeliver"],
  ["Consumer ack", "#1d8a8a", "ack"],
  ["Unroutable (return)", "#b33", "return_unroutable"],
];

export function render(root) {
  const charts = h("div", { class: "charts" });
  const totals = h("div");
  const listeners = h("div");
  root.append(
    h("h1", {}, title),
    charts,
    section("Totals", totals),
    section("Ports and contexts", listeners),
  );
  return async () => {
    const overview = await get("overview");
    samples.push({ timeMs: Date.now(), overview });
    if (samples.length > SAMPLES_MAX) samples.shift();
    charts.replaceChildren(queuedChart(), rateChart());
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

function queuedChart() {
  const series = QUEUED.map(([label, color, key]) => ({
    label,
    color,
    points: samples.map((s) => [s.timeMs, s.overview.queue_totals?.[key] ?? 0]),
  }));
  return lineChart("Queued messages", series, (v) => count(Math.round(v)));
}

function rateChart() {
  const computed = samples.every((s) => !hasReportedRates(s.overview));
  const series = RATES.map(([label, color, key]) => ({
    label,
    color,
    points: samples.flatMap((s, i) => {
      const value = sampleRate(key, s, samples[i - 1]);
      return value === null ? [] : [[s.timeMs, value]];
    }),
  })).filter((s) => s.points.length > 0);
  if (series.length === 0) {
    const counted = Object.keys(samples.at(-1).overview.message_stats ?? {}).length > 0;
    const why = counted
      ? "Rates appear after the next sample."
      : "This node reports no message statistics yet, so there are no rates to chart.";
    return h(
      "figure",
      { class: "chart" },
      h("figcaption", {}, h("strong", {}, "Message rates")),
      h("p", { class: "notice" }, why),
    );
  }
  const chart = lineChart("Message rates", series, (v) => perSecond(v));
  if (computed) {
    chart.append(
      h("p", { class: "note" }, "Rates computed in the browser from successive counts."),
    );
  }
  return chart;
}

function hasReportedRates(overview) {
  return Object.keys(overview.message_stats ?? {}).some((key) => key.endsWith("_details"));
}

// Messages per second for one statistic at one sample, or null when it cannot be known.
function sampleRate(key, sample, previous) {
  const stats = sample.overview.message_stats ?? {};
  const reported = stats[`${key}_details`]?.rate;
  if (reported !== undefined) return reported;
  const before = previous?.overview.message_stats?.[key];
  if (stats[key] === undefined || before === undefined) return null;
  const seconds = (sample.timeMs - previous.timeMs) / 1000;
  return seconds > 0 ? Math.max(0, (stats[key] - before) / seconds) : null;
}
