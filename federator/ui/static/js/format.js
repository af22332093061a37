// Times, quantities and small text helpers shared by the pages.

/** "5s", "3m", "2h10m", "4d" like kubectl's ages. */
export function shortDuration(ms) {
  let s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 && m < 10 ? `${m}m${s % 60}s` : `${m}m`;
  const hours = Math.floor(m / 60);
  if (hours < 24) return m % 60 && hours < 10 ? `${hours}h${m % 60}m` : `${hours}h`;
  const d = Math.floor(hours / 24);
  return hours % 24 && d < 8 ? `${d}d${hours % 24}h` : `${d}d`;
}

export function parseTime(value) {
  if (!value) return null;
  const t = Date.parse(value);
  return Number.isNaN(t) ? null : t;
}

/** "3m ago" (or "in 3m" for a time ahead of this browser's clock). */
export function relative(value, now = Date.now()) {
  const t = parseTime(value);
  if (t === null) return "—";
  const delta = now - t;
  return delta >= -1000 ? `${shortDuration(delta)} ago` : `in ${shortDuration(-delta)}`;
}

// one formatter for every time on the page (building one per call costs more than the formatting)
const ABSOLUTE = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit",
  timeZoneName: "short",
});

/** The absolute time in the reader's locale, with the zone. */
export function absolute(value) {
  const t = parseTime(value);
  if (t === null) return "";
  return ABSOLUTE.format(new Date(t));
}

/** A <time> element: relative text, absolute time in its title and datetime attribute. Refreshed by
 *  refreshTimes(). */
export function timeElement(value, { age = false } = {}) {
  const el = document.createElement("time");
  setTime(el, value, { age });
  return el;
}

export function setTime(el, value, { age = false } = {}) {
  const t = parseTime(value);
  if (t === null) {
    el.textContent = "—";
    el.removeAttribute("datetime");
    el.removeAttribute("title");
    delete el.dataset.t;
    return;
  }
  el.dateTime = new Date(t).toISOString();
  el.title = absolute(value);
  el.dataset.t = String(t);
  el.dataset.age = age ? "1" : "";
  el.textContent = age ? shortDuration(Date.now() - t) : relative(value);
}

/** Re-render every <time data-t> under root (ages move on while the page is open). */
export function refreshTimes(root = document) {
  const now = Date.now();
  for (const el of root.querySelectorAll("time[data-t]")) {
    const t = Number(el.dataset.t);
    el.textContent = el.dataset.age ? shortDuration(now - t) : relative(new Date(t).toISOString(), now);
  }
}

/** Bytes as "1.4 TiB". */
export function bytes(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n >= 10 || i === 0 ? Math.round(n) : n.toFixed(1)} ${units[i]}`;
}

export function seconds(value) {
  if (value === null || value === undefined) return "—";
  return `${Number(value).toFixed(value < 10 ? 1 : 0)} s`;
}

/** A role template in the full form (a PodTemplateSpec: spec or metadata), not the short one. */
export function isFullTemplate(template) {
  return Boolean(template && (template.spec || template.metadata));
}

function count(value) {
  const n = typeof value === "number" ? value : parseInt(value || "0", 10);
  return Number.isFinite(n) ? n : 0;
}

/** GPUs one pod of a role asks for. The full form counts as placement does (apis/podtemplate.py
 * aggregate_requests, kube-scheduler's rule): containers plus sidecars, or the largest init container
 * with the sidecars before it, whichever is more; a request left out defaults to its limit. */
export function podGpus(template) {
  const gpus = (c) => {
    const r = (c && c.resources) || {};
    const request = (r.requests || {})["nvidia.com/gpu"];
    return count(request !== undefined ? request : (r.limits || {})["nvidia.com/gpu"]);
  };
  if (!isFullTemplate(template)) return count(((template || {}).resources || {})["nvidia.com/gpu"]);
  const spec = template.spec || {};
  let total = (spec.containers || []).reduce((sum, c) => sum + gpus(c), 0);
  let sidecars = 0;
  let peak = 0;
  for (const c of spec.initContainers || []) {
    if (c && c.restartPolicy === "Always") {
      total += gpus(c);
      sidecars += gpus(c);
      peak = Math.max(peak, sidecars);
    } else {
      peak = Math.max(peak, sidecars + gpus(c));
    }
  }
  return Math.max(total, peak);
}

/** GPUs a job asks for: replicas x GPUs per pod, per role. */
export function jobGpus(job) {
  let total = 0;
  for (const role of (job.spec && job.spec.roles) || []) total += podGpus(role.template) * (role.replicas || 0);
  return total;
}

export function jobKey(obj) {
  const m = obj.metadata || {};
  return m.namespace ? `${m.namespace}/${m.name}` : m.name;
}

/** The phase shown for a job: Terminating while it is being deleted (as kubectl's column). */
export function jobPhase(job) {
  if ((job.metadata || {}).deletionTimestamp) return "Terminating";
  return (job.status || {}).phase || "Pending";
}

// The upstream kind a twin TrainingJob stands for ({kind, apiVersion, name}: a PyTorchJob, JobSet, batch Job, ...
// submitted to the hub), from its source-kind annotation and controller ownerReference; null for a TrainingJob.
export function jobSource(job) {
  const meta = job.metadata || {};
  const annotation = (meta.annotations || {})["federator.dev/source-kind"];
  if (!annotation) return null;
  const owner = (meta.ownerReferences || []).find((ref) => ref.controller === true
    && `${ref.kind}.${(ref.apiVersion || "").split("/")[0]}` === annotation);
  return owner ? { kind: owner.kind, apiVersion: owner.apiVersion, name: owner.name } : null;
}

export function condition(obj, type) {
  return (((obj.status || {}).conditions) || []).find((c) => c.type === type) || null;
}
