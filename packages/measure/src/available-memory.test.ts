import { describe, expect, it } from "vitest";
import { cgroupMemoryLimit, memAvailable, parseBytes, parseCgroupLimit, type ReadText } from "./available-memory.js";

const GiB = 2 ** 30;

/** A fake /proc and /sys: the given files exist, every other file is missing. */
function files(contents: Record<string, string>): ReadText {
  return (file) => contents[file] ?? null;
}

const meminfo = (availableKb: number) => `MemTotal:       24000000 kB\nMemFree:        20000000 kB\nMemAvailable:   ${availableKb} kB\n`;

describe("cgroup and meminfo parsing", () => {
  it("parses limit files: numbers, 'max', v1's no-limit sentinel, missing and garbage", () => {
    expect(parseCgroupLimit("1073741824\n")).toBe(GiB);
    expect(parseCgroupLimit("max\n")).toBeNull();
    expect(parseCgroupLimit("9223372036854771712\n")).toBeNull();
    expect(parseCgroupLimit(null)).toBeNull();
    expect(parseCgroupLimit("")).toBeNull();
    expect(parseCgroupLimit("-1")).toBeNull();
  });

  it("finds the tightest limit of this process's cgroup and its ancestors (v2 and v1)", () => {
    const v2 = files({
      "/proc/self/cgroup": "0::/user.slice/job.scope\n",
      "/sys/fs/cgroup/user.slice/job.scope/memory.max": "max\n",
      "/sys/fs/cgroup/user.slice/memory.max": "4294967296\n",
    });
    expect(cgroupMemoryLimit(v2)).toEqual({ bytes: 4 * GiB, file: "/sys/fs/cgroup/user.slice/memory.max" });
    const v1 = files({
      "/proc/self/cgroup": "9:name=systemd:/\n4:memory:/docker/abc\n3:cpuset:/\n",
      "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "2147483648\n",
      "/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
    });
    expect(cgroupMemoryLimit(v1)).toEqual({ bytes: 2 * GiB, file: "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes" });
    expect(cgroupMemoryLimit(files({ "/sys/fs/cgroup/memory.max": "max" }))).toBeNull();
    expect(cgroupMemoryLimit(files({}))).toBeNull();
  });

  it("reads MemAvailable and byte counts with suffixes", () => {
    expect(memAvailable(files({ "/proc/meminfo": meminfo(1024) }))).toBe(1024 * 1024);
    expect(memAvailable(files({ "/proc/meminfo": "MemTotal: 1 kB\n" }))).toBeNull();
    expect(memAvailable(files({}))).toBeNull();
    expect(parseBytes("8G")).toBe(8 * GiB);
    expect(parseBytes("512MiB")).toBe(512 * 2 ** 20);
    expect(parseBytes("1.5k")).toBe(1536);
    expect(parseBytes("123")).toBe(123);
    expect(parseBytes("-1G")).toBeNull();
  });
});
