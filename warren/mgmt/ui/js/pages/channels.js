// Channels: GET /api/channels, one row per open channel of every connection; a name opens
// its page.

import { get } from "../api.js";
import { count, h, link, rate, table } from "../dom.js";

export const title = "Channels";

export const COLUMNS = [
  { label: "Channel", cell: (c) => link(c.name, "channels", c.name) },
  { label: "Virtual host", cell: (c) => c.vhost },
  { label: "User", cell: (c) => c.user },
  { label: "Mode", cell: (c) => mode(c) },
  { label: "State", cell: (c) => c.state },
  { label: "Prefetch", cell: (c) => count(c.prefetch_count), numeric: true },
  { label: "Unacked", cell: (c) => count(c.messages_unacknowledged), numeric: true },
  { label: "Unconfirmed", cell: (c) => count(c.messages_unconfirmed), numeric: true },
  { label: "Consumers", cell: (c) => count(c.consumer_count), numeric: true },
  { label: "Publish", cell: (c) => rate(c.message_stats, "publish"), numeric: true },
  { label: "Deliver / get", cell: (c) => rate(c.message_stats, "deliver_get"), numeric: true },
  { label: "Ack", cell: (c) => rate(c.message_stats, "ack"), numeric: true },
];

// RabbitMQ's mode letters: C for publisher confirms, T for transactional.
export function mode(channel) {
  const letters = [];
  if (channel.confirm) letters.push(h("abbr", { title: "confirm", class: "tag" }, "C"));
  if (channel.transactional) letters.push(h("abbr", { title: "transactional", class: "tag" }, "T"));
  return letters;
}

export function render(root) {
  const list = h("div");
  root.append(h("h1", {}, title), list);
  return async () => {
    list.replaceChildren(table("Channels", COLUMNS, await get("channels")));
  };
}
