export const tensor = 1;
