// The shell: login, the hash router, and the refresh loop every page runs in.
//
// A page module exports `title` and `render(root, params, kind)`, which builds the page
// once (headings, forms) and returns `update`, an async function that reads the API and
// fills the live parts (tables, charts). The shell calls `update` at once and then every
// REFRESH_MS while the page is shown. Errors from `update` are handled here:
// Unauthorized shows the login form, NotAvailable replaces the page with "not available on
// this node", Refused with the reason the node gave (such as "Not administrator user"),
// anything else is shown above the page until the next update succeeds.

import { NotAvailable, Refused, Unauthorized, get, logIn, logOut, username } from "./api.js";
import { h, noticePage } from "./dom.js";
import * as channel from "./pages/channel.js";
import * as channels from "./pages/channels.js";
import * as connection from "./pages/connection.js";
import * as connections from "./pages/connections.js";
import * as exchange from "./pages/exchange.js";
import * as exchanges from "./pages/exchanges.js";
import * as overview from "./pages/overview.js";
import * as policies from "./pages/policies.js";
import * as policy from "./pages/policy.js";
import * as queue from "./pages/queue.js";
import * as queues from "./pages/queues.js";
import * as users from "./pages/users.js";
import * as vhosts from "./pages/vhosts.js";

const REFRESH_MS = 5000;

// First segment of the hash -> [list page, page of one object (its vhost and name, or its
// name alone for a connection or channel)].
const ROUTES = {
  overview: [overview],
  connections: [connections, connection],
  channels: [channels, channel],
  exchanges: [exchanges, exchange],
  queues: [queues, queue],
  policies: [policies, policy],
  "operator-policies": [policies, policy],
  users: [users],
  vhosts: [vhosts],
};

const loginForm = document.getElementById("login");
const content = document.getElementById("content");
let timer = null;
let shown = 0; // increases with every page shown; a late update of an older page is dropped

function showLogin(message) {
  clearInterval(timer);
  shown += 1;
  content.replaceChildren();
  document.getElementById("nav").hidden = true;
  document.getElementById("session").hidden = true;
  loginForm.hidden = false;
  loginForm.querySelector("output").textContent = message ?? "";
  loginForm.elements.username.focus();
}

function enter(node) {
  loginForm.hidden = true;
  document.getElementById("node").textContent = node.node ?? "";
  document.getElementById("user").textContent = `User ${username()}`;
  document.getElementById("nav").hidden = false;
  document.getElementById("session").hidden = false;
  show();
}

function parseHash() {
  const [kind, ...params] = location.hash
    .replace(/^#\/?/, "")
    .split("/")
    .map((segment) => decodeURIComponent(segment));
  return ROUTES[kind] ? [kind, params] : ["overview", []];
}

function show() {
  clearInterval(timer);
  const mine = (shown += 1);
  const [kind, params] = parseHash();
  const [listPage, objectPage] = ROUTES[kind];
  const page = params.length > 0 && objectPage ? objectPage : listPage;
  for (const a of document.querySelectorAll("#nav a")) {
    const current =
      a.getAttribute("href") === `#/${kind === "operator-policies" ? "policies" : kind}`;
    if (current) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `${page.title} - Warren`;
  const failure = h("p", { class: "error", role: "alert", hidden: true });
  const pageRoot = h("div");
  content.replaceChildren(failure, pageRoot);
  const update = page.render(pageRoot, params, kind);
  const tick = async () => {
    try {
      await update();
      failure.hidden = true;
    } catch (error) {
      if (mine !== shown) return;
      if (error instanceof Unauthorized) {
        logOut();
        showLogin(error.message);
      } else if (error instanceof NotAvailable) {
        clearInterval(timer);
        const why = `${error.message}: this node does not serve it (yet), or the object is gone.`;
        pageRoot.replaceChildren(...noticePage(page.title, "Not available on this node", why));
      } else if (error instanceof Refused) {
        clearInterval(timer);
        pageRoot.replaceChildren(...noticePage(page.title, "Not allowed", error.message));
      } else {
        failure.textContent = error.message;
        failure.hidden = false;
      }
    }
  };
  tick();
  timer = setInterval(tick, REFRESH_MS);
}

loginForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  logIn(loginForm.elements.username.value, loginForm.elements.password.value);
  try {
    enter(await get("overview"));
  } catch (error) {
    logOut();
    showLogin(error instanceof Unauthorized ? error.message : `Cannot log in: ${error.message}`);
  }
});

document.getElementById("logout").addEventListener("click", () => {
  logOut();
  showLogin();
});

window.addEventListener("hashchange", () => {
  if (username() !== null) show();
});

async function start() {
  if (username() === null) return showLogin();
  try {
    enter(await get("overview"));
  } catch (error) {
    logOut();
    showLogin(error.message);
  }
}

start();
