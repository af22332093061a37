"""Web dashboard benchmark: the jobs page with 2,000 jobs in the hub, measured in the browser.

    .venv/bin/python bench/ui.py [--runs 5] [--jobs 2000] [--rate 50] [--seconds 20] [--quick] [--json FILE]

Starts `federator up --no-sim` (the real hub with its controllers, sqlite, HTTPS, dev tokens) in a
temporary state directory, creates `--jobs` TrainingJobs (the design.md example, renamed, in ten
namespaces) through the API, and opens the dashboard in Debian's Chromium (/usr/bin/chromium, driven by
Playwright) signed in as the admin. Each run:

- render: loads /ui/#/jobs afresh and reads the page's own performance marks: `federator:listed` (every
  list answered and parsed) and `federator:jobs-table` (the table painted, one frame after it was built:
  the rows near the window, with the count of all), both from the navigation start; renderAfterListMs is
  the page's own part. Bar (issue 18): <= 1 s for 2,000 jobs.
- follow: patches a label of one of the jobs on screen (the page renders only the rows near the window:
  writes to rows in view are its worst case) `--rate` times a second for `--seconds` from this process,
  each write's send time noted with its resourceVersion, while the page notes when each watch event
  arrived (its store) and a MutationObserver when the job's row showed that resourceVersion or a later
  one (`data-rv`; this hub's resourceVersions are integers). Update lag = row shown - write sent (the hub's
  write and watch included); page lag = row shown - event arrived (the page alone). It follows "without
  falling behind" when every write was shown within 2 s of the end of the stream and the page lag's p95
  over the last quarter of the writes is at most twice that of the first quarter (or 100 ms).
  The hub answers 409 to a merge patch that races another patch of the same job (kube-apiserver retries
  such a patch itself); the writer sends it again and counts it (writeConflictsRetried).

Prints each run and the median of the runs. `--quick`: 500 jobs, 2 runs, 8 s of writes. `--json FILE`:
every run's figures in bench/benchresult.py's format (`federator bench` reads it). Never part of the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchresult import BenchResult  # noqa: E402 - the script's directory, bench/, is on sys.path

CHROMIUM = os.environ.get("FEDERATOR_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
GROUP = "/apis/federator.dev/v1alpha1"
NAMESPACES = [f"bench-{i}" for i in range(10)]
EXAMPLE = yaml.safe_load((ROOT / "examples" / "resnet-ps.yaml").read_text())
RENDER_BAR_MS = 1000.0
#: 409s the writer met and sent again (see stream_updates)
CONFLICTS = [0]

OBSERVER = """() => {
  window.benchShown = [];
  window.benchArrivals = [];  // the page's store notes when each watch event arrived (store.js)
  const body = document.querySelector('table.jobs tbody');
  new MutationObserver((records) => {
    const now = performance.timeOrigin + performance.now();
    for (const record of records) {
      for (const node of record.addedNodes) {
        if (node.dataset && node.dataset.rv) window.benchShown.push([node.dataset.key, node.dataset.rv, now]);
      }
    }
  }).observe(body, { childList: true });
}"""


class Hub:
    """`federator up --no-sim` as a process in a temporary state directory."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""
        self.token = ""

    async def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "federator.cli", "up", "--no-sim", "--listen", "127.0.0.1:0",
            "--state-dir", str(self.state), "--log-level", "warning",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            env=env, cwd=str(self.state.parent))
        assert self.process.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = (await asyncio.wait_for(self.process.stdout.readline(), 120)).decode()
            if not line:
                raise SystemExit("federator up exited before it served")
            if "is serving https://" in line:
                self.url = line.split("is serving ", 1)[1].split()[0]
                break
        for row in (self.state / "tokens.csv").read_text().splitlines():
            if row and not row.startswith("#") and row.split(",")[1] == "admin":
                self.token = row.split(",")[0]
        asyncio.create_task(self._drain(), name="bench-ui-hub-stdout")

    async def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        while await self.process.stdout.readline():
            pass

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


def _job(namespace: str, name: str) -> dict[str, Any]:
    body = json.loads(json.dumps(EXAMPLE))
    body["metadata"] = {"name": name, "namespace": namespace}
    return body


async def create_jobs(session: aiohttp.ClientSession, hub: Hub, count: int, ssl_ctx: ssl.SSLContext) -> list[str]:
    names = [(NAMESPACES[i % len(NAMESPACES)], f"job-{i:05d}") for i in range(count)]
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    for item in names:
        queue.put_nowait(item)

    async def worker() -> None:
        while not queue.empty():
            namespace, name = queue.get_nowait()
            async with session.post(f"{hub.url}{GROUP}/namespaces/{namespace}/trainingjobs",
                                    json=_job(namespace, name), ssl=ssl_ctx) as response:
                if response.status != 201:
                    raise SystemExit(f"create {namespace}/{name}: HTTP {response.status}: {await response.text()}")

    await asyncio.gather(*(worker() for _ in range(16)))
    return [f"{ns}/{name}" for ns, name in names]


async def stream_updates(session: aiohttp.ClientSession, hub: Hub, keys: list[str], *, rate: float, seconds: float,
                         ssl_ctx: ssl.SSLContext, run: int) -> dict[str, tuple[float, str]]:
    """Patch a label of a random job `rate` times a second; rv -> (send time, key)."""
    sent: dict[str, tuple[float, str]] = {}
    conflicts = CONFLICTS
    rng = random.Random(run)
    total = int(rate * seconds)
    start = time.monotonic()
    in_flight: set[asyncio.Task[None]] = set()

    async def patch(seq: int, key: str) -> None:
        namespace, name = key.split("/")
        t_sent = time.time() * 1000
        for _ in range(20):
            async with session.patch(f"{hub.url}{GROUP}/namespaces/{namespace}/trainingjobs/{name}",
                                     data=json.dumps({"metadata": {"labels": {"bench-seq": str(seq)}}}),
                                     headers={"Content-Type": "application/merge-patch+json"},
                                     ssl=ssl_ctx) as response:
                body = await response.json()
                if response.status == 409:
                    # two patches of one job at once: the hub answers the second 409 (kube-apiserver would
                    # retry a patch without a resourceVersion itself); send it again, counted
                    conflicts[0] += 1
                    continue
                if response.status != 200:
                    raise SystemExit(f"patch {key}: HTTP {response.status}: {body}")
                sent[body["metadata"]["resourceVersion"]] = (t_sent, key)
                return
        raise SystemExit(f"patch {key}: 20 conflicts in a row")

    for seq in range(total):
        due = start + seq / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the writer, not synchronising on the page
        task = asyncio.create_task(patch(seq, rng.choice(keys)), name=f"bench-ui-patch-{seq}")
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
    await asyncio.gather(*in_flight)
    return sent


async def settled(session: aiohttp.ClientSession, hub: Hub, count: int, ssl_ctx: ssl.SSLContext) -> None:
    """Wait until the placement controller has written every job's status (no cluster: NoClusters), so that
    its burst of writes is over before anything is measured."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        async with session.get(f"{hub.url}{GROUP}/trainingjobs", ssl=ssl_ctx) as response:
            listing = await response.json()
        if sum(1 for job in listing["items"] if (job.get("status") or {}).get("phase")) >= count:
            return
        await asyncio.sleep(1.0)  # polling the hub's progress, not timing anything
    raise SystemExit("the hub did not write every job's status within 5 minutes")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


async def one_run(page: Any, session: aiohttp.ClientSession, hub: Hub, keys: list[str], args: argparse.Namespace,
                  ssl_ctx: ssl.SSLContext, run: int) -> dict[str, float]:
    await page.goto("about:blank")  # a fresh load of the page each run, not a hash change
    await page.goto(f"{hub.url}/ui/#/jobs")
    await page.wait_for_function("() => performance.getEntriesByName('federator:jobs-table').length > 0",
                                 timeout=120_000)
    marks = await page.evaluate("""() => ({
        listed: performance.getEntriesByName('federator:listed')[0].startTime,
        table: performance.getEntriesByName('federator:jobs-table')[0].startTime,
        rows: document.querySelectorAll('table.jobs tbody tr[data-key]').length })""")
    count = await page.inner_text("#jobs-count")
    if count != f"Showing {len(keys)} of {len(keys)} jobs":
        raise SystemExit(f"the jobs page says {count!r}, not all {len(keys)} jobs")
    await page.evaluate(OBSERVER)
    # the writes go to the jobs on screen (the page renders the rows near the window only): every one of
    # them must change a row, the worst case for the page
    on_screen = await page.evaluate("""() => [...document.querySelectorAll('table.jobs tbody tr[data-key]')]
        .filter(r => { const b = r.getBoundingClientRect(); return b.top >= 0 && b.bottom <= window.innerHeight; })
        .map(r => r.dataset.key)""")
    if len(on_screen) < 5:
        raise SystemExit(f"only {len(on_screen)} rows on screen")
    applied_before = await page.evaluate("() => window.federatorDashboard.collections.get('jobs').stats.events")
    conflicts_before = CONFLICTS[0]
    started = time.time() * 1000
    sent = await stream_updates(session, hub, on_screen, rate=args.rate, seconds=args.seconds, ssl_ctx=ssl_ctx,
                                run=run)
    ended = time.time() * 1000
    # every write shown within 2 s of the end of the stream, or it is behind. A write is shown once its job's
    # row shows its resourceVersion or a later one (the page renders once per frame: two writes to one job in
    # the same frame show as the later one). This hub's resourceVersions are integers (kube's are opaque).
    last_written: dict[str, int] = {}
    for rv, (_, key) in sent.items():
        last_written[key] = max(int(rv), last_written.get(key, 0))
    try:
        await page.wait_for_function(
            """wanted => { const best = {};
                 for (const [key, rv] of window.benchShown) best[key] = Math.max(best[key] || 0, Number(rv));
                 return Object.entries(wanted).every(([key, rv]) => (best[key] || 0) >= rv); }""",
            arg=last_written,
            timeout=2000)
    except Exception:  # noqa: BLE001 - Playwright's TimeoutError: counted below as behind
        pass
    shown_by_key: dict[str, list[tuple[int, float]]] = {}
    for key, rv, t in await page.evaluate("() => window.benchShown"):
        shown_by_key.setdefault(key, []).append((int(rv), t))
    arrived = {rv: t for _key, rv, t in await page.evaluate("() => window.benchArrivals")}
    ordered = sorted(sent.items(), key=lambda item: item[1][0])
    lags: list[float] = []
    page_lags: list[float] = []
    behind = 0
    for rv, (t_sent, key) in ordered:
        times = [t for shown_rv, t in shown_by_key.get(key, ()) if shown_rv >= int(rv)]
        if times:
            lags.append(min(times) - t_sent)
            if rv in arrived:
                page_lags.append(min(times) - arrived[rv])
        else:
            behind += 1
    # falling behind is the page's own lag (event arrived -> row shown) growing along the stream
    quarter = max(1, len(page_lags) // 4)
    first, last = _percentile(page_lags[:quarter], 0.95), _percentile(page_lags[-quarter:], 0.95)
    # the final DOM agrees with the store for the jobs written last
    final_rvs = await page.evaluate("keys => keys.map(k => { const r = document.querySelector(`tr[data-key='${k}']`);"
                                    " return r ? r.dataset.rv : ''; })", [key for _, (_, key) in ordered[-20:]])
    latest: dict[str, str] = {}
    for rv, (_, key) in ordered:
        latest[key] = rv
    stale = sum(1 for (_, (_, key)), got in zip(ordered[-20:], final_rvs) if not got or int(got) < int(latest[key]))
    applied = await page.evaluate("() => window.federatorDashboard.collections.get('jobs').stats.events")
    return {
        "listedMs": marks["listed"],
        "jobsPageRenderMs": marks["table"],
        "renderAfterListMs": marks["table"] - marks["listed"],
        "domRows": float(marks["rows"]),
        "updatesSent": float(len(sent)),
        "watchEventsApplied": float(applied - applied_before),
        "rowsOnScreen": float(len(on_screen)),
        "updatesPerSecondSent": len(sent) / max(0.001, (ended - started) / 1000),
        "updateLagP50Ms": _percentile(lags, 0.5),
        "updateLagP95Ms": _percentile(lags, 0.95),
        "updateLagMaxMs": max(lags) if lags else float("nan"),
        "pageLagP50Ms": _percentile(page_lags, 0.5),
        "pageLagP95Ms": _percentile(page_lags, 0.95),
        "pageLagMaxMs": max(page_lags) if page_lags else float("nan"),
        "writeConflictsRetried": float(CONFLICTS[0] - conflicts_before),
        "pageLagP95FirstQuarterMs": first,
        "pageLagP95LastQuarterMs": last,
        "updatesBehindAfter2s": float(behind),
        "staleRowsAtEnd": float(stale),
        "fellBehind": 1.0 if behind or (page_lags and last > 2 * max(first, 50.0)) else 0.0,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--rate", type=float, default=50.0, help="job updates per second while following")
    parser.add_argument("--seconds", type=float, default=None, help="how long the updates stream in each run")
    parser.add_argument("--quick", action="store_true", help="500 jobs, 2 runs, 8 s of updates (a check)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE")
    args = parser.parse_args()
    args.runs = args.runs or (2 if args.quick else 5)
    args.jobs = args.jobs or (500 if args.quick else 2000)
    args.seconds = args.seconds or (8.0 if args.quick else 20.0)
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"bench/ui.py needs Chromium at {CHROMIUM} (make test installs Debian's chromium)")
    from playwright.async_api import async_playwright

    result = BenchResult("ui")
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        hub = Hub(Path(tmp) / "state")
        await hub.start()
        try:
            ssl_ctx = ssl.create_default_context(cafile=str(hub.state / "tls" / "ca.crt"))
            headers = {"Authorization": f"Bearer {hub.token}"}
            async with aiohttp.ClientSession(headers=headers) as session:
                began = time.monotonic()
                keys = await create_jobs(session, hub, args.jobs, ssl_ctx)
                print(f"created {len(keys)} jobs in {time.monotonic() - began:.1f}s", flush=True)
                await settled(session, hub, len(keys), ssl_ctx)
                print(f"the hub's controllers wrote every job's status after {time.monotonic() - began:.1f}s",
                      flush=True)
                async with async_playwright() as playwright:
                    browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                    context = await browser.new_context(ignore_https_errors=True,
                                                        viewport={"width": 1280, "height": 800})
                    # signed in as the page does it: the token in this tab's sessionStorage
                    await context.add_init_script(
                        f"sessionStorage.setItem('federator.dashboard.token', {json.dumps(hub.token)})")
                    page = await context.new_page()
                    for run in range(args.runs):
                        figures = await one_run(page, session, hub, keys, args, ssl_ctx, run)
                        runs.append(figures)
                        print(f"run {run + 1}: " + ", ".join(f"{k} {v:.0f}" for k, v in figures.items()), flush=True)
                    await browser.close()
        finally:
            await hub.stop()
    bars = {"jobsPageRenderMs": ("<=", RENDER_BAR_MS), "updatesBehindAfter2s": ("<=", 0.0), "fellBehind": ("<=", 0.0)}
    units = {"updatesSent": "updates", "updatesBehindAfter2s": "updates", "staleRowsAtEnd": "rows",
             "fellBehind": "runs", "updatesPerSecondSent": "/s", "watchEventsApplied": "events",
             "rowsOnScreen": "rows", "domRows": "rows", "writeConflictsRetried": "writes"}
    result.add_runs(runs, prefix=f"{args.jobs}jobs.", bars=bars, units=units)
    result.notes.append(f"{args.jobs} jobs in the hub; {args.rate:g} label patches/s for {args.seconds:g} s per run; "
                        f"Chromium at {CHROMIUM}")
    print("median of the runs:")
    for key in runs[0]:
        values = [r[key] for r in runs]
        print(f"  {key}: {statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})")
    if args.json is not None:
        result.write(args.json)


if __name__ == "__main__":
    asyncio.run(main())
