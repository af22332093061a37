"""The shape of the controller pipeline (docs/architecture.md), checked over the source:

- no service locator: controllers are handed typed parts (`HubContext.parts`, controllers/pipeline.py),
  never a dict of well-known names (`hub.shared[...]`, `shared.get(...)`);
- dispatch is the only code of the hub that creates or deletes member objects: a `create` or `delete`
  call on a member client (a receiver named `client`), or a call of dispatch's `delete_member_objects`,
  appears only in controllers/dispatch.py and in the fencing package (the member-side agent, and the
  hub's own fencing Lease in each member);
- stored objects are read through the typed views of federator/apis/views.py (`Body(obj).uid`,
  `.deleting`, `.labels`), never through a `(obj.get("metadata") or {})` chain; in the controllers not
  through any other read of `obj.get("metadata")` either (a local `_mapping(obj.get("metadata"))` helper
  chain) nor a raw `obj["metadata"]["uid"]` subscript (a write into the metadata is no read), and the scan
  reaches the caches' re-lists (jobcache, membercluster, queues); and no controller defines its own "a mapping, else an empty one" helper (views.as_mapping is it).

Each scanner is also run on a small source that breaks the rule, so that the checks can fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "federator"

_LOCATOR = re.compile(r"\bhub\.shared\b|\.shared\[|\bshared\.get\(|\bcontext\.shared\b")

#: files that may create or delete member objects, and why
MEMBER_WRITERS = {
    "federator/controllers/dispatch.py": "dispatch: the only writer of member objects",
    "federator/fencing/agent.py": "the fence agent runs inside the member and deletes what a deposed hub left",
    "federator/fencing/hublease.py": "the hub's own fencing Lease in each member (not a workload object)",
}
#: where the member client itself lives (its methods are the calls counted here)
_CLIENT_MODULE = "federator/clusters/client.py"
_WRITES = frozenset({"create", "delete"})
_CLIENT_NAME = re.compile(r"(^|\.)_?(member_)?client$")

_METADATA_CHAIN = re.compile(r"""\.get\(\s*["']metadata["']\s*\)\s*or\s*\{\s*\}""")
#: files that may hold a `.get("metadata") or {}` chain, and why
METADATA_CHAINS_ALLOWED = {
    "federator/apis/views.py": "the views themselves (their docstring names the chain they replace)",
    "federator/apiserver/openapi.py": "a JSON schema's properties.metadata, not a stored object's metadata",
}


def locator_uses(source: str) -> list[int]:
    """Lines of `source` that reach a shared dict of well-known names."""
    return [number for number, line in enumerate(source.splitlines(), 1) if _LOCATOR.search(line)]


def member_writes(source: str, *, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, call) of every member create/delete in `source`: `<client>.create(...)`, `<client>.delete(...)`
    and `delete_member_objects(...)`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _WRITES and _CLIENT_NAME.search(ast.unparse(func.value)):
            found.append((node.lineno, ast.unparse(func)))
        elif isinstance(func, ast.Name) and func.id == "delete_member_objects":
            found.append((node.lineno, func.id))
        elif isinstance(func, ast.Attribute) and func.attr == "delete_member_objects":
            found.append((node.lineno, ast.unparse(func)))
    return found


def metadata_chains(source: str) -> list[int]:
    """Lines of `source` where a `.get("metadata") or {}` chain starts (it may run over two lines)."""
    return [source.count("\n", 0, match.start()) + 1 for match in _METADATA_CHAIN.finditer(source)]


def metadata_gets(source: str, *, filename: str = "<source>") -> list[int]:
    """Lines of `source` that call `<anything>.get("metadata")` (however it is wrapped: `_mapping(...)`,
    `... or {}`, `dict(...)`)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source, filename=filename))
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                  and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "metadata")


def metadata_subscripts(source: str, *, filename: str = "<source>") -> list[int]:
    """Lines of `source` that read `<anything>["metadata"]` (`job["metadata"]["uid"]`): a raw read around
    the views. A write into the metadata (`job["metadata"]["finalizers"] = ...`, `del ...`) is no read."""
    tree = ast.parse(source, filename=filename)
    written = {id(node.value) for node in ast.walk(tree)
               if isinstance(node, ast.Subscript | ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del)}
    return sorted(node.lineno for node in ast.walk(tree)
                  if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
                  and isinstance(node.slice, ast.Constant) and node.slice.value == "metadata"
                  and id(node) not in written)


def _is_mapping_check(node: ast.expr) -> bool:
    """`isinstance(v, Mapping)` (or dict), alone or in an `or` with other checks (`type(v) is dict or ...`)."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return any(_is_mapping_check(value) for value in node.values)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
            and len(node.args) == 2 and ast.unparse(node.args[1]).split(".")[-1] in {"Mapping", "dict"})


def mapping_coercers(source: str, *, filename: str = "<source>") -> list[int]:
    """Lines of the functions (nested ones too) in `source` that only return their argument if it is a mapping,
    else an empty one (`return value if isinstance(value, Mapping) else {}`): a local copy of views.as_mapping."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = [b for b in node.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
        if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.IfExp) \
                and _is_mapping_check(body[0].value.test):
            found.append(node.lineno)
    return found


def _sources() -> list[tuple[str, str]]:
    return [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
            for path in sorted(PACKAGE.rglob("*.py"))]


def test_no_controller_reaches_another_through_a_shared_dict() -> None:
    offenders = [f"{name}:{line}" for name, source in _sources() for line in locator_uses(source)]
    assert not offenders, ("a dict of well-known names instead of a typed part handed to the controller "
                           f"(controllers/pipeline.py): {offenders}")


def test_only_dispatch_creates_or_deletes_member_objects() -> None:
    offenders: list[str] = []
    seen: dict[str, int] = {}
    for name, source in _sources():
        if name == _CLIENT_MODULE or name.startswith("federator/sim/"):
            continue  # the client itself; the simulator is a member, not the hub
        writes = member_writes(source, filename=name)
        seen[name] = len(writes)
        if name not in MEMBER_WRITERS:
            offenders += [f"{name}:{line}: {call}" for line, call in writes]
    assert not offenders, f"member objects created or deleted outside dispatch: {offenders}"
    assert seen["federator/controllers/dispatch.py"] >= 5  # the scanner sees dispatch's own writes


def test_stored_objects_are_read_through_views() -> None:
    offenders: list[str] = []
    seen: dict[str, int] = {}
    for name, source in _sources():
        lines = metadata_chains(source)
        seen[name] = len(lines)
        if name not in METADATA_CHAINS_ALLOWED:
            offenders += [f"{name}:{line}" for line in lines]
    assert not offenders, ("a `.get(\"metadata\") or {}` chain instead of a typed view (Body/Meta, "
                           f"federator/apis/views.py): {offenders}")
    assert seen["federator/apis/views.py"] >= 1  # the scanner sees the chain views.py's docstring names


def test_controllers_read_metadata_only_through_views() -> None:
    offenders: list[str] = []
    scanned: list[str] = []
    for name, source in _sources():
        if not name.startswith("federator/controllers/"):
            continue
        scanned.append(name)
        offenders += [f"{name}:{line}: .get(\"metadata\")" for line in metadata_gets(source, filename=name)]
        offenders += [f"{name}:{line}: [\"metadata\"]" for line in metadata_subscripts(source, filename=name)]
        offenders += [f"{name}:{line}: a local mapping helper" for line in mapping_coercers(source, filename=name)]
    assert not offenders, ("a controller reads metadata around the typed views (Body/Meta and as_mapping, "
                           f"federator/apis/views.py): {offenders}")
    assert len(scanned) >= 20  # the scan reaches the controllers ...
    # ... among them the caches that list stored objects (their re-lists once read uids around the views)
    assert {"federator/controllers/jobcache.py", "federator/controllers/membercluster.py",
            "federator/controllers/queues.py"} <= set(scanned)
    views = (PACKAGE / "apis" / "views.py").read_text(encoding="utf-8")
    assert mapping_coercers(views) and metadata_gets(views)  # ... and sees the helper and the read views.py holds


def test_the_scanners_find_what_breaks_the_rules() -> None:
    assert locator_uses("x = 1\nd = hub.shared.get('dispatcher')\ny = self._shared.get(key)\n") == [2]
    assert locator_uses("objects = self.hub.context.shared['member_objects']\n") == [1]
    source = (
        "async def gc(client, self, objs):\n"
        "    await client.delete(PODS, namespace='a', name='b')\n"
        "    await self.client.create(PODS, {}, namespace='a')\n"
        "    await self.storage.delete(rt, namespace='a', name='b')\n"
        "    await delete_member_objects(client, objs, cluster='c')\n"
        "    await client.get(PODS, namespace='a', name='b')\n"
    )
    assert [line for line, _ in member_writes(source)] == [2, 3, 5]

    chains = (
        "uid = (job.get('metadata') or {}).get('uid')\n"
        "meta = Body(job)\n"
        "labels = (pod.get(\"metadata\")\n"
        "          or {}).get('labels')\n"
        "spec = job.get('spec') or {}\n"
        "meta = obj.get( 'metadata' ) or { }\n"
    )
    assert metadata_chains(chains) == [1, 3, 6]

    local = (
        "def _mapping(value: Any) -> Mapping[str, Any]:\n"
        "    return value if isinstance(value, Mapping) else {}\n"
        "def member_pod(pod):\n"
        "    def mapping(value):\n"
        "        \"\"\"A mapping, else {}.\"\"\"\n"
        "        return value if isinstance(value, collections.abc.Mapping) else {}\n"
        "    meta = mapping(pod.get(\"metadata\"))\n"
        "    labels = _mapping(_mapping(pod.get('metadata')).get('labels'))\n"
        "    body = Body(pod)\n"
        "    return value if value else {}\n"
        "spec = _mapping(pod.get('spec'))\n"
        "def fast(value):\n"
        "    return value if type(value) is dict or isinstance(value, Mapping) else {}\n"
    )
    assert sorted(mapping_coercers(local)) == [1, 4, 12]
    assert metadata_gets(local) == [7, 8]

    subscripts = (
        "present.add(job['metadata']['uid'])\n"
        "job[\"metadata\"][\"finalizers\"] = []\n"
        "meta = obj['metadata']\n"
        "uid = Body(job).uid\n"
        "del pod['metadata']['labels']\n"
        "name = str(obj[\"metadata\"].get('name'))\n"
    )
    assert metadata_subscripts(subscripts) == [1, 3, 6]
