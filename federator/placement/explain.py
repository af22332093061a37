"""Human-readable explanations of placement: why here, why not there.

`render_decision` and `render_unplaced` produce the text that
`federator describe job` prints: the chosen cluster and its nodes, the score
table of the clusters that passed, and the why-not table of the clusters a
filter rejected (filter, reason code, message with the numbers).

Pure: builds strings, prints nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from federator.placement.decision import Decision, Rejection, ScoreBreakdown, Unplaced

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


def render_decision(decision: Decision) -> str:
    model = f" on {decision.gpu_model}" if decision.gpu_model else ""
    lines = [
        f"Placed {decision.gang_key} in cluster {decision.cluster}{model} "
        f"({len(decision.assignment)} pods on {len(decision.nodes)} nodes, "
        f"decided at member resourceVersion {decision.resource_version or '-'})",
        "Nodes:",
        *_assignment_lines(decision),
        "Scores (normalised x weight):",
        *render_scores(decision.scores),
    ]
    if decision.outranked:
        best = decision.scores[0].total if decision.scores else 0.0
        lines.append(f"Outranked (passed the cheap filters, but could score at most this, below {best:.1f}):")
        rows = [(name, f"{decision.outranked[name]:.1f}") for name in sorted(decision.outranked)]
        lines.extend(_table(("CLUSTER", "AT MOST"), rows))
    lines.append("Why not the other clusters:")
    lines.extend(render_why_not(decision.why_not))
    return "\n".join(lines)


def render_unplaced(unplaced: Unplaced) -> str:
    if unplaced.never_fits:
        headline = f"{unplaced.gang_key} fits no eligible cluster, even with every node free"
    else:
        headline = f"{unplaced.gang_key} is waiting: no cluster can take the whole gang now"
    lines = [headline]
    if unplaced.hold is not None:
        hold = unplaced.hold
        lines.append(
            f"Holding {len(hold.nodes)} nodes in {hold.cluster} for it "
            f"({hold.ready_fraction:.0%} of what it needs there is already free): {', '.join(hold.nodes)}"
        )
    lines.append("Why not:")
    lines.extend(render_why_not(unplaced.why_not))
    return "\n".join(lines)
