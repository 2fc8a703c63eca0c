# shellcheck shell=bash
# Rootful Podman with a Docker-compatible API socket, for the container tests.
#
# Source it from .ci/run after the project is installed (`pip install -e .`): it installs Podman on a
# fresh Debian 12 machine (as root), writes this machine kind's engine settings, starts
# `podman system service`, builds the local test image without any registry, and exports
#   DOCKER_HOST            unix socket of the API
#   PODMAN_SERVICE_PID     the service; `outpost_podman_teardown` (defined here) removes outpost
#                          containers by label and stops it: call it when the run is done
#   OUTPOST_TEST_IMAGE     the image the container tests run in (python3 + git)
# Running it again is cheap: packages, config, image and a live service are reused.
#
# The engine settings below are specific to CI machines of this kind (no CAP_SYS_RESOURCE, hybrid
# cgroup v1/v2, no systemd); they belong here, never in the product. Each one's reason is in the
# comment beside it.
#
# Environment knobs: PODMAN_SOCKET (default /tmp/podman.sock), STORAGE_DRIVER (overlay | vfs),
# OUTPOST_PYTHON (the interpreter with outpost_tui installed; default: the repo's .venv, then python3),
# WITH_DEBIAN_IMAGE=1 (also build local/debian-dev:bookworm with debootstrap, about 70 s).

_outpost_ci_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

_outpost_podman_setup() (
  set -euo pipefail
  export DEBIAN_FRONTEND=noninteractive
  local sock=${PODMAN_SOCKET:-/tmp/podman.sock}
  local driver=${STORAGE_DRIVER:-overlay}
  local image=${OUTPOST_TEST_IMAGE:-local/outpost-sample:latest}
  local repo; repo=$(dirname "$_outpost_ci_dir")
  local python=${OUTPOST_PYTHON:-}
  if [ -z "$python" ]; then
    if [ -x "$repo/.venv/bin/python" ]; then python=$repo/.venv/bin/python; else python=python3; fi
  fi
  local started; started=$(date +%s%N)
  local step=$started
  _ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
  _lap() { printf 'podman-setup: %-32s %6d ms\n' "$1" "$(_ms "$step")"; step=$(date +%s%N); }

  # 1. packages: podman and runc (crun 1.8 rejects this hybrid cgroup host); python3 and git are
  #    what the test image is assembled from
  local missing=()
  for pkg in podman runc uidmap fuse-overlayfs slirp4netns catatonit python3 git; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  _lap "packages (${#missing[@]} missing)"

  # 2. engine settings: runc, cgroupfs, file events; ulimits this process may set (podman's
  #    defaults exceed the hard limits without CAP_SYS_RESOURCE); exit_command_delay, otherwise
  #    every API exec leaves two conmon processes alive for 300 s
  local nofile nproc
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  if [ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ]; then nofile=1048576; fi
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
  mkdir -p /etc/containers
  cat > /etc/containers/containers.conf.new <<EOF
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=${nproc}:${nproc}"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
exit_command_delay = 5
EOF
  mv /etc/containers/containers.conf.new /etc/containers/containers.conf
  local current_driver=""
  if [ -f /etc/containers/storage.conf ]; then
    current_driver=$(awk -F'"' '/^driver/{print $2; exit}' /etc/containers/storage.conf)
  fi
  if [ -n "$current_driver" ] && [ "$current_driver" != "$driver" ]; then
    # images stored by another driver would silently vanish; start from an empty store instead
    _outpost_stop_service "$sock"
    podman system reset -f >/dev/null 2>&1 || true
  fi
  cat > /etc/containers/storage.conf <<EOF
[storage]
driver = "${driver}"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
EOF
  _lap "engine settings"

  # 3. the Docker-compatible API, reused when a live one already answers on the socket
  local pidfile=$sock.pid
  if ! { [ -S "$sock" ] && [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null \
         && podman --url "unix://$sock" version >/dev/null 2>&1; }; then
    _outpost_stop_service "$sock"
    rm -f "$sock"
    # setsid: the service must outlive this subshell and not share the caller's process group
    setsid podman system service --time=0 "unix://$sock" >/tmp/podman-service.log 2>&1 < /dev/null &
    echo $! > "$pidfile"
    local i
    for i in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -S "$sock" ] || { echo "podman-setup: the API did not start; see /tmp/podman-service.log" >&2; exit 1; }
  fi
  _lap "API service"

  # 4. the test image, assembled by the product itself from this machine's python3 + git
  if ! podman image exists "$image"; then
    DOCKER_HOST="unix://$sock" "$python" -m outpost_tui.cli image build --tag "$image"
  fi
  _lap "image $image"

  # 5. optional: a Debian image with git + python3, through the root filesystem archive path
  if [ "${WITH_DEBIAN_IMAGE:-0}" = 1 ] && ! podman image exists local/debian-dev:bookworm; then
    dpkg-query -W -f='${Status}' debootstrap 2>/dev/null | grep -q 'install ok installed' \
      || apt-get install -y -qq debootstrap >/dev/null
    local d mirror
    d=$(mktemp -d)
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list)
    debootstrap --variant=minbase --include=git,python3,ca-certificates bookworm "$d/root" "$mirror" >/dev/null
    rm -rf "$d"/root/var/cache/apt/archives/*.deb "$d"/root/var/lib/apt/lists/*
    tar -C "$d/root" -cf "$d/root.tar" .
    DOCKER_HOST="unix://$sock" "$python" -m outpost_tui.cli image build --tag local/debian-dev:bookworm \
      --from-rootfs "$d/root.tar"
    rm -rf "$d"
    _lap "image local/debian-dev:bookworm"
  fi
  printf 'podman-setup: %-32s %6d ms\n' "total" "$(_ms "$started")"
)

_outpost_stop_service() {
  local pidfile=$1.pid pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  # only the service this script started, identified by its pid file and command line
  if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'system service'; then
    kill "$pid" 2>/dev/null || true
    local i
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  fi
  rm -f "$pidfile"
}

# not called as a condition: that would switch off `set -e` inside the function
_outpost_podman_setup
if [ $? = 0 ]; then
  DOCKER_HOST="unix://${PODMAN_SOCKET:-/tmp/podman.sock}"
  PODMAN_SERVICE_PID=$(cat "${PODMAN_SOCKET:-/tmp/podman.sock}.pid")
  OUTPOST_TEST_IMAGE=${OUTPOST_TEST_IMAGE:-local/outpost-sample:latest}
  export DOCKER_HOST PODMAN_SERVICE_PID OUTPOST_TEST_IMAGE
  echo "podman-setup: API at $DOCKER_HOST (pid $PODMAN_SERVICE_PID), test image $OUTPOST_TEST_IMAGE"
else
  echo "podman-setup: failed" >&2
  return 1 2>/dev/null || exit 1
fi

# Call at the end of the CI run: removes every outpost-tui container (by label), then stops the
# service this script started (by its pid file).
outpost_podman_teardown() {
  local sock=${PODMAN_SOCKET:-/tmp/podman.sock} ids
  ids=$(podman ps -aq --filter label=outpost.race 2>/dev/null || true)
  [ -z "$ids" ] || podman rm -f $ids >/dev/null 2>&1 || true
  _outpost_stop_service "$sock"
}
