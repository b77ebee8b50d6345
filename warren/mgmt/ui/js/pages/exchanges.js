// Exchanges: GET /api/exchanges, and a form to declare one (PUT /api/exchanges/{vhost}/{name}).
// RabbitMQ's "rate in / rate out" columns are left out: Warren keeps no message counters
// per exchange, so they would always be empty.

import { apiPath, call, get } from "../api.js";
import { actionForm, features, field, h, link, parseObject, section, table } from "../dom.js";

export const title = "Exchanges";

const TYPES = ["direct", "fanout", "headers", "topic"];

const COLUMNS = [
  { label: "Virtual host", cell: (e) => e.vhost },
  { label: "Name", cell: (e) => link(e.name || "(AMQP default)", "exchanges", e.vhost, e.name) },
  { label: "Type", cell: (e) => e.type },
  { label: "Features", cell: (e) => features(e) },
  { label: "Policy", cell: (e) => (e.policy ? link(e.policy, "policies", e.vhost, e.policy) : "") },
];

export function render(root) {
  const list = h("div");
  const update = async () => {
    list.replaceChildren(table("Exchanges", COLUMNS, await get("exchanges")));
  };
  root.append(h("h1", {}, title), list, section("Add a new exchange", addForm(update)));
  return update;
}

function addForm(done) {
  const fields = [
    field("Virtual host", h("input", { name: "vhost", value: "/", required: true })),
    field("Name", h("input", { name: "name", required: true })),
    field(
      "Type",
      h(
        "select",
        { name: "type" },
        TYPES.map((t) => h("option", {}, t)),
      ),
    ),
    field("Durable", h("input", { type: "checkbox", name: "durable", checked: true })),
    field("Auto delete", h("input", { type: "checkbox", name: "auto_delete" })),
    field("Internal", h("input", { type: "checkbox", name: "internal" })),
    field("Arguments (JSON object)", h("textarea", { name: "arguments", rows: 2 })),
  ];
  return actionForm(
    "Add exchange",
    fields,
    "Add exchange",
    async (data) => {
      await call("PUT", apiPath("exchanges", data.get("vhost"), data.get("name")), {
        type: data.get("type"),
        durable: data.has("durable"),
        auto_delete: data.has("auto_delete"),
        internal: data.has("internal"),
        arguments: parseObject(data.get("arguments"), "Arguments"),
      });
      return `Exchange ${data.get("name")} declared.`;
    },
    done,
  );
}
