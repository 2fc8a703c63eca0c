# shellcheck shell=bash
# Docker Engine (Debian's docker.io) with its own socket, for running the container tests a second
# time: "Docker or Podman" is then tested, not assumed.
#
# Source it from .ci/run after the project is installed (`pip install -e .`): it installs docker.io
# on a fresh Debian 12 machine (as root), starts `dockerd` with a socket, data root and exec root of
# its own (so it shares nothing with another engine on the machine), builds the local test image into
# it without any registry, and exports
#   OUTPOST_DOCKER_HOST    unix socket of this engine's API (DOCKER_HOST is left alone: the caller
#                          points the container tests at it, e.g. DOCKER_HOST=$OUTPOST_DOCKER_HOST)
#   DOCKERD_PID            the daemon; `outpost_docker_teardown` (defined here) removes outpost
#                          containers by label and stops it: call it when the run is done
# Running it again is cheap: packages, image and a live daemon are reused.
#
# The daemon flags are specific to CI machines of this kind (hybrid cgroup v1/v2, no systemd):
# overlay2 storage and the cgroupfs driver. They belong here, never in the product.
#
# Environment knobs: DOCKER_SOCKET (default /tmp/outpost-docker.sock), DOCKER_ROOT (default
# /var/lib/outpost-docker: data root; the exec root is /run/outpost-docker), OUTPOST_TEST_IMAGE,
# OUTPOST_PYTHON (the interpreter with outpost_tui installed; default: the repo's .venv, then python3).

_outpost_docker_ci_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

_outpost_docker_setup() (
  set -euo pipefail
  export DEBIAN_FRONTEND=noninteractive
  local sock=${DOCKER_SOCKET:-/tmp/outpost-docker.sock}
  local root=${DOCKER_ROOT:-/var/lib/outpost-docker}
  local exec_root=/run/outpost-docker
  local image=${OUTPOST_TEST_IMAGE:-local/outpost-sample:latest}
  local repo; repo=$(dirname "$_outpost_docker_ci_dir")
  local python=${OUTPOST_PYTHON:-}
  if [ -z "$python" ]; then
    if [ -x "$repo/.venv/bin/python" ]; then python=$repo/.venv/bin/python; else python=python3; fi
  fi
  local started; started=$(date +%s%N)
  local step=$started
  _ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
  _lap() { printf 'docker-setup: %-32s %6d ms\n' "$1" "$(_ms "$step")"; step=$(date +%s%N); }

  # 1. packages: Debian's Docker Engine (it brings containerd, runc and tini)
  local missing=()
  for pkg in docker.io iptables python3 git; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  _lap "packages (${#missing[@]} missing)"

  # 2. the daemon, reused when a live one already answers on the socket. Its own data root, exec
  #    root and pid file: nothing is shared with a Docker or Podman already on the machine. Its
  #    containerd is started by dockerd itself under the exec root.
  local pidfile=$sock.pid
  if ! { [ -S "$sock" ] && [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null \
         && docker -H "unix://$sock" version >/dev/null 2>&1; }; then
    _outpost_stop_dockerd "$sock"
    rm -f "$sock"
    mkdir -p "$root" "$exec_root"
    # setsid: the daemon must outlive this subshell and not share the caller's process group
    setsid dockerd --host "unix://$sock" --data-root "$root" --exec-root "$exec_root" \
      --pidfile "$exec_root/dockerd.pid" --storage-driver overlay2 \
      --exec-opt native.cgroupdriver=cgroupfs \
      >/tmp/outpost-dockerd.log 2>&1 < /dev/null &
    echo $! > "$pidfile"
    local i
    for i in $(seq 400); do
      docker -H "unix://$sock" version >/dev/null 2>&1 && break
      kill -0 "$(cat "$pidfile")" 2>/dev/null || break
      sleep 0.05
    done
    docker -H "unix://$sock" version >/dev/null 2>&1 \
      || { echo "docker-setup: dockerd did not start; see /tmp/outpost-dockerd.log" >&2; exit 1; }
  fi
  _lap "dockerd"

  # 3. the test image, assembled by the product itself from this machine's python3 + git
  if ! docker -H "unix://$sock" image inspect "$image" >/dev/null 2>&1; then
    DOCKER_HOST="unix://$sock" "$python" -m outpost_tui.cli image build --tag "$image"
  fi
  _lap "image $image"
  printf 'docker-setup: %-32s %6d ms\n' "total" "$(_ms "$started")"
)

_outpost_stop_dockerd() {
  local pidfile=$1.pid pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  # only the daemon this script started, identified by its pid file and command line
  if kill -0 "$pid" 2>/dev/null && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "dockerd --host unix://$1"; then
    kill "$pid" 2>/dev/null || true
    local i
    for i in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  fi
  rm -f "$pidfile"
}

# not called as a condition: that would switch off `set -e` inside the function
_outpost_docker_setup
if [ $? = 0 ]; then
  OUTPOST_DOCKER_HOST="unix://${DOCKER_SOCKET:-/tmp/outpost-docker.sock}"
  DOCKERD_PID=$(cat "${DOCKER_SOCKET:-/tmp/outpost-docker.sock}.pid")
  export OUTPOST_DOCKER_HOST DOCKERD_PID
  echo "docker-setup: API at $OUTPOST_DOCKER_HOST (pid $DOCKERD_PID)"
else
  echo "docker-setup: failed" >&2
  return 1 2>/dev/null || exit 1
fi

# Call at the end of the CI run: removes every outpost-tui container (by label) from this engine,
# then stops the daemon this script started (by its pid file).
outpost_docker_teardown() {
  local sock=${DOCKER_SOCKET:-/tmp/outpost-docker.sock} ids
  ids=$(docker -H "unix://$sock" ps -aq --filter label=outpost.race 2>/dev/null || true)
  [ -z "$ids" ] || docker -H "unix://$sock" rm -f $ids >/dev/null 2>&1 || true
  _outpost_stop_dockerd "$sock"
}
