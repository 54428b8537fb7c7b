export const launch = 1;
export type Stats = { n: number };
