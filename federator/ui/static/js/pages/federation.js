// Federation: one card per member cluster (where it is, its fabric, scheduler, health, GPUs free per
// model, datasets cached) and a strip of the latest placements. Live: both come from list-watches.

import { clustersPath } from "../api.js";
import { append, confirmDialog, empty, failure, fill, h, loading, toast } from "../dom.js";
import { bytes, condition, timeElement } from "../format.js";

const FABRICS = { rdma: "RDMA", ethernet: "Ethernet" };
const LOCATIONS = { onPrem: "On-prem", cloud: "Cloud" };
const RECENT_PLACEMENTS = 8;

export function health(cluster) {
  const spec = cluster.spec || {};
  const lost = condition(cluster, "Lost");
  const ready = condition(cluster, "Ready");
  const badges = [];
  if (lost && lost.status === "True") badges.push({ text: "Lost", kind: "bad", why: lost.message });
  else if (ready && ready.status === "True") badges.push({ text: "Ready", kind: "good", why: ready.message });
  else badges.push({ text: ready ? "Not ready" : "Not yet synced", kind: "warn", why: ready ? ready.message : "" });
  if (spec.cordoned) badges.push({ text: "Cordoned", kind: "warn", why: "no new gangs are placed here" });
  const drain = (cluster.status || {}).drain;
  if (drain && drain.phase) {
    badges.push({ text: `${drain.phase === "Draining" ? "Draining" : `Drain ${drain.phase.toLowerCase()}`} `
      + `${drain.moved || 0}/${drain.gangs || 0}`, kind: drain.phase === "Stuck" ? "bad" : "warn",
    why: `${drain.remaining || 0} gangs left, ${drain.moving || 0} moving` });
  }
  return badges;
}

function locationText(spec) {
  const location = spec.location || {};
  return [LOCATIONS[location.type] || location.type, location.region, location.provider].filter(Boolean).join(" · ")
    || "—";
}

function fabricText(spec) {
  const network = spec.network || {};
  const kind = network.rdmaKind ? ` (${network.rdmaKind === "infiniband" ? "InfiniBand" : network.rdmaKind})` : "";
  const speed = network.bandwidthGbps ? ` · ${network.bandwidthGbps} Gb/s` : "";
  return `${FABRICS[network.type] || network.type || "—"}${kind}${speed}`;
}

function gpuBars(cluster) {
  const capacity = (cluster.status || {}).capacity || {};
  const models = capacity.gpusByModel || {};
  const names = Object.keys(models).sort();
  if (!names.length) {
    const models2 = (cluster.spec || {}).gpuModels || [];
    return h("p.muted", models2.length ? `${models2.join(", ")}: no GPUs seen yet` : "No GPUs");
  }
  return h("ul.bars", names.map((model) => {
    const { free = 0, total = 0 } = models[model] || {};
    const fill_ = h("span.fill");
    fill_.style.width = `${total ? (100 * free) / total : 0}%`;
    return h("li.bar-row", { dataset: { model, free: String(free), total: String(total) } },
      h("span.model", model),
      h("span.bar", { role: "meter", "aria-valuemin": "0", "aria-valuemax": String(total),
        "aria-valuenow": String(free), "aria-label": `${model} GPUs free`,
        "aria-valuetext": `${free} of ${total} free` }, fill_),
      h("span.nums", `${free} / ${total} free`));
  }));
}

function datasets(cluster) {
  const spec = cluster.spec || {};
  const seen = new Set((cluster.status || {}).datasetsSeen || []);
  const declared = spec.datasets || [];
  if (!declared.length && !seen.size) return h("p.muted", "None cached");
  const names = new Map(declared.map((d) => [d.name, d]));
  for (const name of seen) if (!names.has(name)) names.set(name, { name });
  return h("ul.datasets", [...names.values()].sort((a, b) => a.name.localeCompare(b.name)).map((d) =>
    h("li", h("span", d.name), d.sizeBytes ? h("span.muted", ` ${bytes(d.sizeBytes)}`) : null,
      seen.size && !seen.has(d.name) ? h("span.muted", " (not seen on nodes)") : null)));
}

function card(cluster, ctx, mayPatch) {
  const meta = cluster.metadata || {};
  const spec = cluster.spec || {};
  const status = cluster.status || {};
  const capacity = status.capacity || {};
  const id = `cluster-${meta.name}`;
  const description = (meta.annotations || {})["federator.dev/description"];
  // the hub writes no heartbeat into the status (that would be a write every few seconds per cluster): it
  // says when contact was first lost, and since when the cluster has been synced
  const reachable = condition(cluster, "Reachable");
  const contact = h("dd");
  if (status.firstLossOfContact) {
    append(contact, [h("span.bad-text", "out of contact since "), timeElement(status.firstLossOfContact)]);
  } else if (reachable && reachable.status === "True") {
    append(contact, ["in contact", status.lastSyncTime ? [" · synced since ", timeElement(status.lastSyncTime)] : ""]);
  } else {
    append(contact, [reachable ? `not reachable: ${reachable.message || reachable.reason || ""}` : "not contacted yet"]);
  }
  const actions = [];
  if (mayPatch) {
    const cordoned = Boolean(spec.cordoned);
    actions.push(h("button", {
      type: "button", class: cordoned ? "" : "danger-outline",
      "aria-label": `${cordoned ? "Uncordon" : "Cordon"} ${meta.name}`,
      on: { click: (event) => toggleCordon(ctx, cluster, event.currentTarget) },
    }, cordoned ? "Uncordon" : "Cordon"));
  }
  return h("article.card.cluster", { "aria-labelledby": id, dataset: { cluster: meta.name } },
    h("header",
      h("h2", { id }, meta.name),
      h("span.badges", health(cluster).map((b) => h(`span.badge.${b.kind}`, { title: b.why || "" }, b.text)))),
    description ? h("p.desc", description) : null,
    h("dl.facts",
      h("dt", "Location"), h("dd", locationText(spec)),
      h("dt", "Fabric"), h("dd", fabricText(spec)),
      h("dt", "Scheduler"), h("dd", (spec.scheduler || {}).name || "—"),
      h("dt", "Nodes"), h("dd", capacity.nodes !== undefined ? `${capacity.readyNodes ?? "?"} ready of ${capacity.nodes}`
        : "—"),
      h("dt", "Contact"), contact),
    h("section.gpus", { "aria-label": `GPUs of ${meta.name}` }, h("h3", "GPUs free"), gpuBars(cluster)),
    h("section", { "aria-label": `Datasets cached in ${meta.name}` }, h("h3", "Datasets cached"), datasets(cluster)),
    actions.length ? h("footer.actions", actions) : null);
}

async function toggleCordon(ctx, cluster, button) {
  const name = cluster.metadata.name;
  const cordon = !(cluster.spec || {}).cordoned;
  if (cordon) {
    const sure = await confirmDialog({ title: `Cordon ${name}?`, confirm: "Cordon",
      body: "No new gangs will be placed in this cluster. Gangs running there stay." });
    if (!sure) return;
  }
  button.disabled = true;
  try {
    // as `federator cluster cordon|uncordon` does: uncordon also ends a drain
    await ctx.api.request("PATCH", clustersPath(name), {
      contentType: "application/merge-patch+json",
      body: cordon ? { spec: { cordoned: true } } : { spec: { cordoned: false, drain: null } },
    });
    toast(`${name} ${cordon ? "cordoned" : "uncordoned"}`);
  } catch (e) {
    toast(`Could not ${cordon ? "cordon" : "uncordon"} ${name}: ${e.message}`, "error");
    button.disabled = false;
  }
}

function recentPlacements(jobs) {
  const placed = [];
  for (const job of jobs.items.values()) {
    for (const entry of ((job.status || {}).history) || []) {
      if (entry.event === "Placed") placed.push({ job, entry });
    }
  }
  placed.sort((a, b) => (b.entry.time || "").localeCompare(a.entry.time || ""));
  return placed.slice(0, RECENT_PLACEMENTS);
}

export function mount(root, ctx) {
  const clusters = ctx.clusters();
  const jobs = ctx.jobs();
  const grid = h("div.cards", { "aria-live": "off" });
  const strip = h("ol.strip");
  const stripBox = jobs ? h("section.placements", { "aria-labelledby": "placements-title" },
    h("h2", { id: "placements-title" }, "Latest placements"), strip) : null;
  const summary = h("p.summary", { role: "status" });
  fill(root, h("h1", { tabindex: "-1" }, "Federation"), summary, stripBox, grid);
  const cards = new Map();
  let mayPatch = false;
  ctx.api.can("patch", "memberclusters").then((allowed) => {
    mayPatch = allowed;
    render();
  });

  function render() {
    if (!clusters.ready) {
      if (clusters.state === "denied" || clusters.state === "retrying") {
        cards.clear();
        fill(grid, failure("Cannot read the member clusters", clusters.error));
      } else {
        cards.clear();
        fill(grid, loading("member clusters"));
      }
      return;
    }
    const items = [...clusters.items.values()].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
    if (!items.length) {
      fill(summary);
      cards.clear();
      fill(grid, empty("No member clusters registered yet.",
        "An admin registers one with ", h("code", "federator cluster add NAME --kubeconfig FILE ..."), "."));
      return;
    }
    let free = 0;
    let total = 0;
    for (const c of items) {
      free += ((c.status || {}).capacity || {}).freeGPUs || 0;
      total += ((c.status || {}).capacity || {}).totalGPUs || 0;
    }
    const lost = items.filter((c) => (condition(c, "Lost") || {}).status === "True").length;
    fill(summary, `${items.length} member clusters · ${free} of ${total} GPUs free`,
      lost ? h("strong.bad-text", ` · ${lost} lost`) : "",
      clusters.state === "retrying" ? h("span.warn-text", " · reconnecting…") : "");
    // keyed: only a cluster that changed gets a new card, and a focused button keeps the focus
    if (!grid.querySelector("article.card")) fill(grid);
    const wanted = new Set(items.map((c) => c.metadata.name));
    for (const [name, shown] of cards) {
      if (!wanted.has(name)) {
        shown.el.remove();
        cards.delete(name);
      }
    }
    let previous = null;
    for (const c of items) {
      const name = c.metadata.name;
      const version = `${c.metadata.resourceVersion}|${mayPatch}`;
      let shown = cards.get(name);
      if (!shown || shown.version !== version) {
        const el = card(c, ctx, mayPatch);
        if (shown) {
          const focused = shown.el.contains(document.activeElement) ? document.activeElement : null;
          shown.el.replaceWith(el);
          const label = focused && focused.getAttribute("aria-label");
          if (label) {
            const again = [...el.querySelectorAll("button")].find((b) => b.getAttribute("aria-label") === label);
            if (again) again.focus();
          }
        }
        shown = { el, version };
        cards.set(name, shown);
      }
      const expectedPlace = previous ? previous.nextSibling : grid.firstChild;
      if (shown.el !== expectedPlace) grid.insertBefore(shown.el, expectedPlace);
      previous = shown.el;
    }
  }

  function renderStrip() {
    if (!jobs) return;
    if (!jobs.ready) {
      fill(strip, h("li.muted", "Loading…"));
      return;
    }
    const recent = recentPlacements(jobs);
    if (!recent.length) {
      fill(strip, h("li.muted", "No placements yet."));
      return;
    }
    fill(strip, recent.map(({ job, entry }) => {
      const t = timeElement(entry.time);
      return h("li", t, " ",
        h("a", { href: `#/jobs/${encodeURIComponent(job.metadata.namespace)}/${encodeURIComponent(job.metadata.name)}` },
          `${job.metadata.namespace}/${job.metadata.name}`),
        " → ", h("strong", entry.cluster || "?"), entry.epoch > 1 ? ` (epoch ${entry.epoch})` : "");
    }));
  }

  const unsubscribe = [clusters.subscribe(render), jobs ? jobs.subscribe(renderStrip) : () => {}];
  render();
  renderStrip();
  return () => unsubscribe.forEach((fn) => fn());
}
