// Users and their permissions: GET /api/users and /api/permissions; add a user
// (PUT /api/users/{name}), set a permission (PUT /api/permissions/{vhost}/{user}),
// delete a user (DELETE /api/users/{name}).

import { apiPath, call, get, getOptional } from "../api.js";
import { actionForm, field, h, notAvailable, section, table } from "../dom.js";

export const title = "Users";

const USER_COLUMNS = [
  { label: "Name", cell: (u) => u.name },
  { label: "Tags", cell: (u) => (Array.isArray(u.tags) ? u.tags.join(", ") : u.tags) },
  { label: "Has password", cell: (u) => (u.password_hash ? "yes" : "no") },
];

const PERMISSION_COLUMNS = [
  { label: "User", cell: (p) => p.user },
  { label: "Virtual host", cell: (p) => p.vhost },
  { label: "Configure", cell: (p) => h("code", {}, p.configure) },
  { label: "Write", cell: (p) => h("code", {}, p.write) },
  { label: "Read", cell: (p) => h("code", {}, p.read) },
];

export function render(root) {
  const users = h("div");
  const permissions = h("div");
  const update = async () => {
    users.replaceChildren(table("Users", USER_COLUMNS, await get("users")));
    const found = await getOptional("permissions");
    permissions.replaceChildren(
      found === null
        ? notAvailable("Permissions are")
        : table("Permissions", PERMISSION_COLUMNS, found),
    );
  };
  root.append(
    h("h1", {}, title),
    users,
    section("Permissions", permissions),
    section("Add a user", addForm(update)),
    section("Set permission", permissionForm(update)),
    section("Delete a user", deleteUserForm(update)),
  );
  return update;
}

function addForm(done) {
  const fields = [
    field("Username", h("input", { name: "name", required: true, autocomplete: "off" })),
    field(
      "Password",
      h("input", { name: "password", type: "password", autocomplete: "new-password" }),
    ),
    field("Tags (comma separated)", h("input", { name: "tags", placeholder: "administrator" })),
  ];
  return actionForm(
    "Add user",
    fields,
    "Add user",
    async (data) => {
      const tags = data
        .get("tags")
        .split(",")
        .map((t) => t.trim())
        .filter(Boolean);
      await call("PUT", apiPath("users", data.get("name")), {
        password: data.get("password"),
        tags,
      });
      return `User ${data.get("name")} saved.`;
    },
    done,
  );
}

function permissionForm(done) {
  const fields = [
    field("User", h("input", { name: "user", required: true })),
    field("Virtual host", h("input", { name: "vhost", value: "/", required: true })),
    field("Configure regexp", h("input", { name: "configure", value: ".*" })),
    field("Write regexp", h("input", { name: "write", value: ".*" })),
    field("Read regexp", h("input", { name: "read", value: ".*" })),
  ];
  return actionForm(
    "Set permission",
    fields,
    "Set permission",
    async (data) => {
      await call("PUT", apiPath("permissions", data.get("vhost"), data.get("user")), {
        configure: data.get("configure"),
        write: data.get("write"),
        read: data.get("read"),
      });
      return `Permission of ${data.get("user")} in ${data.get("vhost")} set.`;
    },
    done,
  );
}

function deleteUserForm(done) {
  return actionForm(
    "Delete user",
    [field("Username", h("input", { name: "name", required: true, autocomplete: "off" }))],
    "Delete user",
    async (data) => {
      await call("DELETE", apiPath("users", data.get("name")));
      return `User ${data.get("name")} deleted.`;
    },
    done,
  );
}
