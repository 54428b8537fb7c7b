export const model = 1;
