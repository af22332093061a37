"""The metric families federator exports, and the Grafana dashboard that reads them.

- `EXPECTED` is THE list of families (as /metrics names them), with their type and labels: a family added to
  obs.py, or a label added to one, fails here until it is listed (and its labels have a documented bound in
  `LABEL_BOUNDS`). Names follow Prometheus' rules: `federator_` prefix, counters end in `_total`,
  histograms carry their unit.
- A real hub (sqlite, two simulated member clusters, every job controller) runs three jobs with distinct
  names in distinct namespaces to Succeeded, plus three stored DrillReports; its /metrics, read by a viewer,
  exports only expected families, the new ones with the values the run implies, and no label value
  outside its bound (no job name, namespace or uid anywhere).
- deploy/grafana/federator.json is Grafana dashboard JSON whose every panel query names only metrics that
  /metrics of that hub declares, with label names those metrics carry.
- /healthz, /livez and /readyz answer without a token; /metrics needs the viewer or admin role (401 without
  or with a wrong token, 403 for a researcher).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import pytest
from prometheus_client.metrics import MetricWrapperBase

from federator.apis.drillreport import FAULTS
from federator.apis.trainingjob import JobPhase
from federator.controllers.jobs import JOB_PHASES
from federator.obs import MAX_GPU_MODELS_PER_CLUSTER, OTHER_GPU_MODEL, Metrics

from .apis.test_drillreport import report
from .controllers.jobtest_support import phase, wait_until
from .controllers.lifecycle_support import aimed_job, lifecycle_env
from .hub.hubtest_support import GROUP_PATH, start_hub

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "federator.json"

#: every family, as /metrics names it: (type, label names)
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    # store (store/)
    "federator_store_operations_total": ("counter", ("backend", "op", "result")),
    "federator_store_operation_seconds": ("histogram", ("backend", "op")),
    "federator_store_retries_total": ("counter", ("backend", "op")),
    "federator_store_watch_events_total": ("counter", ("backend",)),
    "federator_store_size_bytes": ("gauge", ("backend",)),
    "federator_store_keys": ("gauge", ("backend",)),
    "federator_store_compactions_total": ("counter", ("backend",)),
    "federator_store_encryption_provider": ("gauge", ("resource", "writes")),
    "federator_leader": ("gauge", ("backend",)),
    "federator_leader_transitions_total": ("counter", ("backend", "event")),
    # loops
    "federator_loop_phase_seconds": ("histogram", ("loop", "phase")),
    # API servers (hub and simulator)
    "federator_api_requests_total": ("counter", ("server", "verb", "resource", "code")),
    "federator_api_request_seconds": ("histogram", ("server", "verb")),
    "federator_api_watchers": ("gauge", ("server", "resource")),
    # Events the hub's controllers record (apiserver/events.py)
    "federator_events_total": ("counter", ("result",)),
    # the audit log (apiserver/audit.py)
    "federator_audit_events_total": ("counter", ("result",)),
    # member clusters (clusters/)
    "federator_member_requests_total": ("counter", ("cluster", "verb", "code")),
    "federator_member_request_seconds": ("histogram", ("cluster", "verb")),
    "federator_member_watch_events_total": ("counter", ("cluster", "resource", "type")),
    "federator_member_relists_total": ("counter", ("cluster", "resource", "reason")),
    "federator_member_watch_restarts_total": ("counter", ("cluster", "resource", "reason")),
    "federator_member_sync_lag_seconds": ("histogram", ("cluster",)),
    "federator_member_condition": ("gauge", ("cluster", "condition")),
    "federator_member_condition_transitions_total": ("counter", ("cluster", "condition", "status")),
    "federator_member_snapshot_nodes": ("gauge", ("cluster",)),
    "federator_member_free_gpus": ("gauge", ("cluster", "gpu_model")),
    "federator_member_allocatable_gpus": ("gauge", ("cluster", "gpu_model")),
    "federator_checkpoint_flushes_total": ("counter", ("result",)),
    "federator_checkpoint_keys_written_total": ("counter", ()),
    "federator_checkpoint_written_bytes_total": ("counter", ()),
    # jobs: queue, placement, dispatch, lifecycle
    "federator_jobs": ("gauge", ("phase",)),
    "federator_placement_queue_depth": ("gauge", ()),
    "federator_placement_decision_latency_seconds": ("histogram", ()),
    "federator_placement_decisions_total": ("counter", ("result",)),
    "federator_dispatches_total": ("counter", ("cluster", "result")),
    "federator_dispatch_seconds": ("histogram", ("cluster",)),
    "federator_job_requeues_total": ("counter", ("reason",)),
    "federator_member_orphans_collected_total": ("counter", ("cluster", "reason")),
    "federator_gangs_pulled_back_total": ("counter", ("cluster",)),
    # failover and drills
    "federator_failovers_total": ("counter", ("cluster", "outcome")),
    "federator_hub_partitioned": ("gauge", ()),
    "federator_drill_reports": ("gauge", ("fault", "verdict")),
    "federator_member_lease_renewals_total": ("counter", ("cluster", "result")),
    # simulator (only in a process that runs simulated clusters)
    "federator_sim_pods_bound_total": ("counter", ("cluster",)),
    "federator_sim_faults_total": ("counter", ("cluster", "fault")),
}

#: every label name, and why its values are bounded
LABEL_BOUNDS: dict[str, str] = {
    "backend": "the store backends: memory, sqlite, etcd, and fenced (a leader's writes through the fence)",
    "op": "store operation names written in store/ (get, range, txn, compact, ...)",
    "result": "outcome words written in code (ok, error, conflict, unavailable, placed, failed, ...)",
    "event": "leadership events written in store/leader.py (acquired, lost, ...)",
    "loop": "background loop names written in code",
    "phase": "loop phases written in code; for federator_jobs the TrainingJob phases",
    "server": "'hub', or 'sim:' + a simulated cluster's profile name",
    "verb": "kube verbs (get, list, watch, create, update, patch, delete, deletecollection), 'probe' and "
            "'discovery' (a member's API discovery document)",
    "resource": "the kinds a server serves (plural.group, optionally /subresource)",
    "code": "an HTTP status code, or the class name of a client-side error",
    "cluster": "names of registered MemberClusters (or profiles of simulated ones)",
    "type": "watch event types: ADDED, MODIFIED, DELETED, BOOKMARK",
    "reason": "reason words written in code (initial, expired, timeout, DispatchFailed, ClusterLost, ...)",
    "condition": "MemberCluster condition types (Reachable, Synced, Ready, Lost)",
    "status": "condition statuses: True, False, Unknown",
    "gpu_model": f"GPU models normalised from node labels, at most {MAX_GPU_MODELS_PER_CLUSTER} per cluster "
                 f"(the rest summed as '{OTHER_GPU_MODEL}')",
    "outcome": "failover outcomes: requeued, failed, waiting, requeue_limit",
    "fault": "drill faults (partition, outage, node-failure, drain) or simulator fault names",
    "verdict": "passed, failed",
    "writes": "provider:keyname of the --encryption-provider-config's first provider per resource (key names "
              "from that file, never a key)",
}

#: values some labels may take, where the set is closed (label, or (family, label))
CLOSED: dict[Any, set[str]] = {
    ("federator_jobs", "phase"): set(JOB_PHASES),
    "backend": {"memory", "sqlite", "etcd", "fenced"},
    "type": {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"},
    "status": {"True", "False", "Unknown"},
    "condition": {"Reachable", "Synced", "Ready", "Lost"},
    "verdict": {"passed", "failed"},
    ("federator_drill_reports", "fault"): set(FAULTS),
    "verb": {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "probe",
             "discovery"},
    "outcome": {"requeued", "failed", "waiting", "requeue_limit"},
}
#: a word written in code: no slashes, dots or spaces, short
CODE_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_:-]{0,47}$")
CLUSTERS = ("onprem-rdma-a100", "cloud-eth-h100")
#: what gpu_model_name makes of the simulated clusters' products (tests/controllers/jobtest_support.STANDARD)
GPU_MODELS = {"A100", "H100"}


def exported_name(metric: MetricWrapperBase) -> str:
    return metric._name + ("_total" if metric._type == "counter" else "")  # type: ignore[attr-defined]


def registry_families(metrics: Metrics) -> dict[str, tuple[str, tuple[str, ...]]]:
    found = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            found[exported_name(value)] = (value._type, tuple(value._labelnames))  # type: ignore[attr-defined]
    return found


def test_every_family_is_expected_and_named_by_the_rules() -> None:
    found = registry_families(Metrics())
    assert found == EXPECTED, (f"new or changed families: {sorted(set(found.items()) - set(EXPECTED.items()))}; "
                               f"gone: {sorted(set(EXPECTED.items()) - set(found.items()))}")
    for name, (kind, labels) in found.items():
        assert name.startswith("federator_"), name
        assert name.endswith("_total") == (kind == "counter"), name
        if kind == "histogram":
            assert name.endswith(("_seconds", "_bytes")), f"{name}: a histogram names its unit"
        if "seconds" in name or "bytes" in name:
            assert re.search(r"_(seconds|bytes)(_total)?$", name), f"{name}: the unit ends the name"
        assert "le" not in labels and "quantile" not in labels


def test_every_label_has_a_documented_bound_and_none_names_a_job() -> None:
    for name, (_, labels) in EXPECTED.items():
        for label in labels:
            assert label in LABEL_BOUNDS, f"{name}: label {label!r} has no documented bound"
            assert not re.search(r"job|uid|namespace|name$|user|token|url|server_address|path", label), \
                f"{name}: label {label!r} would take unbounded values"


# ---------------------------------------------------------------- a hub that ran jobs


@dataclass
class Scrape:
    text: str
    job_names: list[str]
    namespaces: list[str]
    uids: list[str]


def parse_exposition(text: str) -> tuple[dict[str, str], list[tuple[str, dict[str, str], float]]]:
    """(family -> type from the # TYPE lines, [(sample name, labels, value)])."""
    from prometheus_client.parser import text_string_to_metric_families

    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    samples = [(s.name, dict(s.labels), float(s.value))
               for family in text_string_to_metric_families(text) for s in family.samples]
    return types, samples


async def _run_jobs_and_scrape(directory: Path) -> Scrape:
    suffix = secrets.token_hex(4)
    async with lifecycle_env(directory, list(CLUSTERS), run_seconds=0.5) as env:
        jobs = [aimed_job(f"obs-alpha-{suffix}", CLUSTERS[0], namespace=f"obs-ns-a-{suffix}"),
                aimed_job(f"obs-beta-{suffix}", CLUSTERS[1], namespace=f"obs-ns-b-{suffix}"),
                aimed_job(f"obs-gamma-{suffix}", CLUSTERS[0], namespace=f"obs-ns-a-{suffix}")]
        uids = [(await env.api.submit(job))["metadata"]["uid"] for job in jobs]
        for job in jobs:
            meta = job["metadata"]
            await env.api.wait_job(meta["namespace"], meta["name"], lambda j: phase(j) == "Succeeded",
                                   timeout=90, what="Succeeded")
        passed, failed = report(), report()
        failed["metadata"]["name"] = "drill-failed"
        failed["spec"].update(fault="outage", duplicates=1, maxConcurrentCopies=2)
        short = report()  # counts 3 of 5 affected gangs: an accounting violation fails the drill's bar
        short["metadata"]["name"] = "drill-short"
        short["spec"].update(fault="drain", gangsAffected=5, gangsRodeOut=0, gangsRestartedInPlace=0, gangsLost=0)
        for body in (passed, failed, short):
            status, answer = await env.hub.request("POST", f"{GROUP_PATH}/drillreports", body=body)
            assert status == 201, answer
        metrics = env.hub.metrics

        def settled() -> bool:
            # every job finished, its GPUs free again (each cluster: 4 nodes of 8), the store's size read
            free = metrics.member_free_gpus
            return (metrics.jobs.labels(phase="Succeeded")._value.get() == len(jobs)
                    and free.labels(cluster=CLUSTERS[0], gpu_model="A100")._value.get() == 4 * 8
                    and free.labels(cluster=CLUSTERS[1], gpu_model="H100")._value.get() == 4 * 8
                    and metrics.store_size_bytes.labels(backend="sqlite")._value.get() > 0)

        await wait_until(settled, timeout=30, what="the job, capacity and store gauges")
        status, text = await env.hub.request("GET", "/metrics", who="viewer")
        assert status == 200, text
        return Scrape(text=text, job_names=[j["metadata"]["name"] for j in jobs],
                      namespaces=sorted({j["metadata"]["namespace"] for j in jobs}), uids=uids)


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Scrape:
    return asyncio.run(_run_jobs_and_scrape(tmp_path_factory.mktemp("metrics")))


@pytest.mark.slow
def test_a_hub_that_ran_jobs_exports_only_expected_families_with_bounded_labels(scrape: Scrape) -> None:
    types, samples = parse_exposition(scrape.text)
    unexpected = {name: kind for name, kind in types.items() if EXPECTED.get(name, ("", ()))[0] != kind}
    assert not unexpected, f"families /metrics exports that are not expected (or of another type): {unexpected}"
    hub_families = {name for name in EXPECTED if not name.startswith("federator_sim_")}
    assert hub_families <= set(types), f"missing: {sorted(hub_families - set(types))}"
    for name, labels, _ in samples:
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in EXPECTED else name
        assert family in EXPECTED, name
        allowed = set(EXPECTED[family][1]) | ({"le"} if name.endswith("_bucket") else set())
        assert set(labels) == allowed, (name, labels)
        for label, value in labels.items():
            if label == "le":
                continue
            for secret in (*scrape.job_names, *scrape.namespaces, *scrape.uids):
                assert secret not in value, f"{name}{{{label}={value!r}}} names a job"
            closed = CLOSED.get((family, label), CLOSED.get(label))
            if closed is not None:
                assert value in closed, (name, label, value)
            elif label == "cluster":
                assert value in CLUSTERS, (name, value)
            elif label == "gpu_model":
                assert value in GPU_MODELS | {OTHER_GPU_MODEL, "unknown"}, (name, value)
            elif label == "code":
                assert re.fullmatch(r"\d{3}|[A-Z][A-Za-z]{2,63}", value), (name, value)
            elif label == "resource":
                assert re.fullmatch(r"[a-z0-9.-]{1,253}(/[a-z]{1,32})?", value) and value.count("/") <= 1, \
                    (name, value)
            elif label == "server":
                assert value == "hub", (name, value)
            else:
                assert CODE_WORD.fullmatch(value), (name, label, value)


@pytest.mark.slow
def test_the_new_families_say_what_the_run_did(scrape: Scrape) -> None:
    _, samples = parse_exposition(scrape.text)

    def value(name: str, **labels: str) -> float:
        found = [v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in labels.items())]
        assert found, f"no sample {name}{labels}"
        return sum(found)

    assert value("federator_jobs", phase="Succeeded") == 3
    assert {lab["phase"] for n, lab, _ in samples if n == "federator_jobs"} == set(get_args(JobPhase))
    assert value("federator_jobs") == 3  # every job counted once
    assert value("federator_placement_queue_depth") == 0
    # one decision per dispatch: on a loaded machine a member create may time out, and the job is placed again
    dispatched = value("federator_dispatches_total")
    assert value("federator_dispatches_total", result="ok") == 3
    assert value("federator_placement_decision_latency_seconds_count") == dispatched
    assert value("federator_member_free_gpus", cluster=CLUSTERS[0], gpu_model="A100") == 4 * 8
    assert value("federator_member_allocatable_gpus", cluster=CLUSTERS[1], gpu_model="H100") == 4 * 8
    assert value("federator_drill_reports", fault="partition", verdict="passed") == 1
    assert value("federator_drill_reports", fault="outage", verdict="failed") == 1
    assert value("federator_drill_reports", fault="drain", verdict="failed") == 1
    assert value("federator_drill_reports") == 3
    assert value("federator_store_size_bytes", backend="sqlite") > 0
    # each job's Placed, Dispatched and Running Events at least (the last ones may still be on their way)
    assert value("federator_events_total", result="written") >= 3 * 3


# ---------------------------------------------------------------- the dashboard

PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless",
    "le", "inf", "nan",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: strings, range and offset selectors, label matchers and
    by/without/on/ignoring clauses removed; what is left that is not a function call, keyword or number."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"(?<![A-Za-z0-9_:])\d[A-Za-z0-9_.]*", "", text)  # numbers and durations (0.95, 5m, 1e3)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word, rest = match.group(0), text[match.end():]
        if rest.lstrip().startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric, label names matched) for each `metric{...}` selector of a PromQL expression."""
    return [(m.group(1), set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", m.group(2))))
            for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}", expr)]


def grouping_labels(expr: str) -> set[str]:
    return {label.strip() for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr)
            for label in clause.split(",") if label.strip()}


def dashboard_panels() -> list[dict[str, Any]]:
    board = json.loads(DASHBOARD.read_text())
    panels: list[dict[str, Any]] = []
    for panel in board["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels") or ())
    return panels


def test_the_dashboard_is_grafana_dashboard_json() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert board["title"] and board["uid"] and isinstance(board["panels"], list)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard_panels()]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    rows = [p["title"] for p in dashboard_panels() if p["type"] == "row"]
    assert rows == ["Queue and placements", "Member clusters: sync and capacity", "Dispatch", "Failover and drills",
                    "Hub: store, API, leadership"]
    for panel in dashboard_panels():
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)) and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        for target in panel["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
            assert "$__rate_interval" in expr or not re.search(r"\b(rate|increase)\(", expr), expr
            # every variable a query uses is defined (or is one of Grafana's own)
            for var in re.findall(r"\$\{?([A-Za-z_]+)", expr):
                assert var in variables or var.startswith("__"), (panel["title"], var)


def test_metric_names_are_read_out_of_promql() -> None:
    expr = ('histogram_quantile(0.95, sum by (le, cluster) (rate(federator_x_seconds_bucket{cluster=~"$c",'
            'a!="b{c}"}[5m]))) / on (cluster) group_left max(federator_y) - 1 + foo offset 5m')
    assert metric_names(expr) == {"federator_x_seconds_bucket", "federator_y", "foo"}
    assert selectors(expr) == [("federator_x_seconds_bucket", {"cluster", "a"})]
    assert grouping_labels(expr) == {"le", "cluster"}


@pytest.mark.slow
def test_every_dashboard_query_names_metrics_the_hub_exports(scrape: Scrape) -> None:
    types, _ = parse_exposition(scrape.text)
    # what a Prometheus server stores for each declared family
    series_names: dict[str, str] = {}
    for name, kind in types.items():
        for series in ((f"{name}_bucket", f"{name}_sum", f"{name}_count") if kind == "histogram" else (name,)):
            series_names[series] = name
    queried = set()
    for panel in dashboard_panels():
        for target in panel.get("targets") or ():
            expr = target["expr"]
            names = metric_names(expr)
            assert names, (panel["title"], expr)
            for name in names:
                assert name in series_names, f"panel {panel['title']!r}: {name} is not exported by the hub"
                queried.add(series_names[name])
            labels_of = {n: set(EXPECTED[series_names[n]][1]) | ({"le"} if n.endswith("_bucket") else set())
                         for n in names}
            for name, matched in selectors(expr):
                assert matched <= labels_of[name], (panel["title"], name, matched - labels_of[name])
            grouped = grouping_labels(expr)
            assert grouped <= set().union(*labels_of.values()), (panel["title"], grouped)
    # the rows: queue and placements, sync lag and capacity, dispatch errors, failovers, store latency
    assert {"federator_jobs", "federator_placement_queue_depth", "federator_placement_decisions_total",
            "federator_placement_decision_latency_seconds", "federator_member_sync_lag_seconds",
            "federator_member_free_gpus", "federator_dispatches_total", "federator_failovers_total",
            "federator_store_operation_seconds", "federator_drill_reports"} <= queried


# ---------------------------------------------------------------- who may read what


@pytest.mark.parametrize(("who", "expected"), [(None, 401), ("wrong", 401), ("researcher", 403),
                                               ("viewer", 200), ("admin", 200)])
async def test_metrics_needs_the_viewer_role_and_probes_need_no_token(tmp_path: Path, who: str | None,
                                                                      expected: int) -> None:
    async with start_hub(tmp_path / "hub") as hub:
        status, body = await hub.request("GET", "/metrics", who=who)
        assert status == expected, body
        if expected == 200:
            assert "# TYPE federator_jobs gauge" in body
        else:
            assert body["kind"] == "Status" and body["code"] == expected and "federator_" not in json.dumps(body)
        for probe in ("/healthz", "/livez", "/readyz"):
            status, text = await hub.request("GET", probe, who=who)
            assert status == 200, (probe, text)
