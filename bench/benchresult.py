"""The machine-readable result every bench writes with `--json FILE`, read by `federator bench`.

Not a benchmark (`federator bench` runs the benches it names, never this
file). A bench script imports it as `from benchresult import BenchResult`:
the directory of the script being run is first on sys.path.

The file is one JSON object:

    {"bench": "placement", "argv": [...],
     "figures": [{"name": "20x500.decisionsPerSecond", "unit": "decisions/s",
                  "values": [3412.0, 3655.1, 3590.7],        # one value per run, in run order
                  "bar": {"op": ">=", "value": 2000}},         # or null: no bar for this figure
                 ...],
     "notes": ["..."],                                          # lines worth keeping with the figures
     "plots": ["/abs/path/plot.png"]}                            # files the bench drew, if any

`federator bench` takes the median and the spread (min, max) of `values`;
the bench itself never has to agree with it on how to summarise.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

OPS = (">=", "<=")


_SUFFIXES = (("_ms", "ms"), ("_s", "s"), ("_mib", "MiB"), ("_per_s", "/s"), ("Ms", "ms"), ("MiB", "MiB"),
             ("Percent", "%"), ("PerSecond", "/s"), ("Seconds", "s"))


def unit_of(key: str) -> str:
    """The unit a figure's name states: "/s" in it, a closing "(ms)", a last word "ms", "s" or "MiB", or an ending
    such as "_ms", "Seconds"."""
    if "/s" in key or "_per_s_" in key:
        return "/s"
    if key.endswith(")") and "(" in key:
        return key[key.rindex("(") + 1 : -1]
    for word in ("ms", "s", "MiB"):
        if key.endswith(f" {word}"):
            return word
    for suffix, unit in sorted(_SUFFIXES, key=lambda pair: -len(pair[0])):
        if key.endswith(suffix):
            return unit
    return ""


class BenchResult:
    """Figures of one bench invocation, one value per run, written as JSON."""

    def __init__(self, bench: str) -> None:
        self.bench = bench
        self._figures: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = []
        self.plots: list[str] = []

    def add(self, name: str, value: float, *, unit: str, bar: tuple[str, float] | None = None) -> None:
        """One run's value of figure `name` (runs append in order); `bar` is (">=" or "<=", threshold)."""
        if bar is not None and bar[0] not in OPS:
            raise ValueError(f"bar op must be one of {OPS}, got {bar[0]!r}")
        figure = self._figures.get(name)
        if figure is None:
            figure = {"name": name, "unit": unit, "values": [],
                      "bar": None if bar is None else {"op": bar[0], "value": bar[1]}}
            self._figures[name] = figure
        number = float(value)
        # JSON has no NaN or infinity; a figure that could not be measured in a run is null there.
        figure["values"].append(number if math.isfinite(number) else None)

    def add_runs(self, runs: list[dict[str, float]], *, prefix: str = "",
                 bars: dict[str, tuple[str, float]] | None = None, units: dict[str, str] | None = None) -> None:
        """Every run's flat {figure: value} dict (the shape most benches build), figures named `prefix + key`;
        a unit not given in `units` is read from the key (`unit_of`)."""
        for run in runs:
            for key, value in run.items():
                unit = (units or {}).get(key) or unit_of(key)
                self.add(prefix + key, value, unit=unit, bar=(bars or {}).get(key))

    def as_json(self) -> dict[str, Any]:
        return {"bench": self.bench, "argv": sys.argv[1:], "figures": list(self._figures.values()),
                "notes": self.notes, "plots": self.plots}

    def write(self, path: Path | str | None) -> None:
        """Write the JSON to `path` (nothing when None: the bench was run without --json)."""
        if path is None:
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(target.name + ".tmp")
        temporary.write_text(json.dumps(self.as_json(), indent=1) + "\n")
        temporary.replace(target)
