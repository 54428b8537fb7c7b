#!/usr/bin/env node
// Import direction (run by .ci/run after the type check):
//
//   node scripts/check-imports.mjs [--root DIR]
//
// Reads the ```deps block under "## The package graph" in
// contributing/README.md, one line per workspace package:
//
//   <package>: <dependency>, <dependency>, type:<dependency>, ...
//
// names without the "@ulysses/" scope; "type:" allows `import type` /
// `export type` only; "*" allows every workspace package; "#" starts a
// comment. Then it scans every file under <package>/src of each workspace
// package (pnpm-workspace.yaml) and prints one line per violation:
//
//   - a non-test file imports a workspace package its line does not allow
//     (static import/export ... from, import "x", import("x"),
//     import.meta.resolve("x"), require("x"), require.resolve("x"));
//   - a value import of a package allowed as type: only;
//   - a non-test file imports a workspace package that package.json does not
//     list in dependencies, peerDependencies or optionalDependencies (a test
//     or testing fixture may also use devDependencies);
//   - package.json lists in dependencies, peerDependencies or
//     optionalDependencies a workspace package the graph does not allow
//     (devDependencies are for tests and may name any package);
//   - any file, test or not, imports a relative path that leaves its package
//     folder (import the other package by name);
//   - the deps block names no such package, misses a workspace package, or
//     has a cycle.
// Test files are *.test.* and everything under a testing-fixtures folder.
// A package may always import itself by name. Exit 1 on any violation.
import { readFileSync, readdirSync, existsSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { SCOPE, workspacePackages } from "./workspace.mjs";
import { fileURLToPath } from "node:url";

const args = process.argv.slice(2);
const rootIndex = args.indexOf("--root");
const root = resolve(rootIndex >= 0 ? args[rootIndex + 1] : fileURLToPath(new URL("..", import.meta.url)));
const README = "contributing/README.md";
const SOURCE = /\.(ts|mts|cts|tsx|js|mjs|cjs)$/;
const RUNTIME_FIELDS = ["dependencies", "peerDependencies", "optionalDependencies"];

const violations = [];
const report = (line) => violations.push(line);

// --- the deps block --------------------------------------------------------

/** { rules: Map<short name, { any, value: Set, typeOnly: Set, line }>, problems } from the README text. */
export function parseDepsBlock(text, file = README) {
  const lines = text.split("\n");
  const heading = lines.findIndex((line) => /^##\s+The package graph\s*$/.test(line));
  if (heading < 0) return { error: `${file}: no "## The package graph" section` };
  let start = -1;
  for (let i = heading + 1; i < lines.length && !/^##\s/.test(lines[i]); i++) {
    if (/^```deps\s*$/.test(lines[i])) {
      start = i;
      break;
    }
  }
  if (start < 0) return { error: `${file}: no \`\`\`deps block under "## The package graph"` };
  const rules = new Map();
  const problems = [];
  for (let i = start + 1; i < lines.length; i++) {
    if (/^```/.test(lines[i])) return { rules, problems };
    const content = lines[i].replace(/#.*$/, "").trim();
    if (content === "") continue;
    const where = `${file}:${i + 1}`;
    const match = /^(@ulysses\/)?([a-z0-9][\w.-]*)\s*:(.*)$/.exec(content);
    if (!match) {
      problems.push(`${where}: '${content}' is not 'package: dependency, ...'`);
      continue;
    }
    const name = match[2];
    if (rules.has(name)) problems.push(`${where}: ${name} has a second line`);
    const rule = { any: false, value: new Set(), typeOnly: new Set(), line: i + 1 };
    for (const item of match[3].split(/[\s,]+/).filter(Boolean)) {
      if (item === "*") rule.any = true;
      else if (item.startsWith("type:")) rule.typeOnly.add(item.slice(5).replace(SCOPE, ""));
      else rule.value.add(item.replace(SCOPE, ""));
    }
    rules.set(name, rule);
  }
  return { error: `${file}:${start + 1}: the deps block is not closed` };
}

const short = (name) => (name.startsWith(SCOPE) ? name.slice(SCOPE.length) : name);
const describe = (rule) =>
  rule.any ? "any package" : [...[...rule.value].sort(), ...[...rule.typeOnly].sort().map((name) => `type:${name}`)].join(", ") || "none";

// --- scanning sources ------------------------------------------------------

const REGEX_AFTER = new Set(["return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw", "case", "do", "else", "yield", "await"]);

/**
 * Tokens of JS/TS source: { kind: "word" | "string" | "punct" | "tail", value, line }
 * ("tail": the end of a template literal with substitutions).
 * Comments are dropped; template literals without substitutions become
 * strings, the text of other templates is dropped (their ${} code is
 * tokenized); regular expression literals are skipped.
 */
export function tokenize(text) {
  const tokens = [];
  const braces = []; // "{" for a code brace, "`" for a template's ${
  let line = 1;
  let i = 0;
  const push = (kind, value, at) => tokens.push({ kind, value, line: at });
  const regexAllowed = () => {
    const last = tokens.at(-1);
    if (!last) return true;
    if (last.kind === "word") return REGEX_AFTER.has(last.value);
    if (last.kind === "string" || last.kind === "tail") return false;
    return !(last.value === ")" || last.value === "]" || last.value === "}");
  };
  const readTemplate = () => {
    // i is just past a ` or a template's closing }; returns true when the template ended
    const at = line;
    let text = "";
    while (i < textLength) {
      const c = source[i];
      if (c === "\\") {
        text += source.slice(i, i + 2);
        if (source[i + 1] === "\n") line++;
        i += 2;
      } else if (c === "`") {
        i++;
        return { ended: true, text, at };
      } else if (c === "$" && source[i + 1] === "{") {
        i += 2;
        braces.push("`");
        return { ended: false, text, at };
      } else {
        if (c === "\n") line++;
        text += c;
        i++;
      }
    }
    return { ended: true, text, at };
  };
  const source = text;
  const textLength = text.length;
  while (i < textLength) {
    const c = source[i];
    if (c === "\n") {
      line++;
      i++;
    } else if (c === " " || c === "\t" || c === "\r") i++;
    else if (c === "/" && source[i + 1] === "/") {
      while (i < textLength && source[i] !== "\n") i++;
    } else if (c === "/" && source[i + 1] === "*") {
      const end = source.indexOf("*/", i + 2);
      const stop = end < 0 ? textLength : end + 2;
      for (let j = i; j < stop; j++) if (source[j] === "\n") line++;
      i = stop;
    } else if (c === '"' || c === "'") {
      const at = line;
      let value = "";
      i++;
      while (i < textLength && source[i] !== c && source[i] !== "\n") {
        if (source[i] === "\\") {
          value += source[i + 1] ?? "";
          i += 2;
        } else value += source[i++];
      }
      i++;
      push("string", value, at);
    } else if (c === "`") {
      i++;
      const { ended, text: value, at } = readTemplate();
      if (ended) push("string", value, at);
      else push("punct", "`${", at);
    } else if (c === "/" && regexAllowed()) {
      let inClass = false;
      i++;
      while (i < textLength && source[i] !== "\n") {
        const d = source[i];
        if (d === "\\") i += 2;
        else if (d === "[") {
          inClass = true;
          i++;
        } else if (d === "]") {
          inClass = false;
          i++;
        } else if (d === "/" && !inClass) break;
        else i++;
      }
      i++;
      while (i < textLength && /[a-z]/i.test(source[i])) i++;
      push("punct", "/regex/", line);
    } else if (/[A-Za-z_$]/.test(c)) {
      let j = i + 1;
      while (j < textLength && /[\w$]/.test(source[j])) j++;
      push("word", source.slice(i, j), line);
      i = j;
    } else if (/[0-9]/.test(c)) {
      let j = i + 1;
      while (j < textLength && /[\w.]/.test(source[j])) j++;
      push("punct", "0", line);
      i = j;
    } else if (c === "{") {
      braces.push("{");
      push("punct", c, line);
      i++;
    } else if (c === "}") {
      if (braces.pop() === "`") {
        i++;
        if (readTemplate().ended) push("tail", "`", line);
      } else {
        push("punct", c, line);
        i++;
      }
    } else {
      push("punct", c, line);
      i++;
    }
  }
  return tokens;
}

/**
 * Module specifiers a source file names: { specifier, line, typeOnly }.
 * typeOnly: `import type ... from`, `export type ... from`, and import("x")
 * in a type position (`typeof import("x")`, `import("x").Name`).
 */
export function importsOf(text) {
  const tokens = tokenize(text);
  const found = [];
  const is = (k, value) => tokens[k] && tokens[k].value === value && tokens[k].kind !== "string";
  const str = (k) => tokens[k] && tokens[k].kind === "string";
  for (let k = 0; k < tokens.length; k++) {
    const token = tokens[k];
    if (token.kind !== "word") continue;
    const afterDot = is(k - 1, ".") && !is(k - 2, ".");
    if (token.value === "import" && !afterDot) {
      if (is(k + 1, "(") && str(k + 2)) {
        const typePosition =
          is(k - 1, "typeof") ||
          (is(k + 3, ")") && is(k + 4, ".") && tokens[k + 5]?.kind === "word" && !["then", "catch", "finally"].includes(tokens[k + 5].value));
        found.push({ specifier: tokens[k + 2].value, line: tokens[k + 2].line, typeOnly: typePosition });
      } else if (is(k + 1, ".") && is(k + 2, "meta") && is(k + 3, ".") && is(k + 4, "resolve") && is(k + 5, "(") && str(k + 6)) {
        found.push({ specifier: tokens[k + 6].value, line: tokens[k + 6].line, typeOnly: false });
      } else if (str(k + 1)) {
        found.push({ specifier: tokens[k + 1].value, line: tokens[k + 1].line, typeOnly: false });
      } else {
        const clause = fromClause(k + 1);
        if (clause) found.push(clause);
      }
    } else if (token.value === "export" && !afterDot && (is(k + 1, "{") || is(k + 1, "*") || (is(k + 1, "type") && (is(k + 2, "{") || is(k + 2, "*"))))) {
      const clause = fromClause(k + 1);
      if (clause) found.push(clause);
    } else if (token.value === "require" && !afterDot) {
      if (is(k + 1, "(") && str(k + 2)) found.push({ specifier: tokens[k + 2].value, line: tokens[k + 2].line, typeOnly: false });
      else if (is(k + 1, ".") && is(k + 2, "resolve") && is(k + 3, "(") && str(k + 4))
        found.push({ specifier: tokens[k + 4].value, line: tokens[k + 4].line, typeOnly: false });
    }
  }
  return found;

  // After `import` / `export`: [type] (names | { ... } | * as x), ... from "x"
  function fromClause(k) {
    const typeOnly = is(k, "type") && !is(k + 1, "from") && !is(k + 1, ",") && !is(k + 1, "=");
    for (let j = k; j < tokens.length && j < k + 4000; j++) {
      const t = tokens[j];
      if (t.kind === "string") return null;
      if (t.kind === "word" && t.value === "from" && str(j + 1)) return { specifier: tokens[j + 1].value, line: tokens[j + 1].line, typeOnly };
      if (t.kind === "word" && (t.value === "import" || t.value === "export")) return null;
      if (t.kind === "word" || t.value === "," || t.value === "{" || t.value === "}" || t.value === "*") continue;
      return null;
    }
    return null;
  }
}

function walk(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name === "node_modules") return [];
    const path = join(dir, entry.name);
    return entry.isDirectory() ? walk(path) : SOURCE.test(entry.name) ? [path] : [];
  });
}

const isTest = (file) => /\.test\.[^/\\]+$/.test(file) || file.split(/[/\\]/).includes("testing-fixtures");

/** The package a bare specifier names, or null. */
function packageOf(specifier) {
  if (!specifier.startsWith(SCOPE)) return null;
  return specifier.split("/").slice(0, 2).join("/");
}

// --- the check -------------------------------------------------------------

function main() {
  const readmePath = join(root, README);
  if (!existsSync(readmePath)) {
    console.error(`${README}: missing`);
    process.exit(1);
  }
  const parsed = parseDepsBlock(readFileSync(readmePath, "utf8"));
  if (parsed.error) {
    console.error(parsed.error);
    process.exit(1);
  }
  parsed.problems.forEach(report);
  const { rules } = parsed;

  const packages = workspacePackages(root);
  const byShort = new Map(packages.map((pkg) => [short(pkg.name), pkg]));
  const workspaceNames = new Set(packages.map((pkg) => pkg.name));

  for (const [name, rule] of rules) {
    const where = `${README}:${rule.line}`;
    if (!byShort.has(name)) report(`${where}: the deps block names ${name}, which is no workspace package`);
    for (const dependency of [...rule.value, ...rule.typeOnly]) {
      if (!byShort.has(dependency)) report(`${where}: ${name} may import ${dependency}, which is no workspace package`);
    }
  }
  for (const pkg of packages) {
    if (!rules.has(short(pkg.name))) report(`${README}: the deps block has no line for ${short(pkg.name)} (${pkg.dir})`);
  }
  const cycle = findCycle(rules);
  if (cycle) report(`${README}: the deps block has a cycle: ${cycle.join(" -> ")}`);

  for (const pkg of packages) {
    const rule = rules.get(short(pkg.name));
    const declared = (fields) => new Set(fields.flatMap((field) => Object.keys(pkg.manifest[field] ?? {})));
    const runtime = declared(RUNTIME_FIELDS);
    const dev = declared(["devDependencies"]);
    const allows = (name, typeOnly) => !rule || rule.any || rule.value.has(short(name)) || (typeOnly && rule.typeOnly.has(short(name)));

    for (const field of RUNTIME_FIELDS) {
      for (const name of Object.keys(pkg.manifest[field] ?? {})) {
        if (!workspaceNames.has(name) || name === pkg.name || !rule) continue;
        if (!rule.any && !rule.value.has(short(name)) && !rule.typeOnly.has(short(name)))
          report(`${pkg.dir}/package.json: ${field} lists ${name}, allowed: ${describe(rule)}`);
      }
    }

    for (const file of walk(join(pkg.absoluteDir, "src"))) {
      const shown = relative(root, file).split(sep).join("/");
      const test = isTest(relative(pkg.absoluteDir, file));
      for (const { specifier, line, typeOnly } of importsOf(readFileSync(file, "utf8"))) {
        const where = `${shown}:${line}`;
        if (specifier.startsWith(".")) {
          const target = resolve(dirname(file), specifier);
          if (target !== pkg.absoluteDir && !target.startsWith(pkg.absoluteDir + sep)) {
            const owner = packages.find((other) => target === other.absoluteDir || target.startsWith(other.absoluteDir + sep));
            report(`${where} imports ${specifier}, which leaves ${pkg.dir}${owner ? ` (import ${owner.name} by name)` : ""}`);
          }
          continue;
        }
        const name = packageOf(specifier);
        if (!name || name === pkg.name) continue;
        if (!workspaceNames.has(name)) {
          report(`${where} imports ${specifier}, and ${name} is no workspace package`);
          continue;
        }
        if (!test && rule && !allows(name, typeOnly)) {
          const typeHint = rule.typeOnly.has(short(name)) ? " (a value import; only import type is allowed)" : "";
          report(`${where} imports ${name}${typeHint}, allowed: ${describe(rule)}`);
        }
        if (test ? !runtime.has(name) && !dev.has(name) : !runtime.has(name)) {
          const hint =
            !test && dev.has(name) ? "lists it only in devDependencies" : `does not list it${test ? " (dependencies or devDependencies)" : " in dependencies"}`;
          report(`${where} imports ${name}, and ${pkg.dir}/package.json ${hint}`);
        }
      }
    }
  }

  for (const violation of violations) console.error(violation);
  if (violations.length > 0) {
    console.error(
      `check-imports: ${violations.length} violation${violations.length === 1 ? "" : "s"} (the graph: ${README}, "## The package graph", the deps block)`,
    );
    process.exit(1);
  }
  console.log(`check-imports: ${packages.length} packages import only what ${README}'s deps block allows and their package.json declares`);
}

/** A cycle among the deps block's allowed edges ("*" lines excluded), or null. */
function findCycle(rules) {
  const state = new Map();
  const stack = [];
  const visit = (name) => {
    if (state.get(name) === "done") return null;
    if (state.get(name) === "active") return [...stack.slice(stack.indexOf(name)), name];
    state.set(name, "active");
    stack.push(name);
    const rule = rules.get(name);
    for (const next of rule && !rule.any ? [...rule.value, ...rule.typeOnly] : []) {
      const cycle = visit(next);
      if (cycle) return cycle;
    }
    stack.pop();
    state.set(name, "done");
    return null;
  };
  for (const name of rules.keys()) {
    const cycle = visit(name);
    if (cycle) return cycle;
  }
  return null;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
