// One channel: its message rates over the last minute, details and consumers.
// GET /api/channels/{name} with the sample range.

import { apiPath, get } from "../api.js";
import { MESSAGE_RATES, RANGE_QUERY, ratesChart } from "../chart.js";
import { count, facts, h, link, section, table } from "../dom.js";
import { mode } from "./channels.js";

export const title = "Channel";

const CONSUMER_COLUMNS = [
  { label: "Consumer tag", cell: (c) => c.consumer_tag },
  {
    label: "Queue",
    cell: (c) => link(c.queue?.name ?? "", "queues", c.queue?.vhost ?? "", c.queue?.name ?? ""),
  },
  { label: "Ack required", cell: (c) => (c.ack_required ? "yes" : "no") },
  { label: "Exclusive", cell: (c) => (c.exclusive ? "yes" : "no") },
  { label: "Prefetch", cell: (c) => count(c.prefetch_count), numeric: true },
];

export function render(root, [name]) {
  const path = apiPath("channels", name);
  const charts = h("div", { class: "charts" });
  const about = h("div");
  const consumers = h("div");
  root.append(h("h1", {}, `Channel ${name}`), charts, about, section("Consumers", consumers));
  return async () => {
    const channel = await get(`${path}?${RANGE_QUERY}`);
    charts.replaceChildren(ratesChart("Message rates", MESSAGE_RATES, channel.message_stats));
    about.replaceChildren(details(channel));
    consumers.replaceChildren(table("Consumers", CONSUMER_COLUMNS, channel.consumer_details ?? []));
  };
}

function details(channel) {
  const connection = channel.connection_details?.name ?? "";
  return h(
    "div",
    { class: "columns" },
    facts([
      ["Connection", link(connection, "connections", connection)],
      ["Virtual host", channel.vhost],
      ["User", channel.user],
      ["Mode", mode(channel)],
      ["State", channel.state],
    ]),
    facts([
      ["Prefetch count", count(channel.prefetch_count)],
      ["Global prefetch count", count(channel.global_prefetch_count)],
      ["Messages unacknowledged", count(channel.messages_unacknowledged)],
      ["Messages unconfirmed", count(channel.messages_unconfirmed)],
      ["Messages uncommitted", count(channel.messages_uncommitted)],
      ["Acks uncommitted", count(channel.acks_uncommitted)],
    ]),
  );
}
