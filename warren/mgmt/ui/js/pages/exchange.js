// One exchange: its properties, the bindings it routes to, publishing, deletion.
// GET /api/exchanges/{vhost}/{name}[/bindings/source]; the default exchange is
// "amq.default" in these paths.

import { apiPath, get, getOptional } from "../api.js";
import {
  deleteForm,
  facts,
  features,
  h,
  json,
  link,
  notAvailable,
  route,
  section,
  table,
} from "../dom.js";
import { publishForm } from "../publish.js";

export const title = "Exchange";

const BINDING_COLUMNS = [
  { label: "To", cell: (b) => destination(b) },
  { label: "Routing key", cell: (b) => b.routing_key },
  { label: "Arguments", cell: (b) => json(b.arguments ?? {}) },
];

function destination(binding) {
  const kind = binding.destination_type === "queue" ? "queues" : "exchanges";
  return [
    `${binding.destination_type} `,
    link(binding.destination, kind, binding.vhost, binding.destination),
  ];
}

export function render(root, [vhost, name]) {
  const path = apiPath("exchanges", vhost, name || "amq.default");
  const about = h("div");
  const bindings = h("div");
  root.append(
    h(
      "h1",
      {},
      `Exchange ${name || "(AMQP default)"}`,
      h("small", {}, ` in virtual host ${vhost}`),
    ),
    about,
    section("Bindings", bindings),
    section("Publish message", publishForm(vhost, name)),
    name ? section("Delete", deleteForm("exchange", path, route("exchanges"))) : null,
  );
  return async () => {
    const exchange = await get(path);
    about.replaceChildren(
      facts([
        ["Type", exchange.type],
        ["Features", features(exchange)],
        [
          "Policy",
          exchange.policy ? link(exchange.policy, "policies", vhost, exchange.policy) : "none",
        ],
        ["Arguments", json(exchange.arguments ?? {})],
      ]),
    );
    const source = await getOptional(`${path}/bindings/source`);
    bindings.replaceChildren(
      source === null
        ? notAvailable("Bindings are")
        : table("Bindings from this exchange", BINDING_COLUMNS, source),
    );
  };
}
