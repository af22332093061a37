// The dashboard's one way to talk to the hub: its kube-style API, same origin, with the user's bearer
// token in the Authorization header (never in a URL), or with none behind `federator dashboard`'s proxy,
// which adds the kubeconfig's credentials itself.

export const GROUP = "federator.dev";
export const GROUP_PATH = "/apis/federator.dev/v1alpha1";

export class ApiError extends Error {
  constructor(status, message, reason = "", body = null) {
    super(message);
    this.status = status;
    this.reason = reason;
    this.body = body;
  }

  static async from(response) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    const message = (body && body.message) || `${response.status} ${response.statusText}`;
    return new ApiError(response.status, message, (body && body.reason) || "", body);
  }
}

export function jobsPath(namespace, name) {
  const base = namespace
    ? `${GROUP_PATH}/namespaces/${encodeURIComponent(namespace)}/trainingjobs`
    : `${GROUP_PATH}/trainingjobs`;
  return name ? `${base}/${encodeURIComponent(name)}` : base;
}

export function clustersPath(name) {
  return name ? `${GROUP_PATH}/memberclusters/${encodeURIComponent(name)}` : `${GROUP_PATH}/memberclusters`;
}

export const DRILLREPORTS_PATH = `${GROUP_PATH}/drillreports`;

function withQuery(path, query) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) {
    if (v !== undefined && v !== null && v !== "") params.set(k, String(v));
  }
  const text = params.toString();
  return text ? `${path}${path.includes("?") ? "&" : "?"}${text}` : path;
}

export class Api {
  constructor(token = null) {
    this.token = token;
    this.access = new Map();
    this.onUnauthorized = null;
  }

  headers(extra = {}) {
    const headers = { Accept: "application/json", ...extra };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    return headers;
  }

  async fetch(path, { method = "GET", body, contentType = "application/json", signal, query } = {}) {
    const init = { method, headers: this.headers(body !== undefined ? { "Content-Type": contentType } : {}),
      signal, credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer" };
    if (body !== undefined) init.body = JSON.stringify(body);
    let response;
    try {
      response = await fetch(withQuery(path, query), init);
    } catch (e) {
      if (e && e.name === "AbortError") throw e;
      throw new ApiError(0, "cannot reach the hub (network error)", "NetworkError");
    }
    if (response.status === 401 && this.onUnauthorized) this.onUnauthorized();
    return response;
  }

  async request(method, path, options = {}) {
    const response = await this.fetch(path, { ...options, method });
    if (!response.ok) throw await ApiError.from(response);
    return response.status === 204 ? null : response.json();
  }

  get(path, query, signal) {
    return this.request("GET", path, { query, signal });
  }

  /** Who am I (kubectl auth whoami): {username, groups}. */
  async whoami() {
    const review = await this.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {
      body: { apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" },
    });
    const info = (review.status || {}).userInfo || {};
    return { username: info.username || "", groups: info.groups || [] };
  }

  /** May I? (kubectl auth can-i): a SelfSubjectAccessReview, cached for the page's life. */
  async can(verb, resource, { group = GROUP, namespace = "", subresource = "", name = "" } = {}) {
    const key = [verb, group, resource, subresource, namespace, name].join("|");
    if (!this.access.has(key)) {
      const attributes = { verb, group, resource };
      if (namespace) attributes.namespace = namespace;
      if (subresource) attributes.subresource = subresource;
      if (name) attributes.name = name;
      const answer = this.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
        body: { apiVersion: "authorization.k8s.io/v1", kind: "SelfSubjectAccessReview",
          spec: { resourceAttributes: attributes } },
      }).then((review) => Boolean((review.status || {}).allowed), () => false);
      this.access.set(key, answer);
    }
    return this.access.get(key);
  }
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  if (signal) signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
});

/**
 * List, then watch from the list's resourceVersion, as client-go's reflector does: a watch that ends
 * resumes from the last resourceVersion seen (bookmarks included), a 410 Expired re-lists, any other
 * failure retries with capped, jittered backoff. handlers: reset(items) after every list, event(type, obj)
 * for ADDED/MODIFIED/DELETED, state(name, error) with name one of "loading", "live", "retrying", "denied".
 */
export class ListWatch {
  constructor(api, path, handlers, { query = {} } = {}) {
    this.api = api;
    this.path = path;
    this.query = query;
    this.handlers = handlers;
    this.controller = new AbortController();
    this.resourceVersion = null;
    this.running = false;
  }

  start() {
    if (!this.running) {
      this.running = true;
      this.loop();
    }
    return this;
  }

  stop() {
    this.running = false;
    this.controller.abort();
  }

  async loop() {
    const signal = this.controller.signal;
    let backoff = 500;
    this.handlers.state && this.handlers.state("loading");
    while (this.running) {
      try {
        if (this.resourceVersion === null) {
          const list = await this.api.get(this.path, this.query, signal);
          if (!this.running) return;
          this.resourceVersion = (list.metadata || {}).resourceVersion || "0";
          this.handlers.reset(list.items || []);
        }
        this.handlers.state && this.handlers.state("live");
        await this.watch(signal);
        backoff = 500;
      } catch (error) {
        if (!this.running || (error && error.name === "AbortError")) return;
        if (error.status === 410) {
          this.resourceVersion = null;
          continue;
        }
        if (error.status === 401 || error.status === 403) {
          this.handlers.state && this.handlers.state("denied", error);
          this.running = false;
          return;
        }
        this.handlers.state && this.handlers.state("retrying", error);
        await sleep(backoff * (0.75 + Math.random() / 2), signal);
        backoff = Math.min(backoff * 2, 30000);
      }
    }
  }

  async watch(signal) {
    const response = await this.api.fetch(this.path, {
      signal,
      query: { ...this.query, watch: "1", allowWatchBookmarks: "true", resourceVersion: this.resourceVersion,
        timeoutSeconds: 240 + Math.floor(Math.random() * 60) },
    });
    if (!response.ok) throw await ApiError.from(response);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffered += decoder.decode(value, { stream: true });
        let newline;
        while ((newline = buffered.indexOf("\n")) >= 0) {
          const line = buffered.slice(0, newline).trim();
          buffered = buffered.slice(newline + 1);
          if (line) this.dispatch(JSON.parse(line));
        }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  dispatch(event) {
    const obj = event.object || {};
    if (event.type === "ERROR") {
      throw new ApiError(obj.code || 500, obj.message || "watch failed", obj.reason || "", obj);
    }
    const rv = (obj.metadata || {}).resourceVersion;
    if (rv) this.resourceVersion = rv;
    if (event.type === "BOOKMARK") return;
    this.handlers.event(event.type, obj);
  }
}
