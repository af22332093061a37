"""Human-readable explanations of placement: why here, why not there.

`render_decision` and `render_unplaced` produce the text that
`federator describe job` prints: the chosen cluster and its nodes, the score
table of the clusters that passed, and the why-not table of the clusters a
filter rejected (filter, reason code, message with the numbers). With
queues: the queue a decision is charged to, the gangs it preempts (why,
and the GPU-seconds each eviction loses: work since the victim's last
checkpoint, or since its start), the elastic gangs it shrinks instead (by how many pods), the quota an
unplaced gang waits for, and, in explain mode, where it would fit after
preempting whom. An elastic gang's decision says the size chosen per role.

Pure: builds strings, prints nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from federator.placement.decision import (
    Decision,
    Preemption,
    Rejection,
    ScoreBreakdown,
    Unplaced,
    Victim,
    VictimReason,
    gpu_seconds_text,
)

__all__ = ["render_decision", "render_scores", "render_unplaced", "render_why_not"]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in (headers, *rows):
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def render_why_not(why_not: Mapping[str, Rejection]) -> list[str]:
    """One row per rejected cluster, sorted by name."""
    if not why_not:
        return ["  (no cluster was rejected by a filter)"]
    rows = [
        (r.cluster, r.filter, r.code, r.message) for r in (why_not[name] for name in sorted(why_not))
    ]
    return _table(("CLUSTER", "FILTER", "REASON", "DETAIL"), rows)


def render_scores(scores: Sequence[ScoreBreakdown]) -> list[str]:
    """One row per passing cluster, best first; each plugin column shows normalised score x weight."""
    if not scores:
        return ["  (no cluster passed every filter)"]
    plugins = [part.plugin for part in scores[0].parts]
    headers = ("CLUSTER", "TOTAL", *plugins, "GPU", "NODES")
    rows = []
    for breakdown in scores:
        cells = [breakdown.cluster, f"{breakdown.total:.1f}"]
        for part in breakdown.parts:
            cells.append(f"{part.normalized:.0f}x{part.weight:g}")
        cells.append(breakdown.gpu_model or "-")
        cells.append(str(breakdown.nodes_used))
        rows.append(cells)
    return _table(headers, rows)


def _assignment_lines(decision: Decision) -> list[str]:
    by_node: dict[str, list[str]] = {}
    for pod in decision.assignment:
        by_node.setdefault(pod.node, []).append(f"{pod.role}-{pod.index}")
    return [f"  {node}: {', '.join(pods)}" for node, pods in sorted(by_node.items())]


def _why(reason: VictimReason) -> str:
    return "lower priority" if reason is VictimReason.LOWER_PRIORITY else "borrowed quota"


def _lost(victim: Victim) -> str:
    """The GPU-seconds the eviction loses, and since when ("-" when not known)."""
    if victim.lost_gpu_seconds is None:
        return "-"
    since = "since checkpoint" if victim.checkpointed else "since start"
    return f"{gpu_seconds_text(victim.lost_gpu_seconds)} ({since})"


def _victim_lines(preemption: Preemption) -> list[str]:
    rows = [
        (v.key, v.queue, str(v.priority), _why(v.reason), _lost(v)) for v in preemption.victims
    ]
    lines = _table(("GANG", "QUEUE", "PRIORITY", "WHY", "GPU-SECONDS LOST"), rows) if rows else []
    if preemption.shrinks:
        lines.append("  shrunk toward their minimum instead (their newest pods above it removed):")
        lines.extend(
            _table(
                ("GANG", "QUEUE", "PRIORITY", "WHY", "PODS REMOVED"),
                [(s.key, s.queue, str(s.priority), _why(s.reason), ", ".join(s.pods)) for s in preemption.shrinks],
            )
        )
    if preemption.nodes:
        lines.append(f"  room made on {len(preemption.nodes)} nodes: {', '.join(preemption.nodes)}")
    if not preemption.minimal:
        lines.append("  (the search for fewer victims was cut short: no victim of this set can be spared)")
    return lines


def render_decision(decision: Decision) -> str:
    model = f" on {decision.gpu_model}" if decision.gpu_model else ""
    lines = [
        f"Placed {decision.gang_key} in cluster {decision.cluster}{model} "
        f"({len(decision.assignment)} pods on {len(decision.nodes)} nodes, "
        f"decided at member resourceVersion {decision.resource_version or '-'})",
    ]
    if decision.queue:
        lines.append(f"Queue {decision.queue}" + (", on quota borrowed from its cohort" if decision.borrowed else ""))
    if decision.ranges:
        sizes = ", ".join(
            f"{role} {count}" + (" (of {}..{})".format(*decision.ranges[role]) if role in decision.ranges else "")
            for role, count in sorted(decision.replicas.items())
        )
        lines.append(f"Elastic size: {sizes}")
    if decision.preemption is not None:
        preemption = decision.preemption
        evicted = len(preemption.victims)
        if evicted or not preemption.shrinks:
            lines.append(
                f"Preempts {evicted} gang{'s' if evicted != 1 else ''} "
                f"in {preemption.cluster} (evicted whole before it starts):"
            )
        else:
            shrunk = len(preemption.shrinks)
            lines.append(f"Shrinks {shrunk} gang{'s' if shrunk != 1 else ''} in {preemption.cluster} (evicts none):")
        lines.extend(_victim_lines(preemption))
    lines.extend(["Nodes:", *_assignment_lines(decision)])
    if decision.preemption is None or decision.scores:
        lines.extend(["Scores (normalised x weight):", *render_scores(decision.scores)])
    if decision.outranked:
        best = decision.scores[0].total if decision.scores else 0.0
        lines.append(f"Outranked (passed the cheap filters, but could score at most this, below {best:.1f}):")
        rows = [(name, f"{decision.outranked[name]:.1f}") for name in sorted(decision.outranked)]
        lines.extend(_table(("CLUSTER", "AT MOST"), rows))
    lines.append("Why not the other clusters:")
    lines.extend(render_why_not(decision.why_not))
    return "\n".join(lines)


def render_unplaced(unplaced: Unplaced) -> str:
    quota = unplaced.quota
    if quota is not None:
        if unplaced.never_fits:
            headline = f"{unplaced.gang_key} can never be admitted by its queue: {quota.message}"
        else:
            headline = f"{unplaced.gang_key} is waiting for quota: {quota.message}"
    elif unplaced.never_fits:
        headline = f"{unplaced.gang_key} fits no eligible cluster, even with every node free"
    else:
        headline = f"{unplaced.gang_key} is waiting: no cluster can take the whole gang now"
    lines = [headline]
    if quota is not None and quota.holding:
        lines.append(
            f"Holding its demand in queue {quota.queue}'s quota: gangs of equal or lower priority of that "
            "queue cannot take what frees up first"
        )
    if unplaced.preemption is not None:
        text = unplaced.preemption.describe()
        lines.append(f"{text[:1].upper()}{text[1:]}:")
        lines.extend(_victim_lines(unplaced.preemption))
    if unplaced.hold is not None:
        hold = unplaced.hold
        lines.append(
            f"Holding {len(hold.nodes)} nodes in {hold.cluster} for it "
            f"({hold.ready_fraction:.0%} of what it needs there is already free): {', '.join(hold.nodes)}"
        )
    lines.append("Why not:")
    lines.extend(render_why_not(unplaced.why_not))
    return "\n".join(lines)
