#!/usr/bin/env bash
# DRAFT (issue 7, not yet run): written from the reference recipe, untested here.
# Builds the worker image without a registry, cached outside git:
#   1. a debootstrap bookworm rootfs committed as the local base image
#      localhost/hta-base:bookworm (once);
#   2. k8s/image/Dockerfile built on it with `buildah bud --pull=never`
#      (rebuilt only when the Dockerfile or the package sources change);
#   3. exported as an OCI archive: $HTA_IMAGE_CACHE/hta-worker.oci.tar.
# Container tools are configured through files in the cache (runc, cgroupfs,
# vfs storage, file events), not through /etc.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${HTA_IMAGE_CACHE:-/var/cache/hta-image}"
say() { echo "[image] $*" >&2; }
mkdir -p "$CACHE"

need=()
for p in debootstrap buildah runc; do command -v "$p" >/dev/null || need+=("$p"); done
if ((${#need[@]})); then
  say "installing ${need[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

cat > "$CACHE/containers.conf" <<CONF
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
CONF
cat > "$CACHE/storage.conf" <<CONF
[storage]
driver = "vfs"
runroot = "$CACHE/run"
graphroot = "$CACHE/storage"
CONF
export CONTAINERS_CONF="$CACHE/containers.conf" CONTAINERS_STORAGE_CONF="$CACHE/storage.conf"
export BUILDAH_ISOLATION=chroot

mirror=$(grep -rhoE '^(deb|URIs:) +https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
         | awk '{print $2}' | grep -v security | head -1)
mirror=${mirror:-http://deb.debian.org/debian}

t0=$(date +%s)
if ! buildah images --quiet localhost/hta-base:bookworm >/dev/null 2>&1; then
  say "debootstrap bookworm from $mirror"
  rm -rf "$CACHE/rootfs"
  debootstrap --variant=minbase bookworm "$CACHE/rootfs" "$mirror" >/dev/null
  rm -rf "$CACHE/rootfs/var/cache/apt/archives/"*.deb "$CACHE/rootfs/var/lib/apt/lists/"*
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  cp -a "$CACHE/rootfs/." "$mnt/"
  buildah umount "$ctr" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  buildah commit --quiet "$ctr" localhost/hta-base:bookworm >/dev/null
  buildah rm "$ctr" >/dev/null
  rm -rf "$CACHE/rootfs"
  say "base image ready ($(( $(date +%s) - t0 )) s)"
fi

cd "$root"
inputs=$(cat k8s/image/Dockerfile setup.cfg pyproject.toml README.md \
         $(git ls-files hta workqueue_bridge resource_monitor k8s 2>/dev/null || find hta workqueue_bridge resource_monitor k8s -name '*.py') \
         | sha256sum | cut -d' ' -f1)
if [ -f "$CACHE/hta-worker.oci.tar" ] && [ "$(cat "$CACHE/inputs" 2>/dev/null)" = "$inputs" ]; then
  say "hta-worker image up to date: $CACHE/hta-worker.oci.tar"
  exit 0
fi
t1=$(date +%s)
say "building hta-worker:latest"
buildah bud --quiet --pull=never --layers=false --build-arg BASE=localhost/hta-base:bookworm \
  -t localhost/hta-worker:latest -f k8s/image/Dockerfile . >/dev/null
rm -f "$CACHE/hta-worker.oci.tar"
buildah push --quiet localhost/hta-worker:latest "oci-archive:$CACHE/hta-worker.oci.tar:hta-worker:latest" >/dev/null
echo "$inputs" > "$CACHE/inputs"
say "built in $(( $(date +%s) - t1 )) s: $CACHE/hta-worker.oci.tar ($(du -h "$CACHE/hta-worker.oci.tar" | cut -f1))"
