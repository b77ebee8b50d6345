// Building the page: elements, tables, forms and the few number formats the pages share.
//
// Every text that came from the broker goes in as a text node (never as HTML), so a queue
// named "<b>" is shown, not interpreted.

import { NotAvailable, call } from "./api.js";

// h("a", { href: "#/queues" }, "Queues"): attributes by name (true is present, false and
// null absent); children are nodes, strings, numbers or arrays of them, null and false skipped.
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    element.setAttribute(name, value === true ? "" : value);
  }
  element.append(...nodes(children));
  return element;
}

function nodes(children) {
  return children
    .flat(Infinity)
    .filter((child) => child !== null && child !== undefined && child !== false)
    .map((child) => (child instanceof Node ? child : String(child)));
}

// A link inside the UI: route("queues", "/", "q1") is #/queues/%2F/q1.
export function route(...segments) {
  return `#/${segments.map((segment) => encodeURIComponent(segment)).join("/")}`;
}

export function link(text, ...segments) {
  return h("a", { href: route(...segments) }, text);
}

// columns: [{ label, cell: (row) => node or text, numeric }]
export function table(caption, columns, rows) {
  if (rows.length === 0) return h("p", { class: "empty" }, `No ${caption.toLowerCase()}.`);
  return h(
    "table",
    {},
    h("caption", {}, caption),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        columns.map((c) => h("th", { scope: "col", class: c.numeric ? "numeric" : null }, c.label)),
      ),
    ),
    h(
      "tbody",
      {},
      rows.map((row) =>
        h(
          "tr",
          {},
          columns.map((c) => h("td", { class: c.numeric ? "numeric" : null }, c.cell(row))),
        ),
      ),
    ),
  );
}

// A definition list of label/value pairs, for one object's properties.
export function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.map(([label, value]) => [h("dt", {}, label), h("dd", {}, value)]),
  );
}

export function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), children);
}

export function notAvailable(what) {
  return h("p", { class: "notice", role: "status" }, `${what} not available on this node.`);
}

// What a page shows instead of itself when its API path answers 404/405 or refuses the user.
export function noticePage(title, heading, text) {
  return [
    h("h1", {}, title),
    h("div", { class: "notice", role: "status" }, h("h2", {}, heading), h("p", {}, text)),
  ];
}

export function field(label, input) {
  return h("label", {}, label, " ", input);
}

// A form whose submit runs `action(form data)`; its <output> says how that went. `done`
// (the page's refresh) runs after a success. The section around it gives the visible
// heading; `label` names the form for assistive technology.
export function actionForm(label, fields, submitLabel, action, done) {
  const output = h("output", { role: "status" });
  const form = h(
    "form",
    { class: "card", "aria-label": label },
    fields,
    h("button", { type: "submit" }, submitLabel),
    output,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    output.className = "";
    try {
      output.replaceChildren(...nodes([(await action(new FormData(form))) ?? "Done."]));
      await done?.();
    } catch (error) {
      output.className = "error";
      output.textContent =
        error instanceof NotAvailable
          ? `Not available on this node (${error.message}).`
          : error.message;
    }
  });
  return form;
}

// A button that deletes `apiPath` after the user confirms, then goes to `nextHash`.
export function deleteForm(what, apiPath, nextHash) {
  const form = actionForm(`Delete this ${what}`, [], `Delete ${what}`, async () => {
    await call("DELETE", apiPath);
    location.hash = nextHash;
  });
  form.addEventListener(
    "submit",
    (event) => {
      if (confirm(`Delete this ${what}?`)) return;
      event.preventDefault();
      event.stopImmediatePropagation();
    },
    { capture: true },
  );
  form.querySelector("button").classList.add("danger");
  return form;
}

// JSON typed into a textarea: {} when empty, else an object or a thrown explanation.
export function parseObject(text, what) {
  if (!text.trim()) return {};
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error(`${what} is not valid JSON.`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new Error(`${what} must be a JSON object.`);
  }
  return value;
}

export function json(value) {
  return h("code", { class: "json" }, JSON.stringify(value));
}

export function count(value) {
  return value === undefined || value === null ? "" : Number(value).toLocaleString("en");
}

// A per-second figure: one decimal below 100, whole numbers with separators above.
export function perSecond(value, unit = "") {
  const digits = value < 100 ? 1 : 0;
  const text = value.toLocaleString("en", {
    minimumFractionDigits: digits,
    maximumFractionDigits: digits,
  });
  return `${text}${unit}/s`;
}

// RabbitMQ's `<key>_details.rate` (per second) of a statistic, or "" when the node has none.
export function rate(stats, key) {
  const value = stats?.[`${key}_details`]?.rate;
  return value === undefined ? "" : perSecond(value);
}

// The same for a byte count, in kB/s or MB/s once it is large.
export function byteRate(stats, key) {
  const value = stats?.[`${key}_details`]?.rate;
  return value === undefined ? "" : bytesPerSecond(value);
}

export function bytesPerSecond(value) {
  if (value >= 1e6) return perSecond(value / 1e6, " MB");
  if (value >= 1e3) return perSecond(value / 1e3, " kB");
  return perSecond(value, " B");
}

// A byte count in B, kB, MB or GB (powers of 1000, as RabbitMQ's disk_free_limit "50MB").
export function bytes(value) {
  if (value === undefined || value === null) return "";
  const [unit, size] = [
    ["GB", 1e9],
    ["MB", 1e6],
    ["kB", 1e3],
  ].find(([, s]) => value >= s) ?? ["B", 1];
  return `${(value / size).toLocaleString("en", { maximumFractionDigits: 1 })} ${unit}`;
}

// A duration in milliseconds as RabbitMQ's UI writes an uptime: "3d 4h", "2h 5m", "41s".
export function duration(ms) {
  const seconds = Math.floor(ms / 1000);
  const parts = [
    [Math.floor(seconds / 86400), "d"],
    [Math.floor(seconds / 3600) % 24, "h"],
    [Math.floor(seconds / 60) % 60, "m"],
    [seconds % 60, "s"],
  ];
  const first = parts.findIndex(([n]) => n > 0);
  if (first === -1) return "0s";
  return parts
    .slice(first, first + 2)
    .map(([n, unit]) => `${n}${unit}`)
    .join(" ");
}

// RabbitMQ's short feature letters for durable, auto-delete, exclusive/internal, arguments.
export function features(object) {
  const tags = [];
  if (object.durable) tags.push(["D", "durable"]);
  if (object.auto_delete) tags.push(["AD", "auto-delete"]);
  if (object.exclusive) tags.push(["Excl", "exclusive"]);
  if (object.internal) tags.push(["I", "internal"]);
  for (const key of Object.keys(object.arguments ?? {})) {
    tags.push([key, `${key}: ${JSON.stringify(object.arguments[key])}`]);
  }
  return tags.map(([text, title]) => h("abbr", { class: "tag", title }, text));
}
