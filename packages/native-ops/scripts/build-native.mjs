#!/usr/bin/env node
// Builds build/Release/ulysses_fused_attention.node: fetches the ONNX Runtime
// C API headers (scripts/fetch-ort-headers.sh), compiles the CUDA kernels
// with nvcc when nvcc exists (CPU-only build otherwise, or when that compile
// fails), then runs node-gyp configure + build (not rebuild, which would
// delete the fetched headers under build/).
//
// Runs as the package's `install` script. Without a C++ compiler, or when the
// headers cannot be fetched (offline), it prints why and how to build later
// and exits 0, so the workspace still installs; the package then reports the
// same at `new FusedAttention()`. With everything present, a failed C++
// build fails. Flags: --force rebuilds even when up to date; --strict exits
// non-zero instead of skipping.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const buildDir = join(packageDir, "build");
const addonPath = join(buildDir, "Release", "ulysses_fused_attention.node");
const force = process.argv.includes("--force");
const strict = process.argv.includes("--strict");
const tag = "@ulysses/native-ops";
// How to rerun this script, for both places the package lives: this
// repository's workspace, and a project that installed it from the registry.
const hint =
  `then rebuild it: in a project that installed ${tag}, \`npm rebuild ${tag}\` ` +
  `(pnpm: \`pnpm rebuild ${tag}\`, with the package listed in pnpm's allowBuilds) or ` +
  `\`node node_modules/${tag}/scripts/build-native.mjs --force\`; inside the ulysses-ts repository, ` +
  `\`pnpm --filter ${tag} build:native -- --force\``;
const env = { ...process.env, ORT_DISABLE_TELEMETRY: "1" };

function skip(reason) {
  console.log(`${tag}: skipping the native addon build: ${reason}; ${hint}`);
  process.exit(strict ? 1 : 0);
}

function run(command, args, options = {}) {
  return spawnSync(command, args, { cwd: packageDir, stdio: "inherit", env, ...options });
}

function newestSource() {
  const files = [join(packageDir, "binding.gyp"), join(packageDir, "scripts", "build-native.mjs")];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else files.push(path);
    }
  };
  walk(join(packageDir, "native"));
  return Math.max(...files.map((f) => statSync(f).mtimeMs));
}

if (!force && existsSync(addonPath) && statSync(addonPath).mtimeMs > newestSource()) {
  console.log(`${tag}: native addon up to date (${addonPath})`);
  process.exit(0);
}

const cxx = process.env.CXX ?? "c++";
const probe = spawnSync(cxx, ["--version"], { encoding: "utf8" });
if (probe.error || probe.status !== 0) skip(`no C++ compiler ('${cxx}'); install one (e.g. apt-get install -y g++ make python3)`);

// ONNX Runtime C API headers: a prepared folder, or Debian's libonnxruntime-dev.
let ortInclude = process.env.ULYSSES_ORT_INCLUDE_DIR;
if (!ortInclude) {
  const fetched = run("bash", [join(packageDir, "scripts", "fetch-ort-headers.sh")]);
  if (fetched.status !== 0) skip("the ONNX Runtime C API headers could not be fetched (needs apt-get and the Debian mirror, or set ULYSSES_ORT_INCLUDE_DIR)");
  ortInclude = join(buildDir, "ort-headers", "usr", "include", "onnxruntime");
}
if (!existsSync(join(ortInclude, "onnxruntime_c_api.h"))) skip(`no onnxruntime_c_api.h in ${ortInclude}`);

// CUDA kernels, compiled only where nvcc exists.
function findNvcc() {
  const candidates = [process.env.NVCC, process.env.CUDA_HOME && join(process.env.CUDA_HOME, "bin", "nvcc"), "nvcc", "/usr/local/cuda/bin/nvcc"];
  for (const candidate of candidates.filter(Boolean)) {
    const r = spawnSync(candidate, ["--version"], { encoding: "utf8" });
    if (!r.error && r.status === 0) return candidate;
  }
  return undefined;
}

function cudaLibDir(nvcc) {
  const resolved = spawnSync("bash", ["-c", `readlink -f "$(command -v '${nvcc}')"`], { encoding: "utf8" }).stdout.trim();
  const roots = [process.env.CUDA_HOME, resolved && resolve(dirname(resolved), ".."), "/usr/local/cuda"].filter(Boolean);
  for (const root of roots) {
    for (const lib of ["lib64", "lib", join("targets", "x86_64-linux", "lib")]) {
      if (existsSync(join(root, lib, "libcudart_static.a"))) return join(root, lib);
    }
  }
  return undefined;
}

const gypDefines = [`-Dort_include=${ortInclude}`];
const nvcc = process.env.ULYSSES_NO_CUDA ? undefined : findNvcc();
if (nvcc) {
  const libDir = cudaLibDir(nvcc);
  const object = join(buildDir, "cuda", "attention-cuda.o");
  mkdirSync(dirname(object), { recursive: true });
  const archs = (process.env.ULYSSES_CUDA_ARCHS ?? "80,90").split(",").flatMap((a) => ["-gencode", `arch=compute_${a},code=sm_${a}`]);
  const cudaSources = ["attention-cuda.cu", "attention-cuda.h"].map((f) => join(packageDir, "native", "src", "cuda", f));
  cudaSources.push(join(packageDir, "native", "src", "cpu", "attention-cpu.h"));
  const fresh = !force && existsSync(object) && statSync(object).mtimeMs > Math.max(...cudaSources.map((f) => statSync(f).mtimeMs));
  const compiled = fresh
    ? { status: 0 }
    : run(nvcc, [
        "-c",
        "-O3",
        "-std=c++17",
        "-Xcompiler",
        "-fPIC",
        ...archs,
        "-I",
        join(packageDir, "native", "src"),
        join(packageDir, "native", "src", "cuda", "attention-cuda.cu"),
        "-o",
        object,
      ]);
  if (compiled.status === 0 && libDir) {
    gypDefines.push(`-Dcuda_object=${object}`, `-Dcuda_lib_dir=${libDir}`);
    console.log(`${tag}: CUDA kernels compiled with ${nvcc}`);
  } else {
    console.warn(
      `${tag}: the CUDA kernels did not build (${compiled.status !== 0 ? `nvcc exited ${compiled.status}` : "no libcudart_static.a found"}); building CPU only`,
    );
  }
} else {
  console.log(`${tag}: nvcc not found: building the CPU kernels only`);
}

// node-gyp downloads Node's headers unless told where they are: use the ones
// installed next to this node binary (e.g. /usr/include/node) when present.
// node-gyp is a dependency of this package: resolved from the package folder,
// it is found in the package's own node_modules (pnpm) or in a parent one
// (npm's hoisted layout in a consumer's node_modules).
const require = createRequire(import.meta.url);
let gyp;
try {
  gyp = require.resolve("node-gyp/bin/node-gyp.js");
} catch (error) {
  skip(`node-gyp could not be resolved from ${packageDir} (${error.message.split("\n")[0]}); reinstall the package's dependencies`);
}
const nodeArgs = [];
const nodePrefix = resolve(dirname(process.execPath), "..");
if (existsSync(join(nodePrefix, "include", "node", "node_api.h"))) nodeArgs.push(`--nodedir=${nodePrefix}`);
const jobs = process.env.JOBS ?? "2";
for (const step of [
  ["configure", ...nodeArgs, "--", ...gypDefines],
  ["build", ...nodeArgs, `--jobs=${jobs}`],
]) {
  const r = run(process.execPath, [gyp, ...step]);
  if (r.status !== 0) {
    console.error(`${tag}: node-gyp ${step[0]} failed (exit ${r.status})`);
    process.exit(r.status ?? 1);
  }
}
console.log(`${tag}: built ${addonPath}`);
