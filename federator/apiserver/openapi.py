"""Enough OpenAPI for kubectl (kube-api-notes §8).

- `/openapi/v2`: HTTP 200 with an empty body (an empty protobuf Document),
  so kubectl 1.27-1.28 `explain` and the v2 fallbacks do not abort;
- `/openapi/v3`: an index of group-versions, each with a content hash;
- `/openapi/v3/<api|apis/g>/<v>`: one document per group-version with the
  REST paths of every kind, whose operations carry the
  `x-kubernetes-group-version-kind` object and whose PATCH declares the
  `fieldValidation` parameter (so `kubectl apply --validate=strict` leaves
  validation to the server), plus `components.schemas` carrying the GVK list
  form that `kubectl explain` matches. Only the verbs a kind serves appear;
  every operation declares its path and query parameters and every status
  code the server answers it with (2xx with the object, list or Status;
  the errors as Status), and the document its bearer-token security, so
  schema-driven tools (schemathesis, generated clients) work unpatched.

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
    # The server takes (and serves) only this kind's apiVersion and kind: say so, so that generated
    # bodies are of this kind and a generated wrong one is expected to get its 400.
    for field, value in (("apiVersion", rt.api_version), ("kind", rt.kind)):
        base["properties"][field] = {**base["properties"].get(field, {}), "type": "string", "enum": [value]}
    base["required"] = sorted({"apiVersion", "kind", "metadata", *base.get("required", ())})
    base["properties"]["metadata"] = _metadata_schema(rt, dict(base["properties"].get("metadata") or {}))
    base["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return base


_STATUS_NAME = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
_STATUS_REF = f"#/components/schemas/{_STATUS_NAME}"
_STATUS_SCHEMA: JSONObject = {
    "type": "object",
    "description": "Status is a return value for calls that don't return other objects (errors, deletes).",
    "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": {"type": "object"}, "status": {"type": "string"}, "message": {"type": "string"},
        "reason": {"type": "string"}, "details": {"type": "object"}, "code": {"type": "integer", "format": "int32"},
    },
    "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Status"}],
}
#: What every operation may answer besides its success code (a kube Status each): a bad parameter or
#: selector, no or a wrong token, a role that does not allow it, a missing object, and the store not
#: answering (Retry-After; client-go retries it).
_COMMON_ERRORS: dict[str, str] = {
    "400": "BadRequest: a malformed parameter, selector or body",
    "401": "Unauthorized: no valid bearer token",
    "403": "Forbidden: the caller's role does not allow this",
    "404": "NotFound: no such object (or namespace path)",
    "429": "TooManyRequests: retry after the Retry-After header",
    "503": "ServiceUnavailable: the store does not answer; retry after the Retry-After header",
}
#: Besides _COMMON_ERRORS, by action.
_ACTION_ERRORS: dict[str, dict[str, str]] = {
    "list": {"410": "Expired: the resourceVersion or continue token is too old",
             "422": "Invalid: a resourceVersionMatch that the other parameters forbid",
             "504": "Timeout: a resourceVersion newer than the store's"},
    "get": {},
    "post": {"409": "AlreadyExists: an object of that name exists", "413": "RequestEntityTooLarge",
             "415": "UnsupportedMediaType", "422": "Invalid: the object fails validation (details.causes)"},
    "put": {"409": "Conflict: the resourceVersion is stale", "413": "RequestEntityTooLarge",
            "415": "UnsupportedMediaType", "422": "Invalid: the object fails validation (details.causes)"},
    "patch": {"409": "Conflict: the patch's resourceVersion is stale", "413": "RequestEntityTooLarge",
              "415": "UnsupportedMediaType: a patch type this kind does not take",
              "422": "Invalid: the patched object fails validation (details.causes)"},
    "delete": {"409": "Conflict: a precondition (uid, resourceVersion) does not hold",
               "413": "RequestEntityTooLarge", "415": "UnsupportedMediaType of DeleteOptions"},
    "deletecollection": {"413": "RequestEntityTooLarge", "415": "UnsupportedMediaType of DeleteOptions"},
}
#: The security scheme kube-apiserver's documents declare: a bearer token in the Authorization header.
_SECURITY_SCHEMES: JSONObject = {"BearerToken": {
    "type": "apiKey", "in": "header", "name": "authorization",
    "description": "Bearer Token authentication"}}


def _json(schema: JSONObject, description: str) -> JSONObject:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _op(rt: ResourceType, action: str, op_id: str, *, ok: dict[str, JSONObject],
        parameters: list[JSONObject] | None = None) -> JSONObject:
    responses: JSONObject = dict(ok)
    for code, text in {**_COMMON_ERRORS, **_ACTION_ERRORS.get(action, {})}.items():
        responses[code] = _json({"$ref": _STATUS_REF}, text)
    op: JSONObject = {
        "operationId": op_id,
        "description": f"{action} {rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
        "responses": responses,
    }
    if parameters:
        op["parameters"] = parameters
    return op


def _query(name: str, schema: JSONObject, description: str) -> JSONObject:
    return {"name": name, "in": "query", "schema": schema, "description": description}


_FIELD_VALIDATION = _query(
    "fieldValidation", {"type": "string", "uniqueItems": True, "enum": ["Ignore", "Warn", "Strict"]},
    "fieldValidation instructs the server on how to handle objects in the request containing unknown or "
    "duplicate fields. Valid values are: Ignore, Warn, Strict.")
_DRY_RUN = _query("dryRun", {"type": "string", "uniqueItems": True, "enum": ["All"]},
                  "When present, modifications are not persisted. The only valid value is All.")
_FIELD_MANAGER = _query("fieldManager", {"type": "string", "maxLength": 128, "uniqueItems": True},
                        "A name associated with the actor or entity that is making these changes.")
_LIST_PARAMETERS: list[JSONObject] = [
    _query("labelSelector", {"type": "string", "uniqueItems": True}, "A selector on the objects' labels."),
    _query("fieldSelector", {"type": "string", "uniqueItems": True}, "A selector on the objects' fields."),
    _query("limit", {"type": "integer", "minimum": 0, "uniqueItems": True}, "The most items to return (0: no limit)."),
    _query("continue", {"type": "string", "uniqueItems": True}, "The continue token of the previous page."),
    _query("resourceVersion", {"type": "string", "uniqueItems": True},
           "Which version of the collection to list (unset: most recent, 0: any, N: not older than N)."),
    _query("resourceVersionMatch", {"type": "string", "uniqueItems": True, "enum": ["Exact", "NotOlderThan"]},
           "How resourceVersion applies to the list: Exact or NotOlderThan."),
]
_DELETE_PARAMETERS: list[JSONObject] = [
    _DRY_RUN,
    _query("gracePeriodSeconds", {"type": "integer", "minimum": 0, "uniqueItems": True},
           "Seconds before the object is deleted (non-negative)."),
]


#: The names the server accepts (RFC 1123 label or subdomain, ResourceType.name_format): generated
#: requests then mostly name objects that could exist; any other name gets a 404 or 422.
_NAME_SCHEMAS: dict[str, JSONObject] = {
    "label": {"type": "string", "maxLength": 63, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
    "subdomain": {"type": "string", "maxLength": 253,
                  "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"},
}


def _path_param(name: str, description: str, *, name_format: str = "label") -> JSONObject:
    return {"name": name, "in": "path", "required": True,
            "schema": {**_NAME_SCHEMAS.get(name_format, {"type": "string"}), "uniqueItems": True},
            "description": description}


_NAMESPACE = _path_param("namespace", "object name and auth scope, such as for teams and projects")


def _metadata_schema(rt: ResourceType, declared: JSONObject) -> JSONObject:
    """ObjectMeta as the server reads and writes it (unless the kind's schema already spells it out)."""
    if declared.get("properties"):
        return declared
    text: JSONObject = {"type": "string"}
    strings: JSONObject = {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        **declared,
        "type": "object",
        "properties": {
            "name": _NAME_SCHEMAS.get(rt.name_format, text), "generateName": text, "namespace": text,
            "labels": strings, "annotations": strings, "uid": text, "resourceVersion": text,
            "generation": {"type": "integer", "format": "int64"},
            "creationTimestamp": {"type": "string", "format": "date-time"},
            "deletionTimestamp": {"type": "string", "format": "date-time", "nullable": True},
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
            "finalizers": {"type": "array", "items": text},
            "ownerReferences": {"type": "array", "items": {"type": "object"}},
            "managedFields": {"type": "array", "items": {"type": "object"}},
        },
        "required": ["name"],
    }


def _write_op(rt: ResourceType, action: str, op_id: str, ref: str, content_types: dict[str, JSONObject], *,
              ok: dict[str, JSONObject]) -> JSONObject:
    op = _op(rt, action, op_id, ok=ok, parameters=[_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION])
    op["requestBody"] = {"required": True, "content": {ct: {"schema": schema} for ct, schema in content_types.items()}}
    return op


def _list_schema(rt: ResourceType) -> JSONObject:
    return {
        "type": "object",
        "description": f"{rt.list_kind} is a list of {rt.kind} objects.",
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {
                "resourceVersion": {"type": "string"}, "continue": {"type": "string"},
                "remainingItemCount": {"type": "integer", "format": "int64"}}},
            "items": {"type": "array", "items": {"$ref": f"#/components/schemas/{schema_name(rt)}"}},
        },
        "required": ["items"],
        "x-kubernetes-group-version-kind": [{"group": rt.group, "version": rt.version, "kind": rt.list_kind}],
    }


def _paths_for(rt: ResourceType) -> dict[str, JSONObject]:
    """The operations of one kind: only the verbs it serves, each with its path parameters and every
    status code the server answers it with (what schema-driven clients and fuzzers check against)."""
    ref = f"#/components/schemas/{schema_name(rt)}"
    obj: JSONObject = {"$ref": ref}
    listed = {"$ref": f"#/components/schemas/{schema_name(rt)}List"}
    deleted = {"anyOf": [{"$ref": _STATUS_REF}, obj]}
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    kind = rt.kind
    bodies = {"application/json": obj, "application/yaml": obj}
    patches: dict[str, JSONObject] = {"application/json-patch+json": {"type": "array", "items": {"type": "object"}},
                                      "application/merge-patch+json": {"type": "object"}}
    verbs = set(rt.verbs)
    paths: dict[str, JSONObject] = {}
    name = _path_param("name", f"name of the {kind}", name_format=rt.name_format)
    if rt.namespaced:
        if "list" in verbs:
            paths[f"{prefix}/{rt.plural}"] = {"get": _op(rt, "list", f"list{kind}ForAllNamespaces",
                                                         ok={"200": _json(listed, "OK")},
                                                         parameters=list(_LIST_PARAMETERS))}
        coll = f"{prefix}/namespaces/{{namespace}}/{rt.plural}"
        scope, scope_params = "Namespaced", [_NAMESPACE]
    else:
        coll = f"{prefix}/{rt.plural}"
        scope, scope_params = "", []
    item = f"{coll}/{{name}}"
    collection: JSONObject = {}
    if "list" in verbs:
        collection["get"] = _op(rt, "list", f"list{scope}{kind}", ok={"200": _json(listed, "OK")},
                                parameters=list(_LIST_PARAMETERS))
    if "create" in verbs:
        collection["post"] = _write_op(rt, "post", f"create{scope}{kind}", ref, bodies,
                                       ok={"201": _json(obj, "Created")})
    if "deletecollection" in verbs:
        collection["delete"] = _op(rt, "deletecollection", f"deletecollection{scope}{kind}",
                                   ok={"200": _json(listed, "OK: the deleted (or terminating) objects")},
                                   parameters=[*_LIST_PARAMETERS, *_DELETE_PARAMETERS])
    single: JSONObject = {}
    if "get" in verbs:
        single["get"] = _op(rt, "get", f"read{scope}{kind}", ok={"200": _json(obj, "OK")})
    if "update" in verbs:
        single["put"] = _write_op(rt, "put", f"replace{scope}{kind}", ref, bodies, ok={"200": _json(obj, "OK")})
    if "patch" in verbs:
        single["patch"] = _write_op(rt, "patch", f"patch{scope}{kind}", ref, patches, ok={"200": _json(obj, "OK")})
    if "delete" in verbs:
        single["delete"] = _op(rt, "delete", f"delete{scope}{kind}", parameters=list(_DELETE_PARAMETERS),
                               ok={"200": _json(deleted, "OK: a Success Status, or the object while it terminates")})
    if collection:
        paths[coll] = {"parameters": list(scope_params), **collection}
    if single:
        paths[item] = {"parameters": [name, *scope_params], **single}
    if rt.status_subresource:
        status: JSONObject = {"parameters": [name, *scope_params]}
        status_verbs = verbs & set(rt.status_verbs)
        if "get" in status_verbs:
            status["get"] = _op(rt, "get", f"read{scope}{kind}Status", ok={"200": _json(obj, "OK")})
        if "update" in status_verbs:
            status["put"] = _write_op(rt, "put", f"replace{scope}{kind}Status", ref,
                                      {"application/json": obj}, ok={"200": _json(obj, "OK")})
        if "patch" in status_verbs:
            status["patch"] = _write_op(rt, "patch", f"patch{scope}{kind}Status", ref, patches,
                                        ok={"200": _json(obj, "OK")})
        paths[f"{item}/status"] = status
    return paths


def group_version_document(registry: Registry, *, group: str, version: str) -> JSONObject:
    paths: dict[str, JSONObject] = {}
    schemas: dict[str, JSONObject] = {}
    for rt in registry.in_group_version(group, version):
        paths.update(_paths_for(rt))
        schemas[schema_name(rt)] = _object_schema(rt)
        schemas[f"{schema_name(rt)}List"] = _list_schema(rt)
    schemas[_STATUS_NAME] = _STATUS_SCHEMA
    title = f"{group}/{version}" if group else version
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": title},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": _SECURITY_SCHEMES},
        "security": [{"BearerToken": []}],
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

