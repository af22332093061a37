"""TrainingJob (federator.dev/v1alpha1, namespaced, short name tj): a gang to run whole in one cluster.

The spec is what a researcher submits (roles with pod templates and, for an
elastic role, the range of sizes it may run at; placement needs, failover
and restart policy, priority, suspend); the status is what the hub's
controllers write (phase, conditions, placement with its why-not table,
the size each role runs at, history with its resizes, pod counts per role). `validate_trainingjob` returns every bad field
of a submitted object as kube-style (path, message) pairs, which the hub's API
server turns into a 422 Invalid Status.

Bottom layer: pydantic and stdlib only, no I/O. Validation never changes the
submitted object; stored objects keep the exact form the user sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from federator.apis.checkpoint import DEFAULT_SAVE_GRACE_SECONDS
from federator.apis.failurepolicy import FailurePolicy, container_names, failure_policy_errors
from federator.apis.frameworks import Framework, FrameworkSettings, framework_errors
from federator.apis.podtemplate import is_full_form, pod_template_errors, toleration_errors
from federator.apis.common import (
    ApiModel,
    Condition,
    DNSLabel,
    DNSSubdomain,
    FieldError,
    LabelMap,
    LabelSelector,
    AnnotationMap,
    ObjectMeta,
    Quantity,
    Timestamp,
    ValidationSettings,
    api_validator,
    duplicate_errors,
    duplicate_scalar_errors,
    metadata_errors,
    parse_quantity,
    raise_semantic,
    selector_errors,
    selector_selects_nothing,
    settings_of,
    validate_object,
)

__all__ = [
    "KIND",
    "MAX_EXCLUDED_NODES",
    "MAX_SCORE_ROWS",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "EnvVar",
    "CHECKPOINT_VOLUME",
    "CheckpointSpec",
    "CheckpointStatus",
    "CheckpointVolume",
    "ClusterAffinity",
    "ClusterScore",
    "ExcludedCluster",
    "ExcludedNode",
    "Failover",
    "HistoryEntry",
    "JobPhase",
    "PlacementSpec",
    "PreferredClusterTerm",
    "PlacementStatus",
    "PodCounts",
    "PodTemplate",
    "ResourceRequests",
    "RestartPolicy",
    "Role",
    "TemplateMetadata",
    "ScoreContribution",
    "Toleration",
    "TrainingJob",
    "TrainingJobSpec",
    "TrainingJobStatus",
    "WhyNotRow",
    "DEFAULT_BACKOFF_LIMIT",
    "MAX_DEADLINE_SECONDS",
    "HISTORY_RESIZED",
    "keep_admitted_fields",
    "placed_replicas",
    "trainingjob_update_validator",
    "trainingjob_validator",
    "validate_trainingjob",
]

KIND = "TrainingJob"
PLURAL = "trainingjobs"
SINGULAR = "trainingjob"
SHORT_NAMES = ("tj",)
CATEGORIES = ("federator",)

JobPhase = Literal["Pending", "Placed", "Admitted", "Running", "Succeeded", "Failed", "Requeued", "Suspended"]
NetworkRequirement = Literal["rdma", "ethernet", "any"]
#: what happens to a role's pod that fails (as a Kubeflow replicaSpec's restartPolicy, less Always and ExitCode)
RestartPolicy = Literal["Never", "OnFailure"]
#: what happens when an elastic role loses a worker (its pod failed, or its node was lost)
WorkerLossPolicy = Literal["shrink", "restart"]
#: spec.backoffLimit when left out: a Kubernetes Job's default
DEFAULT_BACKOFF_LIMIT = 6
#: spec.activeDeadlineSeconds and spec.placement.giveUpAfterSeconds at most: a Kubernetes int64
MAX_DEADLINE_SECONDS = 2**63 - 1
#: status.history event of a resize (with `from`, `to` and `reason`)
HISTORY_RESIZED = "Resized"

# Kubernetes' rule for environment variable names (validation.IsEnvVarName).
_ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
_MAX_TEXT = 4096


def _check_image(value: str) -> str:
    if not value or value != value.strip() or any(c.isspace() for c in value):
        raise ValueError("must be a non-empty image reference without whitespace")
    return value


ImageRef = Annotated[
    StrictStr, Field(max_length=1024), AfterValidator(_check_image)
]
# Model and dataset names are free-form identifiers but travel in node labels,
# so they follow the label-value rules (minus emptiness).
_NAME_TOKEN = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
NameToken = Annotated[StrictStr, Field(min_length=1, max_length=63, pattern=_NAME_TOKEN)]


class EnvVar(ApiModel):
    """An environment variable for every container of the role."""

    name: StrictStr = Field(min_length=1, max_length=256, pattern=_ENV_NAME)
    value: StrictStr = Field(default="", max_length=32768)


class ResourceRequests(ApiModel):
    """What one pod of the role needs. Quantities as in a pod spec ("8", "500m", "32Gi", 4)."""

    cpu: Quantity | None = Field(default=None, description="CPU cores, e.g. \"8\" or \"500m\".")
    memory: Quantity | None = Field(default=None, description="Memory in bytes, e.g. \"32Gi\".")
    gpu: Quantity | None = Field(default=None, alias="nvidia.com/gpu", description="Whole NVIDIA GPUs.")
    rdma_hca: Quantity | None = Field(default=None, alias="rdma/hca", description="Whole RDMA host channel adapters.")

    @field_validator("cpu")
    @classmethod
    def _cpu_cap(cls, value: str | int | None, info: ValidationInfo) -> str | int | None:
        cap = settings_of(info).cpu_cap
        if value is not None and parse_quantity(value) > cap:
            raise ValueError(f"must be at most {settings_of(info).max_cpu_per_pod} per pod")
        return value

    @field_validator("memory")
    @classmethod
    def _memory_cap(cls, value: str | int | None, info: ValidationInfo) -> str | int | None:
        settings = settings_of(info)
        if value is not None and parse_quantity(value) > settings.memory_cap:
            raise ValueError(f"must be at most {settings.max_memory_per_pod} per pod")
        return value

    @field_validator("gpu", "rdma_hca")
    @classmethod
    def _device_count(cls, value: str | int | None, info: ValidationInfo) -> str | int | None:
        if value is None:
            return None
        amount = parse_quantity(value)
        if amount.denominator != 1:
            raise ValueError("must be a whole number")
        settings = settings_of(info)
        cap = settings.max_gpus_per_pod if info.field_name == "gpu" else settings.max_rdma_per_pod
        if amount > cap:
            raise ValueError(f"must be at most {cap} per pod")
        return value


class Toleration(ApiModel):
    """Lets the role's pods onto nodes with a matching taint (as in a pod spec)."""

    key: StrictStr | None = Field(default=None, max_length=317)
    operator: Literal["Exists", "Equal"] | None = None
    value: StrictStr | None = Field(default=None, max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: StrictInt | None = Field(default=None, alias="tolerationSeconds", ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        raise_semantic(toleration_errors(self.model_dump(exclude_none=True), path=""))
        return self


class TemplateMetadata(ApiModel):
    """A full pod template's metadata: the labels and annotations every pod of the role gets (the hub
    adds its own; keys under federator.dev/ and the gang schedulers' pod-group keys are the hub's)."""

    labels: LabelMap | None = None
    annotations: AnnotationMap | None = None


_TEMPLATE_DESCRIPTION = (
    "The pod every replica of the role runs, in one of two forms. Short form: image, command, args, env, "
    "resources (requests; limits are set equal), nodeSelector, tolerations at the top: one container named "
    "after the role. Full form: a core/v1 PodTemplateSpec (metadata with labels and annotations; spec a "
    "PodSpec with containers, initContainers and sidecars, volumes, env from secrets and config maps, "
    "securityContext, serviceAccountName, affinity, any extended resource ...), validated at the hub "
    "against the OpenAPI schema of the Kubernetes release the members run. The two forms may not be mixed. "
    "The hub owns, and a template may not set: spec.schedulerName, spec.priorityClassName (unless equal to "
    "the job's), spec.priority, spec.preemptionPolicy, spec.nodeName, spec.schedulingGroup, "
    "spec.restartPolicy (other than Never: set the role's restartPolicy), the GPU-model node affinity on "
    "nvidia.com/gpu.product (set spec.placement.gpuModels), and labels or annotations under federator.dev/ "
    "or a gang scheduler's pod-group key. Extended resources requested without a limit get limit = request."
)


class PodTemplate(ApiModel):
    """The pod every replica of a role runs: the short form (one container) or a full PodTemplateSpec."""

    # Exactly one form: an image (short) or a spec (full); the hub's validation names the field.
    model_config = ConfigDict(**ApiModel.model_config, json_schema_extra={
        "oneOf": [{"required": ["image"]}, {"required": ["spec"]}]})

    image: ImageRef | None = Field(default=None, description="Short form: the container image, e.g. trainer:1.4.")
    command: list[Annotated[StrictStr, Field(max_length=_MAX_TEXT)]] | None = Field(default=None, max_length=256)
    args: list[Annotated[StrictStr, Field(max_length=_MAX_TEXT)]] | None = Field(default=None, max_length=1024)
    env: list[EnvVar] | None = Field(
        default=None, max_length=256,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    resources: ResourceRequests | None = Field(default=None, description="Short form: requests of one pod.")
    node_selector: LabelMap | None = Field(default=None, alias="nodeSelector")
    tolerations: list[Toleration] | None = Field(default=None, max_length=64)
    metadata: TemplateMetadata | None = Field(default=None, description=(
        "Full form: labels and annotations of the role's pods."))
    spec: Annotated[dict[str, Any], WithJsonSchema({
        "type": "object", "x-kubernetes-preserve-unknown-fields": True,
        "description": "Full form: a core/v1 PodSpec (checked by the hub against the members' Kubernetes "
                       "OpenAPI schema: unknown fields, types, required fields, names, quantities)."})] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> PodTemplate:
        if self.spec is None and self.metadata is None and self.image is None:
            raise_semantic([("image", "Required value: the short form needs an image (or give a full pod "
                                      "template: spec.containers)")])
        return self

    @property
    def full(self) -> bool:
        """The full form (a PodTemplateSpec), not the short one."""
        return self.spec is not None or self.metadata is not None


class Role(ApiModel):
    """One kind of pod in the gang (e.g. ps, worker): all its replicas start together with the rest."""

    # Elastic when minReplicas < maxReplicas: it runs with any number of pods in that range (replicas is the
    # size it starts at if that fits). 1 <= minReplicas <= replicas <= maxReplicas; a bound left out is
    # replicas (`fewest`, `most`).

    name: DNSLabel = Field(description="Role name, unique in the job; part of pod names.")
    replicas: StrictInt = Field(ge=1, description=(
        "Number of pods of this role; for an elastic role, the preferred size to start at."))
    min_replicas: StrictInt | None = Field(default=None, alias="minReplicas", ge=1, description=(
        "Elastic role: the fewest pods it can run with (at most replicas; left out: replicas). The member "
        "PodGroup's minimum is the sum of the roles' minimums, so the member's gang scheduler guarantees "
        "at least these. May not change while the job is placed."))
    max_replicas: StrictInt | None = Field(default=None, alias="maxReplicas", ge=1, description=(
        "Elastic role: the most pods it can use (at least replicas; left out: replicas). The gang, counted "
        "at every role's maximum, stays within the hub's gang size limit. May not change while the job is "
        "placed."))
    restart_policy: RestartPolicy | None = Field(default=None, alias="restartPolicy", description=(
        "What happens to a pod of this role that fails: Never (the default: the gang fails) or OnFailure "
        "(recreated in the same cluster, counted against spec.backoffLimit). Per role, as a Kubeflow "
        "replicaSpec's. OnFailure: the hub deletes the failed pod and creates it again under the same name "
        "with the next attempt index (annotation federator.dev/attempt, env FEDERATOR_ATTEMPT); failures "
        "the infrastructure caused (DisruptionTarget: lost or deleted node) are not counted, the others "
        "are. The gang is never moved or split for it."))
    on_worker_loss: WorkerLossPolicy | None = Field(default=None, alias="onWorkerLoss", description=(
        "Elastic roles only: when a pod of this role fails or its node is lost and the role is above its "
        "minimum, shrink (the gang goes on with one pod fewer) or restart (the pod is recreated; needs "
        "restartPolicy OnFailure). Left out, restartPolicy decides. A shrink deletes the failed pod, makes "
        "status.replicas one smaller and says Resized (reason WorkerLost) in the history; it does not count "
        "toward spec.backoffLimit."))
    template: PodTemplate = Field(description=_TEMPLATE_DESCRIPTION)

    @field_validator("replicas", "min_replicas", "max_replicas")
    @classmethod
    def _replica_cap(cls, value: int | None, info: ValidationInfo) -> int | None:
        cap = settings_of(info).max_replicas_per_role
        if value is not None and value > cap:
            raise ValueError(f"must be less than or equal to {cap}")
        return value

    @property
    def fewest(self) -> int:
        """The fewest pods this role runs with (minReplicas, else replicas)."""
        return self.min_replicas if self.min_replicas is not None else self.replicas

    @property
    def most(self) -> int:
        """The most pods this role runs with (maxReplicas, else replicas)."""
        return self.max_replicas if self.max_replicas is not None else self.replicas

    @property
    def elastic(self) -> bool:
        return self.fewest < self.most


MAX_AFFINITY_TERMS: Final = 16
MAX_PINNED_CLUSTERS: Final = 64


class PreferredClusterTerm(ApiModel):
    """A soft preference for clusters whose labels match, weighed against the other terms (as node affinity's
    preferredDuringSchedulingIgnoredDuringExecution)."""

    weight: StrictInt = Field(ge=1, le=100, description="1..100: the share of the affinity score it carries.")
    preference: LabelSelector = Field(description="The clusters preferred, by their metadata.labels.")


class ClusterAffinity(ApiModel):
    """Which clusters the gang must, or would rather, go to; every part that is set must hold."""

    cluster_names: list[DNSLabel] | None = Field(
        default=None, alias="clusterNames", max_length=MAX_PINNED_CLUSTERS,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Pinning: only these MemberClusters may take the gang.")
    required: list[LabelSelector] | None = Field(
        default=None, max_length=MAX_AFFINITY_TERMS,
        description="Cluster selector terms, ORed (as nodeSelectorTerms): a cluster must match at least one.")
    preferred: list[PreferredClusterTerm] | None = Field(
        default=None, max_length=MAX_AFFINITY_TERMS,
        description="Soft preferences: among clusters that fit, those matching more weight score higher.")


class PlacementSpec(ApiModel):
    """What a cluster must offer to take the gang."""

    network: NetworkRequirement = Field(default="any", description="rdma, ethernet or any.")
    gpu_models: list[NameToken] | None = Field(
        default=None, alias="gpuModels", max_length=64, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Acceptable GPU models (any of them), e.g. [A100, H100].",
    )
    datasets: list[DNSSubdomain] | None = Field(
        default=None, max_length=64, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Datasets the job reads; clusters that cache them are preferred.",
    )
    cluster_selector: LabelSelector | None = Field(
        default=None, alias="clusterSelector", description="Only clusters whose labels match."
    )
    affinity: ClusterAffinity | None = Field(
        default=None, description="Pinning to named clusters, required and preferred cluster terms.")
    spot: Literal["never", "allowed", "preferred"] | None = Field(
        default=None, description="Spot capacity (MemberCluster spec.cost.spot: cheap, but its nodes can "
                                  "vanish): never (the default when left out), allowed, or preferred.")
    give_up_after_seconds: StrictInt | None = Field(
        default=None, alias="giveUpAfterSeconds", ge=1, le=MAX_DEADLINE_SECONDS, description=(
        "Pending deadline: a job that has waited this long in phase Pending (fits nowhere), counted from its "
        "creation or, after a requeue, from its newest Requeued history entry, is Failed with reason Unplaceable "
        "and the why-not table in its Failed condition's message. Left out: it waits for as long as it takes."))


class Failover(ApiModel):
    """What happens when the cluster running the gang is lost."""

    on_cluster_loss: Literal["requeue", "fail", "wait"] = Field(
        default="requeue", alias="onClusterLoss",
        description="requeue: placed whole elsewhere at a new epoch; fail: Failed (ClusterLost); "
                    "wait: stays, waiting for the cluster to return.",
    )
    max_requeues: StrictInt = Field(default=3, alias="maxRequeues", ge=0)

    @field_validator("max_requeues")
    @classmethod
    def _requeue_cap(cls, value: int, info: ValidationInfo) -> int:
        cap = settings_of(info).max_requeues
        if value > cap:
            raise ValueError(f"must be less than or equal to {cap}")
        return value


# ---------------------------------------------------------------- checkpoints (issue 29, items 1 and 2)

#: the checkpoint volume's name in every rendered pod (a template volume of that name is refused)
CHECKPOINT_VOLUME = "federator-checkpoint"
_MOUNT_PATH = r"^/[^:\x00]*$"
_URI = r"^[a-zA-Z][a-zA-Z0-9+.-]*://\S+$"


class CheckpointVolume(ApiModel):
    """A PersistentVolumeClaim of the member namespace, mounted in every pod at spec.checkpoint.mountPath."""

    claim_name: DNSSubdomain = Field(alias="claimName", description=(
        "The claim's name; the claim must exist in every member namespace the job can run in (a claim missing "
        "there leaves the pods Pending, as kube does)."))


class CheckpointSpec(ApiModel):
    """Where the job keeps its checkpoints and how long it may take to save one when evicted.

    A pod reports a checkpoint by setting annotation federator.dev/checkpoint on its own pod (docs/failover.md);
    the hub records the latest in status.checkpoint and passes its location to the next copy as env
    FEDERATOR_RESTORE_FROM."""

    volume: CheckpointVolume | None = Field(default=None, description=(
        "A PersistentVolumeClaim mounted in every container of every pod at mountPath (volume "
        "federator-checkpoint). Exclusive with uri."))
    mount_path: StrictStr | None = Field(default=None, alias="mountPath", min_length=1, max_length=1024,
                                         pattern=_MOUNT_PATH, description=(
        "Where the volume is mounted (absolute, no '..'); required with volume; also env FEDERATOR_CHECKPOINT_DIR."))
    uri: StrictStr | None = Field(default=None, min_length=1, max_length=2048, pattern=_URI, description=(
        "Where the job keeps its checkpoints outside the cluster (e.g. s3://bucket/run-7); the hub only passes "
        "it on, as env FEDERATOR_CHECKPOINT_URI. Exclusive with volume."))
    save_grace_seconds: StrictInt = Field(default=DEFAULT_SAVE_GRACE_SECONDS, alias="saveGraceSeconds", ge=0,
                                          description=(
        "Preemption, drain and a requeue delete the old copy's pods with this grace period: SIGTERM, then "
        "SIGKILL after it, so the job can save. Fencing a partitioned cluster's copy stays immediate. At most "
        "the hub's validation.max_save_grace_seconds (default 3600)."))

    @field_validator("save_grace_seconds")
    @classmethod
    def _grace_cap(cls, value: int, info: ValidationInfo) -> int:
        cap = settings_of(info).max_save_grace_seconds
        if value > cap:
            raise ValueError(f"must be less than or equal to {cap} (the hub's max_save_grace_seconds)")
        return value

    @model_validator(mode="after")
    def _where(self) -> CheckpointSpec:
        if self.volume is not None and self.uri is not None:
            raise ValueError("volume and uri are exclusive: give one")
        if self.volume is not None and self.mount_path is None:
            raise ValueError("mountPath is required with volume")
        if self.mount_path is not None and self.volume is None:
            raise ValueError("mountPath is only meaningful with volume")
        if self.mount_path is not None and ".." in self.mount_path.split("/"):
            raise ValueError("mountPath must not contain '..'")
        return self


class CheckpointStatus(ApiModel):
    """The latest checkpoint a pod of the job reported (annotation federator.dev/checkpoint)."""

    time: Timestamp
    step: StrictInt = Field(ge=0, le=2**63 - 1)
    location: StrictStr = Field(min_length=1, max_length=1024)
    cluster: StrictStr = Field(max_length=253)
    epoch: StrictInt = Field(ge=0)


# ---------------------------------------------------------------- the job


class TrainingJobSpec(ApiModel):
    """The desired gang."""

    roles: list[Role] = Field(
        min_length=1,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description="The gang's roles; every pod of every role runs in one cluster, or none does.",
    )
    placement: PlacementSpec | None = None
    failover: Failover | None = None
    priority: StrictInt = Field(default=0, ge=-(2**31), le=2**31 - 1, description=(
        "Higher places first. With priorityClassName, the hub writes the class's value here on create "
        "(a different value is refused)."))
    priority_class_name: DNSSubdomain | None = Field(default=None, alias="priorityClassName", description=(
        "A scheduling.k8s.io/v1 PriorityClass whose value becomes spec.priority on create. With neither "
        "this nor priority, the globalDefault class applies (and is written here)."))
    queue: DNSLabel | None = Field(default=None, description=(
        "The Queue whose quota the job uses. Left out, the hub writes the default Queue of the job's "
        "namespace on create (none: the job uses no queue). Once set it can be changed, not removed."))
    suspend: StrictBool = Field(default=False, description=(
        "While true the job is not placed (phase Suspended); a gang already placed or running is deleted from "
        "its cluster (history Suspended, its quota released). Set to false, the job is queued and placed again at "
        "a higher epoch, resuming from its last checkpoint."))
    backoff_limit: StrictInt = Field(
        default=DEFAULT_BACKOFF_LIMIT, alias="backoffLimit", ge=0, le=2**31 - 1, description=(
            "How many pod failures of roles with restartPolicy OnFailure the job survives (each failed pod "
            "recreated in place) before it fails; for the whole job, as a Kubernetes Job's backoffLimit and "
            "a Kubeflow job's runPolicy.backoffLimit. Counted per placement (the count rides on the gang's pods, "
            "annotation federator.dev/counted-failures): past it the job fails with reason "
            "BackoffLimitExceeded and the pods' reasons."))

    active_deadline_seconds: StrictInt | None = Field(
        default=None, alias="activeDeadlineSeconds", ge=1, le=MAX_DEADLINE_SECONDS, description=(
        "As a Kubernetes Job's: how long the job may be active, counted from status.startTime (its first "
        "placement) and across requeues and restarts; past it every copy is deleted and the job is Failed with "
        "reason DeadlineExceeded."))
    # ---- retries by kind of failure (issue 29 item 4; federator/apis/failurepolicy.py)
    failure_policy: FailurePolicy | None = Field(default=None, alias="failurePolicy", description=(
        "How a failed pod is handled by kind of failure, as a Kubernetes Job's podFailurePolicy: rules on exit "
        "codes and pod conditions with actions RestartPod, Requeue, FailJob, Ignore or Count, and defaults for "
        "what no rule matches (a lost node is ignored, a GPU fault requeues the gang off its node, OOMKilled and an "
        "image pull error fail the job). Left out, the defaults alone apply (docs/failover.md)."))
    # ---- end of failure policy

    framework: Framework | None = Field(default=None, description=(
        "The training framework whose environment the hub injects into every pod, as the Kubeflow operators "
        "do: pytorch (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK and torchrun's PET_* variables; roles master "
        "and worker), tensorflow (TF_CONFIG; roles chief, master, ps, worker, evaluator), paddle (the "
        "parameter-server or collective PADDLE_* variables; roles pserver/ps/master and trainer/worker), mpi "
        "(a hostfile ConfigMap mounted on the launcher at /etc/mpi; roles launcher and worker), jax "
        "(COORDINATOR_ADDRESS, NUM_PROCESSES, PROCESS_ID; role worker) or none (the default: only the "
        "FEDERATOR_* variables). Every pod also gets hostname = its name and subdomain = the gang's headless "
        "Service, whatever the framework."))
    framework_settings: FrameworkSettings | None = Field(default=None, alias="frameworkSettings", description=(
        "Settings of spec.framework: port (pytorch, tensorflow, paddle, jax), nprocPerNode (pytorch), "
        "slotsPerWorker and mpiImplementation (mpi)."))
    checkpoint: CheckpointSpec | None = Field(default=None, description=(
        "Checkpoints the hub knows about: where they are kept, the grace to save one when evicted; the latest "
        "reported is passed to the next copy as env FEDERATOR_RESTORE_FROM (docs/failover.md)."))

    @field_validator("roles")
    @classmethod
    def _role_caps(cls, value: list[Role], info: ValidationInfo) -> list[Role]:
        settings = settings_of(info)
        if len(value) > settings.max_roles:
            raise ValueError(f"must have at most {settings.max_roles} roles")
        return value


class WhyNotRow(ApiModel):
    """Why one cluster did not take the job: the filter that rejected it, a reason code and a message."""

    cluster: StrictStr = Field(max_length=253)
    filter: StrictStr = Field(max_length=128)
    reason: StrictStr = Field(max_length=128, description="Machine-readable code, e.g. InsufficientGPU.")
    message: StrictStr = Field(default="", max_length=_MAX_TEXT)


class ExcludedCluster(ApiModel):
    """A cluster the job must not be placed in until `until` (e.g. after its gang was pulled back from it)."""

    cluster: StrictStr = Field(max_length=253)
    until: Timestamp


#: at most this many entries in status.placement.excludedNodes (the oldest go first)
MAX_EXCLUDED_NODES = 256


class ExcludedNode(ApiModel):
    """A node of a cluster the job's pods must not run on until `until` (a failure policy's Requeue with
    exclude Node, e.g. after a GPU fault there); the rest of the cluster stays open to the job."""

    cluster: StrictStr = Field(max_length=253)
    node: StrictStr = Field(max_length=253)
    until: Timestamp


class PreviousCopy(ApiModel):
    """Where an earlier copy of the gang may still exist (a drained cluster, or a dispatch that failed
    and could not read the member to remove what it created): the next dispatch waits until that copy
    is gone or fenced."""

    cluster: StrictStr = Field(max_length=253)
    epoch: StrictInt = Field(ge=0)


#: status.placement.scores holds at most this many clusters: the chosen one and the best runners-up.
MAX_SCORE_ROWS = 16
#: ... and the chosen cluster's breakdown at most this many score plugins.
MAX_SCORE_PARTS = 32


class ScoreContribution(ApiModel):
    """One score plugin's part of the chosen cluster's total."""

    plugin: StrictStr = Field(max_length=128, description="The score plugin, e.g. data-locality.")
    raw: StrictFloat | None = Field(default=None, description=(
        "What the plugin measured, in its own unit (before normalising to 0..100); absent when not finite."))
    weight: StrictFloat = Field(description="The plugin's weight in the placement profile.")
    weighted: StrictFloat = Field(description=(
        "Normalised score (0..100) x weight: what this plugin adds to the total."))


class ClusterScore(ApiModel):
    """How a cluster scored for the current decision."""

    cluster: StrictStr = Field(max_length=253)
    total: StrictFloat = Field(description="Weighted sum of the normalised scores; the chosen cluster's is the "
                                           "highest.")
    gpu_model: StrictStr | None = Field(default=None, alias="gpuModel", max_length=63,
                                        description="The GPU model the gang's fit uses there.")
    nodes: StrictInt | None = Field(default=None, ge=0, description="Nodes the gang's fit uses there.")
    outranked: StrictBool = Field(default=False, description=(
        "True: not fitted node by node, because even its best possible score (`total`) was below the "
        "chosen cluster's."))
    parts: list[ScoreContribution] | None = Field(
        default=None, max_length=MAX_SCORE_PARTS,
        description="Per score plugin (the chosen cluster only): raw score, weight, weighted contribution.")


class PlacementStatus(ApiModel):
    """The current placement decision."""

    cluster: StrictStr | None = Field(default=None, max_length=253)
    epoch: StrictInt = Field(default=0, ge=0, description="Fencing epoch; +1 on every requeue.")
    mode: Literal["operator", "render"] | None = Field(default=None, description=(
        "How the member runs the gang, as its dispatch recorded it: operator (a twin of an upstream job kind "
        "whose member copy the member's own operator runs) or render (the hub rendered the pods); absent until "
        "this placement's dispatch."))
    decision_resource_version: StrictStr | None = Field(default=None, alias="decisionResourceVersion", max_length=64)
    why_not: list[WhyNotRow] | None = Field(default=None, alias="whyNot", max_length=1024)
    scores: list[ClusterScore] | None = Field(
        default=None, max_length=MAX_SCORE_ROWS,
        description="The chosen cluster first, with its score breakdown per plugin, then the runners-up "
                    "best first (totals only). Empty when no score chose the cluster (a preemption); absent "
                    "before a decision.",
    )
    excluded_clusters: list[ExcludedCluster] | None = Field(
        default=None, alias="excludedClusters", max_length=256,
        description="Clusters this job must avoid for a while (pulled back from them), with until when.",
    )
    excluded_nodes: list[ExcludedNode] | None = Field(
        default=None, alias="excludedNodes", max_length=MAX_EXCLUDED_NODES,
        description="Nodes this job's pods must avoid for a while (a failure policy's Requeue with exclude Node), "
                    "with their cluster and until when: placement does not count them and the pods rendered in "
                    "that cluster get a required node affinity that keeps them off.",
    )
    previous: PreviousCopy | None = Field(
        default=None, description="An earlier copy to wait for before dispatching (drain, failed dispatch).")


ReplicaCount = Annotated[StrictInt, Field(ge=0)]


class HistoryEntry(ApiModel):
    """One step in the job's life (placed, requeued, resized, ...)."""

    time: Timestamp
    event: StrictStr = Field(max_length=128)
    cluster: StrictStr | None = Field(default=None, max_length=253)
    epoch: StrictInt | None = Field(default=None, ge=0)
    message: StrictStr = Field(default="", max_length=_MAX_TEXT)
    from_replicas: dict[DNSLabel, ReplicaCount] | None = Field(default=None, alias="from", description=(
        "Resized: the pods per role before."))
    to_replicas: dict[DNSLabel, ReplicaCount] | None = Field(default=None, alias="to", description=(
        "Resized: the pods per role after."))
    reason: StrictStr | None = Field(default=None, max_length=128, description=(
        "Resized: why, as a code (e.g. Preempted: shrunk to make room; Grown: room appeared; WorkerLost); "
        "the message says it in words."))


class PodCounts(ApiModel):
    """Pods of one role by phase."""

    pending: StrictInt = Field(default=0, ge=0)
    running: StrictInt = Field(default=0, ge=0)
    succeeded: StrictInt = Field(default=0, ge=0)
    failed: StrictInt = Field(default=0, ge=0)


class OperatorCondition(ApiModel):
    """One condition of a member copy as the kind's own operator wrote it (kept as written, times as strings)."""

    type: StrictStr = Field(max_length=316)
    status: StrictStr = Field(max_length=16)
    reason: StrictStr | None = Field(default=None, max_length=1024)
    message: StrictStr | None = Field(default=None, max_length=32768)
    last_transition_time: StrictStr | None = Field(default=None, alias="lastTransitionTime", max_length=64)
    last_probe_time: StrictStr | None = Field(default=None, alias="lastProbeTime", max_length=64)
    last_update_time: StrictStr | None = Field(default=None, alias="lastUpdateTime", max_length=64)


class OperatorStatus(ApiModel):
    """A twin run in operator mode (issue 28): the member copy of its source object, which the member's own
    operator runs, as status sync last saw it; the twin controller mirrors its conditions onto the source."""

    cluster: StrictStr = Field(max_length=253)
    epoch: StrictInt = Field(ge=0)
    kind: StrictStr = Field(max_length=253, description="The source kind, as \"<Kind>.<group>\".")
    conditions: list[OperatorCondition] | None = Field(default=None, max_length=32)
    status: Annotated[dict[str, Any], WithJsonSchema({
        "type": "object", "x-kubernetes-preserve-unknown-fields": True,
        "description": "The copy's own status fields the hub mirrors for its kind (e.g. JobSet's "
                       "replicatedJobsStatus, Kubeflow's replicaStatuses, a Job's counts), as its operator wrote "
                       "them; each checked against the kind's schema and at most 32 KiB of JSON (128 KiB in "
                       "all)."})] | None = None
    status_dropped: list[Annotated[StrictStr, Field(max_length=63)]] | None = Field(
        default=None, alias="statusDropped", max_length=16, description=(
            "The copy's status fields left out as malformed or too large: the hub shows its own values for "
            "them."))


class TrainingJobStatus(ApiModel):
    """What the hub observed and decided. Written only through the status subresource."""

    phase: JobPhase | None = None
    conditions: list[Condition] | None = Field(
        default=None, max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    placement: PlacementStatus | None = None
    history: list[HistoryEntry] | None = Field(
        default=None, max_length=256, description="Most recent last; controllers keep the newest entries."
    )
    replicas: dict[DNSLabel, ReplicaCount] | None = Field(default=None, description=(
        "Pods per role of the gang as placed: the size placement chose (written with the decision, so a "
        "restarted hub dispatches the same size), then each resize (a history entry Resized says from, "
        "to and why). Within each role's [minReplicas, maxReplicas]."))
    pod_counts: dict[DNSLabel, PodCounts] | None = Field(default=None, alias="podCounts")
    requeues: StrictInt = Field(default=0, ge=0)
    observed_generation: StrictInt | None = Field(default=None, alias="observedGeneration", ge=0)
    start_time: Timestamp | None = Field(default=None, alias="startTime", description=(
        "When the job was first placed (as a Kubernetes Job's startTime): spec.activeDeadlineSeconds counts from it."))
    operator: OperatorStatus | None = Field(default=None, description=(
        "Operator mode (a twin of an upstream job kind run by the member's own operator): the member copy's "
        "cluster, epoch and conditions."))
    checkpoint: CheckpointStatus | None = Field(default=None, description=(
        "The latest checkpoint a pod reported (time, step, location, cluster, epoch); kept across requeues, its "
        "location is the next copy's FEDERATOR_RESTORE_FROM."))


class TrainingJob(ApiModel):
    """A gang of pods (e.g. parameter servers and workers) that the hub places whole into one member cluster."""

    api_version: Literal["federator.dev/v1alpha1"] = Field(default="federator.dev/v1alpha1", alias="apiVersion")
    kind: Literal["TrainingJob"] = "TrainingJob"
    metadata: ObjectMeta
    spec: TrainingJobSpec
    status: TrainingJobStatus | None = None

    @model_validator(mode="after")
    def _cross_field(self, info: ValidationInfo) -> TrainingJob:
        raise_semantic(_semantic_errors(self.model_dump(exclude_none=True), settings_of(info)))
        return self


def _affinity_errors(affinity: object, *, path: str) -> list[FieldError]:
    if not isinstance(affinity, Mapping):
        return []
    errors = duplicate_scalar_errors(affinity.get("clusterNames"), path=f"{path}.clusterNames")
    terms = [(f"{path}.required[{i}]", term) for i, term in enumerate(affinity.get("required") or ())
             if isinstance(affinity.get("required"), list)]
    terms += [(f"{path}.preferred[{i}].preference", term.get("preference"))
              for i, term in enumerate(affinity.get("preferred") or ())
              if isinstance(affinity.get("preferred"), list) and isinstance(term, Mapping)]
    for where, term in terms:
        errors += selector_errors(term, path=where)
        why = selector_selects_nothing(term)
        if why is not None:
            errors.append((where, f"Invalid value: the term selects no cluster: {why}"))
    return errors


def _semantic_errors(obj: Mapping[str, Any], settings: ValidationSettings) -> list[FieldError]:
    """Rules across fields, with exact paths. Tolerates any shape (it runs on raw input too)."""
    errors = metadata_errors(obj.get("metadata"), namespaced=True)
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        roles = spec.get("roles")
        errors += duplicate_errors(roles, path="spec.roles", key="name")
        if isinstance(roles, list):
            sizes = [_role_sizes(role) for role in roles]
            total = sum(size[1] for size in sizes if size is not None)
            if total > settings.max_total_replicas:
                at_max = " (each role at maxReplicas)" if any(
                    isinstance(r, Mapping) and type(r.get("maxReplicas")) is int for r in roles) else ""
                errors.append(("spec.roles", f"Invalid value: {total}: the gang may have at most "
                                             f"{settings.max_total_replicas} pods in all{at_max}"))
            for index, role in enumerate(roles):
                errors += _elastic_errors(role, path=f"spec.roles[{index}]")
                template = role.get("template") if isinstance(role, Mapping) else None
                where = f"spec.roles[{index}].template"
                if is_full_form(template):
                    errors += pod_template_errors(template, path=where, settings=settings,
                                                  job_priority_class=spec.get("priorityClassName"))
                elif isinstance(template, Mapping):
                    if template.get("image") is None:
                        errors.append((f"{where}.image", "Required value: the short form needs an image (or give "
                                                         "a full pod template: spec.containers)"))
                    errors += duplicate_errors(template.get("env"), path=f"{where}.env", key="name")
                    tolerations = template.get("tolerations")
                    if isinstance(tolerations, list):
                        for t_index, toleration in enumerate(tolerations):
                            errors += toleration_errors(toleration, path=f"{where}.tolerations[{t_index}]")
        errors += framework_errors(spec)
        errors += failure_policy_errors(spec.get("failurePolicy"), path="spec.failurePolicy",
                                        containers=container_names(spec.get("roles")))
        errors += _checkpoint_volume_errors(spec)
        placement = spec.get("placement")
        if isinstance(placement, Mapping):
            errors += duplicate_scalar_errors(placement.get("gpuModels"), path="spec.placement.gpuModels")
            errors += duplicate_scalar_errors(placement.get("datasets"), path="spec.placement.datasets")
            errors += selector_errors(placement.get("clusterSelector"), path="spec.placement.clusterSelector")
            errors += _affinity_errors(placement.get("affinity"), path="spec.placement.affinity")
    status = obj.get("status")
    if isinstance(status, Mapping):
        errors += duplicate_errors(status.get("conditions"), path="status.conditions", key="type")
        history = status.get("history")
        for index, entry in enumerate(history if isinstance(history, list) else ()):
            if isinstance(entry, Mapping) and entry.get("event") == HISTORY_RESIZED:
                errors += [(f"status.history[{index}].{key}", "Required value: a Resized entry says the "
                                                              "pods per role before (from) and after (to)")
                           for key in ("from", "to") if key not in entry]
    return errors


def _checkpoint_volume_errors(spec: Mapping[str, Any]) -> list[FieldError]:
    """spec.checkpoint's volume and mount must not collide with a full-form template's own."""
    checkpoint, roles = spec.get("checkpoint"), spec.get("roles")
    if not isinstance(checkpoint, Mapping) or not isinstance(checkpoint.get("volume"), Mapping) \
            or not isinstance(roles, list):
        return []
    mount_path = checkpoint.get("mountPath")
    errors: list[FieldError] = []
    for index, role in enumerate(roles):
        template = role.get("template") if isinstance(role, Mapping) else None
        pod = template.get("spec") if isinstance(template, Mapping) else None
        if not isinstance(pod, Mapping):
            continue
        where = f"spec.roles[{index}].template.spec"
        if any(isinstance(v, Mapping) and v.get("name") == CHECKPOINT_VOLUME for v in pod.get("volumes") or ()):
            errors.append((f"{where}.volumes", f"Invalid value: {CHECKPOINT_VOLUME!r}: the name is the hub's "
                                               "(spec.checkpoint.volume)"))
        for field in ("initContainers", "containers"):
            for c_index, container in enumerate(pod.get(field) or ()):
                mounts = container.get("volumeMounts") if isinstance(container, Mapping) else None
                if any(isinstance(m, Mapping) and m.get("mountPath") == mount_path for m in mounts or ()):
                    errors.append((f"{where}.{field}[{c_index}].volumeMounts",
                                   f"Invalid value: {mount_path!r}: spec.checkpoint.mountPath mounts there"))
    return errors


def _count(value: object) -> int | None:
    return value if type(value) is int else None


def _role_sizes(role: object) -> tuple[int, int] | None:
    """(fewest, most) pods of a role as submitted (any shape): minReplicas / maxReplicas, else replicas; None
    when replicas is not an int."""
    if not isinstance(role, Mapping) or (replicas := _count(role.get("replicas"))) is None:
        return None
    low, high = _count(role.get("minReplicas")), _count(role.get("maxReplicas"))
    return (replicas if low is None else low, replicas if high is None else max(high, replicas))


def _elastic_errors(role: object, *, path: str) -> list[FieldError]:
    """1 <= minReplicas <= replicas <= maxReplicas, and the policies only an elastic role may set."""
    if not isinstance(role, Mapping):
        return []
    errors: list[FieldError] = []
    replicas = _count(role.get("replicas"))
    low, high = _count(role.get("minReplicas")), _count(role.get("maxReplicas"))
    if replicas is not None and low is not None and low > replicas:
        errors.append((f"{path}.minReplicas",
                       f"Invalid value: {low}: must be less than or equal to replicas ({replicas})"))
    if replicas is not None and high is not None and high < replicas:
        errors.append((f"{path}.maxReplicas",
                       f"Invalid value: {high}: must be greater than or equal to replicas ({replicas})"))
    loss = role.get("onWorkerLoss")
    if loss in ("shrink", "restart") and replicas is not None and not errors:
        if (replicas if low is None else low) >= (replicas if high is None else high):
            errors.append((f"{path}.onWorkerLoss", "Forbidden: only an elastic role (minReplicas < maxReplicas) "
                                                   "may set onWorkerLoss"))
        elif loss == "restart" and role.get("restartPolicy") != "OnFailure":
            errors.append((f"{path}.onWorkerLoss", 'Invalid value: "restart": needs restartPolicy OnFailure '
                                                   "(with Never a lost pod is not recreated)"))
    return errors


def validate_trainingjob(
    obj: object, *, settings: ValidationSettings | None = None, include_generic_metadata: bool = True
) -> list[FieldError]:
    """Every problem with a submitted TrainingJob, as (field path, message); empty when it is valid."""
    chosen = settings or ValidationSettings()
    return validate_object(obj, model=TrainingJob, semantic=lambda o: _semantic_errors(o, chosen), settings=chosen,
                           include_generic_metadata=include_generic_metadata)


def keep_admitted_fields(proposed: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """The `ResourceType.prepare_update` hook: what the hub's admission wrote on create survives an
    update that leaves it out (a PUT or apply of the original manifest), as kube keeps a pod's
    admitted priority: spec.priorityClassName and, while a class is set, spec.priority; and
    spec.queue, which may be changed but not removed (an empty queue would slip past the quota)."""
    old_spec, new_spec = stored.get("spec"), proposed.get("spec")
    if not isinstance(old_spec, Mapping) or not isinstance(new_spec, dict):
        return proposed
    for key in ("priorityClassName", "queue"):
        if old_spec.get(key) and not new_spec.get(key):
            new_spec[key] = old_spec[key]
    if old_spec.get("priorityClassName") and "priority" not in new_spec and "priority" in old_spec:
        new_spec["priority"] = old_spec["priority"]
    return proposed


def trainingjob_update_validator() -> Callable[[dict[str, Any], dict[str, Any]], list[FieldError]]:
    """The `ResourceType.validate_update` hook: spec.priorityClassName is immutable (as a pod's is),
    and so is spec.priority while a class set it; a role's minReplicas and maxReplicas may not be set,
    changed or removed while the job is placed (status.placement.cluster set: the member's gang was built
    for those bounds, its PodGroup's minimum among them), as a pod's resources may not change in place."""

    def validate(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        new_spec, old_spec = new.get("spec"), old.get("spec")
        if not isinstance(new_spec, Mapping) or not isinstance(old_spec, Mapping):
            return []
        errors: list[FieldError] = []
        new_class, old_class = new_spec.get("priorityClassName") or "", old_spec.get("priorityClassName") or ""
        if new_class != old_class:
            shown = json.dumps(new_class)[:80] if isinstance(new_class, str) else "the new value"
            errors.append(("spec.priorityClassName", f"Invalid value: {shown}: field is immutable"))
        elif old_class and new_spec.get("priority", 0) != old_spec.get("priority", 0):
            errors.append(("spec.priority", f"Forbidden: may not be changed while spec.priorityClassName is set "
                                            f"(the class {old_class} gave {old_spec.get('priority', 0)})"))
        errors += _bounds_change_errors(new_spec, old_spec, cluster=_placed_cluster(old))
        return errors

    return validate


def _placed_cluster(job: Mapping[str, Any]) -> str | None:
    status = job.get("status")
    placement = status.get("placement") if isinstance(status, Mapping) else None
    cluster = placement.get("cluster") if isinstance(placement, Mapping) else None
    return cluster if isinstance(cluster, str) and cluster else None


def _bounds_change_errors(new_spec: Mapping[str, Any], old_spec: Mapping[str, Any], *,
                          cluster: str | None) -> list[FieldError]:
    if cluster is None:
        return []
    old_roles = {r["name"]: r for r in old_spec.get("roles") or () if isinstance(r, Mapping)
                 and isinstance(r.get("name"), str)} if isinstance(old_spec.get("roles"), list) else {}
    new_roles = new_spec.get("roles")
    errors: list[FieldError] = []
    for index, role in enumerate(new_roles if isinstance(new_roles, list) else ()):
        old_role = old_roles.get(role.get("name")) if isinstance(role, Mapping) else None
        if old_role is None:
            continue
        for key in ("minReplicas", "maxReplicas"):
            if role.get(key) != old_role.get(key):
                errors.append((f"spec.roles[{index}].{key}",
                               f"Forbidden: may not be changed while the job is placed (in cluster {cluster[:63]}); "
                               f"it was {json.dumps(old_role.get(key))[:32]}"))
    return errors


def placed_replicas(job: Mapping[str, Any]) -> dict[str, int]:
    """Pods per role of `job` (a stored TrainingJob, any shape) as placed: status.replicas when it names
    exactly the spec's roles, each within its [minReplicas, maxReplicas]; otherwise (not placed yet, a
    status from before elastic roles, a spec changed since) each role's spec.replicas. Roles without an
    int replicas are left out."""
    spec = job.get("spec")
    roles = spec.get("roles") if isinstance(spec, Mapping) else None
    bounds: dict[str, tuple[int, int, int]] = {}
    for role in roles if isinstance(roles, list) else ():
        sizes = _role_sizes(role)
        if sizes is not None and isinstance(role, Mapping) and isinstance(role.get("name"), str):
            bounds[role["name"]] = (role["replicas"], *sizes)
    status = job.get("status")
    recorded = status.get("replicas") if isinstance(status, Mapping) else None
    if isinstance(recorded, Mapping) and set(recorded) == set(bounds) and all(
            type(recorded[name]) is int and low <= recorded[name] <= high for name, (_, low, high) in bounds.items()):
        return {name: recorded[name] for name in bounds}
    return {name: replicas for name, (replicas, _, _) in bounds.items()}


def trainingjob_validator(
    settings: ValidationSettings | None = None, *, include_generic_metadata: bool = False
) -> Callable[[dict[str, Any]], list[FieldError]]:
    """The apiserver's `ResourceType.validate` hook for TrainingJob (`common.api_validator`)."""
    return api_validator(validate_trainingjob, settings, include_generic_metadata=include_generic_metadata)
