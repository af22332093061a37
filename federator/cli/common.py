"""What every `federator` command group shares: the errors a user can cause,
the hub access flags and the runner that turns a hub call into an exit code,
reading manifests, and the table/JSON/YAML printers (also `get`, which both
`federator get` and `federator cluster list` run).

The command modules of this package import this one and never each other;
this module imports none of them, nor `federator.cli` itself. Every error is
one line on stderr with a non-zero exit code: server errors as kubectl words
them (`Error from server (NotFound): ...`), file and usage errors as
`error: ...`; never a traceback, never a credential.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

import yaml

from federator.apis.common import json_type, parse_duration_seconds
from federator.apis.views import Body
from federator.apiserver.managedfields import without_managed_fields
from federator.cli.hubclient import (
    API_GROUP,
    API_VERSION,
    HubClient,
    HubConnection,
    HubError,
    JSONObject,
    clusters_path,
    jobs_path,
    load_connection,
    queues_path,
)

GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"
_MAX_INPUT_BYTES = 8 * 1024 * 1024

Handler = Callable[[argparse.Namespace], int]


class UserError(Exception):
    """An error the user caused or can fix; printed as one line, exit code 2 by default."""

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class InputError(Exception):
    """A bad file or flag: printed as `error: <message>`, exit code 2."""


# ---------------------------------------------------------------- hub access


def hub_flags(parser: argparse.ArgumentParser, *, member_kubeconfig: bool = False) -> None:
    """--kubeconfig (or --hub-kubeconfig), --hub-context and --request-timeout of a command that calls the hub."""
    group = parser.add_argument_group("hub access")
    if member_kubeconfig:
        # --kubeconfig names the member cluster's kubeconfig in `cluster add`.
        group.add_argument("--hub-kubeconfig", dest="hub_kubeconfig", metavar="FILE",
                           help="kubeconfig of the hub (default: $KUBECONFIG, then ~/.kube/config)")
    else:
        group.add_argument("--kubeconfig", "--hub-kubeconfig", dest="hub_kubeconfig", metavar="FILE",
                           help="kubeconfig of the hub (default: $KUBECONFIG, then ~/.kube/config)")
    group.add_argument("--hub-context", dest="hub_context", metavar="NAME",
                       help="kubeconfig context to use (default: the current context)")
    group.add_argument("--request-timeout", type=request_timeout, default=30.0, metavar="SECONDS",
                       help="give up on a request after this long (default: 30; at most a day)")


def etcd_tls_flags(group: Any, *, who: str) -> None:
    """--etcd-cafile, --etcd-certfile and --etcd-keyfile (kube-apiserver's names) for a command that takes an
    etcds:// store URL (`federator up`, `federator store rewrite`); federator/store/open.py checks them."""
    group.add_argument("--etcd-cafile", metavar="FILE",
                       help="etcds:// only: the CA (PEM) that signed etcd's server certificate (kube-apiserver's "
                            "flag of this name); with several endpoints every member's certificate must name the "
                            "first endpoint's host")
    group.add_argument("--etcd-certfile", metavar="FILE",
                       help=f"etcds:// only: {who} client certificate (PEM), signed by a CA in etcd's "
                            "--trusted-ca-file (etcd runs with --client-cert-auth)")
    group.add_argument("--etcd-keyfile", metavar="FILE", help="etcds:// only: the key (PEM) of --etcd-certfile")


def request_timeout(text: str) -> float:
    """--request-timeout: seconds, more than 0 and at most a day (argparse turns the error into usage + one line)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < seconds <= 86_400:  # also refuses nan and infinity
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 and at most 86400 seconds")
    return seconds


def run_on_hub(args: argparse.Namespace, work: Callable[[HubClient], Any]) -> int:
    """Connect as the kubeconfig says, run `work`, and turn failures into one line."""
    try:
        connection = load_connection(kubeconfig=args.hub_kubeconfig, context=args.hub_context)
        return int(asyncio.run(_with_client(connection, args.request_timeout, work)) or 0)
    except HubError as e:
        print(str(e), file=sys.stderr)
        return 1
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


async def _with_client(connection: HubConnection, timeout: float, work: Callable[[HubClient], Any]) -> Any:
    async with HubClient(connection, timeout_seconds=timeout) as client:
        return await work(client)


def parse_duration(text: str, *, flag: str, allow_zero: bool = False) -> float:
    """Seconds from a duration like kubectl's: "90", "90s", "1.5m", "2h", "500ms" (a bare number is seconds).
    Raises InputError naming the flag for anything else, a negative or absurd value."""
    try:
        return parse_duration_seconds(text, allow_zero=allow_zero)
    except ValueError as e:
        raise InputError(f"{flag} {text!r}: {e}") from None


_Item = TypeVar("_Item")


async def each_request(items: Iterable[_Item], call: Callable[[_Item], Awaitable[JSONObject]],
                       done: Callable[[_Item, JSONObject], str]) -> int:
    """`call` for each item in turn, printing `done(item, answer)` or the server's one-line error; 1 if any
    failed, else 0. An unreachable hub stops at the first item (the next would fail the same way)."""
    failures = 0
    for item in items:
        try:
            answer = await call(item)
        except HubError as e:
            if e.code == 0:
                raise
            print(str(e), file=sys.stderr)
            failures += 1
            continue
        print(done(item, answer), flush=True)
    return 1 if failures else 0


def namespace_of(args: argparse.Namespace, client: HubClient) -> str:
    """-n, else the kubeconfig context's namespace, else `default`."""
    return str(getattr(args, "namespace", None) or client.connection.namespace or "default")


# ---------------------------------------------------------------- reading manifests


def read_documents(path: str, *, stdin: TextIO | None = None) -> list[JSONObject]:
    """The objects in a YAML/JSON file ('-' = stdin); `kind: List` is unpacked."""
    if path == "-":
        text = (stdin or sys.stdin).read(_MAX_INPUT_BYTES + 1)
        where = "<stdin>"
    else:
        file = Path(path)
        where = path
        try:
            if file.stat().st_size > _MAX_INPUT_BYTES:
                raise InputError(f"{where}: larger than {_MAX_INPUT_BYTES // (1024 * 1024)} MiB")
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"{where}: no such file") from None
        except IsADirectoryError:
            raise InputError(f"{where}: is a directory") from None
        except UnicodeDecodeError:
            raise InputError(f"{where}: not UTF-8 text") from None
        except OSError as e:
            raise InputError(f"{where}: cannot read it ({e.strerror})") from None
    if len(text) > _MAX_INPUT_BYTES:
        raise InputError(f"{where}: larger than {_MAX_INPUT_BYTES // (1024 * 1024)} MiB")
    try:
        loaded = [d for d in yaml.safe_load_all(text) if d is not None]
    except RecursionError:
        raise InputError(f"{where}: nested too deeply to be a manifest") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "malformed"
        raise InputError(f"{where}: not valid YAML or JSON{at}: {problem}") from None
    documents: list[JSONObject] = []
    for index, document in enumerate(loaded, start=1):
        if not isinstance(document, dict):
            raise InputError(f"{where}: document {index} is a {json_type(document)}, not an object")
        if document.get("kind") == "List" and isinstance(document.get("items"), list):
            documents.extend(i for i in document["items"] if isinstance(i, dict))
        else:
            documents.append(document)
    if not documents:
        raise InputError(f"{where}: no objects in it")
    try:
        # JSON round trip: refuse what the API cannot hold (YAML dates, sets, lone surrogates...) here, clearly.
        return [json.loads(json.dumps(d, ensure_ascii=False).encode("utf-8")) for d in documents]
    except RecursionError:
        raise InputError(f"{where}: nested too deeply to be a manifest") from None
    except UnicodeEncodeError:
        raise InputError(f"{where}: a string in it is not valid Unicode (a lone \\uD800-\\uDFFF escape)") \
            from None
    except (TypeError, ValueError):
        raise InputError(f"{where}: a value in it is a YAML date, time, set or other type JSON cannot hold "
                         "(quote it to make it a string)") from None


def check_kind(document: JSONObject, kind: str, where: str, index: int) -> None:
    """InputError unless object `index` of `where` is a `kind` of our API group (or names no apiVersion)."""
    found_kind, found_version = document.get("kind"), document.get("apiVersion")
    if found_kind is None:
        raise InputError(f"{where}: object {index} has no kind; expected kind: {kind} (apiVersion: {GROUP_VERSION})")
    if found_kind != kind or found_version not in (None, GROUP_VERSION):
        shown = f"{found_version}/{found_kind}" if found_version else str(found_kind)
        raise InputError(f"{where}: object {index} is a {shown}, not a {GROUP_VERSION} {kind}")


# ---------------------------------------------------------------- tables and printers


def age(timestamp: Any, now: dt.datetime) -> str:
    """kubectl's AGE (`5m`, `3d`) of a timestamp."""
    from federator.apiserver.table import age as kube_age

    return kube_age(timestamp, now)


@dataclass(frozen=True, slots=True)
class _Column:
    header: str
    cell: Callable[[JSONObject], Any]
    wide_only: bool = False
    date: bool = False


def _columns(kind: str) -> list[_Column]:
    from federator.apis.crd import KINDS

    return [_Column(c.name.upper(), c.cell(), wide_only=c.priority > 0, date=c.type == "date")
            for c in KINDS[kind].columns]


def _cell_text(value: Any) -> str:
    if value is None or value == "":
        return "<none>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """kubectl-style columns: left-aligned, three spaces apart."""
    materialized = [list(headers)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in materialized) for i in range(len(headers))]
    lines = ["   ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in materialized]
    return "\n".join(lines)


class Printer:
    """Rows of one kind, with the header printed once (also across watch events)."""

    def __init__(self, kind: str, *, wide: bool, all_namespaces: bool, out: TextIO) -> None:
        self.columns = [c for c in _columns(kind) if wide or not c.wide_only]
        self.all_namespaces = all_namespaces
        self.out = out
        self.widths: list[int] | None = None

    def headers(self) -> list[str]:
        return (["NAMESPACE"] if self.all_namespaces else []) + ["NAME"] + [c.header for c in self.columns]

    def row(self, obj: JSONObject, now: dt.datetime) -> list[str]:
        meta = Body(obj)
        cells = [meta.namespace] if self.all_namespaces else []
        cells.append(meta.name)
        for column in self.columns:
            value = column.cell(obj)
            cells.append(age(value, now) if column.date else _cell_text(value))
        return cells

    def print_all(self, objects: Sequence[JSONObject]) -> None:
        now = dt.datetime.now(dt.UTC)
        rows = [self.row(o, now) for o in objects]
        table = [self.headers()] + rows
        self.widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        for r in table:
            self._line(r)

    def print_one(self, obj: JSONObject) -> None:
        if self.widths is None:
            self.print_all([obj])
            return
        self._line(self.row(obj, dt.datetime.now(dt.UTC)))

    def _line(self, cells: Sequence[str]) -> None:
        assert self.widths is not None
        self.widths = [max(w, len(c)) for w, c in zip(self.widths, cells, strict=True)]
        print("   ".join(c.ljust(w) for c, w in zip(cells, self.widths, strict=True)).rstrip(),
              file=self.out, flush=True)


def dump(obj: Any, output: str, out: TextIO) -> None:
    """`obj` as `-o json` (kubectl's four-space indent) or `-o yaml`, without metadata.managedFields
    (of a list's items too), as kubectl prints objects unless given --show-managed-fields."""
    obj = without_managed_fields(obj)
    if output == "json":
        print(json.dumps(obj, indent=4), file=out, flush=True)
    else:
        print(yaml.safe_dump(obj, sort_keys=False, default_flow_style=False).rstrip("\n"), file=out, flush=True)


# ---------------------------------------------------------------- get (also `cluster list`)


RESOURCES = {
    "jobs": "TrainingJob", "job": "TrainingJob", "tj": "TrainingJob", "trainingjobs": "TrainingJob",
    "trainingjob": "TrainingJob",
    "clusters": "MemberCluster", "cluster": "MemberCluster", "mc": "MemberCluster",
    "memberclusters": "MemberCluster", "membercluster": "MemberCluster",
    "queues": "Queue", "queue": "Queue", "q": "Queue",
}
#: The path of one object of a cluster-scoped kind `federator get` shows (None: the collection).
_CLUSTER_SCOPED: dict[str, Callable[[str | None], str]] = {"MemberCluster": clusters_path, "Queue": queues_path}


def _collection(kind: str, namespace: str | None) -> str:
    return jobs_path(namespace) if kind == "TrainingJob" else _CLUSTER_SCOPED[kind](None)


def _object_path(kind: str, namespace: str | None, name: str) -> str:
    return jobs_path(namespace, name) if kind == "TrainingJob" else _CLUSTER_SCOPED[kind](name)


def warn_hub_partitioned(clusters: Sequence[JSONObject]) -> None:
    """One line on stderr when the hub judges itself cut off (Lost conditions with reason HubPartitioned)."""
    held = sorted(Body(c).name for c in clusters
                  if any(isinstance(x, dict) and x.get("type") == "Lost" and x.get("reason") == "HubPartitioned"
                         for x in (c.get("status") or {}).get("conditions") or ()))
    if held:
        print(f"warning: {len(held)} of {len(clusters)} clusters were lost at once ({', '.join(held)}): the hub "
              "assumes it is itself cut off and fails nothing over until contact returns", file=sys.stderr,
              flush=True)


def cmd_get(args: argparse.Namespace) -> int:
    """`federator get jobs|clusters|queues` and `federator cluster list`: a table, JSON/YAML or names; -w
    watches."""
    kind = RESOURCES[args.resource]
    if args.all_namespaces and args.name:
        print("error: a resource cannot be retrieved by name across all namespaces", file=sys.stderr)
        return 2

    async def work(client: HubClient) -> int:
        namespace = None if kind != "TrainingJob" or args.all_namespaces else namespace_of(args, client)
        output = args.output or "table"
        printer = Printer(kind, wide=output == "wide", all_namespaces=bool(args.all_namespaces and kind ==
                          "TrainingJob"), out=sys.stdout)
        params: dict[str, str] = {}
        if args.selector:
            params["labelSelector"] = args.selector
        if args.name:
            params["fieldSelector"] = f"metadata.name={args.name}"
            obj = await client.request("GET", _object_path(kind, namespace, args.name))
            items = [obj]
            resource_version = Body(obj).resource_version
        else:
            listing = await client.request("GET", _collection(kind, namespace), params=params)
            items = [i for i in listing.get("items") or [] if isinstance(i, dict)]
            resource_version = Body(listing).resource_version
        if output in ("json", "yaml"):
            if args.name:
                dump(items[0], output, sys.stdout)
            else:
                dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items},
                     output, sys.stdout)
        elif output == "name":
            for item in items:
                print(f"{kind.lower()}.{API_GROUP}/{Body(item).name}", flush=True)
        elif items:
            printer.print_all(items)
            if kind == "MemberCluster":
                warn_hub_partitioned(items)
        elif not args.watch:
            where = "" if namespace is None else f" in {namespace} namespace"
            print(f"No resources found{where}.", file=sys.stderr)
        if not args.watch:
            return 0
        async for event in client.watch(_collection(kind, namespace), resource_version=resource_version,
                                        params=params):
            obj = event.get("object") or {}
            if output in ("json", "yaml"):
                dump(obj, output, sys.stdout)
            elif output == "name":
                print(f"{kind.lower()}.{API_GROUP}/{Body(obj).name}", flush=True)
            else:
                printer.print_one(obj)
        return 0

    return run_on_hub(args, work)
