// The "Publish message" form of the exchange and queue pages:
// POST /api/exchanges/{vhost}/{exchange}/publish, RabbitMQ's body and its {"routed": …}.
// A queue publishes through the default exchange (RabbitMQ's "amq.default" in the API)
// with its own name as the routing key.

import { apiPath, call } from "./api.js";
import { actionForm, field, h, parseObject } from "./dom.js";

export function publishForm(vhost, exchange, routingKey = null) {
  const fields = [
    routingKey === null ? field("Routing key", h("input", { name: "routing_key" })) : null,
    field(
      "Delivery mode",
      h(
        "select",
        { name: "delivery_mode" },
        h("option", { value: "1" }, "1 - non-persistent"),
        h("option", { value: "2" }, "2 - persistent"),
      ),
    ),
    field(
      "Headers (JSON object)",
      h("textarea", { name: "headers", rows: 2, placeholder: '{"x-key": "value"}' }),
    ),
    field(
      "Properties (JSON object)",
      h("textarea", { name: "properties", rows: 2, placeholder: '{"content_type": "text/plain"}' }),
    ),
    field("Payload", h("textarea", { name: "payload", rows: 3 })),
  ];
  return actionForm("Publish message", fields, "Publish message", async (data) => {
    const properties = {
      ...parseObject(data.get("properties"), "Properties"),
      delivery_mode: Number(data.get("delivery_mode")),
      headers: parseObject(data.get("headers"), "Headers"),
    };
    const reply = await call(
      "POST",
      apiPath("exchanges", vhost, exchange || "amq.default", "publish"),
      {
        properties,
        routing_key: routingKey ?? data.get("routing_key"),
        payload: data.get("payload"),
        payload_encoding: "string",
      },
    );
    return reply?.routed
      ? "Message published."
      : "Message published, but it was not routed to any queue.";
  });
}
