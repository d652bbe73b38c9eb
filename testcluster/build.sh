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

# build_tool NAME VERSION MODULE PACKAGE BINARY [copy-replaces]: a Go program from its module
# at VERSION into $BIN/BINARY, under a stamp of its own, so adding it to a warm cache rebuilds
# nothing else. copy-replaces repeats the module's own replace directives in the wrapper module
# (go build ignores a dependency's). Karpenter's kwok cloud provider (cluster up
# --node-autoscaler karpenter): about 2 minutes over the control plane's cache; KEDA's
# operator (cluster up --keda), whose module pins client-go and others by replaces: about 6.
build_tool() {
  local name=$1 version=$2 module=$3 pkg=$4 binary=$5 stamp="$BIN/.$1" want="$1=$2"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$BIN/$binary" ]; then
    return 0
  fi
  mkdir -p "$BIN" "$CACHE/build-$name"
  cd "$CACHE/build-$name"
  say "building $name v$version ($pkg)"
  { printf 'module hta%s\n\ngo 1.23.4\n\nrequire %s v%s\n\n' "$name" "$module" "$version"
    if [ "${6:-}" = copy-replaces ]; then
      awk '/^replace \(/{p=1} p{print} /^\)/{p=0}' \
        "$(go mod download -json "$module@v$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')"
    fi; } > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" > tools.go
  go mod tidy >/dev/null 2>&1  # (it raises the go line to what the module needs)
  go build -ldflags "-s -w" -o "$BIN/$binary" "$pkg"
  echo "$want" > "$stamp"
}

build_autoscalers() {
  build_tool karpenter "$KARPENTER" sigs.k8s.io/karpenter sigs.k8s.io/karpenter/kwok karpenter-kwok
  build_tool keda "$KEDA" github.com/kedacore/keda/v2 github.com/kedacore/keda/v2/cmd/operator keda-operator \
    copy-replaces
}

stamp="$BIN/.versions"
want="k8s=$K8S kwok=$KWOK kubelet"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  build_autoscalers
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
build_autoscalers
say "ready in $BIN"
