// One queue: charts of its length and message rates over the last minute, arguments,
// effective policy, counts, consumers, bindings; get, publish, purge and delete.
// GET /api/queues/{vhost}/{name} (with the sample range) and the paths below it.

import { apiPath, call, get, getOptional } from "../api.js";
import { RANGE_QUERY, lengthsChart, ratesChart } from "../chart.js";
import {
  actionForm,
  count,
  deleteForm,
  facts,
  features,
  field,
  h,
  json,
  link,
  notAvailable,
  route,
  section,
  table,
} from "../dom.js";
import { publishForm } from "../publish.js";
import { QUEUED } from "./overview.js";
import { policyLink } from "./queues.js";

export const title = "Queue";

const CONSUMER_COLUMNS = [
  { label: "Channel", cell: (c) => c.channel_details?.name ?? "" },
  { label: "Consumer tag", cell: (c) => c.consumer_tag },
  { label: "Ack required", cell: (c) => (c.ack_required ? "yes" : "no") },
  { label: "Exclusive", cell: (c) => (c.exclusive ? "yes" : "no") },
  { label: "Prefetch", cell: (c) => count(c.prefetch_count), numeric: true },
];

const RATES = [
  ["Publish", "#2f6fb0", "publish"],
  ["Deliver / get", "#8f3fa8", "deliver_get"],
  ["Redelivered", "#c77c1b", "redeliver"],
  ["Consumer ack", "#1d8a8a", "ack"],
];

const BINDING_COLUMNS = [
  {
    label: "From",
    cell: (b) => link(b.source || "(AMQP default)", "exchanges", b.vhost, b.source),
  },
  { label: "Routing key", cell: (b) => b.routing_key },
  { label: "Arguments", cell: (b) => json(b.arguments ?? {}) },
];

// RabbitMQ's ackmode values and the labels its UI gives them.
const ACK_MODES = [
  ["ack_requeue_true", "Nack message requeue true"],
  ["ack_requeue_false", "Automatic ack"],
  ["reject_requeue_true", "Reject requeue true"],
  ["reject_requeue_false", "Reject requeue false"],
];

export function render(root, [vhost, name]) {
  const path = apiPath("queues", vhost, name);
  const charts = h("div", { class: "charts" });
  const about = h("div");
  const consumers = h("div");
  const bindings = h("div");
  const update = async () => {
    const queue = await get(`${path}?${RANGE_QUERY}`);
    charts.replaceChildren(
      lengthsChart("Queued messages", QUEUED, queue),
      queue.message_stats
        ? ratesChart("Message rates", RATES, queue.message_stats)
        : h("p", { class: "notice" }, "No message rates: nothing was published to this queue yet."),
    );
    about.replaceChildren(details(queue));
    consumers.replaceChildren(
      queue.consumer_details
        ? table("Consumers", CONSUMER_COLUMNS, queue.consumer_details)
        : h(
            "p",
            {},
            `${count(queue.consumers)} consumers; their details are not available on this node.`,
          ),
    );
    const found = await getOptional(`${path}/bindings`);
    bindings.replaceChildren(
      found === null
        ? notAvailable("Bindings are")
        : table("Bindings to this queue", BINDING_COLUMNS, found),
    );
  };
  root.append(
    h("h1", {}, `Queue ${name}`, h("small", {}, ` in virtual host ${vhost}`)),
    charts,
    about,
    section("Consumers", consumers),
    section("Bindings", bindings),
    section("Publish message", publishForm(vhost, "", name)),
    section("Get messages", getForm(path)),
    section("Purge", purgeForm(path, update)),
    section("Delete", deleteForm("queue", path, route("queues"))),
  );
  return update;
}

function details(queue) {
  return h(
    "div",
    { class: "columns" },
    facts([
      ["Type", queue.type],
      ["Features", features(queue)],
      ["State", queue.state],
      ["Arguments", json(queue.arguments ?? {})],
      ["Policy", policyLink(queue, "policies") ?? "none"],
      ["Operator policy", policyLink(queue, "operator-policies") ?? "none"],
      ["Effective policy definition", json(queue.effective_policy_definition ?? {})],
      ["Node", queue.node],
    ]),
    facts([
      ["Ready", count(queue.messages_ready)],
      ["Unacked", count(queue.messages_unacknowledged)],
      ["Total", count(queue.messages)],
      ["Consumers", count(queue.consumers)],
    ]),
  );
}

function getForm(path) {
  const fields = [
    field(
      "Ack mode",
      h(
        "select",
        { name: "ackmode" },
        ACK_MODES.map(([value, text]) => h("option", { value }, text)),
      ),
    ),
    field(
      "Encoding",
      h(
        "select",
        { name: "encoding" },
        h("option", { value: "auto" }, "Auto string / base64"),
        h("option", { value: "base64" }, "base64"),
      ),
    ),
    field("Messages", h("input", { name: "count", type: "number", min: 1, value: 1 })),
  ];
  return actionForm("Get messages", fields, "Get messages", async (data) => {
    const messages = await call("POST", `${path}/get`, {
      count: Number(data.get("count")),
      ackmode: data.get("ackmode"),
      encoding: data.get("encoding"),
      truncate: 50000,
    });
    if (messages.length === 0) return "Queue is empty.";
    return messages.map((m, i) =>
      h(
        "div",
        { class: "message" },
        h("h3", {}, `Message ${i + 1}`),
        facts([
          ["Exchange", m.exchange || "(AMQP default)"],
          ["Routing key", m.routing_key],
          ["Redelivered", m.redelivered ? "yes" : "no"],
          ["Messages left in queue", count(m.message_count)],
          ["Properties", json(m.properties ?? {})],
          [
            `Payload (${count(m.payload_bytes)} bytes, ${m.payload_encoding})`,
            h("pre", {}, m.payload),
          ],
        ]),
      ),
    );
  });
}

function purgeForm(path, done) {
  return actionForm(
    "Purge messages",
    [],
    "Purge messages",
    async () => {
      await call("DELETE", `${path}/contents`);
      return "Queue purged.";
    },
    done,
  );
}
