// A small SVG line chart: a few series of (time ms, value) samples over the same window,
// a y axis from 0 to the largest value, and a legend with each series' latest value.

import { h } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 600;
const HEIGHT = 160;
const MARGIN_LEFT = 64;
const MARGIN_BOTTOM = 20;

function svg(tag, attributes, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  element.append(...children);
  return element;
}

// series: [{ label, color, points: [[timeMs, value], …] }], all sampled at the same times.
export function lineChart(title, series, formatValue) {
  const times = series.flatMap((s) => s.points.map(([t]) => t));
  const values = series.flatMap((s) => s.points.map(([, v]) => v));
  const start = Math.min(...times);
  const span = Math.max(...times) - start || 1;
  const top = niceCeiling(Math.max(1, ...values));
  const x = (t) => MARGIN_LEFT + ((t - start) / span) * (WIDTH - MARGIN_LEFT - 4);
  const y = (v) => 4 + (1 - v / top) * (HEIGHT - MARGIN_BOTTOM - 4);
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
  const lines = series.map((s) =>
    svg("polyline", {
      points: s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
      stroke: s.color,
      class: "series",
    }),
  );
  const seconds = Math.round(span / 1000);
  const axis = svg("text", { x: WIDTH, y: HEIGHT - 4, "text-anchor": "end" }, `last ${seconds} s`);
  return h(
    "figure",
    { class: "chart" },
    h(
      "figcaption",
      {},
      h("strong", {}, title),
      h(
        "ul",
        { class: "legend" },
        series.map((s) =>
          h(
            "li",
            {},
            h("span", { class: "swatch", style: `background:${s.color}` }),
            `${s.label}: ${formatValue(s.points.at(-1)?.[1] ?? 0)}`,
          ),
        ),
      ),
    ),
    svg(
      "svg",
      { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": title },
      ...grid,
      ...lines,
      axis,
    ),
  );
}

// The smallest of 1, 2, 4 × 10^n that is at least `value`: a readable axis top whose
// middle (0.5, 1, 2 × 10^n) is a round number too.
function niceCeiling(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 4, 10].map((step) => step * power).find((top) => top >= value);
}
