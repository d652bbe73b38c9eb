#!/usr/bin/env bash
# Build the worker image without a registry, cached outside git.
#
#   1. a debootstrap bookworm (minbase) rootfs committed as the local base image
#      localhost/hta-base:bookworm — once;
#   2. the build context: the hta wheel and the worker's runtime wheels, made
#      with the project's pip (which knows this machine's index and CA);
#   3. k8s/image/Dockerfile built on the base with `buildah bud --pull=never`,
#      exported as an OCI archive: $HTA_IMAGE_CACHE/hta-worker.oci.tar.
#      Steps 2-3 rerun only when the Dockerfile or the package sources change.
# `build.sh controller` builds HTA's own image (Dockerfile.controller: makeflow
# and the whole package) the same way, as localhost/hta:latest; `build.sh pause`
# the pause image the test cluster's real node needs (k8s/image/pause.c, static).
#
# Container tools are configured through files in the cache (runc, cgroupfs,
# vfs storage, file events), not through /etc. Prints the archive's path last.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${HTA_IMAGE_CACHE:-/var/cache/hta-image}"
PY="${HTA_PYTHON:-$root/.venv/bin/python}"
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
         | awk '{print $2}' | grep -E '/debian/?$' | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}

if ! buildah inspect --type image localhost/hta-base:bookworm >/dev/null 2>&1; then
  t0=$(date +%s)
  say "debootstrap bookworm from $mirror (once, about a minute)"
  rm -rf "$CACHE/rootfs"
  debootstrap --variant=minbase bookworm "$CACHE/rootfs" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
    || { say "debootstrap failed: see $CACHE/debootstrap.log"; exit 1; }
  rm -rf "$CACHE/rootfs/var/cache/apt/archives/"*.deb "$CACHE/rootfs/var/lib/apt/lists/"*
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  cp -a "$CACHE/rootfs/." "$mnt/"
  buildah umount "$ctr" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$ctr"
  buildah commit --quiet "$ctr" localhost/hta-base:bookworm >/dev/null
  buildah rm "$ctr" >/dev/null
  rm -rf "$CACHE/rootfs"
  say "base image localhost/hta-base:bookworm ready in $(( $(date +%s) - t0 )) s"
fi

if [ "${1:-}" = pause ]; then  # the real test node's sandbox image: one static binary
  archive="$CACHE/pause.oci.tar"
  if [ ! -f "$archive" ] || [ "$root/k8s/image/pause.c" -nt "$archive" ]; then
    gcc -static -Os -o "$CACHE/pause" "$root/k8s/image/pause.c" && strip "$CACHE/pause"
    ctr=$(buildah from scratch)
    buildah copy --quiet "$ctr" "$CACHE/pause" /pause >/dev/null
    buildah config --entrypoint '["/pause"]' "$ctr"
    buildah commit --quiet "$ctr" localhost/pause:3.10 >/dev/null
    buildah rm "$ctr" >/dev/null
    rm -f "$archive"
    buildah push --quiet localhost/pause:3.10 "oci-archive:$archive:localhost/pause:3.10" >/dev/null
    say "pause image built: $archive"
  fi
  echo "$archive"
  exit 0
fi

# the worker image (default) or, with `controller`, HTA's own image (Dockerfile.controller)
target="${1:-worker}"
case "$target" in
  worker) image=localhost/hta-worker:latest; dockerfile=k8s/image/Dockerfile ;;
  controller) image=localhost/hta:latest; dockerfile=k8s/image/Dockerfile.controller ;;
  *) say "unknown target '$target': use worker, controller or pause"; exit 2 ;;
esac
cd "$root"
inputs=$( (cat "$dockerfile" setup.cfg pyproject.toml
          find hta workqueue_bridge resource_monitor k8s -name '*.py' -not -path '*/__pycache__/*' \
               | sort | xargs cat) \
         | sha256sum | cut -d' ' -f1)
archive="$CACHE/${image#localhost/}"; archive="${archive%:latest}.oci.tar"
if [ -f "$archive" ] && [ "$(cat "$archive.inputs" 2>/dev/null)" = "$inputs" ] \
   && buildah inspect --type image "$image" >/dev/null 2>&1; then
  say "$image up to date"
  echo "$archive"
  exit 0
fi

t1=$(date +%s)
ctx="$CACHE/context-$target"
rm -rf "$ctx" && mkdir -p "$ctx/wheels" "$ctx/src"
# the wheel is built from a copy: setuptools leaves build/ where it builds
tar -C "$root" --exclude=__pycache__ -c setup.cfg pyproject.toml README.md hta workqueue_bridge resource_monitor k8s \
  | tar -C "$ctx/src" -x
if [ "$target" = worker ]; then  # hta alone, and the two packages the worker path imports
  "$PY" -m pip wheel --quiet --no-deps -w "$ctx/wheels" "$ctx/src" >/dev/null
  "$PY" -m pip download --quiet --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
    -d "$ctx/wheels" 'pydantic>=2.5,<3' 'psutil>=5.9' >/dev/null
else  # hta and every dependency
  "$PY" -m pip wheel --quiet --prefer-binary -w "$ctx/wheels" "$ctx/src" >/dev/null
fi
rm -rf "$ctx/src"
say "building $image on the local base"
buildah bud --quiet --pull=never --layers=false --build-arg BASE=localhost/hta-base:bookworm \
  -t "$image" -f "$dockerfile" "$ctx" >"$CACHE/build-$target.log" 2>&1 \
  || { tail -20 "$CACHE/build-$target.log" >&2; say "build failed: see $CACHE/build-$target.log"; exit 1; }
rm -f "$archive"
buildah push --quiet "$image" "oci-archive:$archive:$image" >/dev/null
echo "$inputs" > "$archive.inputs"
buildah rmi --prune >/dev/null 2>&1 || true
say "built in $(( $(date +%s) - t1 )) s: $archive ($(du -h "$archive" | cut -f1))"
echo "$archive"
