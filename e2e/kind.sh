#!/usr/bin/env bash
# e2e/kind.sh: three kind clusters set up as federator member clusters (fake GPUs and RDMA devices,
# Volcano, the member RBAC and the fence agent from deploy/member), the hub against them, and the kind
# end-to-end tests (e2e/test_kind.py). `e2e/kind.sh --help` says how; README "End to end on kind" says why.
set -euo pipefail

# ---------------------------------------------------------------- pinned versions
# kind v0.27.0's default node image (Kubernetes v1.32.2): the newest Kubernetes that Volcano v1.12 lists
# as compatible. Another kind release may run it; KIND_NODE_IMAGE overrides it at your own risk.
readonly KIND_RELEASE="v0.27.0"
readonly PINNED_NODE_IMAGE="kindest/node:v1.32.2@sha256:f226345927d7e348497136874b6d207e0b32cc52154ad8323129352923a3142f"
readonly VOLCANO_VERSION="v1.12.4"
readonly VOLCANO_MANIFEST="https://raw.githubusercontent.com/volcano-sh/volcano/${VOLCANO_VERSION}/installer/volcano-development.yaml"

# ---------------------------------------------------------------- the member clusters
readonly CLUSTERS=(fed-a fed-b fed-c)
readonly WORKERS=2             # worker nodes per cluster (plus one control plane, which gets no GPUs)
readonly GPUS_PER_NODE=8       # fake nvidia.com/gpu on every worker
readonly RDMA_HCA_PER_NODE=1000  # fake rdma/hca on every worker of an RDMA cluster (shared device plugin's hcaMax)
readonly JOB_NAMESPACE="vision"  # a namespace deploy/member manages (namespaces/), where the tests' jobs run

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
readonly ROOT
STATE=${FEDERATOR_KIND_STATE:-$ROOT/.federator/kind}
[[ $STATE == /* ]] || STATE="$PWD/$STATE"
readonly NODE_IMAGE=${KIND_NODE_IMAGE:-$PINNED_NODE_IMAGE}
readonly MEMBER_KUSTOMIZATION="$ROOT/deploy/member/schedulers/volcano"
IMAGE=""  # the image deploy/member runs (build_image)

usage() {
  cat <<EOF
Usage: e2e/kind.sh COMMAND [ARGS...]

Three kind clusters as federator member clusters, and the kind end-to-end tests against them.

Commands:
  up        create (or reuse) the kind clusters ${CLUSTERS[*]} (1 control plane + ${WORKERS} workers each),
            advertise fake capacity on every worker by patching its node status (nvidia.com/gpu: ${GPUS_PER_NODE};
            rdma/hca: ${RDMA_HCA_PER_NODE} on the RDMA clusters) and set the labels placement reads
            (nvidia.com/gpu.product, the RDMA feature labels, federator.dev/dataset.<name>), install Volcano
            ${VOLCANO_VERSION}, build the federator image from the Dockerfile (tagged as deploy/member names it)
            and load it into the clusters, kubectl apply -k deploy/member/schedulers/volcano (the hub's
            least-privilege RBAC, namespaces default and ${JOB_NAMESPACE}, the fence agent), mint each member's
            kubeconfig for the hub's identity (ServiceAccount federator-hub-access) into STATE/hub-identity/
            and write the MemberCluster registrations to STATE/clusters/ (re-running reuses what exists)
  hub [FLAGS]   run the hub in the foreground against them: federator up --clusters STATE/clusters
            --state-dir STATE/hub FLAGS (Ctrl-C stops it; its admin kubeconfig is STATE/hub/admin.kubeconfig)
  test [PYTEST ARGS]   run e2e/test_kind.py with FEDERATOR_E2E_KIND=1 against the clusters of 'up'
            (each test starts its own hub; stop a hub started with 'hub' first: both would renew one Lease)
  all       up, then test
  down      delete the kind clusters and STATE

Cluster  location          network                GPUs (per worker)         scheduler
fed-a    onPrem eu-central rdma infiniband 200G   ${GPUS_PER_NODE} x A100-SXM4-40GB        volcano; imagenet-22k cached
fed-b    onPrem eu-west    rdma roce 100G         ${GPUS_PER_NODE} x Tesla-V100-SXM2-32GB  volcano; imagenet-1k cached
fed-c    cloud us-central1 ethernet 100G          ${GPUS_PER_NODE} x H100-80GB-HBM3        volcano

Pinned: kind node image ${PINNED_NODE_IMAGE}
        (kind ${KIND_RELEASE}'s default, Kubernetes v1.32.2); Volcano ${VOLCANO_VERSION} from
        ${VOLCANO_MANIFEST}

Needs docker (a running daemon), kind (${KIND_RELEASE} or later), kubectl (v1.27 or later) and make
(the repository's .venv is made by 'make' when missing).

Environment:
  FEDERATOR_KIND_STATE  where kubeconfigs, registrations and the hub's state go (default: .federator/kind)
  KIND_NODE_IMAGE       another kind node image (default: the pinned one above)
EOF
}

die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# usage_error MESSAGE [ARGUMENT]: one line (the argument quoted, newlines and all, and cut at 60 characters)
usage_error() {
  local shown=""
  (($# < 2)) || shown=" $(printf '%q' "${2:0:60}")"
  printf 'error: %s%s (see e2e/kind.sh --help)\n' "$1" "$shown" >&2
  exit 2
}

say() {
  printf 'kind.sh: %s\n' "$*"
}

need_tools() {
  local missing=() tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if ((${#missing[@]})); then
    die "not on PATH: $(printf '%s, ' "${missing[@]}" | sed 's/, $//') (e2e/kind.sh needs docker, kind ${KIND_RELEASE} or later and kubectl; README \"End to end on kind\")"
  fi
}

need_docker_daemon() {
  local out
  if ! out=$(docker info --format '{{.ServerVersion}}' 2>&1); then
    die "the docker daemon is not reachable: $(printf '%s' "$out" | tail -n 1)"
  fi
}

need_venv() {
  if [[ ! -x $ROOT/.venv/bin/federator ]]; then
    say "making the repository's .venv (make .venv/bin/federator)"
    make -C "$ROOT" --no-print-directory .venv/bin/federator
  fi
}

admin_kubeconfig() {
  printf '%s/admin/%s.kubeconfig' "$STATE" "$1"
}

kc() {
  local cluster=$1
  shift
  kubectl --kubeconfig "$(admin_kubeconfig "$cluster")" "$@"
}

# wait_until WHAT SECONDS COMMAND...: poll COMMAND every 2 s until it succeeds, or fail after SECONDS.
wait_until() {
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out after ${seconds}s waiting for ${what}"
    sleep 2
  done
}

# profile CLUSTER: what the cluster offers (the same facts go to its nodes and to its registration).
profile() {
  RDMA_KIND="" DATASET="" DATASET_BYTES=0
  case $1 in
    fed-a)
      LOCATION=onPrem PROVIDER=dc1 REGION=eu-central NETWORK=rdma RDMA_KIND=infiniband BANDWIDTH=200.0
      GPU_PRODUCT=A100-SXM4-40GB GPU_MODEL=A100 GPU_MEMORY_MIB=40960 RDMA_HCA=$RDMA_HCA_PER_NODE
      DATASET=imagenet-22k DATASET_BYTES=1503238553600 COST=1.1 ;;
    fed-b)
      LOCATION=onPrem PROVIDER=dc2 REGION=eu-west NETWORK=rdma RDMA_KIND=roce BANDWIDTH=100.0
      GPU_PRODUCT=Tesla-V100-SXM2-32GB GPU_MODEL=V100 GPU_MEMORY_MIB=32768 RDMA_HCA=$RDMA_HCA_PER_NODE
      DATASET=imagenet-1k DATASET_BYTES=158913789952 COST=0.6 ;;
    fed-c)
      LOCATION=cloud PROVIDER=gcp REGION=us-central1 NETWORK=ethernet BANDWIDTH=100.0
      GPU_PRODUCT=H100-80GB-HBM3 GPU_MODEL=H100 GPU_MEMORY_MIB=81559 RDMA_HCA=0 COST=3.9 ;;
    *) die "no profile for cluster $1" ;;
  esac
}

# ---------------------------------------------------------------- up

cluster_exists() {
  local clusters
  clusters=$(kind get clusters 2>/dev/null)
  grep -qx -- "$1" <<<"$clusters"
}

create_cluster() {
  local cluster=$1 kubeconfig
  kubeconfig=$(admin_kubeconfig "$cluster")
  if cluster_exists "$cluster"; then
    say "$cluster: kind cluster exists, reusing it"
  else
    say "$cluster: creating the kind cluster (${NODE_IMAGE%%@*}, 1 control plane + ${WORKERS} workers)"
    {
      printf 'kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n'
      for ((i = 0; i < WORKERS; i++)); do printf -- '- role: worker\n'; done
    } | kind create cluster --name "$cluster" --image "$NODE_IMAGE" --config - \
          --kubeconfig "$kubeconfig.new" --wait 300s
    rm -f -- "$kubeconfig.new"
  fi
  (umask 077 && kind get kubeconfig --name "$cluster" >"$kubeconfig.tmp")
  mv -f -- "$kubeconfig.tmp" "$kubeconfig"
  kc "$cluster" wait --for=condition=Ready node --all --timeout=300s >/dev/null
}

advertise_devices() {
  local cluster=$1 node patch workers
  profile "$cluster"
  workers=$(kc "$cluster" get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{.items[*].metadata.name}')
  [[ -n $workers ]] || die "$cluster: no worker nodes"
  # JSON patch of the status subresource; "~1" is "/" escaped in a JSON pointer. "add" replaces a value
  # that is already there, so running it again changes nothing.
  patch="[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"${GPUS_PER_NODE}\"}"
  patch+=",{\"op\":\"add\",\"path\":\"/status/allocatable/nvidia.com~1gpu\",\"value\":\"${GPUS_PER_NODE}\"}"
  if ((RDMA_HCA > 0)); then
    patch+=",{\"op\":\"add\",\"path\":\"/status/capacity/rdma~1hca\",\"value\":\"${RDMA_HCA}\"}"
    patch+=",{\"op\":\"add\",\"path\":\"/status/allocatable/rdma~1hca\",\"value\":\"${RDMA_HCA}\"}"
  fi
  patch+="]"
  for node in $workers; do
    kc "$cluster" patch node "$node" --subresource=status --type=json -p "$patch" >/dev/null
    # GPU feature discovery's and Node Feature Discovery's labels, as the simulator's nodes carry them:
    # placement reads the GPU model from nvidia.com/gpu.product and datasets from federator.dev/dataset.*
    local labels=("nvidia.com/gpu.present=true" "nvidia.com/gpu.product=${GPU_PRODUCT}"
                  "nvidia.com/gpu.count=${GPUS_PER_NODE}" "nvidia.com/gpu.memory=${GPU_MEMORY_MIB}"
                  "federator.dev/node-pool=gpu")
    if ((RDMA_HCA > 0)); then
      labels+=("feature.node.kubernetes.io/rdma.capable=true" "feature.node.kubernetes.io/rdma.available=true")
    fi
    [[ -z $DATASET ]] || labels+=("federator.dev/dataset.${DATASET}=${DATASET_BYTES}")
    kc "$cluster" label node "$node" --overwrite "${labels[@]}" >/dev/null
    kc "$cluster" wait node "$node" --timeout=60s \
      --for=jsonpath='{.status.allocatable.nvidia\.com/gpu}'="$GPUS_PER_NODE" >/dev/null
  done
  local rdma=""
  ((RDMA_HCA == 0)) || rdma=" and rdma/hca ${RDMA_HCA}"
  say "$cluster: ${WORKERS} workers advertise ${GPUS_PER_NODE} x ${GPU_PRODUCT}${rdma}"
}

queue_open() {
  [[ $(kc "$1" get queues.scheduling.volcano.sh default -o jsonpath='{.status.state}') == Open ]]
}

install_volcano() {
  local cluster=$1 deployment
  say "$cluster: installing Volcano ${VOLCANO_VERSION}"
  # server-side: the CRDs are too large for the last-applied annotation of a client-side apply
  kc "$cluster" apply --server-side --force-conflicts -f "$VOLCANO_MANIFEST" >/dev/null
  for deployment in volcano-admission volcano-controllers volcano-scheduler; do
    kc "$cluster" -n volcano-system rollout status "deployment/$deployment" --timeout=300s >/dev/null
  done
  # the scheduler creates the default queue that the hub's PodGroups name
  wait_until "Volcano's default queue to be Open in $cluster" 180 queue_open "$cluster"
}

# The image deploy/member's fence agent runs (the hub's image, deploy/base): built from the Dockerfile
# under that very name and loaded into every kind cluster, so `kubectl apply -k` needs no registry.
# (Whole outputs are captured before they are searched: with pipefail, a reader that stops early
# would fail the writer with SIGPIPE.)
member_image() {
  local rendered images
  rendered=$(kubectl kustomize "$MEMBER_KUSTOMIZATION")
  images=$(sed -n 's/^ *image: *//p' <<<"$rendered")
  printf '%s\n' "${images%%$'\n'*}"
}

build_image() {
  [[ -f $ROOT/Dockerfile ]] || die "no Dockerfile in $ROOT: the fence agent's image cannot be built"
  [[ -d $MEMBER_KUSTOMIZATION ]] || die "no $MEMBER_KUSTOMIZATION: the member RBAC and fence agent are missing"
  IMAGE=$(member_image)
  [[ -n $IMAGE ]] || die "$MEMBER_KUSTOMIZATION renders no container image"
  say "building ${IMAGE} from ${ROOT}/Dockerfile"
  docker build --quiet --tag "$IMAGE" "$ROOT" >/dev/null
}

install_member() {
  local cluster=$1
  kind load docker-image "$IMAGE" --name "$cluster" >/dev/null
  say "$cluster: kubectl apply -k deploy/member/schedulers/volcano (the hub identity's RBAC, the fence agent)"
  kc "$cluster" apply -k "$MEMBER_KUSTOMIZATION" >/dev/null
  kc "$cluster" -n federator-system rollout status deployment/federator-agent --timeout=180s >/dev/null
}

token_filled() {
  [[ -n $(kc "$1" -n federator-system get secret federator-hub-access-token -o jsonpath='{.data.token}') ]]
}

# The kubeconfig the hub uses for this member: the kind API server as the host sees it, the cluster's CA,
# and the long-lived token of the ServiceAccount federator-hub-access (its Secret, filled by the token
# controller). Mode 0600: it is a credential.
mint_hub_kubeconfig() {
  local cluster=$1 server ca token out
  out="$STATE/hub-identity/$cluster.kubeconfig"
  wait_until "the token of federator-hub-access in $cluster" 60 token_filled "$cluster"
  server=$(kc "$cluster" config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kc "$cluster" -n federator-system get secret federator-hub-access-token -o jsonpath='{.data.ca\.crt}')
  token=$(kc "$cluster" -n federator-system get secret federator-hub-access-token -o jsonpath='{.data.token}' \
            | base64 --decode)
  (
    umask 077
    cat >"$out.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ${cluster}
  cluster:
    server: ${server}
    certificate-authority-data: ${ca}
users:
- name: federator-hub-access
  user:
    token: ${token}
contexts:
- name: ${cluster}
  context: {cluster: ${cluster}, user: federator-hub-access}
current-context: ${cluster}
EOF
  )
  mv -f -- "$out.tmp" "$out"
  # what the hub needs, and no more: asked as the minted identity itself
  local hub=(kubectl --kubeconfig "$out")
  "${hub[@]}" auth can-i watch nodes >/dev/null \
    || die "$cluster: the hub's kubeconfig cannot watch nodes: deploy/member's RBAC did not take"
  "${hub[@]}" auth can-i create podgroups.scheduling.volcano.sh -n "$JOB_NAMESPACE" >/dev/null \
    || die "$cluster: the hub's kubeconfig cannot create Volcano PodGroups in namespace $JOB_NAMESPACE"
  if "${hub[@]}" auth can-i create pods -n kube-system >/dev/null 2>&1; then
    die "$cluster: the hub's kubeconfig can create pods in kube-system: it is not least-privilege"
  fi
}

write_registration() {
  local cluster=$1 out
  profile "$cluster"
  out="$STATE/clusters/$cluster.yaml"
  {
    printf '# written by e2e/kind.sh: the kind cluster %s as a federator member cluster\n' "$cluster"
    printf 'apiVersion: federator.dev/v1alpha1\nkind: MemberCluster\nmetadata:\n  name: %s\n' "$cluster"
    printf '  labels: {federator.dev/kind: "true"}\n'
    printf 'spec:\n'
    printf '  connection: {kubeconfigPath: %s, context: %s}\n' "$STATE/hub-identity/$cluster.kubeconfig" "$cluster"
    printf '  location: {type: %s, provider: %s, region: %s}\n' "$LOCATION" "$PROVIDER" "$REGION"
    if [[ $NETWORK == rdma ]]; then
      printf '  network: {type: rdma, rdmaKind: %s, bandwidthGbps: %s}\n' "$RDMA_KIND" "$BANDWIDTH"
    else
      printf '  network: {type: ethernet, bandwidthGbps: %s}\n' "$BANDWIDTH"
    fi
    printf '  scheduler: {name: volcano}\n'
    printf '  labels: {tier: research, federator.test/cluster: %s}\n' "$cluster"
    printf '  gpuModels: [%s]\n' "$GPU_MODEL"
    printf '  costPerGpuHour: %s\n' "$COST"
    [[ -z $DATASET ]] || printf '  datasets: [{name: %s, sizeBytes: %s}]\n' "$DATASET" "$DATASET_BYTES"
  } >"$out.tmp"
  mv -f -- "$out.tmp" "$out"
}

cmd_up() {
  need_tools docker kind kubectl
  need_docker_daemon
  mkdir -p -- "$STATE/admin" "$STATE/hub-identity" "$STATE/clusters"
  chmod 700 "$STATE/admin" "$STATE/hub-identity"
  build_image
  local cluster
  for cluster in "${CLUSTERS[@]}"; do
    create_cluster "$cluster"
    advertise_devices "$cluster"
    install_volcano "$cluster"
    install_member "$cluster"
    mint_hub_kubeconfig "$cluster"
    write_registration "$cluster"
  done
  say "ready: registrations in $STATE/clusters/ (admin kubeconfigs: $STATE/admin/<cluster>.kubeconfig)"
  say "next: e2e/kind.sh test, or e2e/kind.sh hub"
}

# ---------------------------------------------------------------- hub, test, down

need_registrations() {
  compgen -G "$STATE/clusters/*.yaml" >/dev/null || die "no registrations in $STATE/clusters: run e2e/kind.sh up first"
}

cmd_hub() {
  need_tools docker kind kubectl
  need_registrations
  need_venv
  mkdir -p -- "$STATE/hub"
  exec "$ROOT/.venv/bin/federator" up --clusters "$STATE/clusters" --state-dir "$STATE/hub" "$@"
}

cmd_test() {
  need_tools docker kind kubectl
  need_registrations
  need_venv
  cd -- "$ROOT"
  FEDERATOR_E2E_KIND=1 FEDERATOR_KIND_STATE="$STATE" \
    exec "$ROOT/.venv/bin/pytest" -p no:cacheprovider -ra e2e/test_kind.py "$@"
}

cmd_down() {
  need_tools docker kind
  local cluster
  for cluster in "${CLUSTERS[@]}"; do
    if cluster_exists "$cluster"; then
      kind delete cluster --name "$cluster"
    fi
  done
  # only what 'up' and 'hub' wrote: STATE itself may be a directory someone chose for more than this
  rm -rf -- "$STATE/admin" "$STATE/hub-identity" "$STATE/clusters" "$STATE/hub"
  rmdir -- "$STATE" 2>/dev/null || true
  say "deleted ${CLUSTERS[*]} and their kubeconfigs and registrations in $STATE"
}

# The state directory goes into registrations (kubeconfigPath: an absolute, normalized path) unquoted.
check_state() {
  if [[ ! $STATE =~ ^(/[A-Za-z0-9._-]+)+$ || $STATE =~ /\.\.?(/|$) || $STATE =~ [^/]{256} || ${#STATE} -gt 1024 ]]; then
    usage_error "FEDERATOR_KIND_STATE must be a normalized path (at most 1024 characters) of letters, digits, '.', '_' and '-', got" "$STATE"
  fi
}

main() {
  (($#)) || usage_error "missing command"
  local command=$1
  shift
  case $command in
    -h | --help | help) usage ;;
    up | down | all)
      (($# == 0)) || usage_error "$command takes no arguments, got" "$1"
      check_state
      case $command in
        up) cmd_up ;;
        down) cmd_down ;;
        all) cmd_up && cmd_test ;;
      esac
      ;;
    hub) check_state && cmd_hub "$@" ;;
    test) check_state && cmd_test "$@" ;;
    -*) usage_error "unknown option" "$command" ;;
    *) usage_error "unknown command" "$command" ;;
  esac
}

# Sourcing the script (tests/test_kind_sh.py does) defines the functions and runs nothing.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
