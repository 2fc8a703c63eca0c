# shellcheck shell=bash
# Rootless Podman and rootless Docker for the rootless-engine tests (tests/containers/
# test_rootless.py), on a fresh Debian 12 machine, as root.
#
# Source it from .ci/run after .ci/podman-setup.sh (whose rootful engine holds the test image): it
# creates an unprivileged user with subordinate uid and gid ranges, gives it a runtime directory,
# starts, as that user, `podman system service` on $XDG_RUNTIME_DIR/podman/podman.sock and rootless
# dockerd (rootlesskit) on $XDG_RUNTIME_DIR/docker.sock (where outpost-tui's discovery looks),
# copies the test image into each one's storage (no registry), and exports
#   OUTPOST_ROOTLESS_USER     the user (outpost-rootless unless set)
#   OUTPOST_ROOTLESS_SOCKET   its Podman's socket
# The tests run outpost-tui as that user (runuser) against those engines. Running it again is
# cheap: the user, its ranges, its images and live services are reused. `outpost_rootless_teardown`
# stops the services this script started.
#
# Machine-kind settings, never the product's: rootless dockerd runs in the host's network namespace
# without iptables or a bridge (the tests' containers have no network; a tap device and NAT rules
# need /dev/net/tun and netfilter rights a CI machine may not give), cgroupfs as the rootful one.

_outpost_rootless_setup() (
  set -euo pipefail
  export DEBIAN_FRONTEND=noninteractive
  local user=${OUTPOST_ROOTLESS_USER:-outpost-rootless}
  local image=${OUTPOST_TEST_IMAGE:-local/outpost-sample:latest}
  local rootful=${DOCKER_HOST:-unix:///tmp/podman.sock}

  # newuidmap/newgidmap (uidmap) map the subordinate ranges; slirp4netns is rootless networking
  local missing=()
  for pkg in podman uidmap slirp4netns fuse-overlayfs docker.io rootlesskit; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi

  id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/sh "$user"
  # a range of 65536 ids of its own, after every range already given out
  local file next
  for file in /etc/subuid /etc/subgid; do
    touch "$file"
    if ! grep -q "^$user:" "$file"; then
      next=$(awk -F: 'BEGIN{n=100000} {if ($2+$3>n) n=$2+$3} END{print n}' "$file")
      echo "$user:$next:65536" >> "$file"
    fi
  done
  local uid home runtime
  uid=$(id -u "$user"); home=$(getent passwd "$user" | cut -d: -f6)
  runtime=/run/user/$uid
  install -d -m 700 -o "$user" -g "$(id -g "$user")" "$runtime"
  local as_user=(runuser -u "$user" -- env -i "HOME=$home" "XDG_RUNTIME_DIR=$runtime"
                 "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
  # (the user's own working directory: runuser keeps root's, which it may not read)
  cd /

  local sock=$runtime/podman/podman.sock
  if ! "${as_user[@]}" podman --url "unix://$sock" version >/dev/null 2>&1; then
    rm -f "$sock"
    # setsid: a session (and process group) of its own, which the teardown stops by its pid file
    setsid "${as_user[@]}" podman system service --time=0 >/tmp/podman-rootless-service.log 2>&1 </dev/null &
    echo $! > /tmp/podman-rootless-service.pid
    local i
    for i in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -S "$sock" ] || { echo "rootless-podman-setup: the API did not start; see /tmp/podman-rootless-service.log" >&2; exit 1; }
  fi
  if ! "${as_user[@]}" podman image exists "$image"; then
    podman --url "$rootful" save "$image" | "${as_user[@]}" podman load >/dev/null
  fi
  echo "rootless-podman-setup: $user (uid $uid) runs Podman at unix://$sock with $image"

  local dsock=$runtime/docker.sock
  local docker=("${as_user[@]}" docker -H "unix://$dsock")
  if ! "${docker[@]}" version >/dev/null 2>&1; then
    rm -f "$dsock"
    setsid "${as_user[@]}" DOCKERD_ROOTLESS_ROOTLESSKIT_NET=host DOCKERD_ROOTLESS_ROOTLESSKIT_PORT_DRIVER=none \
      PATH=/usr/share/docker.io/contrib:/usr/sbin:/usr/bin:/sbin:/bin \
      dockerd-rootless.sh --storage-driver overlay2 --exec-opt native.cgroupdriver=cgroupfs \
      --iptables=false --ip6tables=false --bridge=none \
      >/tmp/dockerd-rootless.log 2>&1 </dev/null &
    echo $! > /tmp/dockerd-rootless.pid
    local i
    for i in $(seq 120); do "${docker[@]}" version >/dev/null 2>&1 && break; sleep 0.5; done
    "${docker[@]}" version >/dev/null 2>&1 \
      || { echo "rootless-podman-setup: rootless dockerd did not start; see /tmp/dockerd-rootless.log" >&2; exit 1; }
  fi
  if ! "${docker[@]}" image inspect "$image" >/dev/null 2>&1; then
    podman --url "$rootful" save "$image" | "${docker[@]}" load >/dev/null
  fi
  echo "rootless-podman-setup: $user (uid $uid) runs rootless Docker at unix://$dsock with $image"
)

_outpost_rootless_setup
if [ $? = 0 ]; then
  OUTPOST_ROOTLESS_USER=${OUTPOST_ROOTLESS_USER:-outpost-rootless}
  OUTPOST_ROOTLESS_SOCKET=/run/user/$(id -u "$OUTPOST_ROOTLESS_USER")/podman/podman.sock
  export OUTPOST_ROOTLESS_USER OUTPOST_ROOTLESS_SOCKET
else
  echo "rootless-podman-setup: failed" >&2
  return 1 2>/dev/null || exit 1
fi

# Removes outpost-tui's containers in the user's engine and stops the service this script started
# (its process group, by the pid file).
outpost_rootless_teardown() {
  local user=${OUTPOST_ROOTLESS_USER:-outpost-rootless} uid
  uid=$(id -u "$user" 2>/dev/null) || return 0
  runuser -u "$user" -- env -i HOME="$(getent passwd "$user" | cut -d: -f6)" \
    XDG_RUNTIME_DIR="/run/user/$uid" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    sh -c 'ids=$(podman ps -aq --filter label=outpost.race); [ -z "$ids" ] || podman rm -f $ids' \
    >/dev/null 2>&1 || true
  local pidfile pid
  for pidfile in /tmp/podman-rootless-service.pid /tmp/dockerd-rootless.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    # the session setsid gave it: runuser, the service and what it started
    if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q 'runuser'; then
      kill -- -"$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
}
