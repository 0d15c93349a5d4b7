// Shared by the console's modules: DOM building (text only), HTTP with the API key, formatting.
// Every call goes to this origin with the key as an Authorization header, never a cookie.

const KEY_STORE = "orchestrator.console.key";

export const $ = (id) => document.getElementById(id);

/** An element with attributes ("class", "text" or any attribute) and children; never parses HTML. */
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** The key (kept in this tab's sessionStorage) and what to do when the server refuses it. */
export const auth = {
  key: sessionStorage.getItem(KEY_STORE) || "",
  onLocked: (_error) => {},
  set(key) {
    this.key = key;
    if (key) sessionStorage.setItem(KEY_STORE, key);
    else sessionStorage.removeItem(KEY_STORE);
  },
};

export async function api(path, options = {}) {
  const headers = new Headers(options.headers || {});
  const used = auth.key;
  if (used) headers.set("Authorization", "Bearer " + used);
  const resp = await fetch(path, { ...options, headers, credentials: "omit", cache: "no-store" });
  if (resp.status === 401) {
    auth.onLocked(used ? "That key was refused." : "");
    throw new HttpError(401, "API key required");
  }
  if (!resp.ok) {
    let message = resp.status + " " + resp.statusText;
    try {
      const body = await resp.json();
      if (body && body.error && body.error.message) message = body.error.message;
    } catch (_) { /* not JSON */ }
    throw new HttpError(resp.status, message);
  }
  return resp;
}

export const getJSON = async (path) => (await api(path)).json();

export const postJSON = (path, body, signal) =>
  api(path, { method: "POST", body: JSON.stringify(body), signal, headers: { "Content-Type": "application/json" } });

export function duration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, Math.round(s));
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}

export const num = (x, digits = 1) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));

export const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(0) + " %");
