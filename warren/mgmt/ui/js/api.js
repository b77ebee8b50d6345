// The management API as the UI sees it: same-origin /api/ calls with HTTP basic
// credentials, and RabbitMQ's answers turned into values or errors.
//
// - The credentials come from the login form and live in sessionStorage (this tab only).
// - 401 is `Unauthorized`: the app shows the login form again; but a 401 whose error is
//   "not_authorised" (RabbitMQ's spelling when it knows the user and its tags or vhost
//   permissions refuse this path) is `Refused`: the user stays logged in.
// - 404 and 405 are `NotAvailable`: the object is gone, or this node does not serve the
//   path (or that method on it) yet; pages show "not available on this node" rather than
//   break.
// - Any other failure is an Error with the status and RabbitMQ's `reason` text.

const CREDENTIALS_KEY = "warren.authorization";

export class Unauthorized extends Error {}

export class Refused extends Error {}

export class NotAvailable extends Error {
  constructor(method, path, response) {
    super(`${method} /api/${path} answered ${response.status} ${response.statusText}`);
  }
}

export function logIn(username, password) {
  const bytes = new TextEncoder().encode(`${username}:${password}`);
  const encoded = btoa(String.fromCharCode(...bytes));
  sessionStorage.setItem(CREDENTIALS_KEY, `Basic ${encoded}`);
}

export function logOut() {
  sessionStorage.removeItem(CREDENTIALS_KEY);
}

export function username() {
  const credentials = sessionStorage.getItem(CREDENTIALS_KEY);
  if (credentials === null) return null;
  const decoded = new TextDecoder().decode(
    Uint8Array.from(atob(credentials.slice("Basic ".length)), (c) => c.charCodeAt(0)),
  );
  return decoded.slice(0, decoded.indexOf(":"));
}

// A path below /api/ from its segments, each escaped: the vhost "/" becomes %2F.
export function apiPath(...segments) {
  return segments.map((segment) => encodeURIComponent(segment)).join("/");
}

export async function call(method, path, body, extraHeaders = {}) {
  const headers = { ...extraHeaders };
  const credentials = sessionStorage.getItem(CREDENTIALS_KEY);
  if (credentials !== null) headers.Authorization = credentials;
  // "omit": a 401 comes back to this code; with credentials included, the fetch standard
  // has the browser prompt for a password itself (RabbitMQ's realm header triggers it).
  const init = { method, headers, credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(`/api/${path}`, init);
  const json = response.headers.get("Content-Type")?.startsWith("application/json");
  const value = json ? await response.json() : null;
  if (response.status === 401 && value?.error === "not_authorised") throw new Refused(value.reason);
  if (response.status === 401) throw new Unauthorized(value?.reason ?? "Login required");
  if (response.status === 404 || response.status === 405) {
    throw new NotAvailable(method, path, response);
  }
  if (!response.ok) throw new Error(`${response.status}: ${value?.reason ?? response.statusText}`);
  return value;
}

export const get = (path) => call("GET", path);

// `get`, or null when the path is not available: for a part of a page that may be missing.
export async function getOptional(path) {
  try {
    return await get(path);
  } catch (error) {
    if (error instanceof NotAvailable) return null;
    throw error;
  }
}
