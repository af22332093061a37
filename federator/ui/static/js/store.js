// Live collections shared by the pages: one list-watch per collection, however many pages show it.
// Subscribers hear about changes at most once per animation frame, with the keys that changed, so a
// burst of watch events costs one render.

import { ListWatch } from "./api.js";
import { jobKey } from "./format.js";

export class LiveCollection {
  /** sources: [{path, query}] — several when a researcher's namespaces are watched one by one. */
  constructor(api, sources) {
    this.api = api;
    this.sources = sources;
    this.items = new Map();
    this.subscribers = new Set();
    this.watches = [];
    this.changed = new Set();
    this.resetPending = false;
    this.frame = 0;
    this.states = new Map();
    this.state = "loading";
    this.error = null;
    this.loaded = new Set();
    this.listedAt = 0;
    // what the page has applied, for the benchmark and the tests (bench/ui.py reads it)
    this.stats = { events: 0, renders: 0, lastResourceVersion: "", lastRenderMs: 0 };
  }

  start() {
    if (this.watches.length) return this;
    this.sources.forEach((source, index) => {
      const watch = new ListWatch(this.api, source.path, {
        reset: (items) => this.reset(index, items),
        event: (type, obj) => this.apply(type, obj),
        state: (name, error) => this.setState(index, name, error),
      }, { query: source.query });
      this.watches.push(watch.start());
    });
    return this;
  }

  stop() {
    for (const watch of this.watches) watch.stop();
    this.watches = [];
    cancelAnimationFrame(this.frame);
  }

  subscribe(fn) {
    this.subscribers.add(fn);
    return () => this.subscribers.delete(fn);
  }

  get ready() {
    return this.loaded.size === this.sources.length;
  }

  reset(index, items) {
    const prefix = this.sources[index].namespace;
    for (const key of [...this.items.keys()]) {
      if (!prefix || key.startsWith(`${prefix}/`)) this.items.delete(key);
    }
    for (const item of items) this.items.set(jobKey(item), item);
    this.loaded.add(index);
    if (this.ready && !this.listedAt) {
      this.listedAt = performance.now();  // every list answered (bench/ui.py reads it)
      performance.mark("federator:listed", { detail: { items: this.items.size } });
    }
    this.resetPending = true;
    this.schedule();
  }

  apply(type, obj) {
    const key = jobKey(obj);
    if (type === "DELETED") this.items.delete(key);
    else this.items.set(key, obj);
    this.stats.events += 1;
    this.stats.lastResourceVersion = (obj.metadata || {}).resourceVersion || "";
    // bench/ui.py sets window.benchArrivals to note when each event arrived
    if (window.benchArrivals) {
      window.benchArrivals.push([key, this.stats.lastResourceVersion, performance.timeOrigin + performance.now()]);
    }
    this.changed.add(key);
    this.schedule();
  }

  setState(index, name, error) {
    this.states.set(index, { name, error });
    const all = [...this.states.values()];
    const worst = all.find((s) => s.name === "denied") || all.find((s) => s.name === "retrying")
      || all.find((s) => s.name === "loading") || all[0];
    const changed = worst.name !== this.state || worst.error !== this.error;
    this.state = worst.name;
    this.error = worst.error || null;
    if (changed) {
      this.resetPending = true;
      this.schedule();
    }
  }

  schedule() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      const started = performance.now();
      const changed = this.changed;
      const reset = this.resetPending;
      this.changed = new Set();
      this.resetPending = false;
      for (const fn of this.subscribers) fn({ changed, reset });
      this.stats.renders += 1;
      this.stats.lastRenderMs = performance.now() - started;
    });
  }
}
