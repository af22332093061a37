// Job: what `federator describe job` says, live: the placement decision with its score breakdown
// (status.placement.scores), the why-not table per cluster (the same words), the history as a timeline
// (epochs, failovers, preemptions), the pods per role with each member pod's node and phase, conditions
// and the job's Events. Delete where the role allows.
//
// The job and its Events come through watches. The member pods come from the job's pods subresource
// (GET .../trainingjobs/NAME/pods, which reads the member): it is asked at once when a watch event
// changes the job's placement or pod counts, and every POD_POLL_MS while the tab is visible (a node,
// readiness or restart count changes no count); never while the tab is hidden, never two at a time.

import { ListWatch, jobsPath } from "../api.js";
import { empty, failure, fill, h, loading } from "../dom.js";
import { condition, isFullTemplate, jobGpus, jobPhase, jobSource, timeElement } from "../format.js";
import { deleteJob } from "./jobs.js";

const POD_POLL_MS = 5000;

function table(caption, headers, rows, { className = "", hideCaption = false, dataset = null, foot = null } = {}) {
  return h(`table${className ? `.${className}` : ""}`, dataset ? { dataset } : null,
    h(hideCaption ? "caption.visually-hidden" : "caption", caption),
    h("thead", h("tr", headers.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", rows.map((cells) => h("tr", cells.map((c, i) => (i === 0 ? h("th", { scope: "row" }, c) : h("td", c)))))),
    foot ? h("tfoot", h("tr", foot.map((c, i) => (i === 0 ? h("th", { scope: "row" }, c) : h("td", c))))) : null);
}

const isNumber = (n) => typeof n === "number" && Number.isFinite(n);
const fixed = (n, digits = 1) => (isNumber(n) ? n.toFixed(digits) : "—");
/** A raw score in its own unit: four significant digits, no trailing zeros. */
const rawText = (n) => (!isNumber(n) ? "—" : Math.abs(n) >= 1e6 ? n.toPrecision(4) : String(Number(n.toPrecision(4))));

/** A horizontal bar: `value` of `max` (a meter for assistive technology too). */
function meter(value, max, label) {
  const share = isNumber(value) && isNumber(max) && max > 0 ? Math.max(0, Math.min(1, value / max)) : 0;
  const fill = h("span.fill");
  fill.style.width = `${(100 * share).toFixed(1)}%`;
  return h("span.bar.score-bar", { role: "meter", "aria-valuemin": "0", "aria-valuemax": fixed(max),
    "aria-valuenow": fixed(value), "aria-label": label, "aria-valuetext": `${fixed(value)} of ${fixed(max)}` }, fill);
}

/** The chosen cluster's score, plugin by plugin, and the runners-up's totals (status.placement.scores). */
function scoreTables(placement) {
  const scores = placement.scores || [];
  const chosen = scores[0];
  if (!chosen || chosen.cluster !== placement.cluster) return [];
  const parts = chosen.parts || [];
  const out = [table(`Score breakdown of ${chosen.cluster}: each score plugin's weighted part of the total`,
    ["Plugin", "Raw", "Weight", "Weighted", "Share of the total"],
    parts.map((p) => [p.plugin, rawText(p.raw), String(p.weight), fixed(p.weighted),
      meter(p.weighted, chosen.total, `${p.plugin}: weighted part of the total`)]),
    { className: "scores", foot: ["Total", "", "", fixed(chosen.total), ""] })];
  const others = scores.slice(1);
  if (others.length) {
    out.push(table("Runners-up: passed every filter, scored lower (“at most”: not fitted, could not win)",
      ["Cluster", "Total", "GPU", "Nodes", `Against ${chosen.cluster}`],
      others.map((r) => [r.cluster, `${r.outranked ? "at most " : ""}${fixed(r.total)}`, r.gpuModel || "—",
        isNumber(r.nodes) ? String(r.nodes) : "—", meter(r.total, chosen.total, `${r.cluster}: total against the chosen`)]),
      { className: "runners-up" }));
  }
  return out;
}

function pairs(resources) {
  return Object.entries(resources || {}).map(([k, v]) => `${k}=${v}`).join(", ");
}

/** The short form's requests; a full template's per container ("name: cpu=4, ..."; sidecars marked). */
function requests(template) {
  if (!isFullTemplate(template)) return pairs((template || {}).resources) || "—";
  const spec = template.spec || {};
  const sidecars = (spec.initContainers || []).filter((c) => c && c.restartPolicy === "Always");
  return [...(spec.containers || []).map((c) => [c, ""]), ...sidecars.map((c) => [c, " (sidecar)"])]
    .map(([c, mark]) => `${c.name}${mark}: ${pairs(((c.resources || {}).requests)) || "—"}`).join("; ") || "—";
}

/** The short form's image; a full template's containers' images. */
function images(template) {
  if (!isFullTemplate(template)) return (template || {}).image || "";
  return ((template.spec || {}).containers || []).map((c) => c.image || "").join(", ");
}

/** The score of the latest Placed Event ("placed in X on A100, score 83.4 at epoch 1"). */
function placedScore(events) {
  const placed = events.filter((e) => e.reason === "Placed")
    .sort((a, b) => (b.lastTimestamp || "").localeCompare(a.lastTimestamp || ""))[0];
  const match = placed && /score (-?[0-9.]+)/.exec(placed.message || "");
  return match ? match[1] : null;
}

// What the Phase line adds about spec.suspend: since when the job is Suspended (its condition), or that a placed
// gang is being stopped.
function suspendedText(job) {
  const spec = job.spec || {};
  const suspended = condition(job, "Suspended");
  if (jobPhase(job) === "Suspended" && suspended && suspended.status === "True") {
    return [" since ", timeElement(suspended.lastTransitionTime),
      spec.suspend ? ": spec.suspend is true (its gang, if it was placed, is deleted)" : ": spec.suspend is false again, queued"];
  }
  return spec.suspend ? " (spec.suspend is true: its gang is being stopped)" : "";
}

function summary(job) {
  const meta = job.metadata;
  const spec = job.spec || {};
  const status = job.status || {};
  const placement = status.placement || {};
  const roles = spec.roles || [];
  const pods = roles.reduce((n, r) => n + (r.replicas || 0), 0);
  const wants = spec.placement || {};
  const failover = spec.failover || {};
  const source = jobSource(job);
  return h("dl.facts.wide",
    source ? [h("dt", "Submitted as"), h("dd", `${source.kind} ${meta.namespace}/${source.name} (${source.apiVersion}); `
      + "this is its gang, which the hub places and moves")] : null,
    h("dt", "Phase"), h("dd", h(`span.phase.phase-${jobPhase(job).toLowerCase()}`, jobPhase(job)),
      suspendedText(job)),
    h("dt", "Cluster"), h("dd", placement.cluster || "—"),
    h("dt", "Epoch"), h("dd", String(placement.epoch || 0)),
    h("dt", "Queue"), h("dd", spec.queue || "—"),
    h("dt", "Priority"), h("dd", String(spec.priority || 0)),
    h("dt", "Gang"), h("dd", `${pods} pods, ${jobGpus(job)} GPUs, all in one cluster or none`),
    h("dt", "Needs"), h("dd", `network ${wants.network || "any"} · GPU models ${(wants.gpuModels || []).join(", ") || "any"}`
      + ` · datasets ${(wants.datasets || []).join(", ") || "none"}`),
    h("dt", "Failover"), h("dd", `on cluster loss ${failover.onClusterLoss || "requeue"}, at most ${failover.maxRequeues ?? 3} requeues`
      + ` (${status.requeues || 0} so far)`),
    h("dt", "Created"), h("dd", timeElement(meta.creationTimestamp), " · ", h("span.muted", meta.creationTimestamp || "")),
    meta.deletionTimestamp ? [h("dt", "Deleting"), h("dd", "since ", timeElement(meta.deletionTimestamp),
      "; its member objects go first")] : null);
}

function decision(job, events) {
  const status = job.status || {};
  const placement = status.placement || {};
  const history = status.history || [];
  const whyNot = placement.whyNot || [];
  const schedulable = (status.conditions || []).find((c) => c.type === "Schedulable");
  const out = [h("h2", { id: "decision-title" }, "Placement decision")];
  if (placement.cluster) {
    const placed = [...history].reverse().find((e) => e.event === "Placed" && e.cluster === placement.cluster);
    const breakdown = scoreTables(placement);
    const score = breakdown.length ? fixed(placement.scores[0].total) : placedScore(events);
    out.push(h("p.decision", "Placed in ", h("strong", placement.cluster), ` (epoch ${placement.epoch || 0})`,
      placed && placed.message ? ` — ${placed.message}` : "", "."));
    out.push(h("dl.facts",
      h("dt", "Score"), h("dd", score !== null ? `${score} (the best of the clusters that passed every filter)`
        : "not recorded (a preemption chose the cluster by the fewest victims, or an older hub placed it)"),
      h("dt", "Decided on"), h("dd", placement.decisionResourceVersion
        ? `member snapshot ${placement.decisionResourceVersion}` : "—")));
    out.push(...breakdown);
  } else if (schedulable && schedulable.status === "False") {
    // the message is "<sentence>: <cluster>: <reason> (...); ...[; holding ...]": the table below has the rest
    const message = schedulable.message || "";
    const cut = message.indexOf(": ");
    const hold = /; (holding \d+ nodes in .*)$/.exec(message);
    out.push(h("p.decision.warn-text", h("strong", schedulable.reason || "Not placed"), ": ",
      cut >= 0 && whyNot.length ? message.slice(0, cut) : message, hold && whyNot.length ? `; ${hold[1]}` : "", "."));
  } else {
    out.push(h("p.muted", "No placement decision yet."));
  }
  if (whyNot.length) {
    out.push(table("Why not the other clusters", ["Cluster", "Filter", "Reason", "Message"],
      whyNot.map((r) => [r.cluster || "", r.filter || "", r.reason || "", r.message || ""]), { className: "why-not" }));
  }
  const excluded = placement.excludedClusters || [];
  if (excluded.length) {
    out.push(h("p.muted", "Avoiding for a while: ",
      excluded.map((e, i) => [i ? ", " : "", e.cluster, " until ", timeElement(e.until)])));
  }
  return h("section.panel", { "aria-labelledby": "decision-title" }, out);
}

const EVENT_KINDS = {
  Placed: "step", Dispatched: "step", Admitted: "step", Running: "good", Succeeded: "good", Failed: "bad",
  Requeued: "warn", ClusterLost: "bad", Preempted: "warn", PulledBack: "warn", StaleCopyKilled: "warn",
  Suspended: "warn", Resumed: "step",
};

function timeline(job) {
  const history = (job.status || {}).history || [];
  const items = [];
  let epoch = null;
  for (const entry of history) {
    if (entry.epoch !== undefined && entry.epoch !== null && entry.epoch !== epoch) {
      if (epoch !== null) items.push(h("li.epoch", { "aria-label": `epoch ${entry.epoch}` }, `epoch ${entry.epoch}`));
      epoch = entry.epoch;
    }
    items.push(h(`li.entry.${EVENT_KINDS[entry.event] || "step"}`, { dataset: { event: entry.event } },
      h("span.when", timeElement(entry.time)),
      h("span.what", h("strong", entry.event), entry.cluster ? ` · ${entry.cluster}` : "",
        entry.epoch !== undefined && entry.epoch !== null ? ` · epoch ${entry.epoch}` : ""),
      entry.message ? h("span.message", entry.message) : null));
  }
  return h("section.panel", { "aria-labelledby": "history-title" },
    h("h2", { id: "history-title" }, "History"),
    items.length ? h("ol.timeline", items) : h("p.muted", "Nothing has happened yet."));
}

/** Each member pod of each role, with its node and phase (the pods subresource's answer). */
function memberPods(job, state) {
  const placement = (job.status || {}).placement || {};
  if (!placement.cluster) return h("p.muted", "No member pods: the job is not placed.");
  if (state.error) {
    return h("p.muted.member-pods-error", state.error.status === 403 ? "You may not list this job's member pods."
      : `Member pods cannot be read now: ${state.error.message}`);
  }
  const body = state.body;
  if (!body || body.cluster !== placement.cluster || body.epoch !== placement.epoch) return loading("member pods");
  const byRole = new Map(((job.spec || {}).roles || []).map((r) => [r.name, []]));
  for (const pod of body.items || []) {
    if (!byRole.has(pod.role)) byRole.set(pod.role, []);
    byRole.get(pod.role).push(pod);
  }
  return h("div.member-pods", { dataset: { cluster: body.cluster, epoch: String(body.epoch) } },
    h("p.muted", `Member pods in ${body.cluster} (epoch ${body.epoch}), read `, timeElement(state.at), "."),
    [...byRole].map(([role, items]) => table(`${role}: ${items.length} member pod${items.length === 1 ? "" : "s"}`,
      ["Index", "Pod", "Node", "Phase", "Ready", "Restarts", "Started"],
      items.map((p) => [String(p.index), p.name, p.node || "not bound yet",
        h(`span.phase.phase-${String(p.phase).toLowerCase()}`, p.phase, p.deletionTimestamp ? " (deleting)" : ""),
        p.ready ? "yes" : "no", String(p.restarts), p.startTime ? timeElement(p.startTime) : "not yet"]),
      { className: "member-pods", dataset: { role } })));
}

function pods(job, podState) {
  const roles = (job.spec || {}).roles || [];
  const counts = (job.status || {}).podCounts || {};
  const cluster = ((job.status || {}).placement || {}).cluster;
  return h("section.panel", { "aria-labelledby": "pods-title" },
    h("h2", { id: "pods-title" }, "Pods"),
    table(cluster ? `Pods per role in ${cluster} (counts from the job's status)` : "Pods per role (none created yet)",
      ["Role", "Replicas", "Image", "Requests (per pod)", "Pending", "Running", "Succeeded", "Failed"],
      roles.map((r) => {
        const c = counts[r.name] || {};
        return [r.name, String(r.replicas), images(r.template), requests(r.template),
          String(c.pending || 0), String(c.running || 0), String(c.succeeded || 0), String(c.failed || 0)];
      }), { className: "pods" }),
    memberPods(job, podState));
}

function conditions(job) {
  const list = (job.status || {}).conditions || [];
  return h("section.panel", { "aria-labelledby": "conditions-title" },
    h("h2", { id: "conditions-title" }, "Conditions"),
    list.length ? table("Conditions", ["Type", "Status", "Reason", "Since", "Message"],
      list.map((c) => [c.type, c.status, c.reason || "", timeElement(c.lastTransitionTime), c.message || ""]),
      { hideCaption: true })
      : h("p.muted", "None yet."));
}

function eventsPanel(state) {
  let body;
  if (state.error) body = h("p.muted", `Events cannot be shown: ${state.error.message}`);
  else if (!state.loaded) body = loading("events");
  else if (!state.items.length) body = h("p.muted", "No Events (the hub keeps them for an hour).");
  else {
    const items = [...state.items].sort((a, b) => (b.lastTimestamp || "").localeCompare(a.lastTimestamp || ""));
    body = table("Events, newest first", ["Reason", "Type", "Last seen", "Count", "From", "Message"],
      items.map((e) => [e.reason || "", e.type || "", timeElement(e.lastTimestamp || e.eventTime),
        String(e.count || 1), (e.source || {}).component || e.reportingComponent || "", e.message || ""]),
      { hideCaption: true });
  }
  return h("section.panel", { "aria-labelledby": "events-title" }, h("h2", { id: "events-title" }, "Events"), body);
}

export function mount(root, ctx, [namespace, name]) {
  const heading = h("h1", { tabindex: "-1" }, h("span.muted", `${namespace} / `), name);
  const actions = h("div.actions");
  const body = h("div.job", loading(`job ${namespace}/${name}`));
  fill(root, h("p.crumbs", h("a", { href: "#/jobs" }, "← Jobs")), h("div.title-row", heading, actions), body);
  let job = null;
  let gone = false;
  let mayDelete = false;
  const events = { items: [], loaded: false, error: null };
  // the pods subresource's latest answer; `asked` is what the job looked like when it was last asked
  const podState = { body: null, error: null, at: null, inFlight: null, again: false, asked: "" };
  let frame = 0;

  function schedule() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; render(); });
  }

  function render() {
    if (gone) {
      fill(actions);
      fill(body, empty(`Job ${namespace}/${name} was deleted.`, h("a", { href: "#/jobs" }, "Back to the jobs")));
      return;
    }
    if (!job) return;
    // the page is built again on each change: a focused control gets the focus back (by its id)
    const focusedId = document.activeElement && root.contains(document.activeElement) ? document.activeElement.id : "";
    fill(actions, mayDelete && !job.metadata.deletionTimestamp ? h("button.danger", { type: "button",
      id: "delete-job", on: { click: () => deleteJob(ctx, job) } }, "Delete job") : null);
    fill(body, summary(job), decision(job, events.items), timeline(job), pods(job, podState), conditions(job),
      eventsPanel(events));
    body.dataset.rv = job.metadata.resourceVersion || "";
    body.dataset.phase = jobPhase(job);
    if (focusedId) {
      const again = document.getElementById(focusedId);
      if (again) again.focus();
    }
  }

  const podsController = new AbortController();

  /** Ask the pods subresource (one request at a time; asked again after it if something changed meanwhile). */
  async function refreshPods() {
    const placed = job && !gone && ((job.status || {}).placement || {}).cluster;
    if (!placed || document.visibilityState !== "visible" || podsController.signal.aborted) return;
    if (podState.inFlight) {
      podState.again = true;
      return;
    }
    podState.inFlight = ctx.api.get(`${jobsPath(namespace, name)}/pods`, null, podsController.signal);
    try {
      podState.body = await podState.inFlight;
      podState.error = null;
      podState.at = new Date().toISOString();
    } catch (error) {
      if (error && error.name === "AbortError") return;
      podState.error = error;
    } finally {
      podState.inFlight = null;
    }
    schedule();
    if (podState.again) {
      podState.again = false;
      refreshPods();
    }
  }

  /** A watch event asks for the pods at once when the placement or the pod counts changed. */
  function podsChanged() {
    const status = (job && job.status) || {};
    const placement = status.placement || {};
    const key = JSON.stringify([placement.cluster, placement.epoch, status.podCounts, status.phase]);
    if (key !== podState.asked) {
      podState.asked = key;
      refreshPods();
    }
  }

  const podTimer = setInterval(refreshPods, POD_POLL_MS);
  const onVisible = () => { if (document.visibilityState === "visible") refreshPods(); };
  document.addEventListener("visibilitychange", onVisible);

  const watch = new ListWatch(ctx.api, jobsPath(namespace), {
    reset(items) {
      job = items[0] || null;
      if (!job) {
        gone = false;
        fill(body, empty(`No job ${namespace}/${name}.`, "It may have been deleted, or it is in a namespace you may not read. ",
          h("a", { href: "#/jobs" }, "Back to the jobs")));
        return;
      }
      podsChanged();
      schedule();
    },
    event(type, obj) {
      if (type === "DELETED") {
        gone = true;
        job = null;
      } else {
        gone = false;
        job = obj;
        podsChanged();
      }
      schedule();
    },
    state(name_, error) {
      if ((name_ === "denied" || name_ === "retrying") && !job) fill(body, failure("Cannot read this job", error));
    },
  }, { query: { fieldSelector: `metadata.name=${name}` } }).start();

  const eventWatch = new ListWatch(ctx.api, `/api/v1/namespaces/${encodeURIComponent(namespace)}/events`, {
    reset(items) {
      events.items = items;
      events.loaded = true;
      schedule();
    },
    event(type, obj) {
      const uid = obj.metadata.uid;
      events.items = events.items.filter((e) => e.metadata.uid !== uid);
      if (type !== "DELETED") events.items.push(obj);
      schedule();
    },
    state(name_, error) {
      if (name_ === "denied") {
        events.error = error;
        schedule();
      }
    },
  }, { query: { fieldSelector: `involvedObject.kind=TrainingJob,involvedObject.name=${name}` } }).start();

  ctx.api.can("delete", "trainingjobs", { namespace }).then((allowed) => {
    mayDelete = allowed;
    schedule();
  });
  return () => {
    watch.stop();
    eventWatch.stop();
    clearInterval(podTimer);
    document.removeEventListener("visibilitychange", onVisible);
    podsController.abort();
    cancelAnimationFrame(frame);
  };
}
