"""The shell scripts the container sandbox runs inside each container: the wrapper every command
runs under, and the stopper that ends a command's processes however they detached."""

from __future__ import annotations

# Seconds between TERM and KILL to a cancelled command's process group (outpost uses 500 ms).
KILL_GRACE = 0.5


# Seconds to wait for a stopped command's output to end once its processes are confirmed gone;
# after that the stream is abandoned (the container's removal ends it).
STREAM_GRACE = 0.5


# Stdin up to this many bytes of text (UTF-8, no NUL) travels in the exec's own request, as a
# variable the wrapper writes to the stdin file: the kernel takes up to 128 KiB in one.
STDIN_IN_REQUEST = 64 * 1024


# Seconds a command may outlive its timeout inside the container before the backstop stops it.
BACKSTOP_MARGIN = 5.0


MARKER = "outpost-sandbox:"


# Stops every process of the container but its init (pid 1), its keep-alive (the oldest other
# process: nothing a command starts can be older) and itself, and confirms they are gone. One
# command runs in a container at a time, so these are the command's processes however they
# detached (a new session, a double fork, closed output): a process group or a closed output
# stream says nothing about them. $1 pid file to wait for ("" none: cancellation can arrive while
# the command is still starting), $2 ticks of 50 ms to wait after TERM before KILL (0: KILL at
# once), $3 a pid to spare and $4 "roots" to spare every process started by an exec (parent
# outside the container, so pid 0; what a command starts has a parent inside): the wrapper
# sweeping after its command spares itself and a stopper the host may be running. Prints what it
# took: none, term or kill; exits 5 naming what it could not stop. TERM is ignored: it must outlive
# its own stop. (No single quote in here: the wrapper quotes it.)
STOPPER = """\
trap "" TERM
f=$1 ticks=$2 spare=${3:-} roots=${4:-}
if [ -n "$f" ]; then n=0; while [ ! -s "$f" ] && [ $n -lt 40 ]; do n=$((n+1)); sleep 0.05; done; fi
others() {
  all= keep= oldest=
  for d in /proc/[0-9]*; do
    q=${d#/proc/}
    [ "$q" = 1 ] || [ "$q" = $$ ] || [ "$q" = "$spare" ] && continue
    read -r l 2>/dev/null < "$d/stat" || continue
    set -- ${l##*) }
    [ "$1" = Z ] && continue
    [ -n "$roots" ] && [ "$2" = 0 ] && continue
    all="$all $q"
    if [ -z "$oldest" ] || [ "${20}" -lt "$oldest" ]; then oldest=${20} keep=$q; fi
  done
  procs=
  for q in $all; do [ "$q" != "$keep" ] && procs="$procs $q"; done
}
others
[ -z "$procs" ] && { echo none; exit 0; }
if [ "$ticks" -gt 0 ]; then
  kill -s TERM $procs 2>/dev/null
  n=0
  while [ $n -lt "$ticks" ]; do
    sleep 0.05; n=$((n+1)); others
    [ -z "$procs" ] && { echo term; exit 0; }
  done
fi
n=0
while [ $n -lt 100 ]; do
  kill -s KILL $procs 2>/dev/null
  others
  [ -z "$procs" ] && { echo kill; exit 0; }
  sleep 0.05; n=$((n+1))
done
echo "still running after KILL:$procs"
exit 5
"""


# $1 pid file, $2 stdin file or "", $3 deadline in seconds or "", then argv; $OUTPOST_RUN is this script;
# $OUTPOST_STDIN, when set, is what the stdin file is to hold (written here, sparing an upload; the host
# puts it there itself when it is not text that fits in a variable). $OUTPOST_GITCONFIG, set for a
# container's first command only, is the operator's git identity for its empty home (an upload per container
# before; an image without a writable /tmp goes without, and commits then need the repository's identity).
# The deadline is a backstop inside the container for when the coordinator that times commands out is gone
# (its containers outlive it until recovery): the stopper, which ignores TERM, so that it lives to send
# KILL. The wrapper leads the command's process group (runc makes every exec a session leader; elsewhere it
# re-executes itself under setsid) and records it, so that the stopper can wait until the command has
# started. It checks that the program exists (one clear error instead of a shell message that differs
# between images), unlinks the stdin file once open, runs the command, then kills whatever the command left
# running, in its group or not, so nothing an agent started in the background survives into validation. It
# outlives a TERM (a handler, which the command does not inherit, unlike an ignored signal) to report how
# the command ended: 128+15 when TERM ended it, 128+9 when it had to be KILLed.
WRAPPER = f"""\
p=$1 i=$2 t=$3; shift 3
stop='{STOPPER}'
pg() {{ g=; read -r l 2>/dev/null < "/proc/$1/stat" || return 1; set -- ${{l##*) }}; g=$3; }}
if pg $$ && [ "$g" != $$ ] && command -v setsid >/dev/null 2>&1; then
  exec setsid sh -c "$OUTPOST_RUN" "$0" "$p" "$i" "$t" "$@"
fi
unset OUTPOST_RUN
if [ -n "${{OUTPOST_STDIN+x}}" ]; then (umask 077; printf %s "$OUTPOST_STDIN" > "$i") || exit 125; fi
unset OUTPOST_STDIN
if [ -n "${{OUTPOST_GITCONFIG:-}}" ]; then
  (umask 077; printf %s "$OUTPOST_GITCONFIG" > /tmp/.gitconfig) 2>/dev/null
fi
unset OUTPOST_GITCONFIG
trap : TERM
echo $$ > "$p" || exit 125
case $1 in
  */*) [ -f "$1" ] || {{ echo "{MARKER} program not found: $1" >&2; exit 127; }}
       [ -x "$1" ] || {{ echo "{MARKER} program not executable: $1" >&2; exit 126; }} ;;
  *) command -v "$1" >/dev/null 2>&1 || {{ echo "{MARKER} program not found: $1" >&2; exit 127; }} ;;
esac
if [ -n "$i" ]; then exec 3< "$i"; rm -f "$i"; else exec 3< /dev/null; fi
if [ -n "$t" ]; then
  (sleep "$t"; exec sh -c "$stop" outpost-stop "" 20) </dev/null >/dev/null 2>&1 &
fi
"$@" 0<&3 3<&-
s=$?
sh -c "$stop" outpost-stop "" 0 $$ roots </dev/null >/dev/null 2>&1
exit $s
"""
