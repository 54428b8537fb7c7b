/**
 * Walks a command line flag by flag: `value()` takes the flag's argument (the
 * next word) or throws naming the flag. The bench CLIs' shared flag reader.
 */
export function* flagsOf(argv: readonly string[]): Generator<{ flag: string; value: () => string }> {
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${flag} needs a value`);
      return v;
    };
    yield { flag, value };
  }
}
