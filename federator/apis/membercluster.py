"""MemberCluster (federator.dev/v1alpha1, cluster-scoped): a Kubernetes cluster the hub may place gangs into.

The spec is the platform team's registration: how to reach the cluster
(a kubeconfig file on the hub, or a server URL plus credentials that the hub
stores, or a server URL plus an `accessProvider`: an exec plugin of the hub's
access-provider file, as a ClusterProfile names it), where it is, its network fabric, its gang scheduler, labels, cost,
cached datasets and whether it is cordoned. The status is what the hub's
cluster controllers observe: Reachable/Synced/Ready conditions, the time of
the first loss of contact, a capacity summary, datasets seen on nodes, member
resourceVersions and sync lag.

Bottom layer: pydantic and stdlib only, no I/O (a kubeconfigPath is checked
for form here; whether the file exists is the hub's business). Credentials
must never leave the hub: `redact` replaces every stored secret (including
copies inside kubectl's last-applied-configuration annotation) with
"<redacted>", and no validation message repeats a credential.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from federator.apis.jobkinds import JOB_KINDS
from federator.apis.common import (
    ApiModel,
    Condition,
    DNSSubdomain,
    FieldError,
    HIDDEN_VALUE_ERROR,
    LabelMap,
    ObjectMeta,
    REDACTED,
    Timestamp,
    ValidationSettings,
    api_validator,
    duplicate_errors,
    duplicate_scalar_errors,
    metadata_errors,
    raise_semantic,
    settings_of,
    validate_object,
)

__all__ = [
    "CREDENTIAL_FIELDS",
    "DEFAULT_SCHEDULER_NAMES",
    "OPERATOR_KINDS",
    "OperatorMode",
    "KIND",
    "LAST_APPLIED_ANNOTATION",
    "MAX_GRACE_PERIOD_SECONDS",
    "PLURAL",
    "SECRET_PATH_PREFIXES",
    "SHORT_NAMES",
    "SINGULAR",
    "SPEC_LABELS_DEPRECATED",
    "ClusterCapacity",
    "ClusterCost",
    "ClusterCredentials",
    "ClusterDataset",
    "ClusterDrain",
    "ClusterFailover",
    "ClusterLocation",
    "ClusterNetwork",
    "ClusterScheduler",
    "Connection",
    "ConnectionAccessProvider",
    "DrainStatus",
    "DrainedGang",
    "GpuCount",
    "MemberCluster",
    "MemberClusterSpec",
    "MemberClusterStatus",
    "SchedulerKind",
    "ServerURL",
    "cluster_labels",
    "contains_credentials",
    "effective_operator_mode",
    "effective_scheduler_name",
    "membercluster_validator",
    "membercluster_warnings",
    "redact",
    "restore_redacted",
    "validate_membercluster",
]

KIND = "MemberCluster"
PLURAL = "memberclusters"
SINGULAR = "membercluster"
SHORT_NAMES = ("mc",)
CATEGORIES = ("federator",)

SchedulerKind = Literal["volcano", "coscheduling", "kube-batch", "native", "kai", "default"]
DEFAULT_SCHEDULER_NAMES: Mapping[str, str] = {
    "volcano": "volcano",
    "coscheduling": "scheduler-plugins-scheduler",
    "kube-batch": "kube-batch",
    "native": "default-scheduler",
    "kai": "kai-scheduler",
    "default": "default-scheduler",
}
"""The pod `schedulerName` each gang scheduler answers to when the registration does not say."""

CREDENTIAL_FIELDS = ("token", "clientCertificateData", "clientKeyData")
SECRET_PATH_PREFIXES = ("spec.connection.credentials",)
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"

_MAX_SECRET = 64 * 1024
_NAME_TOKEN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
NameToken = Annotated[StrictStr, Field(min_length=1, max_length=63, pattern=_NAME_TOKEN)]


def _check_url(value: str) -> str:
    # Never echo a URL that may carry a password: HIDDEN_VALUE_ERROR hides the input.
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise PydanticCustomError(HIDDEN_VALUE_ERROR, "not a valid URL: {why}", {"why": str(exc)}) from None
    if parts.username is not None or parts.password is not None:
        raise PydanticCustomError(
            HIDDEN_VALUE_ERROR, "must not contain user information; put credentials in spec.connection.credentials"
        )
    if any(c.isspace() for c in value):
        raise ValueError("must not contain whitespace")
    if parts.scheme not in ("https", "http"):
        raise ValueError("must be an https:// (or http://) URL")
    if not parts.hostname:
        raise ValueError("must name a host")
    if port == 0:
        raise ValueError("port must be between 1 and 65535")
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise ValueError("must not have a query or fragment")
    return value


ServerURL = Annotated[StrictStr, Field(max_length=2048), AfterValidator(_check_url)]


def _pem_checker(marker: bytes, what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"must be base64-encoded {what}") from None
        if marker not in decoded:
            raise ValueError(f"must be base64-encoded {what}")
        return value

    return check


def _check_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError("must be an absolute path")
    if "\x00" in value or "\n" in value or "\r" in value:
        raise ValueError("must not contain NUL or line breaks")
    if posixpath.normpath(value) != value.rstrip("/") and value != "/":
        raise ValueError("must be a normalized path (no '.', '..' or '//' parts)")
    return value


def _check_config_size(value: Any) -> Any:
    if len(json.dumps(value, separators=(",", ":"))) > _MAX_SECRET:
        raise ValueError(f"must be at most {_MAX_SECRET} bytes as JSON")
    return value


def _check_token(value: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise ValueError("must be a non-empty token without whitespace")
    return value


class ClusterCredentials(ApiModel):
    """Secret material the hub stores for the member: a bearer token, or a client certificate and key.

    Never returned: reads show "<redacted>"; an update that sends "<redacted>" back keeps the stored value.
    """

    token: Annotated[StrictStr, Field(max_length=_MAX_SECRET), AfterValidator(_check_token)] | None = None
    client_certificate_data: Annotated[
        StrictStr, Field(max_length=_MAX_SECRET),
        AfterValidator(_pem_checker(b"-----BEGIN CERTIFICATE-----", "PEM certificate")),
    ] | None = Field(default=None, alias="clientCertificateData")
    client_key_data: Annotated[
        StrictStr, Field(max_length=_MAX_SECRET),
        AfterValidator(_pem_checker(b"PRIVATE KEY-----", "PEM private key")),
    ] | None = Field(default=None, alias="clientKeyData")


class ConnectionAccessProvider(ApiModel):
    """Credentials from an exec plugin of the hub's access-provider file (`--cluster-profile-providers`), as a
    ClusterProfile's status.accessProviders names it: the plugin's command is the file's, never the API's."""

    name: Annotated[StrictStr, Field(min_length=1, max_length=253)] = Field(
        description="A provider of the hub's --cluster-profile-providers file.")
    config: Annotated[Any, AfterValidator(_check_config_size)] = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="Handed to the plugin as ExecCredential spec.cluster.config (provideClusterInfo); the "
                    "profile's client.authentication.k8s.io/exec extension.")


class Connection(ApiModel):
    """How the hub reaches the member: kubeconfigPath, or server plus credentials or an access provider."""

    kubeconfig_path: Annotated[StrictStr, Field(max_length=4096), AfterValidator(_check_path)] | None = Field(
        default=None, alias="kubeconfigPath", description="Absolute path of a kubeconfig file on the hub host.",
    )
    context: StrictStr | None = Field(
        default=None, max_length=253, description="Context in kubeconfigPath; its current context if unset."
    )
    server: ServerURL | None = Field(default=None, description="API server URL, e.g. https://10.0.0.1:6443.")
    certificate_authority_data: Annotated[
        StrictStr, Field(max_length=_MAX_SECRET),
        AfterValidator(_pem_checker(b"-----BEGIN CERTIFICATE-----", "PEM CA certificate")),
    ] | None = Field(default=None, alias="certificateAuthorityData", description="CA bundle, base64 PEM.")
    insecure_skip_tls_verify: StrictBool = Field(default=False, alias="insecureSkipTLSVerify")
    credentials: ClusterCredentials | None = Field(
        default=None, description="Stored by the hub, never returned (reads show \"<redacted>\")."
    )
    access_provider: ConnectionAccessProvider | None = Field(
        default=None, alias="accessProvider",
        description="With server: credentials from an exec plugin of the hub's access-provider file (set by "
                    "the ClusterProfile controller).")


def _connection_errors(connection: object, *, path: str) -> list[FieldError]:
    if not isinstance(connection, Mapping):
        return []
    errors: list[FieldError] = []
    has_path = bool(connection.get("kubeconfigPath"))
    has_server = bool(connection.get("server"))
    credentials = connection.get("credentials")
    if not has_path and not has_server:
        errors.append((path, "Required value: either kubeconfigPath, or server with credentials, must be set"))
    provider = connection.get("accessProvider")
    if has_path:
        for name in ("server", "credentials", "certificateAuthorityData", "accessProvider"):
            if connection.get(name) is not None:
                errors.append((f"{path}.{name}", "Forbidden: may not be set together with kubeconfigPath"))
        if connection.get("insecureSkipTLSVerify") is True:
            errors.append((f"{path}.insecureSkipTLSVerify", "Forbidden: may not be set together with kubeconfigPath"))
    elif connection.get("context") is not None:
        errors.append((f"{path}.context", "Forbidden: only meaningful with kubeconfigPath"))
    if has_server and not has_path and credentials is None and provider is None:
        errors.append((f"{path}.credentials", "Required value: server needs credentials (token, or client "
                                              "certificate and key) or an accessProvider"))
    if credentials is not None and provider is not None:
        errors.append((f"{path}.accessProvider", "Forbidden: may not be set together with credentials"))
    if connection.get("insecureSkipTLSVerify") is True and connection.get("certificateAuthorityData"):
        errors.append((f"{path}.insecureSkipTLSVerify",
                       "Forbidden: may not be set together with certificateAuthorityData"))
    if isinstance(credentials, Mapping):
        where = f"{path}.credentials"
        token = credentials.get("token")
        cert = credentials.get("clientCertificateData")
        key = credentials.get("clientKeyData")
        if token is None and cert is None and key is None:
            errors.append((where, "Required value: token, or clientCertificateData with clientKeyData"))
        if token is not None and (cert is not None or key is not None):
            errors.append((f"{where}.token", "Forbidden: may not be set together with a client certificate"))
        if (cert is None) != (key is None):
            missing = "clientKeyData" if key is None else "clientCertificateData"
            errors.append((f"{where}.{missing}", "Required value: client certificate and key go together"))
        for name in CREDENTIAL_FIELDS:
            if credentials.get(name) == REDACTED:
                errors.append((f"{where}.{name}", f"Invalid value: \"{REDACTED}\": is the placeholder reads show "
                                                  "in place of a stored credential; send the credential itself"))
    return errors


class ClusterLocation(ApiModel):
    """Where the cluster runs."""

    type: Literal["onPrem", "cloud"]
    provider: NameToken | None = Field(default=None, description="e.g. aws, gcp, azure, or a datacenter name.")
    region: NameToken | None = None


class ClusterNetwork(ApiModel):
    """The fabric between the cluster's GPU nodes."""

    type: Literal["rdma", "ethernet"]
    rdma_kind: Literal["infiniband", "roce"] | None = Field(
        default=None, alias="rdmaKind", description="Required when type is rdma."
    )
    bandwidth_gbps: StrictFloat = Field(alias="bandwidthGbps", gt=0, description="Per-node bandwidth in Gbit/s.")

    @field_validator("bandwidth_gbps")
    @classmethod
    def _bandwidth_cap(cls, value: float, info: ValidationInfo) -> float:
        cap = settings_of(info).max_bandwidth_gbps
        if value > cap:
            raise ValueError(f"must be less than or equal to {cap:g}")
        return value


def _network_errors(network: object, *, path: str) -> list[FieldError]:
    if not isinstance(network, Mapping):
        return []
    if network.get("type") == "rdma" and network.get("rdmaKind") is None:
        return [(f"{path}.rdmaKind", "Required value: infiniband or roce, when type is rdma")]
    if network.get("type") == "ethernet" and network.get("rdmaKind") is not None:
        return [(f"{path}.rdmaKind", "Forbidden: only meaningful when type is rdma")]
    return []


class ClusterScheduler(ApiModel):
    """The member's gang scheduler, to which the hub delegates placed gangs."""

    name: SchedulerKind = Field(description="volcano, coscheduling, kube-batch, native (Kubernetes' own gang "
                                            "scheduling, scheduling.k8s.io/v1alpha2 PodGroups), kai (NVIDIA KAI "
                                            "Scheduler) or default.")
    scheduler_name: DNSSubdomain | None = Field(
        default=None, alias="schedulerName",
        description="Pod spec.schedulerName; defaults to the scheduler's usual name.",
    )


def effective_scheduler_name(scheduler: ClusterScheduler) -> str:
    """The schedulerName the hub writes into delegated pods."""
    return scheduler.scheduler_name or DEFAULT_SCHEDULER_NAMES[scheduler.name]


class ClusterDataset(ApiModel):
    """A dataset cached on the cluster."""

    name: DNSSubdomain
    size_bytes: StrictInt = Field(alias="sizeBytes", ge=0, le=2**63 - 1)


#: Upper bound of a cluster's loss grace period (a day): larger is a typo.
MAX_GRACE_PERIOD_SECONDS = 86_400


class ClusterFailover(ApiModel):
    """How the hub treats losing contact with this cluster."""

    grace_period_seconds: StrictInt | None = Field(
        default=None, alias="gracePeriodSeconds", ge=1, le=MAX_GRACE_PERIOD_SECONDS,
        description="Out of contact for longer than this (from the first failed contact) means Lost and its "
                    "gangs fail over; default: the hub's --cluster-loss-grace.",
    )


#: Upper bound of a drain's concurrency.
MAX_DRAIN_CONCURRENCY = 1000


class ClusterDrain(ApiModel):
    """A drain in progress: the hub moves the cluster's gangs elsewhere whole, this many at a time."""

    max_concurrent: StrictInt = Field(default=5, alias="maxConcurrent", ge=1, le=MAX_DRAIN_CONCURRENCY,
                                      description="Gangs moving at the same time.")


#: how the hub runs one upstream job kind in a member (issue 28): "operator" creates the kind's object there for the
#: member's own operator to run; "render" creates the pods itself under the operator's pod contract
OperatorMode = Literal["operator", "render"]
#: the keys of spec.operators / status.operators: each served kind's `JobKind.source_key` ("PyTorchJob.kubeflow.org")
OPERATOR_KINDS: tuple[str, ...] = tuple(kind.source_key for kind in JOB_KINDS)
_OPERATORS_DESCRIPTION = (
    "Per upstream job kind (key: \"<Kind>.<group>\", one of " + ", ".join(OPERATOR_KINDS) + "): \"operator\" "
    "creates the kind's object in this member for its own operator to run (the member must serve the kind), "
    "\"render\" has the hub create the pods itself under the operator's pod contract. Overrides what the hub "
    "discovered (status.operators); a kind named in neither is rendered.")


def effective_operator_mode(spec_operators: object, discovered: object, source_key: str) -> OperatorMode:
    """How the hub runs `source_key`'s jobs in a member: spec.operators' override, else what member sync discovered
    (status.operators), else "render". Total over any input (a malformed map counts as absent)."""
    for modes in (spec_operators, discovered):
        if isinstance(modes, Mapping):
            mode = modes.get(source_key)
            if mode == "operator":
                return "operator"
            if mode == "render":
                return "render"
    return "render"


def _capped_cost(value: float, info: ValidationInfo) -> float:
    cap = settings_of(info).max_cost_per_gpu_hour
    if value > cap:
        raise ValueError(f"must be less than or equal to {cap:g}")
    return value


class ClusterCost(ApiModel):
    """What a GPU-hour costs here, and whether the capacity is spot (cheap, but it can vanish)."""

    per_gpu_hour: StrictFloat = Field(
        default=0.0, alias="perGpuHour", ge=0,
        description="Price of one GPU-hour, in the hub's one currency (its --currency, default USD; Queue budgets "
                    "in money are in it); 0 for capacity already paid for (on-prem).")
    per_model: dict[NameToken, Annotated[StrictFloat, Field(ge=0)]] | None = Field(
        default=None, alias="perModel", max_length=64,
        description="Price of one GPU-hour by GPU model (the names of placement.gpuModels); overrides perGpuHour.")
    spot: StrictBool = Field(
        default=False, description="Spot or preemptible capacity: only jobs with spec.placement.spot allowed or "
                                   "preferred go here; losing its nodes is a failover like any other.")
    interruption_rate_per_hour: StrictFloat = Field(
        default=0.0, alias="interruptionRatePerHour", ge=0, le=1,
        description="Expected share of spot nodes lost per hour (0..1), shown in why-not tables.")

    @field_validator("per_gpu_hour")
    @classmethod
    def _cost_cap(cls, value: float, info: ValidationInfo) -> float:
        return _capped_cost(value, info)

    @field_validator("per_model")
    @classmethod
    def _model_cost_cap(cls, value: dict[str, float] | None, info: ValidationInfo) -> dict[str, float] | None:
        for price in (value or {}).values():
            _capped_cost(price, info)
        return value


class MemberClusterSpec(ApiModel):
    """The registration of a member cluster."""

    connection: Connection
    location: ClusterLocation
    network: ClusterNetwork
    scheduler: ClusterScheduler
    labels: LabelMap | None = Field(
        default=None,
        description="Deprecated: set metadata.labels (kubectl label membercluster NAME KEY=VALUE). Still matched by "
                    "clusterSelector this release, metadata.labels winning on the same key; every write carrying "
                    "it gets a Warning.",
    )
    gpu_models: list[NameToken] | None = Field(
        default=None, alias="gpuModels", max_length=64, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="GPU models the platform team says the cluster has (nodes are authoritative).",
    )
    cost_per_gpu_hour: StrictFloat = Field(
        default=0.0, alias="costPerGpuHour", ge=0,
        description="Price of one GPU-hour; cost.perGpuHour, when set, is used instead.")
    cost: ClusterCost | None = Field(default=None, description="GPU-hour prices by model, and spot capacity.")
    datasets: list[ClusterDataset] | None = Field(
        default=None, max_length=1024,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    cordoned: StrictBool = Field(default=False, description="While true no new gang is placed here.")
    failover: ClusterFailover | None = None
    drain: ClusterDrain | None = Field(
        default=None, description="Set by `federator cluster drain`: move every gang elsewhere (implies cordoned).")
    operators: dict[Annotated[StrictStr, Field(max_length=253)], OperatorMode] | None = Field(
        default=None, max_length=len(OPERATOR_KINDS), description=_OPERATORS_DESCRIPTION)

    @field_validator("cost_per_gpu_hour")
    @classmethod
    def _cost_cap(cls, value: float, info: ValidationInfo) -> float:
        return _capped_cost(value, info)


class GpuCount(ApiModel):
    """GPUs of one model."""

    total: StrictInt = Field(default=0, ge=0)
    free: StrictInt = Field(default=0, ge=0)


class ClusterCapacity(ApiModel):
    """A summary of the cluster's nodes as last synced."""

    nodes: StrictInt = Field(default=0, ge=0)
    ready_nodes: StrictInt = Field(default=0, alias="readyNodes", ge=0)
    total_gpus: StrictInt = Field(default=0, alias="totalGPUs", ge=0)
    free_gpus: StrictInt = Field(default=0, alias="freeGPUs", ge=0)
    gpus_by_model: dict[NameToken, GpuCount] | None = Field(default=None, alias="gpusByModel")
    nodes_by_fabric: dict[Literal["rdma", "ethernet"], Annotated[StrictInt, Field(ge=0)]] | None = Field(
        default=None, alias="nodesByFabric"
    )


class DrainedGang(ApiModel):
    """A gang a drain could not move: it fits nowhere else now."""

    namespace: Annotated[StrictStr, Field(max_length=253)]
    name: Annotated[StrictStr, Field(max_length=253)]
    reason: Annotated[StrictStr, Field(max_length=128)]
    message: Annotated[StrictStr, Field(max_length=4096)]


class DrainStatus(ApiModel):
    """How a drain is going (written by the hub's drain controller)."""

    phase: Literal["Draining", "Complete", "Stuck"]
    gangs: StrictInt = Field(default=0, ge=0, description="Gangs in the cluster when the drain started.")
    moved: StrictInt = Field(default=0, ge=0)
    moving: StrictInt = Field(default=0, ge=0)
    remaining: StrictInt = Field(default=0, ge=0)
    unplaceable: list[DrainedGang] | None = Field(default=None, max_length=1024)
    started_at: Timestamp | None = Field(default=None, alias="startedAt")
    finished_at: Timestamp | None = Field(default=None, alias="finishedAt")


class MemberClusterStatus(ApiModel):
    """What the hub observes of the member."""

    conditions: list[Condition] | None = Field(
        default=None, max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="Reachable, Synced, Ready and Lost.",
    )
    first_loss_of_contact: Timestamp | None = Field(
        default=None, alias="firstLossOfContact", description="When contact was first lost; cleared on contact."
    )
    last_sync_time: Timestamp | None = Field(default=None, alias="lastSyncTime")
    capacity: ClusterCapacity | None = None
    datasets_seen: list[DNSSubdomain] | None = Field(
        default=None, alias="datasetsSeen", max_length=4096, json_schema_extra={"x-kubernetes-list-type": "set"}
    )
    observed_resource_versions: dict[Annotated[StrictStr, Field(max_length=253)],
                                     Annotated[StrictStr, Field(max_length=64)]] | None = Field(
        default=None, alias="observedResourceVersions",
        description="Member resourceVersion last seen per resource, e.g. nodes, pods, podgroups.<group>.",
    )
    sync_lag_seconds: StrictFloat | None = Field(default=None, alias="syncLagSeconds", ge=0)
    drain: DrainStatus | None = None
    operators: dict[Annotated[StrictStr, Field(max_length=253)], OperatorMode] | None = Field(
        default=None, max_length=len(OPERATOR_KINDS),
        description="Per upstream job kind, what member sync discovered when it (re)connected: \"operator\" when the "
                    "member serves the kind's group/version resource, else \"render\". spec.operators overrides it.")
    observed_generation: StrictInt | None = Field(default=None, alias="observedGeneration", ge=0)


class MemberCluster(ApiModel):
    """A Kubernetes cluster registered with the hub as a place to run training gangs."""

    api_version: Literal["federator.dev/v1alpha1"] = Field(default="federator.dev/v1alpha1", alias="apiVersion")
    kind: Literal["MemberCluster"] = "MemberCluster"
    metadata: ObjectMeta
    spec: MemberClusterSpec
    status: MemberClusterStatus | None = None

    @model_validator(mode="after")
    def _cross_field(self) -> MemberCluster:
        raise_semantic(_semantic_errors(self.model_dump(exclude_none=True)))
        return self


def _semantic_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """Rules across fields, with exact paths. Tolerates any shape (it runs on raw input too)."""
    errors = metadata_errors(obj.get("metadata"), namespaced=False)
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        errors += _connection_errors(spec.get("connection"), path="spec.connection")
        errors += _network_errors(spec.get("network"), path="spec.network")
        errors += duplicate_errors(spec.get("datasets"), path="spec.datasets", key="name")
        errors += duplicate_scalar_errors(spec.get("gpuModels"), path="spec.gpuModels")
        errors += _operators_errors(spec.get("operators"), path="spec.operators")
    status = obj.get("status")
    if isinstance(status, Mapping):
        errors += duplicate_errors(status.get("conditions"), path="status.conditions", key="type")
    return errors


def _operators_errors(operators: object, *, path: str) -> list[FieldError]:
    """Keys of spec.operators must be served kinds' source keys (the values are checked by the model)."""
    if not isinstance(operators, Mapping):
        return []
    errors: list[FieldError] = []
    for key in operators:
        if key not in OPERATOR_KINDS:
            shown = json.dumps(str(key)[:80])
            errors.append((f"{path}[{str(key)[:80]}]", f"Unsupported value: {shown}: supported values: "
                                                       + ", ".join(f'"{k}"' for k in OPERATOR_KINDS)))
    return errors


SPEC_LABELS_DEPRECATED = (
    "spec.labels is deprecated: clusterSelector matches metadata.labels (kubectl label membercluster NAME "
    "KEY=VALUE); spec.labels is still matched this release, metadata.labels winning on the same key"
)


def cluster_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    """The labels clusterSelector matches: metadata.labels over the deprecated spec.labels (still honoured for
    one release; metadata wins on the same key). Malformed entries are skipped (validation rejects them)."""
    out: dict[str, str] = {}
    for holder in (obj.get("spec"), obj.get("metadata")):
        labels = holder.get("labels") if isinstance(holder, Mapping) else None
        if isinstance(labels, Mapping):
            out.update((k, v) for k, v in labels.items() if isinstance(k, str) and isinstance(v, str))
    return out


def membercluster_warnings(obj: Mapping[str, Any]) -> list[str]:
    """The apiserver's `ResourceType.warn` hook: a write that still carries spec.labels is told it is deprecated."""
    spec = obj.get("spec")
    return [SPEC_LABELS_DEPRECATED] if isinstance(spec, Mapping) and spec.get("labels") else []


def validate_membercluster(
    obj: object, *, settings: ValidationSettings | None = None, include_generic_metadata: bool = True
) -> list[FieldError]:
    """Every problem with a MemberCluster registration, as (field path, message); never echoes a credential."""
    return validate_object(obj, model=MemberCluster, semantic=_semantic_errors, settings=settings,
                           include_generic_metadata=include_generic_metadata, secret_prefixes=SECRET_PATH_PREFIXES)


def membercluster_validator(
    settings: ValidationSettings | None = None, *, include_generic_metadata: bool = False
) -> Callable[[dict[str, Any]], list[FieldError]]:
    """The apiserver's `ResourceType.validate` hook for MemberCluster (`common.api_validator`)."""
    return api_validator(validate_membercluster, settings, include_generic_metadata=include_generic_metadata)


def _redact_credentials(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    connection = spec.get("connection") if isinstance(spec, dict) else None
    credentials = connection.get("credentials") if isinstance(connection, dict) else None
    if isinstance(credentials, dict):
        for key, value in list(credentials.items()):
            if value is not None:
                credentials[key] = REDACTED
    elif credentials is not None and isinstance(connection, dict):
        connection["credentials"] = REDACTED  # malformed, but still never shown


def redact(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a MemberCluster with every stored credential replaced by "<redacted>".

    kubectl apply keeps the whole submitted object in the last-applied-configuration
    annotation, so the credentials inside it are redacted too (or the whole
    annotation, if it cannot be parsed).
    """
    result = copy.deepcopy(dict(obj))
    _redact_credentials(result)

    def edit(applied: dict[str, Any]) -> bool:
        _redact_credentials(applied)
        return True

    _edit_last_applied(result, edit)
    return result


def _edit_last_applied(obj: dict[str, Any], edit: Callable[[dict[str, Any]], bool]) -> None:
    """Apply `edit` to the object kubectl keeps in the last-applied-configuration annotation; an annotation
    that is not a JSON object, or that `edit` cannot handle (False), is replaced by "<redacted>" whole."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(annotations, dict) or LAST_APPLIED_ANNOTATION not in annotations:
        return
    raw = annotations[LAST_APPLIED_ANNOTATION]
    try:
        applied = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        applied = None
    if isinstance(applied, dict) and edit(applied):
        annotations[LAST_APPLIED_ANNOTATION] = json.dumps(applied, separators=(",", ":"), sort_keys=True)
    else:
        annotations[LAST_APPLIED_ANNOTATION] = REDACTED


#: What a server URL or a kubeconfig path quoted in a status message becomes for a non-admin.
HIDDEN = "<hidden>"
#: a URL, without the punctuation that may follow it in a sentence
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>.,;:)\]]")


def hide_connection(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a MemberCluster as a researcher or viewer sees it: what it offers (location, network, GPUs,
    datasets, scheduler, capacity, conditions) but nothing of how the hub reaches it. spec.connection
    (kubeconfig path, context, server, CA, credentials) is left out, also from kubectl's last-applied
    annotation and from metadata.managedFields (which fields it has), and a server URL or the kubeconfig
    path that an error in status.conditions quotes reads "<hidden>". Admins see the connection, with the
    credentials redacted (`redact`)."""
    result = copy.deepcopy(dict(obj))
    spec = result.get("spec")
    connection = spec.pop("connection", None) if isinstance(spec, dict) else None
    path = connection.get("kubeconfigPath") if isinstance(connection, dict) else None

    def edit(applied: dict[str, Any]) -> bool:
        applied_spec = applied.get("spec")
        if isinstance(applied_spec, dict):
            applied_spec.pop("connection", None)
        return applied_spec is None or isinstance(applied_spec, dict)

    _edit_last_applied(result, edit)
    metadata = result.get("metadata")
    managed = metadata.get("managedFields") if isinstance(metadata, dict) else None
    for entry in managed if isinstance(managed, list) else ():
        fields = entry.get("fieldsV1") if isinstance(entry, dict) else None
        spec_fields = fields.get("f:spec") if isinstance(fields, dict) else None
        if isinstance(spec_fields, dict):
            spec_fields.pop("f:connection", None)  # which connection fields exist says how it is reached
    status = result.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for condition in conditions if isinstance(conditions, list) else ():
        message = condition.get("message") if isinstance(condition, dict) else None
        if isinstance(message, str):
            if isinstance(path, str) and path:
                message = message.replace(path, HIDDEN)
            condition["message"] = _URL.sub(HIDDEN, message)
    return result


def restore_redacted(new: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `new` in which credentials sent back as "<redacted>" take their stored value.

    For updates: a client that read the object (redacted) and writes it back
    must not overwrite the real credential with the placeholder. A placeholder
    with no stored value behind it stays, and validation rejects it.
    """
    result = copy.deepcopy(dict(new))
    spec = result.get("spec")
    connection = spec.get("connection") if isinstance(spec, dict) else None
    credentials = connection.get("credentials") if isinstance(connection, dict) else None
    stored_spec = stored.get("spec")
    stored_connection = stored_spec.get("connection") if isinstance(stored_spec, Mapping) else None
    stored_credentials = stored_connection.get("credentials") if isinstance(stored_connection, Mapping) else None
    if isinstance(credentials, dict) and isinstance(stored_credentials, Mapping):
        for key, value in list(credentials.items()):
            if value == REDACTED and isinstance(stored_credentials.get(key), str):
                credentials[key] = stored_credentials[key]
    return result


def contains_credentials(obj: Mapping[str, Any]) -> bool:
    """Whether the object holds stored credentials (so it must be redacted before it leaves the hub)."""
    spec = obj.get("spec")
    connection = spec.get("connection") if isinstance(spec, Mapping) else None
    return isinstance(connection, Mapping) and connection.get("credentials") is not None
