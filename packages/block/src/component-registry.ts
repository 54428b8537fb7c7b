/**
 * A registry of a block's components of one kind (norms, MLPs), by name: the
 * built-ins first, then what `register` adds. Names are lower-case letters,
 * digits and dashes; a name taken already is refused; an unknown name is a
 * BlockError listing the registered ones, under the config key it came from.
 */
import { BlockError } from "./errors.js";

export class ComponentRegistry<T extends { readonly name: string }> {
  private readonly byName: Map<string, T>;

  /** `noun` with its article ("a norm", "an MLP") for messages; `key` is the block config's key ("norm", "mlp"). */
  constructor(
    private readonly noun: { a: string; name: string },
    private readonly key: string,
    builtIns: readonly T[],
    /** The kind's own rule for a new component (a message, or null when it is fine). */
    private readonly problem: (component: T) => string | null = () => null,
  ) {
    this.byName = new Map(builtIns.map((c) => [c.name, c]));
  }

  register(component: T): void {
    const { a, name } = this.noun;
    if (typeof component.name !== "string" || !/^[a-z][a-z0-9-]*$/.test(component.name))
      throw new BlockError(`${a} ${name}'s name must be lower-case letters, digits and dashes, got '${String(component.name)}'`);
    if (this.byName.has(component.name)) throw new BlockError(`${a} ${name} named '${component.name}' is registered already`);
    const problem = this.problem(component);
    if (problem !== null) throw new BlockError(`${name} '${component.name}': ${problem}`);
    this.byName.set(component.name, component);
  }

  get(name: string): T {
    const component = typeof name === "string" ? this.byName.get(name) : undefined;
    if (component === undefined)
      throw new BlockError(
        `block config: ${this.key} must be one of ${this.names()
          .map((n) => `'${n}'`)
          .join(", ")}, got '${String(name)}'`,
      );
    return component;
  }

  names(): string[] {
    return [...this.byName.keys()];
  }
}
