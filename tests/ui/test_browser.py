"""The web dashboard in a real browser: Debian's Chromium driven by Playwright, against `federator up`.

One `federator up` (three simulated clusters, pods that run for an hour) and one browser serve the whole
module (xdist_group: `make test` keeps it on one worker). Jobs are submitted through the API (kubectl), and
the browser is checked against what the API says:

- an admin signs in with a token (the form); the cluster cards and their GPU bars match the MemberClusters;
- a job submitted while the jobs page is open appears without a reload and moves to Running; its page shows
  the placement's score breakdown as the status records it, the history as a timeline, the pods per role,
  and each member pod with its node and phase as the member cluster itself lists them (kubectl with the
  member's kubeconfig), asked again while the page stays open;
- a job that fits nowhere shows the why-not table, row for row as in its status;
- a researcher, through `federator dashboard` (the kubeconfig proxy), sees only their namespace and none of
  the admin's actions; a job elsewhere is refused;
- an admin plans a drill (dry run) and reads a stored DrillReport; cordons and uncordons a cluster;
  deletes a job and its row goes;
- every input has a label, the jobs page works from the keyboard, a narrow window does not scroll sideways;
- no token ever appears in a URL the browser requested, nor in the hub's or the proxy's output.

Screenshots of every page go to artifacts/ui/ (FEDERATOR_UI_ARTIFACTS overrides; gitignored).
Needs Chromium at /usr/bin/chromium (FEDERATOR_CHROMIUM overrides), which `make test` installs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.e2e_support import EXAMPLE, ROOT, FederatorUp, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.xdist_group("ui-browser")]

CHROMIUM = os.environ.get("FEDERATOR_CHROMIUM", "/usr/bin/chromium")
#: the flags this machine's Chromium needs headless as root, with no network beyond loopback
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(os.environ.get("FEDERATOR_UI_ARTIFACTS") or ROOT / "artifacts" / "ui")
PROFILES = ROOT / "clusterconfigs" / "sim"
CLUSTERS = ("onprem-rdma-a100", "cloud-native-gang", "onprem-kai-h100")
TIMEOUT_MS = 60_000  # a limit, not a measurement: a loaded 2-core machine with two CPU hogs needs it


def _sync_playwright() -> Any:
    """Playwright's sync API, or a skip (a failure in CI) naming what is missing."""
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing.append("the playwright package (pip install -e '.[dev]')")
        sync_playwright = None
    if not Path(CHROMIUM).exists():
        missing.append(f"Chromium at {CHROMIUM} (make test installs Debian's chromium)")
    if missing:
        message = "the browser tests need " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return sync_playwright


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FederatorUp]:
    profiles = [arg for name in CLUSTERS for arg in ("--sim-profile", str(PROFILES / f"{name}.yaml"))]
    running = FederatorUp(tmp_path_factory.mktemp("ui-up"), *profiles, "--sim-ephemeral",
                          "--sim-run-seconds", "3600")
    try:
        running.start()
        wait_for("every simulated cluster Ready", lambda: all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in (mc.get("status") or {}).get("conditions") or ())
            for mc in running.json("get", "mc")["items"]) and len(running.json("get", "mc")["items"]) == 3,
            timeout=90)
        yield running
    finally:
        assert running.stop() == 0, running.other_stderr[-20:]


def tokens(up: FederatorUp) -> dict[str, str]:
    """user -> token of the dev token file."""
    found = {}
    for line in (up.state / "tokens.csv").read_text().splitlines():
        if line and not line.startswith("#"):
            token, user = line.split(",")[:2]
            found[user] = token
    return found


def hub_url(up: FederatorUp) -> str:
    return str(up.event("hub ready")["url"])


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_playwright = _sync_playwright()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


#: every URL any page of this module requested (checked for tokens at the end)
REQUESTED: list[str] = []


def new_page(browser: Any, **options: Any) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, **options)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.on("request", lambda request: REQUESTED.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors
    return page


@pytest.fixture(scope="module")
def admin(up: FederatorUp, browser: Any) -> Iterator[Any]:
    """An admin's page, signed in with the token through the sign-in form."""
    page = new_page(browser, ignore_https_errors=True)
    page.goto(hub_url(up) + "/ui/")
    page.get_by_label("Bearer token").fill(tokens(up)["admin"])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector("article.card")
    yield page
    assert page.errors == []
    page.context.close()


@pytest.fixture(scope="module")
def proxy(up: FederatorUp) -> Iterator[dict[str, Any]]:
    """`federator dashboard` with the researcher's kubeconfig (namespace default)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    env.pop("KUBECONFIG", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "federator.cli", "dashboard", "--port", "0", "--kubeconfig",
         str(up.state / "researcher.kubeconfig")],
        cwd=up.workdir, env=env, text=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    lines = []
    url = ""
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("Dashboard: "):
            url = line.split()[1]
        if "Ctrl-C stops it" in line:
            break
    assert url.startswith("http://127.0.0.1:"), lines
    running = {"url": url, "lines": lines, "stderr": ""}
    yield running
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=20)
    running["lines"] += out.splitlines()
    running["stderr"] = err
    assert process.returncode == 0, err
    for token in tokens(up).values():
        assert token not in out and token not in err and all(token not in line for line in lines)


@pytest.fixture(scope="module")
def researcher(proxy: dict[str, Any], browser: Any) -> Iterator[Any]:
    page = new_page(browser)
    page.goto(proxy["url"])
    page.wait_for_selector("article.card")
    yield page
    assert page.errors == []
    page.context.close()


def shot(page: Any, name: str) -> None:
    """A screenshot of the whole page, once its text has nothing a template left unfilled."""
    text = page.inner_text("body")
    for leftover in ("[object ", "undefined", "NaN", "null"):
        assert leftover not in text, (name, leftover, text[:2000])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def submit(up: FederatorUp, namespace: str, name: str, **spec: Any) -> None:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"].update(spec)
    path = up.workdir / f"{namespace}-{name}.json"
    path.write_text(json.dumps(body))
    up.kubectl("create", "-f", str(path))


def job_json(up: FederatorUp, namespace: str, name: str) -> dict[str, Any]:
    return dict(up.json("get", "tj", name, "-n", namespace))


def go(page: Any, route: str) -> None:
    """Navigate inside the page (a hash route: no reload)."""
    page.evaluate("route => { window.location.hash = route; }", route)


# ---------------------------------------------------------------- the tests, in the order they build on each other


def test_signed_in_admin_sees_cluster_cards_that_match_the_api(up: FederatorUp, admin: Any) -> None:
    assert admin.locator("#who").inner_text().startswith("admin")

    def cards_match() -> bool:
        clusters = up.json("get", "mc")["items"]
        shown = admin.eval_on_selector_all("article.card", """cards => cards.map(card => ({
            name: card.dataset.cluster,
            badges: [...card.querySelectorAll('.badge')].map(b => b.textContent),
            facts: Object.fromEntries([...card.querySelectorAll('dt')].map(dt => [dt.textContent,
                                                                                dt.nextElementSibling.textContent])),
            bars: Object.fromEntries([...card.querySelectorAll('.bar-row')].map(row => [row.dataset.model,
                [Number(row.dataset.free), Number(row.dataset.total), row.querySelector('.nums').textContent,
                 row.querySelector('.bar').getAttribute('aria-valuenow')]])),
        }))""")
        if sorted(c["name"] for c in shown) != sorted(mc["metadata"]["name"] for mc in clusters):
            return False
        by_name = {c["name"]: c for c in shown}
        for mc in clusters:
            card = by_name[mc["metadata"]["name"]]
            capacity = mc["status"]["capacity"]
            expected = {model: [g["free"], g["total"], f"{g['free']} / {g['total']} free", str(g["free"])]
                        for model, g in capacity["gpusByModel"].items()}
            if card["bars"] != expected or "Ready" not in card["badges"]:
                return False
            assert card["facts"]["Scheduler"] == mc["spec"]["scheduler"]["name"]
            assert card["facts"]["Fabric"].lower().startswith(mc["spec"]["network"]["type"])
            assert card["facts"]["Nodes"] == f"{capacity['readyNodes']} ready of {capacity['nodes']}"
        return True

    wait_for("the cards to show what the API says", cards_match, timeout=30)
    summary = admin.locator("p.summary").inner_text()
    assert summary.startswith("3 member clusters")
    shot(admin, "federation")


def test_a_submitted_job_appears_without_reload_and_moves_to_running(up: FederatorUp, admin: Any) -> None:
    go(admin, "#/jobs")
    admin.wait_for_selector("h1:text('Jobs')")
    admin.evaluate("() => { window.notReloaded = true; }")
    submit(up, "vision", "live-1")
    row = admin.locator('tr[data-key="vision/live-1"]')
    row.wait_for()
    admin.wait_for_selector('tr[data-key="vision/live-1"][data-phase="Running"]', timeout=90_000)
    assert admin.evaluate("() => window.notReloaded") is True  # live updates, no reload
    placed = job_json(up, "vision", "live-1")["status"]["placement"]["cluster"]
    cells = row.locator("td, th").all_inner_texts()
    assert cells[:6] == ["vision", "live-1", "", "Running", placed, "32"]
    shot(admin, "jobs")


def test_the_job_page_shows_the_decision_history_and_pods(up: FederatorUp, admin: Any) -> None:
    go(admin, "#/jobs/vision/live-1")
    admin.wait_for_selector('div.job[data-phase="Running"] ol.timeline')
    status = job_json(up, "vision", "live-1")["status"]
    events = admin.eval_on_selector_all("ol.timeline li.entry", "items => items.map(i => i.dataset.event)")
    assert events == [entry["event"] for entry in status["history"]][:len(events)]
    assert {"Placed", "Dispatched", "Running"} <= set(events)
    decision = admin.locator("p.decision").inner_text()
    assert status["placement"]["cluster"] in decision
    why_not = admin.eval_on_selector_all("table.why-not tbody tr", "rows => rows.map(r => r.cells[0].textContent)")
    assert why_not == [row["cluster"] for row in status["placement"]["whyNot"]]
    pods = admin.eval_on_selector_all("table.pods tbody tr",
                                      "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert [(p[0], p[1], p[5]) for p in pods] == [("ps", "2", "2"), ("worker", "8", "8")]

    # the score breakdown: plugin by plugin as status.placement.scores records it, then the runners-up
    scores = status["placement"]["scores"]
    assert scores[0]["cluster"] == status["placement"]["cluster"]
    admin.wait_for_selector("table.scores tbody tr")
    parts = admin.eval_on_selector_all("table.scores tbody tr", """rows => rows.map(r => [r.cells[0].textContent,
        Number(r.cells[3].textContent), Number(r.cells[4].querySelector('[role=meter]').getAttribute('aria-valuenow'))])""")
    assert [p[0] for p in parts] == [p["plugin"] for p in scores[0]["parts"]]
    for (_, shown, bar), part in zip(parts, scores[0]["parts"], strict=True):
        assert abs(shown - part["weighted"]) <= 0.05 + 1e-9 and abs(bar - part["weighted"]) <= 0.05 + 1e-9
    total = float(admin.locator("table.scores tfoot td").nth(2).inner_text())
    assert abs(total - scores[0]["total"]) <= 0.05 + 1e-9
    runners_up = admin.eval_on_selector_all("table.runners-up tbody tr", "rows => rows.map(r => r.cells[0].textContent)")
    assert runners_up == [row["cluster"] for row in scores[1:]]

    # each member pod with its node and phase, as the member cluster itself lists them
    job = job_json(up, "vision", "live-1")
    cluster, epoch = job["status"]["placement"]["cluster"], job["status"]["placement"]["epoch"]
    selector = f"federator.dev/job-uid={job['metadata']['uid']},federator.dev/epoch={epoch}"

    def member_pods() -> list[list[Any]]:
        items = up.json("get", "pods", "-n", "vision", "-l", selector, kubeconfig=up.member(cluster))["items"]
        return sorted([p["metadata"]["labels"]["federator.dev/role"], int(p["metadata"]["labels"]["federator.dev/index"]),
                       p["metadata"]["name"], p["spec"].get("nodeName") or "not bound yet", p["status"]["phase"]]
                      for p in items)

    def page_pods() -> list[list[Any]]:
        return sorted(admin.eval_on_selector_all("table.member-pods tbody tr", """rows => rows.map(r => [
            r.closest('table').dataset.role, Number(r.cells[0].textContent), r.cells[1].textContent,
            r.cells[2].textContent, r.cells[3].textContent])"""))

    def both_match() -> list[list[Any]] | None:
        member = member_pods()
        return member if len(member) == 10 and page_pods() == member else None

    matched = wait_for("the page's member pods to match the member's own", both_match, timeout=30)
    assert {p[4] for p in matched} == {"Running"} and all(p[3] != "not bound yet" for p in matched)
    assert admin.eval_on_selector_all("table.member-pods", "ts => ts.map(t => t.dataset.role)") == ["ps", "worker"]
    # asked again while the page stays open (the poll while visible; the next request is waited for)
    with admin.expect_request(lambda request: request.url.endswith("/namespaces/vision/trainingjobs/live-1/pods"),
                              timeout=20_000):
        pass
    shot(admin, "job-running")


def test_a_job_that_fits_nowhere_shows_the_why_not_table(up: FederatorUp, admin: Any) -> None:
    roles = [{"name": "worker", "replicas": 200,
              "template": {"image": "trainer:1.4", "resources": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 8}}}]
    submit(up, "default", "too-big", roles=roles, placement=None)
    rows = wait_for("its why-not rows", lambda: ((job_json(up, "default", "too-big").get("status") or {})
                                                  .get("placement") or {}).get("whyNot"))
    go(admin, "#/jobs/default/too-big")
    admin.wait_for_selector("table.why-not tbody tr")
    admin.wait_for_function("n => document.querySelectorAll('table.why-not tbody tr').length === n", arg=len(rows))
    shown = admin.eval_on_selector_all("table.why-not tbody tr",
                                       "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert shown == [[r["cluster"], r["filter"], r["reason"], r.get("message", "")] for r in rows]
    assert {r["cluster"] for r in rows} == set(CLUSTERS)
    assert "TooLargeForAnyCluster" in admin.locator("p.decision").inner_text()
    assert admin.locator("caption", has_text="Why not the other clusters").count() == 1  # describe's words
    shot(admin, "job-unplaceable")


def test_a_researcher_sees_only_their_own_namespace_through_the_proxy(up: FederatorUp, researcher: Any) -> None:
    assert "namespace default" in researcher.locator("#who").inner_text()
    assert researcher.locator("#who").get_by_text("via proxy").count() == 1
    assert researcher.get_by_role("button", name="Cordon").count() == 0  # not an admin: no cluster actions
    go(researcher, "#/jobs")
    researcher.wait_for_selector('tr[data-key="default/too-big"]')
    keys = researcher.eval_on_selector_all("table.jobs tbody tr[data-key]", "rows => rows.map(r => r.dataset.key)")
    assert keys and all(key.startswith("default/") for key in keys), keys
    assert "vision/live-1" not in keys
    assert researcher.locator("#job-ns option").all_inner_texts() == ["All namespaces", "default"]
    assert researcher.locator("#job-cluster option").all_inner_texts() == ["Any cluster"]  # none placed
    # their own job may be deleted by them: the button comes once the hub said so (SelfSubjectAccessReview)
    researcher.get_by_role("button", name="Delete job default/too-big").wait_for()
    shot(researcher, "jobs-researcher")
    # another namespace's job: the hub refuses, the page says so
    go(researcher, "#/jobs/vision/live-1")
    researcher.wait_for_selector(".state.error")
    assert "cannot" in researcher.locator(".state.error").inner_text().lower()
    assert researcher.locator("table.why-not").count() == 0
    # drills: reports may be read, a plan may not be made
    go(researcher, "#/drills")
    researcher.wait_for_selector("h2:text('Reports')")
    assert researcher.locator("form.planner").count() == 0


def test_drills_list_reports_and_an_admin_plans_a_dry_run(up: FederatorUp, admin: Any) -> None:
    report = {
        "apiVersion": "federator.dev/v1alpha1", "kind": "DrillReport", "metadata": {"name": "drill-ui-test"},
        "spec": {"cluster": "onprem-rdma-a100", "fault": "partition", "gangsAffected": 2, "gangsMoved": 2,
                 "gangsUnplaceable": 0, "detectSeconds": 61.5, "redispatchSeconds": 63.0,
                 "runningAgainSeconds": 66.5, "jobsLost": 0, "maxConcurrentCopies": 1, "duplicates": 0,
                 "stalePodsKilled": 20, "planMatched": 1.0, "durationSeconds": 90.0,
                 "startedAt": "2026-05-01T12:00:00Z", "finishedAt": "2026-05-01T12:02:00Z"},
    }
    path = up.workdir / "drillreport.json"
    path.write_text(json.dumps(report))
    up.kubectl("create", "-f", str(path))
    go(admin, "#/drills")
    row = admin.locator('table.drills tr[data-name="drill-ui-test"]')
    row.wait_for()
    assert "Passed" in row.inner_text() and "62 s" in row.inner_text()  # detectSeconds 61.5
    planner = admin.locator("form.planner")
    planner.get_by_label("Cluster").select_option("onprem-rdma-a100")
    planner.get_by_label("Fault").select_option("partition")
    planner.get_by_role("button", name="Plan (dry run)").click()
    admin.wait_for_selector("table.plan tbody tr")
    gangs = admin.eval_on_selector_all("table.plan tbody tr th", "cells => cells.map(c => c.textContent)")
    assert gangs == ["vision/live-1"]
    assert "Nothing was changed." in admin.locator(".plan-result").inner_text()
    shot(admin, "drills")
    row.get_by_role("link").click()
    admin.wait_for_selector("#report-title")
    assert "Passed" in admin.locator("#report-title").inner_text()


def test_an_admin_cordons_and_uncordons_a_cluster(up: FederatorUp, admin: Any) -> None:
    go(admin, "#/federation")
    card = admin.locator('article[data-cluster="cloud-native-gang"]')
    card.get_by_role("button", name="Cordon cloud-native-gang").click()
    dialog = admin.get_by_role("dialog")
    dialog.get_by_role("button", name="Cordon").click()
    card.locator(".badge", has_text="Cordoned").wait_for()
    assert up.json("get", "mc", "cloud-native-gang")["spec"]["cordoned"] is True
    card.get_by_role("button", name="Uncordon cloud-native-gang").click()
    card.locator(".badge", has_text="Cordoned").wait_for(state="detached")
    assert not up.json("get", "mc", "cloud-native-gang")["spec"].get("cordoned")


def tab_to(page: Any, predicate: str, what: str, *, most: int = 40) -> None:
    """Press Tab until the focused element satisfies the JS `predicate`, as a keyboard user would."""
    for _ in range(most):
        page.keyboard.press("Tab")
        if page.evaluate(f"() => ({predicate})(document.activeElement)"):
            return
    raise AssertionError(f"{what} cannot be reached with Tab")


def test_every_control_has_a_label_and_the_jobs_page_works_from_the_keyboard(admin: Any) -> None:
    go(admin, "#/jobs")
    admin.wait_for_selector("table.jobs tbody tr[data-key]")
    unlabelled = admin.evaluate("""() => [...document.querySelectorAll('input, select, button, a')]
        .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                      && !el.textContent.trim() && !el.getAttribute('title'))
        .map(el => el.outerHTML.slice(0, 80))""")
    assert unlabelled == []
    admin.evaluate("() => document.activeElement && document.activeElement.blur()")
    tab_to(admin, "el => el.id === 'job-search'", "the search field")
    admin.keyboard.type("too-big")
    admin.wait_for_function("() => document.querySelectorAll('table.jobs tbody tr[data-key]').length === 1")
    tab_to(admin, "el => el.textContent === 'too-big'", "the job's link")
    admin.keyboard.press("Enter")
    admin.wait_for_selector("table.why-not")
    assert admin.evaluate("() => window.location.hash") == "#/jobs/default/too-big"


def test_a_narrow_window_does_not_scroll_sideways(admin: Any) -> None:
    admin.set_viewport_size({"width": 390, "height": 800})
    try:
        for route, ready, name in (("#/federation", "article.card", "federation-narrow"),
                                   ("#/jobs", "table.jobs", "jobs-narrow"),
                                   ("#/jobs/default/too-big", "table.why-not", "job-narrow"),
                                   ("#/jobs/vision/live-1", "table.member-pods", "job-running-narrow")):
            go(admin, route)
            admin.wait_for_selector(ready)
            overflow = admin.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 1, (route, overflow)
            shot(admin, name)
    finally:
        admin.set_viewport_size({"width": 1280, "height": 800})


def test_delete_works_and_the_row_goes(up: FederatorUp, admin: Any) -> None:
    go(admin, "#/jobs?q=live-1")
    row = admin.locator('tr[data-key="vision/live-1"]')
    row.wait_for()
    row.get_by_role("button", name="Delete job vision/live-1").click()
    admin.get_by_role("dialog").get_by_role("button", name="Delete").click()
    row.wait_for(state="detached", timeout=90_000)
    gone = up.kubectl("get", "tj", "live-1", "-n", "vision", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_many_jobs_render_near_the_window_and_scrolling_reaches_every_one(up: FederatorUp, admin: Any) -> None:
    # 150 suspended jobs (not placed: cheap for the simulated clusters), in one kubectl call
    items = []
    for i in range(150):
        body = yaml.safe_load(EXAMPLE.read_text())
        body["metadata"] = {"name": f"bulk-{i:03d}", "namespace": "bulk"}
        body["spec"]["suspend"] = True
        items.append(body)
    path = up.workdir / "bulk.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    up.kubectl("create", "-f", str(path))
    go(admin, "#/jobs?ns=bulk&sort=name")
    admin.wait_for_selector("#jobs-count:text('Showing 150 of')")
    assert admin.get_attribute("table.jobs", "aria-rowcount") == "151"
    in_dom = admin.eval_on_selector_all("table.jobs tbody tr[data-key]", "rows => rows.map(r => r.dataset.key)")
    assert in_dom[0] == "bulk/bulk-000" and 20 <= len(in_dom) < 150, len(in_dom)  # only the rows near the window
    admin.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
    last = admin.locator('tr[data-key="bulk/bulk-149"]')
    last.wait_for()
    assert last.get_attribute("aria-rowindex") == "151"
    assert admin.locator('tr[data-key="bulk/bulk-000"]').count() == 0  # scrolled out, out of the DOM
    shot(admin, "jobs-many")
    admin.evaluate("() => window.scrollTo(0, 0)")
    admin.locator('tr[data-key="bulk/bulk-000"]').wait_for()


def test_no_token_in_any_url_or_output(up: FederatorUp, proxy: dict[str, Any], researcher: Any) -> None:
    secrets = list(tokens(up).values())
    assert REQUESTED and any("/apis/" in url for url in REQUESTED)
    for url in REQUESTED:
        for token in secrets:
            assert token not in url, url
    output = "\n".join(up.stdout + up.stderr_lines + proxy["lines"])
    for token in secrets:
        assert token not in output  # the proxy's stderr is checked when it stops (its fixture)


def test_an_upstream_pytorchjob_shows_its_kind_on_the_jobs_and_job_pages(up: FederatorUp, admin: Any) -> None:
    """Kubeflow's own PyTorchJob example (examples/kubeflow/pytorch-simple.yaml, in namespace vision here) is
    listed by its gang (the twin TrainingJob) with the kind it was submitted as, and its page says so."""
    example = yaml.safe_load((ROOT / "examples" / "kubeflow" / "pytorch-simple.yaml").read_text())
    example["metadata"]["namespace"] = "vision"
    name = example["metadata"]["name"]
    path = up.workdir / "pytorch-simple.json"
    path.write_text(json.dumps(example))
    up.kubectl("apply", "-f", str(path))
    try:
        go(admin, "#/jobs")
        row = admin.locator(f'tr[data-key="vision/{name}"]')
        row.wait_for()
        assert row.locator("span.kind").inner_text() == "PyTorchJob"
        assert admin.locator('tr[data-key="vision/live-1"] span.kind').count() == 0  # a TrainingJob: no badge
        go(admin, f"#/jobs/vision/{name}")
        admin.wait_for_selector("dl.facts.wide dt:text('Submitted as')")
        assert f"PyTorchJob vision/{name} (kubeflow.org/v1)" in admin.locator("dl.facts.wide").inner_text()
        shot(admin, "job-pytorchjob")
    finally:
        up.kubectl("delete", "pytorchjob", name, "-n", "vision", "--wait=false")
