"""ClusterProfile (multicluster.x-k8s.io/v1alpha1, namespaced): a cluster of a multicluster inventory.

SIG Multicluster's cluster inventory API (sigs.k8s.io/cluster-inventory-api,
KEPs 4322 and 5339), the source MultiKueue and Open Cluster Management read:
a cluster manager writes one ClusterProfile per cluster, with
`spec.displayName`, the immutable `spec.clusterManager.name`, and a status
it keeps current: `conditions` (ControlPlaneHealthy, ...), `version.kubernetes`,
`properties` (name/value pairs) and `accessProviders` (each a provider name
and a kubeconfig `Cluster`: server, certificate-authority-data, extensions;
`credentialProviders` is the deprecated older name of the same list). The hub
serves the kind with its upstream schema so that a cluster manager (or
`kubectl apply`) can write profiles into it; controllers/clusterprofile.py
joins each as a MemberCluster.

Also here: the access-provider configuration file (`--cluster-profile-providers`),
upstream's format `{"providers": [{"name", "execConfig": {apiVersion, command,
args, env, provideClusterInfo}}]}`: which exec credential plugin the hub runs
for a profile that lists an access provider of that name. The command only
ever comes from this file, which the hub's operator writes, never from the
API (a profile names a provider; it cannot name a program to run).

Bottom layer: pydantic and stdlib only, no I/O; validation never echoes a
server URL with user information (it may hold a password).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field, StrictBool, StrictStr, ValidationError, model_validator

from federator.apis.common import (
    ApiModel,
    Condition,
    FieldError,
    ObjectMeta,
    Timestamp,
    ValidationSettings,
    api_validator,
    duplicate_errors,
    errors_from_validation,
    raise_semantic,
    validate_object,
)
from federator.apis.membercluster import ServerURL

__all__ = [
    "API_VERSION",
    "CLUSTER_MANAGER_LABEL",
    "EXEC_EXTENSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SINGULAR",
    "VERSION",
    "AccessProvider",
    "AccessProviderConfig",
    "ClusterProfile",
    "ExecConfig",
    "ExecEnvVar",
    "ProviderConfigError",
    "access_providers_of",
    "clusterprofile_update_validator",
    "clusterprofile_validator",
    "exec_extension",
    "parse_provider_config",
    "validate_clusterprofile",
]

GROUP: Final = "multicluster.x-k8s.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "ClusterProfile"
PLURAL: Final = "clusterprofiles"
SINGULAR: Final = "clusterprofile"
#: upstream's LabelClusterManagerKey: the cluster manager's name, on each profile it writes
CLUSTER_MANAGER_LABEL: Final = "x-k8s.io/cluster-manager"
#: the reserved kubeconfig Cluster extension whose value the exec plugin gets as spec.cluster.config (KEP-5339)
EXEC_EXTENSION: Final = "client.authentication.k8s.io/exec"

_MAX_EXTENSION_BYTES = 64 * 1024
_MAX_CA_BYTES = 64 * 1024
_Name = Annotated[StrictStr, Field(min_length=1, max_length=253)]


def _check_base64(value: str) -> str:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("must be base64-encoded data") from None
    return value


def _check_json_size(value: Any) -> Any:
    if len(json.dumps(value, separators=(",", ":"))) > _MAX_EXTENSION_BYTES:
        raise ValueError(f"must be at most {_MAX_EXTENSION_BYTES} bytes as JSON")
    return value


class NamedExtension(ApiModel):
    """A kubeconfig extension: a name and any JSON value (clientcmd's NamedExtension)."""

    name: _Name
    extension: Annotated[Any, AfterValidator(_check_json_size)] = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="Any JSON value; the one named client.authentication.k8s.io/exec goes to the exec plugin.")


class KubeconfigCluster(ApiModel):
    """How to reach a cluster's API server: a kubeconfig `clusters[].cluster` (clientcmd v1 Cluster)."""

    server: ServerURL | None = Field(default=None, description="API server URL, e.g. https://10.0.0.1:6443.")
    tls_server_name: Annotated[StrictStr, Field(max_length=253)] | None = Field(
        default=None, alias="tls-server-name")
    insecure_skip_tls_verify: StrictBool | None = Field(default=None, alias="insecure-skip-tls-verify")
    certificate_authority: Annotated[StrictStr, Field(max_length=4096)] | None = Field(
        default=None, alias="certificate-authority",
        description="A CA file on the consumer's host; the hub ignores it (certificate-authority-data is used).")
    certificate_authority_data: Annotated[
        StrictStr, Field(max_length=_MAX_CA_BYTES * 4 // 3 + 4), AfterValidator(_check_base64)
    ] | None = Field(default=None, alias="certificate-authority-data", description="CA bundle, base64 PEM.")
    proxy_url: Annotated[StrictStr, Field(max_length=2048)] | None = Field(default=None, alias="proxy-url")
    disable_compression: StrictBool | None = Field(default=None, alias="disable-compression")
    extensions: list[NamedExtension] | None = Field(
        default=None, max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})


class AccessProvider(ApiModel):
    """One way to reach the cluster: the provider's name (which credential plugin a consumer runs) and the
    cluster's connection details."""

    name: _Name
    cluster: KubeconfigCluster | None = None


class ClusterManager(ApiModel):
    """The cluster manager that owns the profile (immutable)."""

    name: _Name


class ClusterProfileSpec(ApiModel):
    display_name: Annotated[StrictStr, Field(max_length=1024)] | None = Field(
        default=None, alias="displayName", description="A human-readable name of the cluster.")
    cluster_manager: ClusterManager = Field(alias="clusterManager")


class ClusterVersion(ApiModel):
    kubernetes: Annotated[StrictStr, Field(max_length=256)] | None = None


class Property(ApiModel):
    """A name/value pair the cluster manager reports (KEP-4322's properties, e.g. location)."""

    name: _Name
    value: Annotated[StrictStr, Field(min_length=1, max_length=1024)]
    last_observed_time: Timestamp | None = Field(default=None, alias="lastObservedTime")


_MAP_BY_NAME: Final[dict[str, Any]] = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}


class ClusterProfileStatus(ApiModel):
    conditions: list[Condition] | None = Field(
        default=None, max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="Written by the cluster manager (ControlPlaneHealthy, ...); the hub never writes them.")
    version: ClusterVersion | None = None
    properties: list[Property] | None = Field(default=None, max_length=256, json_schema_extra=_MAP_BY_NAME)
    credential_providers: list[AccessProvider] | None = Field(
        default=None, alias="credentialProviders", max_length=16, json_schema_extra=_MAP_BY_NAME,
        description="Deprecated: accessProviders; on the same name accessProviders wins.")
    access_providers: list[AccessProvider] | None = Field(
        default=None, alias="accessProviders", max_length=16, json_schema_extra=_MAP_BY_NAME)


class ClusterProfile(ApiModel):
    """A cluster of a multicluster inventory (sigs.k8s.io/cluster-inventory-api), written by its cluster manager;
    the hub joins it as a MemberCluster."""

    api_version: Literal["multicluster.x-k8s.io/v1alpha1"] = Field(default="multicluster.x-k8s.io/v1alpha1", alias="apiVersion")
    kind: Literal["ClusterProfile"] = "ClusterProfile"
    metadata: ObjectMeta
    spec: ClusterProfileSpec
    status: ClusterProfileStatus | None = None

    @model_validator(mode="after")
    def _cross_field(self) -> ClusterProfile:
        raise_semantic(_semantic_errors(self.model_dump(by_alias=True, exclude_none=True)))
        return self


def _semantic_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """Duplicate keys of the list-map fields; tolerates any shape (it runs on raw input too)."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return []
    errors = duplicate_errors(status.get("conditions"), path="status.conditions", key="type")
    for field in ("properties", "credentialProviders", "accessProviders"):
        errors += duplicate_errors(status.get(field), path=f"status.{field}", key="name")
    for field in ("credentialProviders", "accessProviders"):
        providers = status.get(field)
        for i, provider in enumerate(providers if isinstance(providers, list) else ()):
            cluster = provider.get("cluster") if isinstance(provider, Mapping) else None
            if isinstance(cluster, Mapping):
                errors += duplicate_errors(cluster.get("extensions"), path=f"status.{field}[{i}].cluster.extensions",
                                           key="name")
    return errors


def validate_clusterprofile(
    obj: object, *, settings: ValidationSettings | None = None, include_generic_metadata: bool = True
) -> list[FieldError]:
    """Every problem with a ClusterProfile, as (field path, message); empty when it is valid."""
    return validate_object(obj, model=ClusterProfile, semantic=_semantic_errors, settings=settings,
                           include_generic_metadata=include_generic_metadata)


def clusterprofile_validator(
    settings: ValidationSettings | None = None, *, include_generic_metadata: bool = False
) -> Callable[[dict[str, Any]], list[FieldError]]:
    """The apiserver's `ResourceType.validate` hook for ClusterProfile (`common.api_validator`)."""
    return api_validator(validate_clusterprofile, settings, include_generic_metadata=include_generic_metadata)


def clusterprofile_update_validator() -> Callable[[dict[str, Any], dict[str, Any]], list[FieldError]]:
    """The `ResourceType.validate_update` hook: spec.clusterManager is immutable (upstream's CEL rule)."""

    def validate(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        before = old.get("spec", {}).get("clusterManager") if isinstance(old.get("spec"), dict) else None
        after = new.get("spec", {}).get("clusterManager") if isinstance(new.get("spec"), dict) else None
        if before != after:
            return [("spec.clusterManager", "Invalid value: \"object\": ClusterManager is immutable")]
        return []

    return validate


def access_providers_of(profile: Mapping[str, Any]) -> dict[str, AccessProvider]:
    """The profile's access providers by name: status.credentialProviders (deprecated), then
    status.accessProviders over them on the same name (upstream's rule). Malformed entries are skipped."""
    status = profile.get("status")
    found: dict[str, AccessProvider] = {}
    if not isinstance(status, Mapping):
        return found
    for field in ("credentialProviders", "accessProviders"):
        entries = status.get(field)
        for entry in entries if isinstance(entries, list) else ():
            try:
                provider = AccessProvider.model_validate(entry)
            except ValidationError:
                continue
            found[provider.name] = provider
    return found


def exec_extension(cluster: KubeconfigCluster | None) -> Any:
    """The value of the cluster's client.authentication.k8s.io/exec extension (None when absent)."""
    for extension in (cluster.extensions or ()) if cluster is not None else ():
        if extension.name == EXEC_EXTENSION:
            return extension.extension
    return None


# --------------------------------------------------------------------------- the access-provider config file


class ProviderConfigError(ValueError):
    """The access-provider configuration file is malformed; the message names the field."""


class ExecEnvVar(ApiModel):
    name: Annotated[StrictStr, Field(min_length=1, max_length=256)]
    value: Annotated[StrictStr, Field(max_length=32 * 1024)]


class ExecConfig(ApiModel):
    """An exec credential plugin (a kubeconfig user's `exec`): the program and what it is run with."""

    api_version: Literal["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"] = Field(
        alias="apiVersion")
    command: Annotated[StrictStr, Field(min_length=1, max_length=4096)]
    args: list[Annotated[StrictStr, Field(max_length=32 * 1024)]] | None = Field(default=None, max_length=256)
    env: list[ExecEnvVar] | None = Field(default=None, max_length=256)
    provide_cluster_info: StrictBool = Field(default=False, alias="provideClusterInfo")
    install_hint: StrictStr | None = Field(default=None, alias="installHint", max_length=4096)
    interactive_mode: Literal["Never", "IfAvailable", "Always"] | None = Field(default=None, alias="interactiveMode")


class AccessProviderConfig(ApiModel):
    """One entry of the file: a provider name and its exec plugin."""

    name: _Name
    exec_config: ExecConfig = Field(alias="execConfig")


class _ProviderFile(ApiModel):
    providers: list[AccessProviderConfig] = Field(max_length=64)


def parse_provider_config(raw: bytes) -> tuple[AccessProviderConfig, ...]:
    """The providers of an access-provider configuration file (JSON, upstream's format), in the file's order
    (the first a profile also lists is used); ProviderConfigError naming the field when it is malformed."""
    if len(raw) > 1024 * 1024:
        raise ProviderConfigError("is larger than 1 MiB")
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProviderConfigError(f"is not valid JSON: {e}") from None
    try:
        parsed = _ProviderFile.model_validate(document)
    except ValidationError as e:
        first = errors_from_validation(e, model=_ProviderFile)[0]
        raise ProviderConfigError(f"{first[0]}: {first[1]}") from None
    names = [p.name for p in parsed.providers]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ProviderConfigError(f"providers[{i}].name: Duplicate value: {json.dumps(name)}")
    for i, provider in enumerate(parsed.providers):
        if provider.exec_config.interactive_mode == "Always":
            raise ProviderConfigError(f"providers[{i}].execConfig.interactiveMode: Unsupported value: \"Always\": "
                                      "the hub runs plugins without a terminal")
    return tuple(parsed.providers)
