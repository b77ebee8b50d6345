// One policy or operator policy: GET /api/{kind}/{vhost}/{name}, its update form and
// deletion. Queue pages link here from their effective policy.

import { apiPath, get } from "../api.js";
import { deleteForm, facts, h, json, route, section } from "../dom.js";
import { policyForm } from "./policies.js";

export const title = "Policy";

export function render(root, [vhost, name], kind) {
  const path = apiPath(kind, vhost, name);
  const noun = kind === "policies" ? "Policy" : "Operator policy";
  const about = h("div");
  const edit = h("div");
  root.append(
    h("h1", {}, `${noun} ${name}`, h("small", {}, ` in virtual host ${vhost}`)),
    about,
    section("Update this policy", edit),
    section("Delete", deleteForm(noun.toLowerCase(), path, route("policies"))),
  );
  const update = async () => {
    const policy = await get(path);
    about.replaceChildren(
      facts([
        ["Pattern", policy.pattern],
        ["Apply to", policy["apply-to"]],
        ["Priority", policy.priority],
        ["Definition", json(policy.definition)],
      ]),
    );
    // The form is filled in once: later updates must not overwrite what is being typed.
    if (edit.childElementCount === 0) edit.append(policyForm({ ...policy, kind }, update));
  };
  return update;
}
