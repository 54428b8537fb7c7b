// What scripts/check-references.mjs and scripts/check-imports.mjs share: the
// workspace's packages (from pnpm-workspace.yaml), their @ulysses/*
// dependencies, and a reader for tsconfig files (JSON with comments and
// trailing commas). Plain Node, no dependencies.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

export const SCOPE = "@ulysses/";

/** The dependency fields of a manifest, in the order they are read. */
export const DEPENDENCY_FIELDS = ["dependencies", "peerDependencies", "optionalDependencies", "devDependencies"];

/**
 * The workspace folders pnpm-workspace.yaml lists (`- dir/*` or `- dir`
 * entries of its `packages:` list; other globs are refused), relative to
 * root. Without a pnpm-workspace.yaml: packages/*, apps/*, tools/*.
 */
export function workspacePatterns(root) {
  const file = join(root, "pnpm-workspace.yaml");
  if (!existsSync(file)) return ["packages/*", "apps/*", "tools/*"];
  const patterns = [];
  let inPackages = false;
  for (const raw of readFileSync(file, "utf8").split("\n")) {
    const line = raw.replace(/#.*$/, "").trimEnd();
    if (/^\S/.test(line)) inPackages = /^packages:\s*$/.test(line);
    else if (inPackages) {
      const match = /^\s+-\s+["']?([^"']+?)["']?\s*$/.exec(line);
      if (match) patterns.push(match[1]);
    }
  }
  for (const pattern of patterns) {
    if (!/^[\w.-]+(\/[\w.-]+)*(\/\*)?$/.test(pattern))
      throw new Error(`pnpm-workspace.yaml: the pattern '${pattern}' is not 'dir' or 'dir/*', which is all scripts/workspace.mjs reads`);
  }
  return patterns;
}

/**
 * Every workspace package: { name, dir (relative to root, with "/"),
 * absoluteDir, manifest }, sorted by dir.
 */
export function workspacePackages(root) {
  const dirs = workspacePatterns(root).flatMap((pattern) => {
    if (!pattern.endsWith("/*")) return [pattern];
    const parent = pattern.slice(0, -2);
    if (!existsSync(join(root, parent))) return [];
    return readdirSync(join(root, parent), { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => `${parent}/${entry.name}`);
  });
  return dirs
    .filter((dir) => existsSync(join(root, dir, "package.json")))
    .sort()
    .map((dir) => {
      const manifest = JSON.parse(readFileSync(join(root, dir, "package.json"), "utf8"));
      return { name: manifest.name, dir, absoluteDir: resolve(root, dir), manifest };
    });
}

/** The @ulysses/* names a manifest lists in the given fields (self excluded), sorted. */
export function workspaceDependencies(manifest, fields = DEPENDENCY_FIELDS) {
  const names = new Set();
  for (const field of fields) {
    for (const name of Object.keys(manifest[field] ?? {})) {
      if (name.startsWith(SCOPE) && name !== manifest.name) names.add(name);
    }
  }
  return [...names].sort();
}

/** JSON with // and block comments and trailing commas (tsconfig's dialect) parsed. */
export function parseJsonc(text, file = "JSON") {
  let out = "";
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j;
    } else if (c === "/" && text[i + 1] === "/") {
      while (i < text.length && text[i] !== "\n") i++;
      out += "\n";
    } else if (c === "/" && text[i + 1] === "*") {
      const end = text.indexOf("*/", i + 2);
      out += text.slice(i, end < 0 ? text.length : end + 2).replace(/[^\n]/g, " ");
      i = end < 0 ? text.length : end + 1;
    } else if (c === "," && /^\s*[}\]]/.test(text.slice(i + 1).replace(/^(\s|\/\/[^\n]*|\/\*[\s\S]*?\*\/)*/, " "))) {
      out += " ";
    } else out += c;
  }
  try {
    return JSON.parse(out);
  } catch (cause) {
    throw new Error(`${file}: ${cause.message}`);
  }
}

export function readJsonc(file) {
  return parseJsonc(readFileSync(file, "utf8"), file);
}

/**
 * A tsconfig's compilerOptions with its `extends` chain applied (relative
 * paths only; later entries of an extends array win, the file itself last).
 * Paths are left as written; enough to read flags such as composite.
 */
export function resolvedCompilerOptions(file, seen = new Set()) {
  if (seen.has(file)) throw new Error(`${file}: extends itself`);
  seen.add(file);
  const config = readJsonc(file);
  const parents = config.extends === undefined ? [] : Array.isArray(config.extends) ? config.extends : [config.extends];
  let options = {};
  for (const parent of parents) {
    if (!parent.startsWith(".")) throw new Error(`${file}: extends '${parent}', and only relative extends are read`);
    const path = resolve(dirname(file), parent.endsWith(".json") ? parent : `${parent}.json`);
    options = { ...options, ...resolvedCompilerOptions(path, seen) };
  }
  return { ...options, ...(config.compilerOptions ?? {}) };
}
