// Virtual hosts: GET /api/vhosts; add one (PUT /api/vhosts/{name}) or delete one
// (DELETE /api/vhosts/{name}).

import { apiPath, call, get } from "../api.js";
import { actionForm, count, field, h, section, table } from "../dom.js";

export const title = "Virtual hosts";

const COLUMNS = [
  { label: "Name", cell: (v) => v.name },
  { label: "Description", cell: (v) => v.description ?? "" },
  { label: "Tags", cell: (v) => (v.tags ?? []).join(", ") },
  { label: "Default queue type", cell: (v) => v.default_queue_type ?? "" },
  { label: "Ready", cell: (v) => count(v.messages_ready), numeric: true },
  { label: "Unacked", cell: (v) => count(v.messages_unacknowledged), numeric: true },
  { label: "Total", cell: (v) => count(v.messages), numeric: true },
];

export function render(root) {
  const list = h("div");
  const update = async () => {
    list.replaceChildren(table("Virtual hosts", COLUMNS, await get("vhosts")));
  };
  root.append(
    h("h1", {}, title),
    list,
    section("Add a virtual host", addForm(update)),
    section("Delete a virtual host", deleteVhostForm(update)),
  );
  return update;
}

function addForm(done) {
  const fields = [
    field("Name", h("input", { name: "name", required: true })),
    field("Description", h("input", { name: "description" })),
    field("Tags (comma separated)", h("input", { name: "tags" })),
    field(
      "Default queue type",
      h(
        "select",
        { name: "default_queue_type" },
        h("option", {}, "classic"),
        h("option", {}, "quorum"),
      ),
    ),
  ];
  return actionForm(
    "Add virtual host",
    fields,
    "Add virtual host",
    async (data) => {
      await call("PUT", apiPath("vhosts", data.get("name")), {
        description: data.get("description"),
        tags: data.get("tags"),
        default_queue_type: data.get("default_queue_type"),
      });
      return `Virtual host ${data.get("name")} added.`;
    },
    done,
  );
}

function deleteVhostForm(done) {
  return actionForm(
    "Delete virtual host",
    [field("Name", h("input", { name: "name", required: true }))],
    "Delete virtual host",
    async (data) => {
      await call("DELETE", apiPath("vhosts", data.get("name")));
      return `Virtual host ${data.get("name")} deleted.`;
    },
    done,
  );
}
