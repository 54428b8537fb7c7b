#!/usr/bin/env bash
# The rsh agent mpirun uses in multihost.sh (--mca plm_rsh_agent): called as
#   netns-agent.sh HOST COMMAND WORDS...
# like ssh, it runs COMMAND on HOST, where HOST is one of the addresses in
# ULYSSES_MH_HOSTS ("ADDRESS=NETNS=HOSTNAME ..."). The command runs in that
# network namespace, with its own hostname (UTS namespace) and a private
# /dev/shm (mount namespace + tmpfs), as a process on a separate machine would.
set -euo pipefail
host="$1"
shift
for entry in ${ULYSSES_MH_HOSTS:?ULYSSES_MH_HOSTS is not set}; do
  IFS== read -r address netns name <<<"$entry"
  if [[ "$host" == "$address" || "$host" == "$name" ]]; then
    # ssh joins the words and lets the remote shell parse them: do the same.
    exec ip netns exec "$netns" unshare --uts --mount --propagation private \
      sh -c 'hostname "$1" && mount -t tmpfs -o size=1g tmpfs /dev/shm && exec sh -c "$2"' netns-agent "$name" "$*"
  fi
done
echo "netns-agent: unknown host '$host' (known: ${ULYSSES_MH_HOSTS})" >&2
exit 255
