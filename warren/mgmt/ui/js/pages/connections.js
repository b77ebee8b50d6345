// Connections: GET /api/connections, one row per AMQP connection; a name opens its page.

import { get } from "../api.js";
import { byteRate, count, h, link, table } from "../dom.js";

export const title = "Connections";

const COLUMNS = [
  { label: "Virtual host", cell: (c) => c.vhost },
  {
    label: "Name",
    cell: (c) => [
      link(c.name, "connections", c.name),
      c.user_provided_name ? h("small", { class: "provided" }, ` ${c.user_provided_name}`) : null,
    ],
  },
  { label: "User", cell: (c) => c.user },
  { label: "State", cell: (c) => c.state },
  { label: "Protocol", cell: (c) => c.protocol },
  { label: "Client", cell: (c) => client(c.client_properties) },
  { label: "Channels", cell: (c) => count(c.channels), numeric: true },
  { label: "From client", cell: (c) => byteRate(c, "recv_oct"), numeric: true },
  { label: "To client", cell: (c) => byteRate(c, "send_oct"), numeric: true },
];

export function client(properties) {
  if (!properties) return "";
  return [properties.product, properties.version].filter(Boolean).join(" ");
}

export function render(root) {
  const list = h("div");
  root.append(h("h1", {}, title), list);
  return async () => {
    list.replaceChildren(table("Connections", COLUMNS, await get("connections")));
  };
}
