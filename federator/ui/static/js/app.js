// The dashboard's entry point: who is signed in, what they may do, and which page the URL's hash names.
//
// Auth as the API: the page asks for a bearer token (kept in this tab's sessionStorage, sent only in the
// Authorization header of requests to this origin, never put in a URL), or, behind `federator dashboard`'s
// local proxy, needs none (the proxy adds the kubeconfig's credentials). What the user may do is asked of
// the hub (SelfSubjectAccessReview) and the pages hide what it would refuse; the API enforces it anyway.

import { Api, ApiError, clustersPath, jobsPath } from "./api.js";
import { fill, h, failure, toast } from "./dom.js";
import { refreshTimes } from "./format.js";
import { LiveCollection } from "./store.js";
import * as federationPage from "./pages/federation.js";
import * as jobsPage from "./pages/jobs.js";
import * as jobPage from "./pages/job.js";
import * as drillsPage from "./pages/drills.js";

const TOKEN_KEY = "federator.dashboard.token";
const main = document.getElementById("main");

const ROUTES = [
  { pattern: /^\/?$/, page: federationPage, nav: "federation" },
  { pattern: /^\/federation$/, page: federationPage, nav: "federation" },
  { pattern: /^\/jobs$/, page: jobsPage, nav: "jobs" },
  { pattern: /^\/jobs\/([^/]+)\/([^/]+)$/, page: jobPage, nav: "jobs" },
  { pattern: /^\/drills$/, page: drillsPage, nav: "drills" },
  { pattern: /^\/drills\/([^/]+)$/, page: drillsPage, nav: "drills" },
];

function rolesOf(groups) {
  const roles = [];
  if (groups.includes("federator:admin") || groups.includes("system:masters")) roles.push("admin");
  if (groups.includes("federator:researcher")) roles.push("researcher");
  if (groups.includes("federator:viewer")) roles.push("viewer");
  return roles;
}

/** Where this user's jobs can be listed: null for every namespace at once, else the namespaces (one
 *  list-watch each) that the hub says it may list. */
async function jobScope(api, identity) {
  if (await api.can("list", "trainingjobs")) return null;
  const named = identity.groups.filter((g) => g.startsWith("ns:") && g.length > 3).map((g) => g.slice(3));
  const allowed = [];
  for (const namespace of [...new Set(named)].sort()) {
    if (await api.can("list", "trainingjobs", { namespace })) allowed.push(namespace);
  }
  return allowed;
}

class Dashboard {
  constructor(api, identity, { proxied }) {
    this.api = api;
    this.identity = identity;
    this.proxied = proxied;
    this.roles = rolesOf(identity.groups);
    this.scope = undefined;
    this.collections = new Map();
    this.unmount = null;
    // for bench/ui.py and the tests: what the page has applied
    window.federatorDashboard = this;
  }

  async start() {
    this.scope = await jobScope(this.api, this.identity);
    this.renderWho();
    window.addEventListener("hashchange", () => this.route());
    setInterval(() => refreshTimes(main), 5000);
    this.route();
  }

  /** The live jobs this user may see (shared by every page). null when it may list none. */
  jobs() {
    if (this.scope !== null && this.scope.length === 0) return null;
    if (!this.collections.has("jobs")) {
      const sources = this.scope === null ? [{ path: jobsPath(null) }]
        : this.scope.map((namespace) => ({ path: jobsPath(namespace), namespace }));
      this.collections.set("jobs", new LiveCollection(this.api, sources).start());
    }
    return this.collections.get("jobs");
  }

  clusters() {
    if (!this.collections.has("clusters")) {
      this.collections.set("clusters", new LiveCollection(this.api, [{ path: clustersPath() }]).start());
    }
    return this.collections.get("clusters");
  }

  renderWho() {
    const who = document.getElementById("who");
    const roles = this.roles.length ? this.roles.join(", ") : "no federator role";
    const where = this.scope === null ? "all namespaces"
      : this.scope.length ? `namespace${this.scope.length > 1 ? "s" : ""} ${this.scope.join(", ")}` : "no namespace";
    fill(who,
      h("span.user", { title: `groups: ${this.identity.groups.join(", ")}` },
        h("strong", this.identity.username || "anonymous"), ` · ${roles} · ${where}`),
      this.proxied ? h("span.via", { title: "requests go through federator dashboard's local proxy" }, "via proxy")
        : h("button.link", { type: "button", on: { click: () => signOut() } }, "Sign out"));
  }

  route() {
    const hash = window.location.hash || "#/";
    if (!hash.startsWith("#/")) return;
    const path = hash.slice(1).split("?")[0];
    let match = null;
    let route = null;
    for (const candidate of ROUTES) {
      match = path.match(candidate.pattern);
      if (match) {
        route = candidate;
        break;
      }
    }
    for (const link of document.querySelectorAll("nav a[data-page]")) {
      if (route && link.dataset.page === route.nav) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    if (this.unmount) this.unmount();
    this.unmount = null;
    fill(main);
    if (!route) {
      document.title = "Not found · federator";
      fill(main, h("h1", "Not found"), h("p", "No page here. ", h("a", { href: "#/federation" }, "Federation")));
      return;
    }
    const params = match.slice(1).map((p) => decodeURIComponent(p));
    this.unmount = route.page.mount(main, this, params) || null;
    const heading = main.querySelector("h1");
    document.title = `${heading ? heading.textContent : "federator"} · federator`;
    if (this.navigated) (heading || main).focus({ preventScroll: false });
    this.navigated = true;
  }
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  window.location.hash = "#/";
  window.location.reload();
}

function showLogin(message) {
  document.title = "Sign in · federator";
  fill(document.getElementById("who"));
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true,
    spellcheck: false, "aria-describedby": "token-hint" });
  const error = h("p.error", { role: "alert" }, message || "");
  const form = h("form.login", { "aria-labelledby": "login-title" },
    h("h1", { id: "login-title", tabindex: "-1" }, "Sign in to the hub"),
    h("label", { for: "token" }, "Bearer token"),
    input,
    h("p.hint", { id: "token-hint" },
      "The token of your kubeconfig's user. It stays in this browser tab (sessionStorage) and goes only to this ",
      "hub, in the Authorization header. Or run ", h("code", "federator dashboard"),
      ", which signs in with your kubeconfig and prints the address to open."),
    h("button.primary", { type: "submit" }, "Sign in"),
    error);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    error.textContent = "";
    const api = new Api(token);
    try {
      const identity = await api.whoami();
      sessionStorage.setItem(TOKEN_KEY, token);
      input.value = "";
      await begin(api, identity, { proxied: false });
    } catch (e) {
      error.textContent = e.status === 401 ? "The hub does not know this token." : `Cannot sign in: ${e.message}`;
      input.focus();
    }
  });
  fill(main, form);
  input.focus();
}

async function begin(api, identity, options) {
  api.onUnauthorized = () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("The hub no longer accepts this token: sign in again.");
  };
  fill(main, h("p.state.loading", { role: "status", "aria-busy": "true" }, "Loading…"));
  await new Dashboard(api, identity, options).start();
}

async function boot() {
  document.getElementById("skip").addEventListener("click", (event) => {
    event.preventDefault();
    main.focus();
  });
  const token = sessionStorage.getItem(TOKEN_KEY);
  const api = new Api(token);
  api.can("list", "trainingjobs");  // asked now, beside whoami: the first page needs the answer (cached)
  try {
    const identity = await api.whoami();
    await begin(api, identity, { proxied: !token });
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      if (token) sessionStorage.removeItem(TOKEN_KEY);
      showLogin(token ? "The hub no longer accepts the saved token: sign in again." : "");
      return;
    }
    fill(main, failure("The hub does not answer", e, () => window.location.reload()));
    toast(e.message, "error");
  }
}

boot();
