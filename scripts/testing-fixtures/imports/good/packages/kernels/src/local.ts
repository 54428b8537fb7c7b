export const local = 2;
