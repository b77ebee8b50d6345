// Queues: GET /api/queues with counts and policies, and a form to declare one
// (PUT /api/queues/{vhost}/{name}).

import { apiPath, call, get } from "../api.js";
import {
  actionForm,
  count,
  features,
  field,
  h,
  link,
  parseObject,
  rate,
  route,
  section,
  table,
} from "../dom.js";

export const title = "Queues";

const COLUMNS = [
  { label: "Virtual host", cell: (q) => q.vhost },
  { label: "Name", cell: (q) => link(q.name, "queues", q.vhost, q.name) },
  { label: "Type", cell: (q) => q.type },
  { label: "Features", cell: (q) => features(q) },
  { label: "Policy", cell: (q) => policyLinks(q) },
  { label: "State", cell: (q) => q.state },
  { label: "Ready", cell: (q) => count(q.messages_ready), numeric: true },
  { label: "Unacked", cell: (q) => count(q.messages_unacknowledged), numeric: true },
  { label: "Total", cell: (q) => count(q.messages), numeric: true },
  { label: "Consumers", cell: (q) => count(q.consumers), numeric: true },
  { label: "Incoming", cell: (q) => rate(q.message_stats, "publish"), numeric: true },
  { label: "Deliver / get", cell: (q) => rate(q.message_stats, "deliver_get"), numeric: true },
];

// The queue's policy and operator policy, each a link to its page.
function policyLinks(queue) {
  return [policyLink(queue, "policies"), " ", policyLink(queue, "operator-policies")];
}

export function policyLink(queue, kind) {
  const name = kind === "policies" ? queue.policy : queue.operator_policy;
  const noun = kind === "policies" ? "policy" : "operator policy";
  return name ? h("a", { href: route(kind, queue.vhost, name), title: noun }, name) : null;
}

export function render(root) {
  const list = h("div");
  const update = async () => {
    list.replaceChildren(table("Queues", COLUMNS, await get("queues")));
  };
  root.append(h("h1", {}, title), list, section("Add a new queue", addForm(update)));
  return update;
}

function addForm(done) {
  const fields = [
    field("Virtual host", h("input", { name: "vhost", value: "/", required: true })),
    field("Name", h("input", { name: "name", required: true })),
    field(
      "Type",
      h("select", { name: "type" }, h("option", {}, "classic"), h("option", {}, "quorum")),
    ),
    field("Durable", h("input", { type: "checkbox", name: "durable", checked: true })),
    field("Auto delete", h("input", { type: "checkbox", name: "auto_delete" })),
    field(
      "Arguments (JSON object)",
      h("textarea", { name: "arguments", rows: 2, placeholder: '{"x-max-length": 1000}' }),
    ),
  ];
  return actionForm(
    "Add queue",
    fields,
    "Add queue",
    async (data) => {
      await call("PUT", apiPath("queues", data.get("vhost"), data.get("name")), {
        durable: data.has("durable"),
        auto_delete: data.has("auto_delete"),
        arguments: {
          "x-queue-type": data.get("type"),
          ...parseObject(data.get("arguments"), "Arguments"),
        },
      });
      return `Queue ${data.get("name")} declared.`;
    },
    done,
  );
}
