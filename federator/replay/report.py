"""Writing a replay's report: report.json, report.md and three PNG plots (matplotlib, no display).

- report.json: `trace`, `clustersFile`, `seed`, `rule`, `machine`, and
  `policies` (policy -> exactly METRIC_KEYS); with `--queues` also
  `queues` (`queue_section`: the queue rule, each queue's GPU-hours and
  nominal quota, and per policy Jain's index over queues, preemptions per
  1,000 jobs, GPU-hours lost to preemption, and per queue and per priority
  the mean, median and p95 queueing delay; federator-queues / federator;
  with `--compare-victims`, `checkpointAwareVictims`: GPU-hours lost to
  preemption with the checkpoint-aware victim order (federator-queues)
  and without it (federator-queues-by-start), same jobs and checkpoints,
  and the difference);
  with `--elastic-share` F > 0 also `elasticity` (`elasticity_section`:
  the share, the elastic jobs and the multi-GPU jobs they were drawn
  from, and per policy its elastic jobs, how many started below their
  max, resizes (growths), and ELASTIC_KEYS with elasticity (as
  `policies`) and without (the same jobs and shapes, min = max));
  and `spend` (`spend_section`, every report: how money is counted, each
  cluster's location, price and tier, and per policy the money spent,
  GPU-hours on-prem (sunk) and in the cloud, their shares and each tier's,
  and the median, p90 and p95 queueing delay; with `--tiers` also
  `comparison`: federator-tiers against federator);
- report.md: the inputs, every metric per policy, the money-and-delay table, federator / each
  baseline per metric, jobs that never started, the queues section, the
  elasticity table, and the plots;
- queue_delay_cdf.png, gpu_utilization.png, writes_and_bytes.png.

Files are written into `out` (created if missing) only after every
policy ran; a plot that cannot be drawn raises rather than leaving a
partial report unexplained.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from federator.placement import QueueQuota
from federator.replay.attributes import ReplayJob
from federator.replay.clusters import Federation
from federator.replay.engine import UNTIERED, PolicyResult
from federator.replay.federated import TIER_POLICY
from federator.replay.queues import QUEUE_POLICY, QUEUE_POLICY_BY_START, describe_queues, queue_gpu_hours

__all__ = [
    "VICTIM_ORDER_TEXT",
    "ELASTIC_KEYS",
    "FAIRNESS_TEXT",
    "METRIC_KEYS",
    "PLOTS",
    "QUEUE_KEYS",
    "elasticity_section",
    "queue_section",
    "SPEND_TEXT",
    "spend_section",
    "victim_order_comparison",
    "write_report",
]

METRIC_KEYS: tuple[str, ...] = (
    "meanQueueDelaySeconds",
    "p95QueueDelaySeconds",
    "p99QueueDelaySeconds",
    "meanJctSeconds",
    "makespanSeconds",
    "gpuUtilization",
    "failedDispatches",
    "memberWritesPerJob",
    "datasetBytesCopied",
    "fabricMismatches",
    "jainFairness",
    "jobs",
    "wallSeconds",
)
PLOTS = ("queue_delay_cdf.png", "gpu_utilization.png", "writes_and_bytes.png")
# Per policy in report.json's queues.policies (besides perQueue).
QUEUE_KEYS: tuple[str, ...] = (
    "queueJainFairness",
    "preemptions",
    "preemptionsPer1000Jobs",
    "preemptedJobs",
    "mostEvictionsOfOneJob",
    "gpuHoursLostToPreemption",
    "evictionsResumedFromCheckpoint",
)
# Per policy in report.json's elasticity.policies, with and without elasticity.
ELASTIC_KEYS: tuple[str, ...] = ("meanQueueDelaySeconds", "p95QueueDelaySeconds", "gpuUtilization", "meanJctSeconds")
FAIRNESS_TEXT = (
    "queueJainFairness is Jain's index (sum x)^2 / (n sum x^2) over the queues (trace clusters) with a finished "
    "job, x = the queue's mean speed, a job's speed being its traced duration / its JCT (1: never waited, "
    "never slowed; a preempted job's JCT runs from its submission to its final finish). A preemption evicts "
    "the victim whole; it keeps the work up to its last checkpoint (the rule's checkpoint interval) and its "
    "next copy resumes from there (one that never checkpointed restarts from the beginning): GPU-hours lost "
    "are the GPUs it held from its last checkpoint in that run (without one, from binding, dataset copy "
    "included) until eviction; evictionsResumedFromCheckpoint counts the evictions that kept some work. "
    "Queueing delay is the time a job waited: submission to its final start, less the time its evicted runs "
    "held GPUs (counted in its JCT)."
)
# federator-queues / federator in the queues section (delays and JCT lower is better; the rest higher).
_COMPARED = ("meanQueueDelaySeconds", "p95QueueDelaySeconds", "p99QueueDelaySeconds", "meanJctSeconds",
             "gpuUtilization", "memberWritesPerJob")
_LOWER_IS_BETTER = {
    "meanQueueDelaySeconds", "p95QueueDelaySeconds", "p99QueueDelaySeconds", "meanJctSeconds", "makespanSeconds",
    "failedDispatches", "memberWritesPerJob", "datasetBytesCopied", "fabricMismatches",
}


def _cell(key: str, value: float | int) -> str:
    if key == "datasetBytesCopied":
        return f"{value / 2**40:,.1f} TiB"
    if key in ("gpuUtilization", "jainFairness"):
        return f"{value:.3f}"
    if key == "memberWritesPerJob":
        return f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


def _ratio(ours: float, theirs: float) -> str:
    if theirs == 0:
        return "=" if ours == 0 else "∞"
    return f"{ours / theirs:.3g}"


def _markdown(
    report: dict[str, Any], results: Sequence[PolicyResult], federation: Federation, *, wall_seconds: float, jobs: int
) -> str:
    names = [r.policy for r in results]
    lines = [
        "# federator bench replay",
        "",
        f"- trace: `{report['trace']}` ({jobs:,} jobs replayed)",
        f"- clusters file: `{report['clustersFile']}`: {federation.description or '(no description)'}; "
        f"{len(federation.clusters)} clusters, "
        f"{sum(c.gpus for c in federation.clusters):,} GPUs",
        f"- seed: {report['seed']}",
        f"- machine: {report['machine']['cpus']} CPUs ({report['machine']['cpuModel'] or 'unknown model'}), "
        f"load average at start {report['machine']['loadAverageAtStart']}, "
        f"{report['machine']['workers']} worker processes; whole run {wall_seconds:.1f} s wall",
        "",
        "Attribute rule (what the trace does not say):",
        "",
        f"> {report['rule']}",
        "",
        "## Metrics",
        "",
        "| metric | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key in METRIC_KEYS:
        lines.append(f"| {key} | " + " | ".join(_cell(key, r.metrics[key]) for r in results) + " |")
    lines.append("| jobs never started | " + " | ".join(f"{r.never_started:,}" for r in results) + " |")
    lines.append("| CPU seconds | " + " | ".join(f"{r.cpu_seconds:,.1f}" for r in results) + " |")
    lines += [
        "",
        "Queueing delay is submission to training start, so it includes copying a dataset the cluster does "
        "not cache (the gang holds its GPUs meanwhile), less the runs a preemption lost (federator-queues only); "
        "delays and JCT count the jobs that started. "
        "gpuUtilization counts GPUs allocated to gangs over the makespan, copying included, so a policy that "
        "copies more looks busier. memberWritesPerJob counts 1 + pods writes per gang copy written into or "
        "deleted from a member (finished gangs are cleaned up too). jainFairness is Jain's index over teams of "
        "each team's mean traced duration / JCT.",
    ]
    if "federator" in names:
        ours = next(r for r in results if r.policy == "federator")
        # federator-queues is federator itself with queues: its own section compares the two.
        others = [r for r in results if r.policy not in ("federator", QUEUE_POLICY)]
        if others:
            lines += [
                "",
                "## federator / baseline",
                "",
                "Ratio of federator's figure to each baseline's (for delays, JCT, makespan, failures, writes, "
                "bytes copied and mismatches lower is better, so below 1 means federator does better; for "
                "utilisation and fairness higher is better).",
                "",
                "| metric | " + " | ".join(r.policy for r in others) + " |",
                "|---|" + "---|" * len(others),
            ]
            for key in METRIC_KEYS:
                if key in ("jobs", "wallSeconds"):
                    continue
                lines.append(
                    f"| {key} | "
                    + " | ".join(_ratio(float(ours.metrics[key]), float(r.metrics[key])) for r in others)
                    + " |"
                )
            lines += ["", "Where federator is not the best:", ""]
            worse = []
            for key in METRIC_KEYS:
                if key in ("jobs", "wallSeconds"):
                    continue
                lower = key in _LOWER_IS_BETTER
                better = [
                    r.policy for r in others
                    if (r.metrics[key] < ours.metrics[key] if lower else r.metrics[key] > ours.metrics[key])
                ]
                if better:
                    worse.append(f"- {key}: {', '.join(better)}")
            lines += worse or ["- nowhere: federator is best or tied on every metric"]
    spend = report.get("spend")
    if isinstance(spend, Mapping):
        lines += _spend_markdown(spend)
    queues = report.get("queues")
    if isinstance(queues, Mapping):
        lines += _queue_markdown(queues)
    elasticity = report.get("elasticity")
    if isinstance(elasticity, Mapping):
        lines += _elasticity_markdown(elasticity)
    lines += [
        "",
        "## Plots",
        "",
        "![queueing delay CDF](queue_delay_cdf.png)",
        "",
        "![GPU utilisation over time](gpu_utilization.png)",
        "",
        "![writes per job and dataset bytes copied](writes_and_bytes.png)",
        "",
    ]
    return "\n".join(lines)


SPEND_TEXT = (
    "Money spent is the cloud clusters' GPU-hours times their price per GPU-hour (by GPU model where the clusters "
    "file gives perModel); on-prem GPU-hours are sunk (paid for whether used or not): shown, not counted. A GPU-hour "
    "is a GPU held by a bound gang (its dataset copy and any run later evicted included). Tier shares split the "
    f"GPU-hours by the clusters file's tiers ('{UNTIERED}': clusters in no tier, every cluster without tiers) for "
    f"every policy; only {TIER_POLICY} places by them. Queueing delay counts the jobs that started."
)
# federator-tiers / federator in the spend section.
_SPEND_COMPARED = ("moneySpent", "cloudGpuHours", "cloudShare", "meanQueueDelaySeconds", "medianQueueDelaySeconds",
                   "p90QueueDelaySeconds", "p95QueueDelaySeconds", "p99QueueDelaySeconds")


def spend_section(results: Sequence[PolicyResult], *, federation: Federation) -> dict[str, Any]:
    """report.json's `spend`: how money is counted, the clusters' prices and tiers, and every policy's spend."""
    section: dict[str, Any] = {
        "rule": SPEND_TEXT,
        "tiers": [
            {"name": t.name, "spillAfterSeconds": t.spill_after_seconds,
             "clusters": [c.name for c in federation.clusters if federation.tier_of(c.name) == t.name]}
            for t in federation.tiers
        ],
        "clusters": {
            c.name: {
                "location": c.location,
                "gpus": c.gpus,
                "pricePerGpuHour": {m: c.price(m) for m in c.gpu_models},
                "tier": federation.tier_of(c.name) or UNTIERED,
            }
            for c in federation.clusters
        },
        "policies": {r.policy: {**r.extra["spend"], "jobs": r.metrics["jobs"]} for r in results},
    }
    by_name = {r.policy: r.extra["spend"] for r in results}
    if TIER_POLICY in by_name and "federator" in by_name:
        on, off = by_name[TIER_POLICY], by_name["federator"]
        section["comparison"] = {
            "of": TIER_POLICY,
            "to": "federator",
            "difference": {key: round(float(on[key]) - float(off[key]), 6) for key in _SPEND_COMPARED},
            "ratios": {key: _ratio_value(float(on[key]), float(off[key])) for key in _SPEND_COMPARED},
        }
    return section


def _spend_markdown(section: Mapping[str, Any]) -> list[str]:
    policies: Mapping[str, Any] = section["policies"]
    tiers = [t["name"] for t in section["tiers"]]
    shown = tiers + ([UNTIERED] if any(p["tierShares"].get(UNTIERED) for p in policies.values()) or not tiers else [])
    lines = ["", "## Money, tiers and queueing delay", "", SPEND_TEXT, ""]
    if section["tiers"]:
        lines += ["Tiers: " + "; ".join(
            f"{i + 1}. {t['name']} ({', '.join(t['clusters'])}"
            + (f"; the next tier opens after {t['spillAfterSeconds']:g} s)" if i + 1 < len(section["tiers"]) else ")")
            for i, t in enumerate(section["tiers"])) + ".", ""]
    lines += [
        "| policy | jobs | money spent | on-prem GPU-hours (sunk) | cloud GPU-hours | on-prem share | cloud share | "
        + " | ".join(f"tier {t}" for t in shown) + " | mean delay (s) | median delay (s) | p90 delay (s) | p95 delay (s) | p99 delay (s) |",
        "|---|---|---|---|---|---|---|" + "---|" * len(shown) + "---|---|---|---|---|",
    ]
    for name, p in policies.items():
        lines.append(
            f"| {name} | {p['jobs']:,} | {p['moneySpent']:,.1f} | {p['onPremGpuHours']:,.1f} | "
            f"{p['cloudGpuHours']:,.1f} | {p['onPremShare']:.3f} | {p['cloudShare']:.3f} | "
            + " | ".join(f"{p['tierShares'].get(t, 0.0):.3f}" for t in shown)
            + f" | {p['meanQueueDelaySeconds']:,.1f} | {p['medianQueueDelaySeconds']:,.1f} | "
            f"{p['p90QueueDelaySeconds']:,.1f} | {p['p95QueueDelaySeconds']:,.1f} | {p['p99QueueDelaySeconds']:,.1f} |"
        )
    comparison = section.get("comparison")
    if isinstance(comparison, Mapping):
        diff = comparison["difference"]
        lines += [
            "",
            f"{comparison['of']} - {comparison['to']} (same jobs, this invocation): money "
            f"{diff['moneySpent']:+,.1f}, cloud GPU-hours {diff['cloudGpuHours']:+,.1f}, mean delay "
            f"{diff['meanQueueDelaySeconds']:+,.1f} s, median {diff['medianQueueDelaySeconds']:+,.1f} s, p95 "
            f"{diff['p95QueueDelaySeconds']:+,.1f} s, p99 {diff['p99QueueDelaySeconds']:+,.1f} s.",
        ]
    return lines


def queue_section(
    results: Sequence[PolicyResult], *, queues: Mapping[str, QueueQuota], jobs: Sequence[ReplayJob]
) -> dict[str, Any]:
    """report.json's `queues`: the rule, each queue's quota, and every policy's fairness and preemptions."""
    hours = queue_gpu_hours(jobs, queues)
    counts = Counter(job.trace_cluster for job in jobs)
    section: dict[str, Any] = {
        "rule": describe_queues(queues),
        "fairness": FAIRNESS_TEXT,
        "priorities": {str(p): n for p, n in sorted(Counter(job.priority for job in jobs).items())},
        "quota": {
            name: {
                "jobs": counts.get(name, 0),
                "gpuHours": round(hours[name], 3),
                "nominal": dict(sorted(quota.nominal.gpus.items())),
            }
            for name, quota in sorted(queues.items())
        },
        "policies": {
            r.policy: {
                **{key: r.extra[key] for key in QUEUE_KEYS},
                "perQueue": r.extra["queues"],
                "perPriority": r.extra["priorities"],
            }
            for r in results
        },
    }
    by_name = {r.policy: r for r in results}
    if QUEUE_POLICY in by_name and "federator" in by_name:
        with_q, without = by_name[QUEUE_POLICY], by_name["federator"]
        ratios = {key: _ratio_value(float(with_q.metrics[key]), float(without.metrics[key])) for key in _COMPARED}
        ratios["queueJainFairness"] = _ratio_value(
            float(with_q.extra["queueJainFairness"]), float(without.extra["queueJainFairness"])
        )
        section["comparison"] = {"of": QUEUE_POLICY, "to": "federator", "ratios": ratios}
    if QUEUE_POLICY in by_name and QUEUE_POLICY_BY_START in by_name:
        section["checkpointAwareVictims"] = victim_order_comparison(
            by_name[QUEUE_POLICY], by_name[QUEUE_POLICY_BY_START]
        )
    return section


VICTIM_ORDER_TEXT = (
    f"GPU-hours lost to preemption with the checkpoint-aware victim order ({QUEUE_POLICY}: among victims of equal "
    "priority, those whose eviction loses the fewest GPU-seconds since their last checkpoint first, then the most "
    f"recently started) and without it ({QUEUE_POLICY_BY_START}: equal priority, the most recently started first, "
    "as before checkpoints), in the same invocation: the same jobs, queues, priorities and checkpoint intervals, "
    "and in both an evicted job resumes from its last checkpoint. Priority comes first in both, and so does the "
    "number of victims of a preemption."
)


def victim_order_comparison(aware: PolicyResult, by_start: PolicyResult) -> dict[str, Any]:
    """report.json's queues.checkpointAwareVictims: GPU-hours lost with the checkpoint-aware victim order and
    without it, the difference (without - with), preemptions of each and GPU-hours lost per preemption."""
    with_lost = float(aware.extra["gpuHoursLostToPreemption"])
    without_lost = float(by_start.extra["gpuHoursLostToPreemption"])
    with_count, without_count = int(aware.extra["preemptions"]), int(by_start.extra["preemptions"])
    return {
        "rule": VICTIM_ORDER_TEXT,
        "with": aware.policy,
        "without": by_start.policy,
        "gpuHoursLostWith": with_lost,
        "gpuHoursLostWithout": without_lost,
        "gpuHoursSaved": round(without_lost - with_lost, 3),
        "ratio": _ratio_value(with_lost, without_lost),
        "preemptionsWith": with_count,
        "preemptionsWithout": without_count,
        "gpuHoursLostPerPreemptionWith": round(with_lost / with_count, 3) if with_count else 0.0,
        "gpuHoursLostPerPreemptionWithout": round(without_lost / without_count, 3) if without_count else 0.0,
    }


def elasticity_section(
    share: float, with_elastic: Sequence[PolicyResult], without: Sequence[PolicyResult], *, jobs: Sequence[ReplayJob]
) -> dict[str, Any]:
    """report.json's `elasticity`: the elastic jobs (of the multi-GPU `jobs`), and per policy ELASTIC_KEYS with
    and without elasticity and the elastic jobs' counts."""
    if [r.policy for r in with_elastic] != [r.policy for r in without]:
        raise ValueError("the replays with and without elasticity must be of the same policies")
    return {
        "share": share,
        "elasticJobs": sum(1 for job in jobs if job.elastic),
        "multiGpuJobs": sum(1 for job in jobs if job.gpus > 1),
        "policies": {
            w.policy: {
                "elasticJobs": w.extra["elasticJobs"],
                "startedBelowMax": w.extra["startedBelowMax"],
                "resizes": w.extra["resizes"],
                "with": {key: w.metrics[key] for key in ELASTIC_KEYS},
                "without": {key: o.metrics[key] for key in ELASTIC_KEYS},
            }
            for w, o in zip(with_elastic, without, strict=True)
        },
    }


def _elasticity_markdown(section: Mapping[str, Any]) -> list[str]:
    lines = [
        "",
        "## Elasticity",
        "",
        f"Every policy replayed twice, the same jobs and seed: with {section['elasticJobs']:,} of the "
        f"{section['multiGpuJobs']:,} multi-GPU jobs elastic (share {section['share']:g}: one worker per GPU, "
        "min = half; the figures above) and with the same jobs in the same shape fixed (min = max). Per cell: "
        "with / without. Started below max counts the elastic gangs their member admitted below their max pods; "
        "resizes count growths (federator's grow pass; the baselines never resize).",
        "",
        "| policy | elastic jobs | started below max | resizes | mean delay (s) | p95 delay (s) | GPU utilisation "
        "| mean JCT (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, p in section["policies"].items():
        w, o = p["with"], p["without"]
        lines.append(
            f"| {name} | {p['elasticJobs']:,} | {p['startedBelowMax']:,} | {p['resizes']:,} | "
            f"{w['meanQueueDelaySeconds']:,.1f} / {o['meanQueueDelaySeconds']:,.1f} | "
            f"{w['p95QueueDelaySeconds']:,.1f} / {o['p95QueueDelaySeconds']:,.1f} | "
            f"{w['gpuUtilization']:.3f} / {o['gpuUtilization']:.3f} | "
            f"{w['meanJctSeconds']:,.1f} / {o['meanJctSeconds']:,.1f} |"
        )
    return lines


def _ratio_value(ours: float, theirs: float) -> float | None:
    """ours / theirs rounded; 1 when both are 0, None when only theirs is (undefined)."""
    if not theirs:
        return 1.0 if not ours else None
    return round(ours / theirs, 4)


def _queue_markdown(section: Mapping[str, Any]) -> list[str]:
    policies: Mapping[str, Any] = section["policies"]
    quota: Mapping[str, Any] = section["quota"]
    models = sorted({m for q in quota.values() for m in q["nominal"]})
    lines = [
        "",
        "## Queues",
        "",
        f"> {section['rule']}",
        "",
        "Jobs per priority: " + ", ".join(f"{p}: {n:,}" for p, n in section["priorities"].items()) + ".",
        "",
        "| queue | jobs | GPU-hours submitted | " + " | ".join(f"nominal {m}" for m in models) + " |",
        "|---|---|---|" + "---|" * len(models),
    ]
    for name, q in quota.items():
        lines.append(
            f"| {name} | {q['jobs']:,} | {q['gpuHours']:,.0f} | "
            + " | ".join(f"{q['nominal'].get(m, 0):,}" for m in models)
            + " |"
        )
    lines += [
        "",
        FAIRNESS_TEXT,
        "",
        "| policy | Jain over queues | preemptions per 1,000 jobs | preempted jobs | GPU-hours lost to preemption |",
        "|---|---|---|---|---|",
    ]
    for name, p in policies.items():
        lines.append(
            f"| {name} | {p['queueJainFairness']:.3f} | {p['preemptionsPer1000Jobs']:.2f} | {p['preemptedJobs']:,} | "
            f"{p['gpuHoursLostToPreemption']:,.1f} |"
        )
    shown = [n for n in (QUEUE_POLICY, "federator") if n in policies]
    for title, table, names in (("queue", "perQueue", list(quota)), ("priority", "perPriority", None)):
        if not shown:
            break
        groups = names or sorted({g for n in shown for g in policies[n][table]}, key=int)
        lines += [
            "",
            f"Per {title}: mean / median / p95 queueing delay (s), mean speed, evictions.",
            "",
            f"| {title} | " + " | ".join(f"{n} delay | {n} speed | {n} evictions" for n in shown) + " |",
            "|---|" + "---|---|---|" * len(shown),
        ]
        for group in groups:
            cells = []
            for n in shown:
                q = policies[n][table].get(group)
                if q is None:
                    cells.append("- | - | -")
                else:
                    cells.append(
                        f"{q['meanQueueDelaySeconds']:,.1f} / {q['medianQueueDelaySeconds']:,.1f} / "
                        f"{q['p95QueueDelaySeconds']:,.1f} | {q['meanSpeed']:.3f} | {q['evictions']:,}"
                    )
            lines.append(f"| {group} | " + " | ".join(cells) + " |")
    victims = section.get("checkpointAwareVictims")
    if isinstance(victims, Mapping):
        ratio = victims["ratio"]
        lines += [
            "",
            "### Checkpoint-aware victims",
            "",
            str(victims["rule"]),
            "",
            "| victim order | GPU-hours lost to preemption | preemptions | GPU-hours lost per preemption |",
            "|---|---|---|---|",
            f"| with ({victims['with']}) | {victims['gpuHoursLostWith']:,.1f} | {victims['preemptionsWith']:,} | "
            f"{victims['gpuHoursLostPerPreemptionWith']:,.2f} |",
            f"| without ({victims['without']}) | {victims['gpuHoursLostWithout']:,.1f} | "
            f"{victims['preemptionsWithout']:,} | {victims['gpuHoursLostPerPreemptionWithout']:,.2f} |",
            "",
            f"Difference (without - with): {victims['gpuHoursSaved']:,.1f} GPU-hours"
            + (f" (with / without: {ratio:.3g})." if ratio is not None else "."),
        ]
    comparison = section.get("comparison")
    if isinstance(comparison, Mapping):
        lines += [
            "",
            f"{comparison['of']} / {comparison['to']} (same jobs, same priorities, this invocation; delays, JCT "
            "and writes lower is better, utilisation and fairness higher):",
            "",
            "| " + " | ".join(comparison["ratios"]) + " |",
            "|" + "---|" * len(comparison["ratios"]),
            "| " + " | ".join("n/a" if v is None else f"{v:.3g}" for v in comparison["ratios"].values()) + " |",
        ]
    return lines


def _plots(out: Path, results: Sequence[PolicyResult]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for r in results:
        delays = r.delays
        if not delays:
            continue
        n = len(delays)
        step = max(1, n // 2000)
        xs = [delays[i] for i in range(0, n, step)] + [delays[-1]]
        ys = [(i + 1) / n for i in range(0, n, step)] + [1.0]
        ax.step(xs, ys, where="post", label=r.policy, linewidth=1.6 if r.policy == "federator" else 1.0)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("queueing delay (s, symmetric log)")
    ax.set_ylabel("share of started jobs")
    ax.set_title("Queueing delay CDF")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "queue_delay_cdf.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 5))
    for r in results:
        if r.utilization:
            ax.plot([t / 86400 for t, _ in r.utilization], [u for _, u in r.utilization], label=r.policy,
                    linewidth=1.4 if r.policy == "federator" else 0.8)
    ax.set_xlabel("days since the first submission")
    ax.set_ylabel("GPUs allocated / all GPUs")
    ax.set_title("GPU utilisation over time")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "gpu_utilization.png", dpi=110)
    plt.close(fig)

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    names = [r.policy for r in results]
    left.bar(names, [float(r.metrics["memberWritesPerJob"]) for r in results], color="tab:blue")
    left.set_ylabel("member writes per job")
    left.set_title("Writes into member clusters per job")
    right.bar(names, [float(r.metrics["datasetBytesCopied"]) / 2**40 for r in results], color="tab:orange")
    right.set_ylabel("TiB")
    right.set_title("Dataset bytes copied")
    for axis in (left, right):
        axis.tick_params(axis="x", labelrotation=45)
        for label in axis.get_xticklabels():
            label.set_horizontalalignment("right")
        axis.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "writes_and_bytes.png", dpi=110)
    plt.close(fig)


def write_report(
    out: Path,
    *,
    report: dict[str, Any],
    results: Sequence[PolicyResult],
    federation: Federation,
    wall_seconds: float,
    jobs: int,
) -> None:
    for r in results:
        if tuple(r.metrics) != METRIC_KEYS:
            raise RuntimeError(f"policy {r.policy} measured {sorted(r.metrics)}, not the report's keys")
    out.mkdir(parents=True, exist_ok=True)
    _plots(out, results)
    (out / "report.md").write_text(_markdown(report, results, federation, wall_seconds=wall_seconds, jobs=jobs))
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
