#!/usr/bin/env bash
# Builds what the local test cluster needs, once, into a cache outside git:
#   etcd (Debian's etcd-server), kube-apiserver / kube-scheduler /
#   kube-controller-manager and kubelet v1.33.13 (a wrapper go.mod over k8s.io/kubernetes
#   with every staging module replaced by v0.33.13), kwok v0.8.0, Karpenter v1.6.4's
#   kwok cloud provider (sigs.k8s.io/karpenter/kwok) and KEDA v2.16.1's operator.
# A warm run takes well under a second; a cold one about 8 minutes on 2 cores for the
# control plane, plus about 2 for Karpenter and 6 for KEDA
# (and ~5 GB of Go caches under $HTA_K8S_CACHE).
set -euo pipefail
K8S=1.33.13
KWOK=0.8.0
KARPENTER=1.6.4  # (testcluster/karpenter.py names the same)
KEDA=2.16.1  # (testcluster/keda.py names the same)
CACHE="${HTA_K8S_CACHE:-/var/cache/hta-k8s}"
BIN="$CACHE/bin"
say() { echo "[build] $*" >&2; }

if ! command -v etcd >/dev/null; then
  say "installing etcd-server"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq etcd-server >/dev/null
fi
if ! command -v go >/dev/null; then
  [ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin" || { say "Go is needed to build the control plane"; exit 1; }
fi
export GOMODCACHE="$CACHE/gomodcache" GOCACHE="$CACHE/gocache" GOBIN="$BIN" GOFLAGS=-buildvcs=false

# Karpenter's kwok cloud provider (cluster up --node-autoscaler karpenter): its own stamp, so
# adding it to a warm cache does not rebuild the control plane (about 2 minutes over that cache)
build_karpenter() {
  local kstamp="$BIN/.karpenter" kwant="karpenter=$KARPENTER"
  if [ -f "$kstamp" ] && [ "$(cat "$kstamp")" = "$kwant" ] && [ -x "$BIN/karpenter-kwok" ]; then
    return 0
  fi
  mkdir -p "$BIN" "$CACHE/build-karpenter"
  cd "$CACHE/build-karpenter"
  printf 'module htakarpenter\n\ngo 1.26\n\nrequire sigs.k8s.io/karpenter v%s\n' "$KARPENTER" > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/karpenter/kwok"\n' > tools.go
  say "building Karpenter v$KARPENTER (kwok provider)"
  go mod tidy >/dev/null 2>&1
  go build -ldflags "-s -w" -o "$BIN/karpenter-kwok" sigs.k8s.io/karpenter/kwok
  echo "$kwant" > "$kstamp"
}

# KEDA's operator (cluster up --keda): its module pins client-go and others with replace
# directives, which a module that requires it must repeat (go build ignores a dependency's
# replaces); they are copied from its go.mod. About 6 minutes over the control plane's cache.
build_keda() {
  local kstamp="$BIN/.keda" kwant="keda=$KEDA"
  if [ -f "$kstamp" ] && [ "$(cat "$kstamp")" = "$kwant" ] && [ -x "$BIN/keda-operator" ]; then
    return 0
  fi
  mkdir -p "$BIN" "$CACHE/build-keda"
  cd "$CACHE/build-keda"
  say "building KEDA v$KEDA (operator)"
  local gomod
  gomod=$(go mod download -json "github.com/kedacore/keda/v2@v$KEDA" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
  { printf 'module htakeda\n\ngo 1.23.4\n\nrequire github.com/kedacore/keda/v2 v%s\n\n' "$KEDA"
    awk '/^replace \(/{p=1} p{print} /^\)/{p=0}' "$gomod"; } > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/kedacore/keda/v2/cmd/operator"\n' > tools.go
  go mod tidy >/dev/null 2>&1
  go build -ldflags "-s -w" -o "$BIN/keda-operator" github.com/kedacore/keda/v2/cmd/operator
  echo "$kwant" > "$kstamp"
}

stamp="$BIN/.versions"
want="k8s=$K8S kwok=$KWOK kubelet"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  build_karpenter
  build_keda
  exit 0
fi
mkdir -p "$BIN" "$CACHE/build"
cd "$CACHE/build"
staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider cluster-bootstrap
code-generator component-base component-helpers controller-manager cri-api cri-client csi-translation-lib
dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy
kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission sample-apiserver sample-cli-plugin
sample-controller"
{
  printf 'module htak8sbuild\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S"
  for m in $staging; do printf '\tk8s.io/%s => k8s.io/%s v0.%s\n' "$m" "$m" "${K8S#1.}"; done
  printf ')\n'
} > go.mod
printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler"\n\t_ "k8s.io/kubernetes/cmd/kubelet"\n)\n' > tools.go
say "resolving k8s.io/kubernetes v$K8S modules"
go mod tidy >/dev/null 2>&1
pkg=k8s.io/component-base/version
cpkg=k8s.io/client-go/pkg/version
minor=$(echo "$K8S" | cut -d. -f2)
ldf="-s -w -X $pkg.gitVersion=v$K8S -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $cpkg.gitVersion=v$K8S -X $cpkg.gitMajor=1 -X $cpkg.gitMinor=$minor"
for c in kube-apiserver kube-scheduler kube-controller-manager kubelet; do
  if [ ! -x "$BIN/$c" ]; then
    say "building $c"
    go build -ldflags "$ldf" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c"
  fi
done
if [ ! -x "$BIN/kwok" ]; then
  say "building kwok v$KWOK"
  go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK"
fi
echo "$want" > "$stamp"
build_karpenter
build_keda
say "ready in $BIN"
