// Consumer check: launch from the installed @ulysses/collectives with plain
// node. Every rank must see the right size and rank through every way of
// getting a group, errors keep their classes, and a user backend passes the
// exported conformance suite without any test runner installed.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { CollectiveError, launch } from "@ulysses/collectives";

const here = (file) => new URL(file, import.meta.url);
const require = createRequire(import.meta.url);
assert.throws(() => require.resolve("vitest"), "vitest must not be installed in the consumer");
assert.throws(() => require.resolve("tsx"), "tsx must not be installed in the consumer");

async function identities(worldSize, backend) {
  const world = await launch({ worldSize, backend, entry: here("./rank-own-backend.mjs"), timeoutMs: 20_000 });
  try {
    const seen = await world.all("identity");
    const expectedSum = (worldSize * (worldSize + 1)) / 2;
    seen.forEach((s, r) => {
      const where = `${backend}, ${worldSize} ranks, rank ${r}`;
      assert.deepEqual(
        [s.contextRank, s.contextSize, s.rank, s.size, s.initRank, s.initSize, s.threadsRank, s.threadsSize],
        [r, worldSize, r, worldSize, r, worldSize, r, worldSize],
        `${where}: ${JSON.stringify(s)}`,
      );
      assert.equal(s.sum, expectedSum, `${where}: allReduce sum`);
    });
    return seen[0].backend;
  } finally {
    await world.shutdown();
  }
}

for (const worldSize of [2, 4]) {
  assert.equal(await identities(worldSize, "wrapped"), "wrapped");
  assert.equal(await identities(worldSize, here("./wrap-threads-backend.mjs").pathname), "wrapped-module");
  console.log(
    `collectives: ${worldSize} ranks see size ${worldSize} and their own rank (entry-registered backend, module-path backend, init, createThreadsGroup)`,
  );
}

// errors keep their classes, in the ranks and here
{
  const world = await launch({ worldSize: 2, backend: "wrapped", entry: here("./rank-own-backend.mjs"), timeoutMs: 20_000 });
  try {
    const results = await world.all("errorClass");
    for (const [r, result] of results.entries()) {
      assert.equal(result.threw, true, `rank ${r}: a non-array inputSplits must throw`);
      assert.equal(result.isCollectiveError, true, `rank ${r}: ${result.name}: ${result.message} is not a CollectiveError`);
    }
    await assert.rejects(world.all("fail"), (error) => error instanceof CollectiveError && /rank \d fails on purpose/.test(error.message));
  } finally {
    await world.shutdown();
  }
  console.log("collectives: CollectiveError is the same class inside the ranks and in the launcher");
}

// a user backend passes the conformance suite, runner-free
for (const worldSize of [1, 2, 4]) {
  const world = await launch({ worldSize, backend: "tracing", entry: here("./rank-conformance.mjs"), timeoutMs: 20_000 });
  try {
    const perRank = await world.all("conformance");
    for (const [r, { backend, results, forwarded }] of perRank.entries()) {
      assert.equal(backend, "tracing");
      const failed = results.filter((x) => x.status === "failed");
      assert.deepEqual(failed, [], `rank ${r} of ${worldSize}: failed checks`);
      assert.ok(results.filter((x) => x.status === "passed").length > 10, `rank ${r}: too few checks passed`);
      assert.ok((forwarded.allToAll ?? 0) > 0, `rank ${r}: the tracing backend forwarded no allToAll`);
    }
    const passed = perRank[0].results.filter((x) => x.status === "passed").length;
    console.log(
      `collectives: the consumer's tracing backend passes the conformance suite at P=${worldSize} (${passed} checks passed on rank 0, no test runner)`,
    );
  } finally {
    await world.shutdown();
  }
}
