// Policies and operator policies: GET /api/policies and /api/operator-policies, and the
// form that adds or updates one (PUT /api/{kind}/{vhost}/{name}), also used by the page
// of one policy.

import { apiPath, call, get, getOptional } from "../api.js";
import { actionForm, field, h, json, link, notAvailable, section, table } from "../dom.js";

export const title = "Policies";

const KINDS = [
  ["policies", "Policy"],
  ["operator-policies", "Operator policy"],
];
const APPLY_TO = ["all", "exchanges", "queues"];

function columns(kind) {
  return [
    { label: "Virtual host", cell: (p) => p.vhost },
    { label: "Name", cell: (p) => link(p.name, kind, p.vhost, p.name) },
    { label: "Pattern", cell: (p) => p.pattern },
    { label: "Apply to", cell: (p) => p["apply-to"] },
    { label: "Definition", cell: (p) => json(p.definition) },
    { label: "Priority", cell: (p) => p.priority, numeric: true },
  ];
}

export function render(root) {
  const user = h("div");
  const operator = h("div");
  const update = async () => {
    user.replaceChildren(table("Policies", columns("policies"), await get("policies")));
    const found = await getOptional("operator-policies");
    operator.replaceChildren(
      found === null
        ? notAvailable("Operator policies are")
        : table("Operator policies", columns("operator-policies"), found),
    );
  };
  root.append(
    h("h1", {}, title),
    section("User policies", user),
    section("Operator policies", operator),
    section("Add / update a policy", policyForm(null, update)),
  );
  return update;
}

// The add/update form; `policy` ({kind, vhost, name, pattern, …}) fills it in and fixes
// which policy it updates, null leaves every field open.
export function policyForm(policy, done) {
  const fixed = policy !== null;
  const fields = [
    field(
      "Kind",
      h(
        "select",
        { name: "kind", disabled: fixed },
        KINDS.map(([value, text]) =>
          h("option", { value, selected: policy?.kind === value }, text),
        ),
      ),
    ),
    field(
      "Virtual host",
      h("input", { name: "vhost", value: policy?.vhost ?? "/", required: true, readonly: fixed }),
    ),
    field(
      "Name",
      h("input", { name: "name", value: policy?.name ?? "", required: true, readonly: fixed }),
    ),
    field("Pattern", h("input", { name: "pattern", value: policy?.pattern ?? "", required: true })),
    field(
      "Apply to",
      h(
        "select",
        { name: "apply-to" },
        APPLY_TO.map((a) => h("option", { selected: policy?.["apply-to"] === a }, a)),
      ),
    ),
    field(
      "Priority",
      h("input", { name: "priority", type: "number", value: policy?.priority ?? 0 }),
    ),
    field(
      "Definition (JSON object)",
      h(
        "textarea",
        { name: "definition", rows: 3, placeholder: '{"max-length": 1000}', required: true },
        policy ? JSON.stringify(policy.definition) : "",
      ),
    ),
  ];
  const label = fixed ? "Update policy" : "Add / update policy";
  return actionForm(
    label,
    fields,
    label,
    async (data) => {
      const kind = policy?.kind ?? data.get("kind");
      let definition;
      try {
        definition = JSON.parse(data.get("definition"));
      } catch {
        throw new Error("Definition is not valid JSON.");
      }
      await call("PUT", apiPath(kind, data.get("vhost"), data.get("name")), {
        pattern: data.get("pattern"),
        definition,
        priority: Number(data.get("priority")),
        "apply-to": data.get("apply-to"),
      });
      return `Policy ${data.get("name")} saved.`;
    },
    done,
  );
}
