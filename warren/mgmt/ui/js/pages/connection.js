// One connection: its data rates over the last minute, details, client, channels, and a
// button that closes it (DELETE /api/connections/{name}, the reason in X-Reason, as
// RabbitMQ's UI sends it; the client gets connection.close 320 CONNECTION_FORCED).

import { apiPath, call, get } from "../api.js";
import { RANGE_QUERY, ratesChart } from "../chart.js";
import {
  actionForm,
  bytesPerSecond,
  count,
  facts,
  field,
  h,
  route,
  section,
  table,
} from "../dom.js";
import { COLUMNS as CHANNEL_COLUMNS } from "./channels.js";
import { client } from "./connections.js";

export const title = "Connection";

const DATA = [
  ["From client", "#2f6fb0", "recv_oct"],
  ["To client", "#c77c1b", "send_oct"],
];
const CLOSE_REASON = "Closed via management plugin";

export function render(root, [name]) {
  const path = apiPath("connections", name);
  const charts = h("div", { class: "charts" });
  const about = h("div");
  const channels = h("div");
  root.append(
    h("h1", {}, `Connection ${name}`),
    charts,
    about,
    section("Channels", channels),
    section("Close this connection", closeForm(path)),
  );
  return async () => {
    const connection = await get(`${path}?${RANGE_QUERY}`);
    charts.replaceChildren(ratesChart("Data rates", DATA, connection, bytesPerSecond));
    about.replaceChildren(details(connection));
    const found = await get(`${path}/channels`);
    channels.replaceChildren(table("Channels of this connection", CHANNEL_COLUMNS, found));
  };
}

function details(connection) {
  return h(
    "div",
    { class: "columns" },
    facts([
      ["Virtual host", connection.vhost],
      ["User", connection.user],
      ["State", connection.state],
      ["Protocol", connection.protocol],
      ["Authentication", connection.auth_mechanism],
      ["Connected at", new Date(connection.connected_at).toLocaleString("en-GB")],
    ]),
    facts([
      ["Client", client(connection.client_properties)],
      ["Client name", connection.user_provided_name ?? ""],
      ["Heartbeat", `${connection.timeout} s`],
      ["Frame max", `${count(connection.frame_max)} bytes`],
      ["Channel limit", `${count(connection.channel_max)} channels`],
      ["Capabilities", capabilities(connection.client_properties?.capabilities ?? {})],
    ]),
  );
}

// The capabilities the client announced (those set to true), as RabbitMQ's UI lists them.
function capabilities(announced) {
  const names = Object.keys(announced).filter((name) => announced[name] === true);
  return names.map((name) => h("abbr", { class: "tag", title: name }, name.replaceAll("_", " ")));
}

function closeForm(path) {
  const reason = h("input", { name: "reason", value: CLOSE_REASON });
  const form = actionForm(
    "Close this connection",
    [field("Reason", reason)],
    "Force close",
    async (data) => {
      await call("DELETE", path, undefined, { "X-Reason": data.get("reason") || CLOSE_REASON });
      location.hash = route("connections");
      return "Connection closed.";
    },
  );
  form.querySelector("button").classList.add("danger");
  return form;
}
