import { describe, expect, it } from "vitest";
import { launcherRank, launcherWorldSize, localRanksOnHost } from "./launcher-env.js";

describe("the launcher's environment", () => {
  it("reads Open MPI's variables, then PMI's and PMIx's, and says null or 1 without a launcher", () => {
    expect(launcherWorldSize({ OMPI_COMM_WORLD_SIZE: "4" })).toBe(4);
    expect(launcherWorldSize({ PMI_SIZE: "2" })).toBe(2);
    expect(launcherWorldSize({ PMIX_SIZE: "8" })).toBe(8);
    expect(launcherWorldSize({})).toBeNull();
    expect(launcherRank({ OMPI_COMM_WORLD_RANK: "3", PMI_RANK: "1" })).toBe(3);
    expect(launcherRank({ PMIX_RANK: "0" })).toBe(0);
    expect(launcherRank({})).toBeNull();
    expect(localRanksOnHost({ MPI_LOCALNRANKS: "2" })).toBe(2);
    expect(localRanksOnHost({ PMI_LOCAL_SIZE: "-1" })).toBe(1);
  });
});
