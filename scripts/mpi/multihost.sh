#!/usr/bin/env bash
# Runs the mpi backend across two "hosts" on one machine: two network
# namespaces joined by a veth pair (10.77.0.1 and 10.77.0.2), each with its
# own hostname and private /dev/shm, 2 ranks per host (-np 4). mpirun runs on
# host A and starts host B's daemon through netns-agent.sh, so ranks on the
# same host talk through shared memory and across hosts over TCP. Runs the
# mpi checks plus the shared conformance suite, then (if apps/trainer exists
# and --no-train is not given) a short ZeRO-3 training run with --backend mpi
# checked against the threads backend.
#
# Everything happens inside a private sandbox (unshare --net --mount): the
# namespaces, the veth pair and the mounts vanish with it, and a trap tears
# them down explicitly even when a step fails. Needs root (CI runs as root)
# and iproute2 + util-linux (ip, unshare). Exit status: that of the first
# failing step.
#
# ULYSSES_MH_QDISC, when set, shapes the link between the hosts both ways
# with that tc queueing discipline, as a slower network would (e.g. "tbf rate
# 1gbit burst 256kb latency 50ms": a 1 Gbit/s link).
#
# Usage: scripts/mpi/multihost.sh [--no-train]
# ULYSSES_MH_TRAIN_ARGS replaces the trainer flags (default: --sp 4 --zero 3 --layers 8
# --steps 4 --seq 64 --threads 1 --no-export --log-every 1, then the same on
# the threads backend and scripts/mpi/zero3-check.mjs comparing the two).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export ORT_DISABLE_TELEMETRY=1

if [[ "${ULYSSES_MH_SANDBOX:-}" != 1 ]]; then
  # Re-run inside a private network + mount namespace: nothing below touches
  # the machine's own interfaces, routes or mounts.
  exec env ULYSSES_MH_SANDBOX=1 unshare --net --mount --propagation private --fork "$0" "$@"
fi

train=1
[[ "${1:-}" == "--no-train" ]] && train=0

ns_a=ulysses-mh-a
ns_b=ulysses-mh-b
cleanup() {
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  umount /run/netns 2>/dev/null || true
}
trap cleanup EXIT

# /run/netns on a private tmpfs: the namespaces' bind mounts stay in the sandbox.
mkdir -p /run/netns
mount -t tmpfs tmpfs /run/netns
ip link set lo up
ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add veth-mh-a type veth peer name veth-mh-b
ip link set veth-mh-a netns "$ns_a"
ip link set veth-mh-b netns "$ns_b"
ip -n "$ns_a" addr add 10.77.0.1/24 dev veth-mh-a
ip -n "$ns_b" addr add 10.77.0.2/24 dev veth-mh-b
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set veth-mh-a up
ip -n "$ns_b" link set veth-mh-b up
if [[ -n "${ULYSSES_MH_QDISC:-}" ]]; then
  read -r -a qdisc <<< "$ULYSSES_MH_QDISC"
  ip netns exec "$ns_a" tc qdisc add dev veth-mh-a root "${qdisc[@]}"
  ip netns exec "$ns_b" tc qdisc add dev veth-mh-b root "${qdisc[@]}"
  echo "== multihost: the link between the hosts shaped by tc qdisc $ULYSSES_MH_QDISC"
fi

export ULYSSES_MH_HOSTS="10.77.0.1=$ns_a=ulysses-host-a 10.77.0.2=$ns_b=ulysses-host-b"
mpi_flags=(
  --allow-run-as-root --oversubscribe --bind-to none
  --host 10.77.0.1:2,10.77.0.2:2 -np 4
  --mca plm_rsh_agent "$here/netns-agent.sh"
  --mca btl_tcp_if_include 10.77.0.0/24
  --mca oob_tcp_if_include 10.77.0.0/24
  --mca mpi_yield_when_idle 1
  -x ORT_DISABLE_TELEMETRY=1 -x PATH
)
node_flags=(node --conditions=@ulysses/source --import tsx)

# Runs "$@" on host A (mpirun's host), as the agent does for host B.
on_host_a() {
  "$here/netns-agent.sh" 10.77.0.1 "cd '$repo' && $*"
}

step() {
  local name="$1"
  shift
  local start=$SECONDS
  echo "== multihost: $name"
  on_host_a "$@"
  echo "== multihost: $name done in $((SECONDS - start)) s"
}

# Each rank leaves a file in /dev/shm, waits, and lists it: a host sees only its own two ranks' files.
hosts_log="$(mktemp)"
step "hosts" "mpirun ${mpi_flags[*]} sh -c 'touch /dev/shm/ulysses-mh-rank-\$OMPI_COMM_WORLD_RANK; sleep 1; echo rank \$OMPI_COMM_WORLD_RANK on \$(hostname) sees /dev/shm: \$(ls /dev/shm | grep ulysses-mh | tr \"\\n\" \" \")'" | tee "$hosts_log"
# Four ranks, two hosts: every rank must see exactly two rank files (its host's).
seeing_two=$(grep -cE 'sees /dev/shm: ulysses-mh-rank-[0-9]+ ulysses-mh-rank-[0-9]+ ?$' "$hosts_log" || true)
rm -f "$hosts_log"
if [[ $seeing_two != 4 ]]; then
  echo "== multihost: hosts FAILED: $seeing_two of 4 ranks saw exactly their host's two /dev/shm files" >&2
  exit 1
fi
# Each rank writes its reports to its own file in a shared folder (mpirun
# forwards output in raw chunks, so one rank's line can be cut by another's).
reports_dir="$(mktemp -d)"
step "conformance" "mpirun ${mpi_flags[*]} ${node_flags[*]} packages/collectives-mpi/src/testing-fixtures/rank-checks.ts ordered '$reports_dir'"
# Every rank must report, with no failed check (our checks and the shared suite).
reports=$(find "$reports_dir" -name 'ULYSSES_CONFORMANCE-*.jsonl' | wc -l)
clean=$(cat "$reports_dir"/ULYSSES_CHECKS-*.jsonl 2>/dev/null | grep -c '"failed":0,' || true)
failed=$( (cat "$reports_dir"/ULYSSES_CONFORMANCE-*.jsonl 2>/dev/null | grep -o '"status":"failed"' || true) | wc -l)
passed=$( (cat "$reports_dir"/ULYSSES_CONFORMANCE-*.jsonl 2>/dev/null | grep -o '"status":"passed"' || true) | wc -l)
if [[ $failed != 0 ]]; then grep -h '"status":"failed"' "$reports_dir"/ULYSSES_CONFORMANCE-*.jsonl | cut -c1-400 >&2; fi
rm -rf "$reports_dir"
echo "== multihost: conformance: $reports of 4 ranks reported, $passed checks passed, $failed failed; mpi checks clean on $clean of 4 ranks"
if [[ $reports != 4 || $clean != 4 || $failed != 0 || $passed == 0 ]]; then
  echo "== multihost: conformance FAILED" >&2
  exit 1
fi
if [[ $train == 1 ]]; then
  # The backend by module path (init's module-path loading), not the registered name. ZeRO-3: each rank holds a quarter of the
  # weights and gathers each layer's from all four, across the hosts; the same flags on the threads backend give the same losses.
  out="$(mktemp -d)"
  threads_out="$(mktemp -d)"
  train_args="${ULYSSES_MH_TRAIN_ARGS:---sp 4 --zero 3 --layers 8 --steps 4 --seq 64 --threads 1 --no-export --log-every 1}"
  step "training" "mpirun ${mpi_flags[*]} ${node_flags[*]} apps/trainer/src/cli.ts --backend packages/collectives-mpi/src/module.ts --out '$out' $train_args"
  if [[ -z "${ULYSSES_MH_TRAIN_ARGS:-}" ]]; then
    step "training on threads" "${node_flags[*]} apps/trainer/src/cli.ts --backend threads --out '$threads_out' $train_args"
    step "zero-3 check" "node scripts/mpi/zero3-check.mjs '$threads_out' '$out' 4"
  fi
  rm -rf "$out" "$threads_out"
else
  echo "== multihost: training skipped (--no-train)"
fi
