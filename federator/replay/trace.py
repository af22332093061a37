"""Reading a GPU-cluster job trace: the ITP format (one CSV per cluster).

    job_id,submission_time,duration,num_gpu

`submission_time` and `duration` are seconds (submission since the start
of collection), `num_gpu` the GPUs the job used. The files are named
`<cluster>.csv`; the cluster name (`cluster01`, ...) is the job's home.

`load_trace(dir)` returns every job sorted by submission time (then
cluster and row), each with a uid unique across the trace
(`<cluster>-<row, six digits>`: job ids repeat across files). A missing directory, a
directory without CSV files, a file without the header, a malformed row
(not a number, a negative or non-finite time, a GPU count below 1) is an
error naming the file and the line; nothing is skipped silently.

Pure apart from reading the files; never writes anything.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_TRACE_JOBS", "TraceError", "TraceJob", "load_trace"]

COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")
# A trace far larger than ITP's 69,351 jobs is a mistake (or an attack on the machine's memory).
MAX_TRACE_JOBS = 5_000_000
# No real GPU job asks for more; a larger count is a malformed row.
MAX_JOB_GPUS = 100_000


class TraceError(ValueError):
    """A trace that cannot be read: the message names the file and line."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    uid: str
    job_id: str
    cluster: str
    row: int
    submitted: float
    duration: float
    gpus: int


def _number(text: str, *, where: str, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {column} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(f"{where}: {column} {text!r} must be a finite, non-negative number")
    return value


def _read_file(path: Path) -> list[TraceJob]:
    cluster = path.stem
    jobs: list[TraceJob] = []
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None or tuple(h.strip() for h in header) != COLUMNS:
                raise TraceError(f"{path}: the first line must be the header {','.join(COLUMNS)}, got {header!r}")
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                where = f"{path}:{line}"
                if len(row) != len(COLUMNS):
                    raise TraceError(f"{where}: expected {len(COLUMNS)} columns, got {len(row)}")
                job_id = row[0].strip()
                if not job_id:
                    raise TraceError(f"{where}: job_id is empty")
                gpus_text = row[3].strip()
                if not gpus_text.isdigit() or not 1 <= int(gpus_text) <= MAX_JOB_GPUS:
                    raise TraceError(f"{where}: num_gpu {gpus_text!r} must be an integer from 1 to {MAX_JOB_GPUS}")
                jobs.append(
                    TraceJob(
                        uid=f"{cluster}-{line - 1:06d}",
                        job_id=job_id,
                        cluster=cluster,
                        row=line - 1,
                        submitted=_number(row[1].strip(), where=where, column="submission_time"),
                        duration=_number(row[2].strip(), where=where, column="duration"),
                        gpus=int(gpus_text),
                    )
                )
                if len(jobs) > MAX_TRACE_JOBS:
                    raise TraceError(f"{path}: more than {MAX_TRACE_JOBS} jobs")
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text ({e.reason})") from None
    except csv.Error as e:
        raise TraceError(f"{path}: malformed CSV ({e})") from None
    return jobs


def load_trace(directory: Path) -> list[TraceJob]:
    """Every job of every `*.csv` in `directory`, sorted by (submission time, cluster, row)."""
    if not directory.is_dir():
        raise TraceError(f"trace directory {directory} does not exist (or is not a directory)")
    files = sorted(p for p in directory.glob("*.csv") if p.is_file())
    if not files:
        raise TraceError(f"trace directory {directory} has no .csv files")
    jobs: list[TraceJob] = []
    for path in files:
        jobs.extend(_read_file(path))
        if len(jobs) > MAX_TRACE_JOBS:
            raise TraceError(f"trace {directory}: more than {MAX_TRACE_JOBS} jobs")
    if not jobs:
        raise TraceError(f"trace directory {directory} has no jobs")
    jobs.sort(key=lambda j: (j.submitted, j.cluster, j.row))
    return jobs
