// Jobs: every job this user may see (namespace, name with the upstream kind it was submitted as, queue, phase,
// cluster, GPUs, age), filtered and
// searched in the page, kept live by the shared list-watch (no polling). Rows are keyed: a watch event
// rebuilds only its own row, and a burst of events costs one render per animation frame.

import { jobsPath } from "../api.js";
import { confirmDialog, empty, failure, fill, h, loading, toast } from "../dom.js";
import { jobGpus, jobKey, jobPhase, jobSource, parseTime, setTime } from "../format.js";

// rows kept in the DOM beyond the window, above and below; and the rows' height until one is measured
const BUFFER_ROWS = 40;
const ROW_HEIGHT = 37;

export const PHASES = ["Pending", "Placed", "Admitted", "Running", "Succeeded", "Failed", "Requeued", "Suspended",
  "Terminating"];

const COLUMNS = [
  { key: "namespace", label: "Namespace", sort: (j) => j.metadata.namespace },
  { key: "name", label: "Name", sort: (j) => j.metadata.name },
  { key: "queue", label: "Queue", sort: (j) => (j.spec || {}).queue || "" },
  { key: "phase", label: "Phase", sort: (j) => jobPhase(j) },
  { key: "cluster", label: "Cluster", sort: (j) => clusterOf(j) },
  { key: "gpus", label: "GPUs", sort: (j) => jobGpus(j), numeric: true },
  { key: "age", label: "Age", sort: (j) => -(parseTime(j.metadata.creationTimestamp) || 0), numeric: true },
];

function compare(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

function clusterOf(job) {
  return (((job.status || {}).placement) || {}).cluster || "";
}

export function jobHref(job) {
  return `#/jobs/${encodeURIComponent(job.metadata.namespace)}/${encodeURIComponent(job.metadata.name)}`;
}

function readFilters() {
  const query = new URLSearchParams((window.location.hash.split("?")[1]) || "");
  return { q: query.get("q") || "", ns: query.get("ns") || "", phase: query.get("phase") || "",
    cluster: query.get("cluster") || "", sort: query.get("sort") || "age", dir: query.get("dir") || "asc" };
}

function writeFilters(filters) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(filters)) {
    if (v && !(k === "sort" && v === "age") && !(k === "dir" && v === "asc")) query.set(k, v);
  }
  const text = query.toString();
  // replaceState: no hashchange, so the page is not mounted again
  history.replaceState(null, "", `#/jobs${text ? `?${text}` : ""}`);
}

function matches(job, filters, needle) {
  const meta = job.metadata;
  if (filters.ns && meta.namespace !== filters.ns) return false;
  if (filters.phase && jobPhase(job) !== filters.phase) return false;
  if (filters.cluster && clusterOf(job) !== filters.cluster) return false;
  if (needle) {
    const hay = `${meta.namespace}/${meta.name} ${clusterOf(job)} ${(job.spec || {}).queue || ""} ${jobPhase(job)}`;
    if (!hay.toLowerCase().includes(needle)) return false;
  }
  return true;
}

export function mount(root, ctx) {
  const jobs = ctx.jobs();
  fill(root, h("h1", { tabindex: "-1" }, "Jobs"));
  if (!jobs) {
    root.append(empty("You may not list jobs in any namespace.",
      "Ask an admin for a researcher token with a namespace (group ns:NAME) or a viewer token."));
    return () => {};
  }
  const filters = readFilters();
  const mayDelete = new Map();
  const rows = new Map();

  const search = h("input", { id: "job-search", type: "search", value: filters.q, autocomplete: "off",
    placeholder: "name, namespace, cluster, queue" });
  const nsSelect = h("select", { id: "job-ns" });
  const phaseSelect = h("select", { id: "job-phase" },
    h("option", { value: "" }, "Any phase"), PHASES.map((p) => h("option", { value: p, selected: p === filters.phase }, p)));
  const clusterSelect = h("select", { id: "job-cluster" });
  const count = h("p.count", { role: "status", "aria-live": "polite" });
  const live = h("span.live");
  const headRow = h("tr", { "aria-rowindex": "1" });
  const tbody = h("tbody");
  const table = h("table.jobs", { "aria-describedby": "jobs-count" },
    h("caption.visually-hidden", "Training jobs"),
    h("colgroup", ["namespace", "name", "queue", "phase", "cluster", "gpus", "age", "actions"].map((c) =>
      h(`col.col-${c}`))),
    h("thead", headRow), tbody);
  const box = h("div.table-box");
  count.id = "jobs-count";

  root.append(
    h("form.filters", { role: "search", "aria-label": "Filter jobs", on: { submit: (e) => e.preventDefault() } },
      h("div.field", h("label", { for: "job-search" }, "Search"), search),
      h("div.field", h("label", { for: "job-ns" }, "Namespace"), nsSelect),
      h("div.field", h("label", { for: "job-phase" }, "Phase"), phaseSelect),
      h("div.field", h("label", { for: "job-cluster" }, "Cluster"), clusterSelect)),
    h("div.table-head", count, live),
    box);

  function renderHead() {
    fill(headRow, COLUMNS.map((column) => {
      const sorted = filters.sort === column.key;
      const direction = sorted ? (filters.dir === "desc" ? "descending" : "ascending") : "none";
      return h(`th${column.numeric ? ".num" : ""}`, { scope: "col", "aria-sort": direction },
        h("button.sort", { type: "button", on: { click: () => {
          filters.dir = sorted && filters.dir === "asc" ? "desc" : "asc";
          filters.sort = column.key;
          writeFilters(filters);
          renderHead();
          render({ reset: true, changed: new Set() });
        } } }, column.label, h("span", { "aria-hidden": "true" }, sorted ? (filters.dir === "desc" ? " ▼" : " ▲") : "")));
    }), h("th", { scope: "col" }, h("span.visually-hidden", "Actions")));
  }

  function options(select, values, anyLabel, chosen) {
    const wanted = ["", ...values];
    const current = [...select.options].map((o) => o.value);
    if (JSON.stringify(current) === JSON.stringify(wanted)) return;
    fill(select, h("option", { value: "" }, anyLabel),
      values.map((v) => h("option", { value: v, selected: v === chosen }, v)));
    select.value = chosen;
  }

  // May this user delete jobs there? Asked of the hub once for every namespace (an admin), else once per
  // namespace; an answer fills the action cells of that namespace's rows, without rebuilding them.
  let everywhere = null;
  ctx.api.can("delete", "trainingjobs").then((allowed) => {
    everywhere = allowed;
    for (const namespace of mayDelete.keys()) settle(namespace);
  });

  function deletable(namespace) {
    if (!mayDelete.has(namespace)) {
      mayDelete.set(namespace, null);
      settle(namespace);
    }
    return mayDelete.get(namespace) === true;
  }

  function settle(namespace) {
    if (everywhere === null || mayDelete.get(namespace) !== null) return;
    const answer = everywhere ? Promise.resolve(true) : ctx.api.can("delete", "trainingjobs", { namespace });
    mayDelete.set(namespace, undefined);  // asked
    answer.then((allowed) => {
      mayDelete.set(namespace, allowed);
      for (const row of rows.values()) {
        if (row.namespace === namespace) fillActions(row.actions, row.job, allowed);
      }
    });
  }

  function fillActions(cell, job, allowed) {
    const meta = job.metadata;
    fill(cell, allowed && !meta.deletionTimestamp ? h("button.danger-outline.small", {
      type: "button", "aria-label": `Delete job ${meta.namespace}/${meta.name}`,
      on: { click: () => deleteJob(ctx, job) } }, "Delete") : null);
  }

  function buildRow(job, allowed) {
    const meta = job.metadata;
    const phase = jobPhase(job);
    const source = jobSource(job);
    const age = h("time");
    setTime(age, meta.creationTimestamp, { age: true });
    const cells = [
      h("td", meta.namespace),
      h("th", { scope: "row" }, h("a", { href: jobHref(job), title: `${meta.namespace}/${meta.name}` }, meta.name),
        source ? [" ", h("span.kind", { title: `submitted as a ${source.kind} (${source.apiVersion})` },
          source.kind)] : null),
      h("td", (job.spec || {}).queue || ""),
      h("td", h(`span.phase.phase-${phase.toLowerCase()}`, phase)),
      h("td", clusterOf(job)),
      h("td.num", String(jobGpus(job))),
      h("td.num", age),
      h("td.actions"),
    ];
    fillActions(cells[cells.length - 1], job, allowed);
    const tr = h("tr", { dataset: { key: jobKey(job), rv: meta.resourceVersion || "", phase } }, cells);
    return { tr, actions: cells[cells.length - 1] };
  }

  let current = [];
  let marked = false;
  let measured = false;
  let rowHeight = ROW_HEIGHT;
  const topSpacer = h("tr.spacer", { "aria-hidden": "true" }, h("td", { colspan: "8" }));
  const bottomSpacer = h("tr.spacer", { "aria-hidden": "true" }, h("td", { colspan: "8" }));

  function render({ reset, changed }) {
    if (!jobs.ready) {
      rows.clear();
      current = [];
      fill(tbody);
      if (jobs.state === "denied" || (jobs.state === "retrying" && jobs.error)) {
        fill(box, failure("Cannot list jobs", jobs.error));
      } else {
        fill(box, loading("jobs"));
      }
      return;
    }
    const all = [...jobs.items.values()];
    options(nsSelect, [...new Set(all.map((j) => j.metadata.namespace))].sort(), "All namespaces", filters.ns);
    options(clusterSelect, [...new Set(all.map(clusterOf).filter(Boolean))].sort(), "Any cluster", filters.cluster);
    fill(live, jobs.state === "retrying" ? h("span.warn-text", "Reconnecting to the hub…")
      : h("span.muted", { title: "updated by the hub's watch API" }, "● live"));
    if (!all.length) {
      rows.clear();
      current = [];
      fill(tbody);
      fill(count);
      fill(box, empty("No jobs yet.", "Submit one with ", h("code", "federator submit -f job.yaml"),
        " (it appears here at once)."));
      return;
    }
    const needle = filters.q.trim().toLowerCase();
    const column = COLUMNS.find((c) => c.key === filters.sort) || COLUMNS[COLUMNS.length - 1];
    const sign = filters.dir === "desc" ? -1 : 1;
    // sort keys computed once per job, compared plainly (a render must stay cheap at 2,000 jobs and 50
    // updates a second)
    const decorated = [];
    for (const job of all) {
      if (matches(job, filters, needle)) decorated.push([column.sort(job), jobKey(job), job]);
    }
    decorated.sort((a, b) => sign * compare(a[0], b[0]) || compare(a[1], b[1]));
    const shown = decorated.map((d) => d[2]);
    fill(count, `Showing ${shown.length} of ${all.length} jobs`);
    if (!shown.length) {
      rows.clear();
      current = [];
      fill(tbody);
      fill(box, empty("No job matches these filters.", h("button", { type: "button", on: { click: clearFilters } },
        "Clear the filters")));
      return;
    }
    if (table.parentNode !== box) fill(box, table);
    current = shown;
    paint();
    void reset;
    void changed;
  }

  // Windowed rendering: only the rows in and near the window are in the DOM (rows have one fixed height; a
  // spacer row above and below stands for the others), so 2,000 jobs cost what 80 do, and an update to a
  // row out of sight costs nothing but the sort. aria-rowcount/aria-rowindex tell assistive technology
  // where each row is in the whole table.
  function paint() {
    const total = current.length;
    const top = tbody.getBoundingClientRect().top;  // from the window's top
    const from = Math.max(0, Math.floor(-top / rowHeight) - BUFFER_ROWS);
    const to = Math.min(total, Math.max(from, Math.ceil((window.innerHeight - top) / rowHeight)) + BUFFER_ROWS);
    const visible = current.slice(from, to);
    const keys = visible.map(jobKey);
    const keep = new Set(keys);
    for (const [key, row] of rows) {
      if (!keep.has(key)) {
        row.tr.remove();
        rows.delete(key);
      }
    }
    visible.forEach((job, i) => {
      const key = keys[i];
      const row = rows.get(key);
      const version = job.metadata.resourceVersion;
      if (!row || row.version !== version) {
        const built = buildRow(job, deletable(job.metadata.namespace));
        if (row) {
          const focused = row.tr.contains(document.activeElement) ? document.activeElement : null;
          row.tr.replaceWith(built.tr);
          if (focused) (built.tr.querySelector("a") || built.tr).focus();
        }
        rows.set(key, { ...built, version, job, namespace: job.metadata.namespace });
      }
      rows.get(key).tr.setAttribute("aria-rowindex", String(from + i + 2));
    });
    topSpacer.firstChild.style.height = `${from * rowHeight}px`;
    bottomSpacer.firstChild.style.height = `${(total - to) * rowHeight}px`;
    topSpacer.hidden = from === 0;
    bottomSpacer.hidden = to === total;
    table.setAttribute("aria-rowcount", String(total + 1));
    if (topSpacer.parentNode !== tbody) tbody.prepend(topSpacer);
    // reorder: walk the wanted order and move only rows that are out of place
    let previous = topSpacer;
    for (const key of keys) {
      const tr = rows.get(key).tr;
      if (previous.nextSibling !== tr) tbody.insertBefore(tr, previous.nextSibling);
      previous = tr;
    }
    if (previous.nextSibling !== bottomSpacer) tbody.insertBefore(bottomSpacer, previous.nextSibling);
    if (!measured && keys.length) {
      const height = rows.get(keys[0]).tr.getBoundingClientRect().height;
      measured = true;
      if (height > 0 && Math.abs(height - rowHeight) > 0.5) {
        rowHeight = height;
        paint();
        return;
      }
    }
    if (!marked) {
      // when the first table has been painted (after the next frame); bench/ui.py reads it
      marked = true;
      requestAnimationFrame(() => setTimeout(() => performance.mark("federator:jobs-table",
        { detail: { rows: keys.length, total } })));
    }
  }

  let scrolled = 0;
  function onScroll() {
    if (!scrolled) scrolled = requestAnimationFrame(() => { scrolled = 0; if (current.length) paint(); });
  }
  window.addEventListener("scroll", onScroll, { passive: true });
  window.addEventListener("resize", onScroll, { passive: true });

  function clearFilters() {
    Object.assign(filters, { q: "", ns: "", phase: "", cluster: "" });
    search.value = "";
    nsSelect.value = "";
    phaseSelect.value = "";
    clusterSelect.value = "";
    writeFilters(filters);
    render({ reset: true, changed: new Set() });
    search.focus();
  }

  let typing = 0;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      filters.q = search.value;
      writeFilters(filters);
      render({ reset: true, changed: new Set() });
    }, 120);
  });
  for (const [select, key] of [[nsSelect, "ns"], [phaseSelect, "phase"], [clusterSelect, "cluster"]]) {
    select.addEventListener("change", () => {
      filters[key] = select.value;
      writeFilters(filters);
      render({ reset: true, changed: new Set() });
    });
  }
  options(nsSelect, filters.ns ? [filters.ns] : [], "All namespaces", filters.ns);
  options(clusterSelect, filters.cluster ? [filters.cluster] : [], "Any cluster", filters.cluster);
  renderHead();
  const unsubscribe = jobs.subscribe(render);
  render({ reset: true, changed: new Set() });
  return () => {
    unsubscribe();
    window.removeEventListener("scroll", onScroll);
    window.removeEventListener("resize", onScroll);
    cancelAnimationFrame(scrolled);
  };
}

export async function deleteJob(ctx, job, after) {
  const { namespace, name } = job.metadata;
  const sure = await confirmDialog({ title: `Delete job ${namespace}/${name}?`, confirm: "Delete",
    body: "Its pods in the member cluster are deleted first; the job goes once they are gone. This cannot be undone." });
  if (!sure) return false;
  try {
    await ctx.api.request("DELETE", jobsPath(namespace, name));
    toast(`Deleting ${namespace}/${name}: its member objects go first`);
    if (after) after();
    return true;
  } catch (e) {
    toast(`Could not delete ${namespace}/${name}: ${e.message}`, "error");
    return false;
  }
}
