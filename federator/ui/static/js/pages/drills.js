// Drills: the reports of past `federator drill` runs (DrillReports stored by the hub) with their
// figures, one report in full, and a dry-run failover plan started from the page (admin only): the
// hub's memberclusters/NAME/failoverplan, which changes nothing. A live drill faults a cluster from
// the operator's machine (the simulator's fault API, or an operator's hands), so the page shows the
// command instead of starting one.

import { DRILLREPORTS_PATH, clustersPath } from "../api.js";
import { empty, failure, fill, h, loading } from "../dom.js";
import { seconds, timeElement } from "../format.js";

const FAULTS = ["partition", "outage", "node-failure", "drain"];

export function verdict(spec) {
  // as the hub's federator_drill_reports verdict: also every affected gang accounted for (when the report counts them)
  const counted = ["gangsMoved", "gangsUnplaceable", "gangsRodeOut", "gangsRestartedInPlace", "gangsLost"]
    .map((k) => spec[k]);
  const addsUp = !counted.every(Number.isInteger) || counted.reduce((a, b) => a + b, 0) === spec.gangsAffected;
  const passed = spec.jobsLost === 0 && spec.duplicates === 0 && (spec.maxConcurrentCopies || 0) <= 1 && addsUp;
  return passed ? { text: "Passed", kind: "good" } : { text: "Failed", kind: "bad" };
}

function reportHref(name) {
  return `#/drills/${encodeURIComponent(name)}`;
}

function reportsTable(items) {
  return h("table.drills",
    h("caption.visually-hidden", "Drill reports, newest first"),
    h("thead", h("tr", ["Report", "Verdict", "Cluster", "Fault", "Started", "Held", "Affected", "Moved",
      "Unplaceable", "Detect", "Redispatch", "Running again", "Lost", "Max copies"].map((x) =>
      h("th", { scope: "col" }, x)))),
    h("tbody", items.map((report) => {
      const spec = report.spec || {};
      const v = verdict(spec);
      return h("tr", { dataset: { name: report.metadata.name } },
        h("th", { scope: "row" }, h("a", { href: reportHref(report.metadata.name) }, report.metadata.name)),
        h("td", h(`span.badge.${v.kind}`, v.text)),
        h("td", spec.cluster || ""), h("td", spec.fault || ""), h("td", timeElement(spec.startedAt)),
        h("td.num", seconds(spec.durationSeconds)), h("td.num", String(spec.gangsAffected ?? "")),
        h("td.num", String(spec.gangsMoved ?? "")), h("td.num", String(spec.gangsUnplaceable ?? "")),
        h("td.num", seconds(spec.detectSeconds)), h("td.num", seconds(spec.redispatchSeconds)),
        h("td.num", seconds(spec.runningAgainSeconds)), h("td.num", String(spec.jobsLost ?? "")),
        h("td.num", String(spec.maxConcurrentCopies ?? "")));
    })));
}

function reportDetail(report) {
  const spec = report.spec || {};
  const v = verdict(spec);
  const plan = spec.plan || null;
  const gangs = spec.gangs || [];
  const figures = [
    ["Cluster", spec.cluster], ["Fault", spec.fault], ["Mode", spec.mode || "simulated"],
    ["Held for", seconds(spec.durationSeconds)],
    ["Gangs affected", spec.gangsAffected], ["Gangs moved", spec.gangsMoved],
    ["Gangs unplaceable", spec.gangsUnplaceable], ["Gangs that rode it out in place", spec.gangsRodeOut],
    ["Gangs restarted in place", spec.gangsRestartedInPlace], ["Gangs lost", spec.gangsLost],
    ["Seconds to detect", seconds(spec.detectSeconds)],
    ["Seconds to redispatch", seconds(spec.redispatchSeconds)],
    ["Seconds to run again", seconds(spec.runningAgainSeconds)], ["Jobs lost", spec.jobsLost],
    ["Most copies of one job at once", spec.maxConcurrentCopies], ["Duplicates", spec.duplicates],
    ["Stale pods killed", spec.stalePodsKilled],
    ["Moves that matched the plan", spec.planMatched === null || spec.planMatched === undefined ? "—"
      : `${Math.round(spec.planMatched * 100)}%`],
    ["Samples", `${spec.samples || 0} (${spec.unansweredReads || 0} member reads unanswered)`],
  ];
  return h("section.panel", { "aria-labelledby": "report-title" },
    h("h2", { id: "report-title" }, report.metadata.name, " ", h(`span.badge.${v.kind}`, v.text)),
    h("p", "From ", timeElement(spec.startedAt), " to ", timeElement(spec.finishedAt), "."),
    h("dl.facts.figures", figures.map(([k, value]) => [h("dt", k), h("dd", String(value ?? "—"))])),
    plan ? h("p.muted", `Plan (for ${plan.for}, `, timeElement(plan.generatedAt),
      `): ${plan.movable} would move, ${plan.unplaceable} fit nowhere else.`) : null,
    gangs.length ? h("table.gangs",
      h("caption", `Gangs (${gangs.length}${spec.gangsOmitted ? `, ${spec.gangsOmitted} more not listed` : ""})`),
      h("thead", h("tr", ["Gang", "Outcome", "From", "Planned", "Now in", "Placed after", "Running after", "Note"]
        .map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", gangs.map((g) => h("tr",
        h("th", { scope: "row" }, `${g.namespace}/${g.name}`), h("td", g.outcome),
        h("td", `${g.fromCluster} (epoch ${g.fromEpoch})`), h("td", g.plannedTarget || "—"),
        h("td", g.cluster ? `${g.cluster}${g.epoch !== undefined && g.epoch !== null ? ` (epoch ${g.epoch})` : ""}` : "—"),
        h("td.num", seconds(g.placedSeconds)), h("td.num", seconds(g.runningSeconds)), h("td", g.message || ""))))) : null,
    (spec.notes || []).length ? h("ul.notes", spec.notes.map((n) => h("li", n))) : null);
}

function planTable(plan, fault) {
  const gangs = plan.gangs || [];
  const head = h("p", `Failover plan for a ${fault} of ${plan.cluster} (generated `, timeElement(plan.generatedAt),
    `): ${gangs.length} gangs, ${plan.movable || 0} would move, ${plan.unplaceable || 0} fit nowhere else. `,
    h("strong", "Nothing was changed."));
  if (!gangs.length) return [head, h("p.muted", `No active gangs in ${plan.cluster}: nothing would move.`)];
  const rows = gangs.map((g) => {
    let where = g.target || "nowhere";
    if (!g.target && plan.for === "loss" && (g.onClusterLoss === "fail" || g.onClusterLoss === "wait")) {
      where = `— (onClusterLoss ${g.onClusterLoss}: ${g.onClusterLoss === "fail" ? "fails" : "waits"})`;
    }
    const rowsWhy = (g.whyNot || []).filter((r) => r.cluster !== plan.cluster);
    const why = rowsWhy.length ? h("ul.why", rowsWhy.map((r) =>
      h("li", h("strong", r.cluster), `: ${r.filter} ${r.reason}${r.message ? `: ${r.message}` : ""}`))) : "";
    return h("tr", h("th", { scope: "row" }, `${g.namespace}/${g.name}`), h("td.num", String(g.epoch)),
      h("td", g.phase || ""), h("td.num", String(g.pods)), h("td", g.onClusterLoss || ""), h("td", where),
      h("td", why));
  });
  return [head, h("table.plan", h("caption.visually-hidden", "Where each gang would go"),
    h("thead", h("tr", ["Gang", "Epoch", "Phase", "Pods", "On loss", "Would go to", "Why not elsewhere"]
      .map((x) => h("th", { scope: "col" }, x)))), h("tbody", rows))];
}

function planner(ctx, clusterNames) {
  const cluster = h("select", { id: "plan-cluster", required: true },
    clusterNames.map((n) => h("option", { value: n }, n)));
  const fault = h("select", { id: "plan-fault" }, FAULTS.map((f) => h("option", { value: f }, f)));
  const result = h("div.plan-result", { "aria-live": "polite" });
  const command = h("code");
  const button = h("button.primary", { type: "submit" }, "Plan (dry run)");
  function updateCommand() {
    command.textContent = `federator drill --cluster ${cluster.value} --fault ${fault.value} --duration 60s`;
  }
  cluster.addEventListener("change", updateCommand);
  fault.addEventListener("change", updateCommand);
  updateCommand();
  const form = h("form.planner", { "aria-labelledby": "planner-title" },
    h("h2", { id: "planner-title" }, "Plan a drill"),
    h("p.muted", "Where each gang of a cluster would go if it were lost (or drained) now. A dry run: nothing changes."),
    h("div.row", h("div.field", h("label", { for: "plan-cluster" }, "Cluster"), cluster),
      h("div.field", h("label", { for: "plan-fault" }, "Fault"), fault), button),
    h("p.muted", "To run the drill itself (it faults the cluster, observes, and stores a report here): ", command),
    result);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    button.disabled = true;
    fill(result, loading("the plan"));
    try {
      const purpose = fault.value === "drain" ? "drain" : "loss";
      const plan = await ctx.api.get(`${clustersPath(cluster.value)}/failoverplan`, { for: purpose });
      fill(result, planTable(plan, fault.value));
    } catch (e) {
      fill(result, failure("No plan", e));
    } finally {
      button.disabled = false;
    }
  });
  return form;
}

export function mount(root, ctx, [selected]) {
  const list = h("div", loading("drill reports"));
  const detail = h("div");
  const plan = h("div");
  fill(root, h("h1", { tabindex: "-1" }, selected ? `Drill ${selected}` : "Drills"),
    selected ? h("p.crumbs", h("a", { href: "#/drills" }, "← All drills")) : null, detail, plan, list);
  const controller = new AbortController();

  async function load() {
    try {
      const listing = await ctx.api.get(DRILLREPORTS_PATH, undefined, controller.signal);
      const items = (listing.items || []).sort((a, b) =>
        String((b.spec || {}).startedAt || "").localeCompare(String((a.spec || {}).startedAt || "")));
      if (selected) {
        const report = items.find((r) => r.metadata.name === selected);
        fill(detail, report ? reportDetail(report) : empty(`No drill report ${selected}.`));
      }
      fill(list, h("h2", "Reports"), items.length ? reportsTable(items)
        : empty("No drill reports yet.", "Run one with ", h("code", "federator drill --cluster NAME --fault partition"),
          "; its report is stored here."));
    } catch (e) {
      if (e.name !== "AbortError") fill(list, failure("Cannot read the drill reports", e, load));
    }
  }

  // a dry-run plan is for those who may run drills: an admin (it may store reports and read the plan)
  Promise.all([ctx.api.can("create", "drillreports"), ctx.api.can("get", "memberclusters", { subresource: "failoverplan" })])
    .then(async ([mayStore, mayPlan]) => {
      if (!(mayStore && mayPlan) || selected) return;
      try {
        const clusters = await ctx.api.get(clustersPath(), undefined, controller.signal);
        const names = (clusters.items || []).map((c) => c.metadata.name).sort();
        fill(plan, names.length ? planner(ctx, names) : null);
      } catch (e) {
        if (e.name !== "AbortError") fill(plan, failure("Cannot list the clusters to plan a drill", e));
      }
    });
  load();
  return () => controller.abort();
}
