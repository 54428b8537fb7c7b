/**
 * --profile's table in the summary: where world rank 0's last step went, op
 * by op (OpProfile's totals, the slowest first), then the time the step
 * waited in collectives (commMs) and the rest: JavaScript between the ops
 * (gradient sums, conversions, copies, the data), what no op counted.
 */
import type { StepMetrics } from "@ulysses/training";

/** Rows for formatTable: an op's name, then its calls, seconds and share of the step. */
export function profileRows(m: StepMetrics): [string, string][] {
  const ops = Object.entries(m.ops ?? {}).sort((a, b) => b[1].ms - a[1].ms);
  const share = (ms: number) => `${(ms / 1000).toFixed(3)} s, ${((100 * ms) / m.stepMs).toFixed(1)}%`;
  const opsMs = ops.reduce((sum, [, t]) => sum + t.ms, 0);
  return [
    [`step ${m.step}, world rank 0 (--profile)`, `${(m.stepMs / 1000).toFixed(3)} s`],
    ...ops.map(([name, t]): [string, string] => [name, `${t.calls} call${t.calls === 1 ? "" : "s"}, ${share(t.ms)}`]),
    ["all ops", share(opsMs)],
    ["waiting in collectives (commMs)", share(m.commMs)],
    ["the rest (JavaScript between ops)", share(m.stepMs - opsMs - m.commMs)],
  ];
}
