/**
 * Learning-rate schedule: linear warmup to the peak, then cosine decay to
 * `minLr` at the last step. Steps count from 0; the rate of step s is the one
 * its update uses.
 */
import { TrainingError } from "./errors.js";

export interface LrSchedule {
  peak: number;
  warmupSteps: number;
  totalSteps: number;
  /** Floor of the cosine (default peak / 10). */
  minLr?: number;
}

export function learningRateAt(step: number, schedule: LrSchedule): number {
  const { peak, warmupSteps, totalSteps } = schedule;
  const minLr = schedule.minLr ?? peak / 10;
  if (!(totalSteps >= 1) || !(warmupSteps >= 0) || !(peak >= 0)) {
    throw new TrainingError(`invalid schedule: peak ${peak}, warmupSteps ${warmupSteps}, totalSteps ${totalSteps}`);
  }
  if (step < warmupSteps) return (peak * (step + 1)) / warmupSteps;
  const decaySteps = Math.max(1, totalSteps - 1 - warmupSteps);
  const progress = Math.min(1, Math.max(0, (step - warmupSteps) / decaySteps));
  return minLr + 0.5 * (peak - minLr) * (1 + Math.cos(Math.PI * progress));
}
