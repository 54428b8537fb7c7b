/** Failed file-system calls in words, for messages that name a file. */

/** "no such file or directory (ENOENT)" and the like, from a failed fs call. */
export function errnoText(cause: unknown): string {
  const e = cause as NodeJS.ErrnoException;
  const known: Record<string, string> = {
    ENOENT: "no such file or directory",
    EACCES: "permission denied",
    EPERM: "operation not permitted",
    ENOTDIR: "a parent is not a directory",
    EROFS: "read-only file system",
    ENOSPC: "no space left on the device",
    EEXIST: "already exists",
    EISDIR: "is a directory",
    ELOOP: "too many symbolic links",
    ENAMETOOLONG: "name too long",
    EDQUOT: "disk quota exceeded",
  };
  if (e?.code !== undefined) return `${known[e.code] ?? e.message.replace(/^[A-Z]+: /, "").replace(/, \w+ '.*'$/, "")} (${e.code})`;
  return (cause as Error)?.message ?? String(cause);
}
