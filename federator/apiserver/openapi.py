"""Enough OpenAPI for kubectl (kube-api-notes §8).

- `/openapi/v2`: HTTP 200 with an empty body (an empty protobuf Document),
  so kubectl 1.27-1.28 `explain` and the v2 fallbacks do not abort;
- `/openapi/v3`: an index of group-versions, each with a content hash;
- `/openapi/v3/<api|apis/g>/<v>`: one document per group-version with the
  REST paths of every kind, whose operations carry the
  `x-kubernetes-group-version-kind` object and whose PATCH declares the
  `fieldValidation` parameter (so `kubectl apply --validate=strict` leaves
  validation to the server), plus `components.schemas` carrying the GVK list
  form that `kubectl explain` matches.

PATCH bodies advertise merge-patch and json-patch only: built-in kinds then
get their strategic merge patches from kubectl's compiled-in types, which
know the real merge keys. Pure: it builds documents and must never do I/O;
it must never advertise strategic merge patch for a kind whose merge keys it
does not publish (kubectl would then build wrong patches).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
import orjson

from federator.apiserver.registry import JSONObject, Registry, ResourceType


@dataclass(frozen=True, slots=True)
class OpenAPIDocument:
    path: str  # "api/v1" or "apis/<group>/<version>" (no leading slash)
    body: bytes
    hash: str


def schema_name(rt: ResourceType) -> str:
    if rt.openapi_name:
        return rt.openapi_name
    if not rt.group:
        return f"io.k8s.api.core.{rt.version}.{rt.kind}"
    reversed_group = ".".join(reversed(rt.group.split(".")))
    return f"{reversed_group}.{rt.version}.{rt.kind}"


def _gvk(rt: ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _object_schema(rt: ResourceType) -> JSONObject:
    base: JSONObject = {
        "type": "object",
        "description": rt.description or f"{rt.kind} is a {rt.qualified_kind} object.",
        "properties": {
            "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
            "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
            "metadata": {"type": "object", "description": "Standard object's metadata."},
        },
    }
    custom = dict(rt.openapi_schema or {})
    props = dict(custom.pop("properties", {}) or {})
    base.update(custom)
    base["properties"].update(props)
    base["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return base


def _op(rt: ResourceType, action: str, op_id: str, *, ref: str | None = None) -> JSONObject:
    op: JSONObject = {
        "operationId": op_id,
        "description": f"{action} {rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
        "responses": {"200": {"description": "OK"}},
    }
    if ref is not None:
        op["responses"]["200"]["content"] = {"application/json": {"schema": {"$ref": ref}}}
    return op


_FIELD_VALIDATION = {
    "name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True},
    "description": "fieldValidation instructs the server on how to handle objects in the request "
                   "containing unknown or duplicate fields. Valid values are: Ignore, Warn, Strict.",
}
_DRY_RUN = {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}}
_FIELD_MANAGER = {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}}


def _write_op(rt: ResourceType, action: str, op_id: str, ref: str, content_types: list[str]) -> JSONObject:
    op = _op(rt, action, op_id, ref=ref)
    op["parameters"] = [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION]
    op["requestBody"] = {"content": {ct: {"schema": {"$ref": ref} if ct == "application/json" else {"type": "object"}}
                                     for ct in content_types}}
    return op


def _paths_for(rt: ResourceType) -> dict[str, JSONObject]:
    ref = f"#/components/schemas/{schema_name(rt)}"
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    name_kind = rt.kind
    patch_types = ["application/json-patch+json", "application/merge-patch+json"]
    paths: dict[str, JSONObject] = {}
    if rt.namespaced:
        paths[f"{prefix}/{rt.plural}"] = {"get": _op(rt, "list", f"list{name_kind}ForAllNamespaces")}
        coll = f"{prefix}/namespaces/{{namespace}}/{rt.plural}"
        item = f"{coll}/{{name}}"
        scope = "Namespaced"
    else:
        coll = f"{prefix}/{rt.plural}"
        item = f"{coll}/{{name}}"
        scope = ""
    paths[coll] = {
        "get": _op(rt, "list", f"list{scope}{name_kind}"),
        "post": _write_op(rt, "post", f"create{scope}{name_kind}", ref, ["application/json", "application/yaml"]),
    }
    paths[item] = {
        "get": _op(rt, "get", f"read{scope}{name_kind}", ref=ref),
        "put": _write_op(rt, "put", f"replace{scope}{name_kind}", ref, ["application/json", "application/yaml"]),
        "patch": _write_op(rt, "patch", f"patch{scope}{name_kind}", ref, patch_types),
        "delete": _op(rt, "delete", f"delete{scope}{name_kind}"),
    }
    if rt.status_subresource:
        paths[f"{item}/status"] = {
            "get": _op(rt, "get", f"read{scope}{name_kind}Status", ref=ref),
            "put": _write_op(rt, "put", f"replace{scope}{name_kind}Status", ref, ["application/json"]),
            "patch": _write_op(rt, "patch", f"patch{scope}{name_kind}Status", ref, patch_types),
        }
    return paths


def group_version_document(registry: Registry, *, group: str, version: str) -> JSONObject:
    paths: dict[str, JSONObject] = {}
    schemas: dict[str, JSONObject] = {}
    for rt in registry.in_group_version(group, version):
        paths.update(_paths_for(rt))
        schemas[schema_name(rt)] = _object_schema(rt)
    title = f"{group}/{version}" if group else version
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": title},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


class OpenAPISpecs:
    """Every OpenAPI v3 document of a registry, built and hashed once."""

    def __init__(self, registry: Registry) -> None:
        self.documents: dict[str, OpenAPIDocument] = {}
        for group, version in registry.group_versions():
            body = orjson.dumps(group_version_document(registry, group=group, version=version))
            digest = hashlib.sha512(body).hexdigest()[:32].upper()
            path = _gv_path(group, version)
            self.documents[path] = OpenAPIDocument(path, body, digest)

    def index(self) -> JSONObject:
        return {
            "paths": {
                path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={doc.hash}"}
                for path, doc in self.documents.items()
            }
        }

    def get(self, path: str) -> OpenAPIDocument | None:
        return self.documents.get(path.strip("/"))


def openapi_v2_body() -> bytes:
    """An empty protobuf `openapi_v2.Document` (zero bytes)."""
    return b""

