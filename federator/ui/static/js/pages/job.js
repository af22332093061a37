// Job: what `federator describe job` says, live: the placement decision, the why-not table per
// cluster (the same words), the history as a timeline (epochs, failovers, preemptions), the pods per
// role, conditions and the job's Events. Delete where the role allows.

import { ListWatch, jobsPath } from "../api.js";
import { empty, failure, fill, h, loading } from "../dom.js";
import { jobGpus, jobPhase, timeElement } from "../format.js";
import { deleteJob } from "./jobs.js";

function table(caption, headers, rows, { className = "", hideCaption = false } = {}) {
  return h(`table${className ? `.${className}` : ""}`,
    h(hideCaption ? "caption.visually-hidden" : "caption", caption),
    h("thead", h("tr", headers.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", rows.map((cells) => h("tr", cells.map((c, i) => (i === 0 ? h("th", { scope: "row" }, c) : h("td", c)))))));
}

function requests(template) {
  const resources = (template || {}).resources || {};
  return Object.entries(resources).map(([k, v]) => `${k}=${v}`).join(", ") || "—";
}

/** The score of the latest Placed Event ("placed in X on A100, score 83.4 at epoch 1"). */
function placedScore(events) {
  const placed = events.filter((e) => e.reason === "Placed")
    .sort((a, b) => (b.lastTimestamp || "").localeCompare(a.lastTimestamp || ""))[0];
  const match = placed && /score (-?[0-9.]+)/.exec(placed.message || "");
  return match ? match[1] : null;
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
  return h("dl.facts.wide",
    h("dt", "Phase"), h("dd", h(`span.phase.phase-${jobPhase(job).toLowerCase()}`, jobPhase(job)),
      spec.suspend ? " (spec.suspend is true)" : ""),
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
    const score = placedScore(events);
    out.push(h("p.decision", "Placed in ", h("strong", placement.cluster), ` (epoch ${placement.epoch || 0})`,
      placed && placed.message ? ` — ${placed.message}` : "", "."));
    out.push(h("dl.facts",
      h("dt", "Score"), h("dd", score !== null ? `${score} (the best of the clusters that passed every filter)`
        : "not recorded (the Placed Event has it while the hub keeps Events, an hour)"),
      h("dt", "Decided on"), h("dd", placement.decisionResourceVersion
        ? `member snapshot ${placement.decisionResourceVersion}` : "—")));
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

function pods(job) {
  const roles = (job.spec || {}).roles || [];
  const counts = (job.status || {}).podCounts || {};
  const cluster = ((job.status || {}).placement || {}).cluster;
  return h("section.panel", { "aria-labelledby": "pods-title" },
    h("h2", { id: "pods-title" }, "Pods"),
    table(cluster ? `Member pods per role in ${cluster}` : "Pods per role (none created yet)",
      ["Role", "Replicas", "Image", "Requests (per pod)", "Pending", "Running", "Succeeded", "Failed"],
      roles.map((r) => {
        const c = counts[r.name] || {};
        return [r.name, String(r.replicas), (r.template || {}).image || "", requests(r.template),
          String(c.pending || 0), String(c.running || 0), String(c.succeeded || 0), String(c.failed || 0)];
      }), { className: "pods" }));
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
    fill(body, summary(job), decision(job, events.items), timeline(job), pods(job), conditions(job), eventsPanel(events));
    body.dataset.rv = job.metadata.resourceVersion || "";
    body.dataset.phase = jobPhase(job);
    if (focusedId) {
      const again = document.getElementById(focusedId);
      if (again) again.focus();
    }
  }

  const watch = new ListWatch(ctx.api, jobsPath(namespace), {
    reset(items) {
      job = items[0] || null;
      if (!job) {
        gone = false;
        fill(body, empty(`No job ${namespace}/${name}.`, "It may have been deleted, or it is in a namespace you may not read. ",
          h("a", { href: "#/jobs" }, "Back to the jobs")));
        return;
      }
      schedule();
    },
    event(type, obj) {
      if (type === "DELETED") {
        gone = true;
        job = null;
      } else {
        gone = false;
        job = obj;
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
    cancelAnimationFrame(frame);
  };
}
