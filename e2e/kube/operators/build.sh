#!/usr/bin/env bash
# Build the operators a real member runs in operator mode (issue 28) from the
# pinned Go modules in this folder, into a cache outside the work tree keyed by
# the hash of their go.sum files (and the wrappers' main.go):
#   jobset-controller   sigs.k8s.io/jobset's own main package          (module ./jobset)
#   training-operator   ./kubeflow/main.go: github.com/kubeflow/training-operator's
#                       controllers and webhooks without in-cluster cert rotation (module ./kubeflow)
#   mpi-operator        ./mpi/main.go: github.com/kubeflow/mpi-operator's cmd/mpi-operator (MPIJob v2beta1)
#                       with a loopback health address and no leader election (module ./mpi)
# and copies their upstream install manifests (CRDs, RBAC, webhook configurations:
# jobset's config/, the training operator's and the mpi-operator's manifests/) beside
# them, which federator/dev/kube.py renders with `kubectl kustomize` and installs in a
# member, and the upstream PyTorchJob example (examples/pytorch-simple.yaml) the e2e
# tests apply. Three modules because jobset v0.10.1 pins Kubernetes 0.34 /
# controller-runtime 0.22, mpi-operator v0.6.0 0.31 / 0.19 and the training operator
# v1.8.1 0.29 / 0.17, whose APIs differ.
#
# `build.sh kueue` builds ONLY Kueue's manager instead (issue 32: bench/multikueue.py measures federator against
# MultiKueue): sigs.k8s.io/kueue's cmd/kueue from the pinned module ./kueue, into kueue-<hash of kueue/go.sum>/
# (bin/kueue, and upstream's config/ as manifests/kueue: CRDs, RBAC, webhook configurations). Nothing else
# builds it (not CI's cold build, not the e2e tests), and the plain `build.sh` never does.
#
# Does nothing when everything is there. Prints the cache folder on its last line of
# standard output. A failed step is one line naming the module and the step; the Go
# tool's own output goes to a log file named there.
#
# Environment: FEDERATOR_KUBE_CACHE (default ~/.cache/federator/kube) as for
# ../tools/build.sh; GOFLAGS, GOPROXY, GOMODCACHE as for any go command.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

command -v go >/dev/null 2>&1 || { echo "error: build of the member operators: no 'go' on PATH (Go >= 1.26 is needed)" >&2; exit 1; }

cache_root="${FEDERATOR_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/federator/kube}"
# shellcheck source-path=SCRIPTDIR/.. source=build-step.sh
source "$here/../build-step.sh"
export CGO_ENABLED=0

case "${1:-}" in
    "") ;;
    kueue)
        KUEUE_VERSION="$(awk '$1 == "sigs.k8s.io/kueue" {print $2; exit}' kueue/go.mod)"
        out="$cache_root/kueue-$(sha256sum kueue/go.sum | cut -c1-16)"
        if [ -f "$out/complete" ] && [ -x "$out/bin/kueue" ]; then
            echo "$out"
            exit 0
        fi
        mkdir -p "$out/bin" "$out/manifests"
        log="$out/build.log"
        : > "$log"
        built="Kueue's manager"
        t_start=$(date +%s)
        echo "building Kueue's manager into $out (kueue $KUEUE_VERSION); a cold build takes many minutes" >&2
        kueue_mod="sigs.k8s.io/kueue@$KUEUE_VERSION"
        step "$kueue_mod" "download modules" -- bash -c "cd kueue && go mod download"
        step "$kueue_mod" "go build sigs.k8s.io/kueue/cmd/kueue" -- bash -c \
            "cd kueue && go build -trimpath -ldflags \"-s -w -X 'sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION'\" -o '$out/bin/kueue.tmp' sigs.k8s.io/kueue/cmd/kueue"
        mv "$out/bin/kueue.tmp" "$out/bin/kueue"
        kueue_dir="$(cd kueue && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
        step "$kueue_mod" "copy config/ (CRDs, RBAC, webhooks)" -- bash -c \
            "rm -rf '$out/manifests/kueue' && cp -r '$kueue_dir/config' '$out/manifests/kueue' && chmod -R u+w '$out/manifests/kueue'"
        printf 'kueue %s\n' "$KUEUE_VERSION" > "$out/complete"
        echo "built Kueue's manager in $(( $(date +%s) - t_start ))s" >&2
        echo "$out"
        exit 0
        ;;
    *) echo "error: build.sh: unknown argument ${1:0:40} (none builds the member operators, 'kueue' Kueue's manager)" >&2
       exit 2 ;;
esac

JOBSET_VERSION="$(awk '$1 == "sigs.k8s.io/jobset" {print $2; exit}' jobset/go.mod)"
KUBEFLOW_VERSION="$(awk '$1 == "github.com/kubeflow/training-operator" {print $2; exit}' kubeflow/go.mod)"
MPI_VERSION="$(awk '$1 == "github.com/kubeflow/mpi-operator" {print $2; exit}' mpi/go.mod)"
hash="$(cat jobset/go.sum kubeflow/go.sum kubeflow/main.go mpi/go.sum mpi/main.go | sha256sum | cut -c1-16)"
out="$cache_root/operators-$hash"
done_marker="$out/complete"

if [ -f "$done_marker" ] && [ -x "$out/bin/jobset-controller" ] && [ -x "$out/bin/training-operator" ] \
        && [ -x "$out/bin/mpi-operator" ]; then
    echo "$out"
    exit 0
fi

mkdir -p "$out/bin" "$out/manifests"
log="$out/build.log"
: > "$log"
built="the member operators"
t_start=$(date +%s)
echo "building the member operators into $out (jobset $JOBSET_VERSION, training-operator $KUBEFLOW_VERSION, mpi-operator $MPI_VERSION); a cold build takes minutes" >&2

jobset_mod="sigs.k8s.io/jobset@$JOBSET_VERSION"
step "$jobset_mod" "download modules" -- bash -c "cd jobset && go mod download"
step "$jobset_mod" "go build sigs.k8s.io/jobset" -- bash -c \
    "cd jobset && go build -trimpath -ldflags \"-s -w -X 'sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION'\" -o '$out/bin/jobset-controller.tmp' sigs.k8s.io/jobset"
mv "$out/bin/jobset-controller.tmp" "$out/bin/jobset-controller"
jobset_dir="$(cd jobset && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)"
step "$jobset_mod" "copy config/ (CRDs, RBAC, webhooks)" -- bash -c \
    "rm -rf '$out/manifests/jobset' && cp -r '$jobset_dir/config' '$out/manifests/jobset' && chmod -R u+w '$out/manifests/jobset'"

kubeflow_mod="github.com/kubeflow/training-operator@$KUBEFLOW_VERSION"
step "$kubeflow_mod" "download modules" -- bash -c "cd kubeflow && go mod download"
step "$kubeflow_mod" "go build ./kubeflow (training-operator)" -- bash -c \
    "cd kubeflow && go build -trimpath -ldflags '-s -w' -o '$out/bin/training-operator.tmp' ."
mv "$out/bin/training-operator.tmp" "$out/bin/training-operator"
kubeflow_dir="$(cd kubeflow && go list -m -f '{{.Dir}}' github.com/kubeflow/training-operator)"
step "$kubeflow_mod" "copy manifests/ (CRDs, RBAC, webhooks) and examples/pytorch/simple.yaml" -- bash -c \
    "rm -rf '$out/manifests/kubeflow' && cp -r '$kubeflow_dir/manifests' '$out/manifests/kubeflow' && chmod -R u+w '$out/manifests/kubeflow' && mkdir -p '$out/examples' && cp '$kubeflow_dir/examples/pytorch/simple.yaml' '$out/examples/pytorch-simple.yaml' && chmod u+w '$out/examples/pytorch-simple.yaml'"

mpi_mod="github.com/kubeflow/mpi-operator@$MPI_VERSION"
step "$mpi_mod" "download modules" -- bash -c "cd mpi && go mod download"
step "$mpi_mod" "go build ./mpi (mpi-operator)" -- bash -c \
    "cd mpi && go build -trimpath -ldflags \"-s -w -X 'github.com/kubeflow/mpi-operator/pkg/version.GitSHA=$MPI_VERSION'\" -o '$out/bin/mpi-operator.tmp' ."
mv "$out/bin/mpi-operator.tmp" "$out/bin/mpi-operator"
mpi_dir="$(cd mpi && go list -m -f '{{.Dir}}' github.com/kubeflow/mpi-operator)"
step "$mpi_mod" "copy manifests/ (CRD, RBAC)" -- bash -c \
    "rm -rf '$out/manifests/mpi' && cp -r '$mpi_dir/manifests' '$out/manifests/mpi' && chmod -R u+w '$out/manifests/mpi'"

printf 'jobset %s\ntraining-operator %s\nmpi-operator %s\n' "$JOBSET_VERSION" "$KUBEFLOW_VERSION" "$MPI_VERSION" > "$done_marker"
echo "built the member operators in $(( $(date +%s) - t_start ))s" >&2
echo "$out"
