// Charts of the node's sample history: a small SVG line chart, and the series it draws,
// read from RabbitMQ's `<key>_details.samples` (newest first, `{sample, timestamp}`).
//
// Pages ask for the last minute at 5 s (`RANGE_QUERY`, the range RabbitMQ's UI asks for by
// default); the node keeps that history itself, so a chart is full on the first update.
// A length (queued messages) is charted as sampled; a rate is the change between two
// successive samples of a counter, divided by the time between them.
//
// Series are drawn in order, each thinner than the one before, so a line that runs on top
// of an earlier one with the same values (Ack over Publish at a steady rate) leaves the
// earlier one showing along both its edges.

import { count, h, perSecond } from "./dom.js";

const RANGE_S = 60; // the charts say "last minute"
const INCREMENT_S = 5;
// A node's or channel's message_stats series: label, colour, key (each drawn thinner than
// the one before, so Publish stays visible under Ack).
export const MESSAGE_RATES = [
  ["Publish", "#2f6fb0", "publish"],
  ["Publisher confirm", "#6a9f2f", "confirm"],
  ["Deliver / get", "#8f3fa8", "deliver_get"],
  ["Redelivered", "#c77c1b", "redeliver"],
  ["Consumer ack", "#1d8a8a", "ack"],
  ["Unroutable (return)", "#b33", "return_unroutable"],
];

export const RANGE_QUERY = ["lengths", "msg_rates", "data_rates"]
  .map((family) => `${family}_age=${RANGE_S}&${family}_incr=${INCREMENT_S}`)
  .join("&");

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 600;
const HEIGHT = 170;
const MARGIN_LEFT = 64;
const MARGIN_BOTTOM = 22;
const WIDEST_STROKE = 5;
const THINNEST_STROKE = 1.5;
const TIME_TICK_MS = 10_000;
const TIME_LABEL_HALF = 24; // half the width of "18:04:10" in the chart's units

function svg(tag, attributes, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  element.append(...children);
  return element;
}

// [[timeMs, value], …] oldest first: a statistic's samples as they are.
function lengthPoints(stats, key) {
  return (stats?.[`${key}_details`]?.samples ?? []).map((s) => [s.timestamp, s.sample]).reverse();
}

// [[timeMs, per second], …] oldest first: the change of a counter between its samples.
function ratePoints(stats, key) {
  const samples = stats?.[`${key}_details`]?.samples ?? [];
  const points = [];
  for (let i = samples.length - 2; i >= 0; i -= 1) {
    const [later, earlier] = [samples[i], samples[i + 1]];
    const seconds = (later.timestamp - earlier.timestamp) / 1000;
    points.push([
      later.timestamp,
      seconds > 0 ? Math.max(0, later.sample - earlier.sample) / seconds : 0,
    ]);
  }
  return points;
}

// A chart of lengths: specs are [[label, color, key], …] of `stats` (such as a queue).
export function lengthsChart(title, specs, stats) {
  const series = specs.map(([label, color, key]) => ({
    label,
    color,
    points: lengthPoints(stats, key),
    current: stats?.[key],
  }));
  return lineChart(title, series, (v) => count(Math.round(v)));
}

// A chart of the rates of counters; the legend shows the rate the node measured over its
// last few seconds. `format` turns a rate into text (messages or bytes per second).
export function ratesChart(title, specs, stats, format = (v) => perSecond(v)) {
  const series = specs.map(([label, color, key]) => ({
    label,
    color,
    points: ratePoints(stats, key),
    current: stats?.[`${key}_details`]?.rate,
  }));
  return lineChart(title, series, format);
}

// series: [{ label, color, points: [[timeMs, value], …], current }], sampled at the same
// times; the legend shows `current`, else the latest point.
function lineChart(title, series, formatValue) {
  const times = series.flatMap((s) => s.points.map(([t]) => t));
  const values = series.flatMap((s) => s.points.map(([, v]) => v));
  const start = times.length ? Math.min(...times) : 0;
  const span = times.length ? Math.max(...times) - start || 1 : 1;
  const top = niceCeiling(Math.max(1, ...values));
  const x = (t) => MARGIN_LEFT + ((t - start) / span) * (WIDTH - MARGIN_LEFT - 8);
  const y = (v) => 6 + (1 - v / top) * (HEIGHT - MARGIN_BOTTOM - 6);
  // Ticks at 0, the middle and the top; a middle that formats like an end is left out.
  const ticks = new Map([0, top / 2, top].map((v) => [formatValue(v), v]));
  const grid = [...ticks.values()].map((v) =>
    svg(
      "g",
      {},
      svg("line", { x1: MARGIN_LEFT, x2: WIDTH, y1: y(v), y2: y(v), class: "grid" }),
      svg("text", { x: MARGIN_LEFT - 6, y: y(v) + 4, "text-anchor": "end" }, formatValue(v)),
    ),
  );
  // Time ticks at whole multiples of TIME_TICK_MS, as RabbitMQ's charts have them, centred
  // on their time; one too close to an end to fit its label is left out.
  const axis = [];
  for (
    let t = Math.ceil(start / TIME_TICK_MS) * TIME_TICK_MS;
    t <= start + span;
    t += TIME_TICK_MS
  ) {
    if (x(t) - MARGIN_LEFT < TIME_LABEL_HALF || WIDTH - x(t) < TIME_LABEL_HALF) continue;
    axis.push(
      svg("text", { x: x(t), y: HEIGHT - 4, "text-anchor": "middle", class: "time" }, clock(t)),
    );
  }
  const step = series.length > 1 ? (WIDEST_STROKE - THINNEST_STROKE) / (series.length - 1) : 0;
  const lines = series.map((s, i) =>
    svg("polyline", {
      points: s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
      stroke: s.color,
      "stroke-width": (series.length > 1 ? WIDEST_STROKE - i * step : 2).toFixed(2),
      class: "series",
      "data-label": s.label,
    }),
  );
  return h(
    "figure",
    { class: "chart" },
    h(
      "figcaption",
      {},
      h("strong", {}, title),
      " ",
      h("small", {}, "last minute"),
      h(
        "ul",
        { class: "legend" },
        series.map((s) =>
          h(
            "li",
            {},
            h("span", { class: "swatch", style: `background:${s.color}` }),
            `${s.label}: ${formatValue(s.current ?? s.points.at(-1)?.[1] ?? 0)}`,
          ),
        ),
      ),
    ),
    svg(
      "svg",
      { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": title },
      ...grid,
      ...lines,
      ...axis,
    ),
  );
}

function clock(timeMs) {
  return new Date(timeMs).toLocaleTimeString("en-GB", { hour12: false });
}

// The smallest of 1, 2, 4 × 10^n that is at least `value`: a readable axis top whose
// middle (0.5, 1, 2 × 10^n) is a round number too.
function niceCeiling(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 4, 10].map((step) => step * power).find((top) => top >= value);
}
