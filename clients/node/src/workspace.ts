// A live workspace: confined file operations and command execution, all
// scoped to one workspace id. Use `await using ws = await client.open(...)`
// (or try/finally with ws.close()) so the workspace is always closed.
import { Readable } from 'node:stream';
import * as grpc from '@grpc/grpc-js';

import { CallAborted, NoSuchProcess, WorkspaceEvicted, WorkspacedError, WorkspaceFailed } from './errors';
import { AttachedProcess, Process, SignalLike, signalNumber } from './process';
import type { InputControl, SendInputOptions } from './process';
import { onAbort } from './transport';
import type { CallOptions, ResolvedCall, Transport, UnaryFn } from './transport';
import type { Capabilities__Output } from '../gen/workspace/v1/Capabilities';
import type { DescribeResponse__Output } from '../gen/workspace/v1/DescribeResponse';
import type { EditFileResponse__Output } from '../gen/workspace/v1/EditFileResponse';
import type { Exited__Output } from '../gen/workspace/v1/Exited';
import type { FileInfo__Output } from '../gen/workspace/v1/FileInfo';
import type { GrepMatch__Output } from '../gen/workspace/v1/GrepMatch';
import type { GrepResponse__Output } from '../gen/workspace/v1/GrepResponse';
import type { GrepSummary__Output } from '../gen/workspace/v1/GrepSummary';
import type { ProcessConfig } from '../gen/workspace/v1/ProcessConfig';
import type { ProcessInfo__Output } from '../gen/workspace/v1/ProcessInfo';
import type { ReadFileResponse__Output } from '../gen/workspace/v1/ReadFileResponse';
import type { Workspace__Output } from '../gen/workspace/v1/Workspace';
import type { WorkspaceRef } from '../gen/workspace/v1/WorkspaceRef';
import type { WriteFileRequest } from '../gen/workspace/v1/WriteFileRequest';
import type { Lifetime__Output } from '../gen/workspace/v1/Lifetime';
import type { SetSecretsResponse__Output } from '../gen/workspace/v1/SetSecretsResponse';
import type { ArchiveTrailer__Output } from '../gen/workspace/v1/ArchiveTrailer';
import type { ReadArchiveResponse__Output } from '../gen/workspace/v1/ReadArchiveResponse';
import type { Snapshot__Output } from '../gen/workspace/v1/Snapshot';
import type { WatchEvent__Output } from '../gen/workspace/v1/WatchEvent';
import type { WriteArchiveRequest } from '../gen/workspace/v1/WriteArchiveRequest';
import { createGzip } from 'node:zlib';
import { extractTar, tarDirectory } from './tar';
import type { ExtractOptions } from './tar';

export type FileInfo = FileInfo__Output;
export type GrepMatch = GrepMatch__Output;
export type GrepSummary = GrepSummary__Output;
export type ProcessInfo = ProcessInfo__Output;
/**
 * What describe() reports, including the host uid and gid the workspace's
 * commands run as (`uid`, `gid`), a docker container's runtime
 * (`container.runtime`), and its lifetime: `expiresAtUnixMs` (0: never),
 * `lifetime`, `lastActivityAtUnixMs`, `labels`, `name`, `env`,
 * `secretNames` (never the values) and `secretsMissing`.
 */
export type Description = DescribeResponse__Output;

/**
 * How long a workspace lives, in milliseconds (workspace.v1.Lifetime):
 * `ttlMs` from Open or the last extend() (0 or absent: no limit of its
 * own), `idleTimeoutMs` after its last activity (0 or absent: none, or the
 * server's default at Open).
 */
export interface Lifetime {
  ttlMs?: number;
  idleTimeoutMs?: number;
}

/** What setSecrets() reports: the workspace's secret names now, and whether some are still missing. */
export type SecretsState = SetSecretsResponse__Output;

/**
 * What a workspace handle did about a call that met a failure a Resolve of
 * its ref may repair, WORKSPACE_EVICTED or WORKSPACE_FAILED with metadata
 * resolve="true" (ConnectOptions.onEvictionRetry): `recovered` when
 * Resolve(ref) succeeded and the call was made once more, else
 * `resolveError` says why Resolve failed and `error` was thrown.
 */
export interface EvictionRetry {
  workspaceId: string;
  error: WorkspaceEvicted | WorkspaceFailed;
  recovered: boolean;
  resolveError?: WorkspacedError;
}

/** What a Workspace takes from its client. @internal */
export interface WorkspaceHandleOptions {
  resolveOnEviction: boolean;
  onEvictionRetry?: (event: EvictionRetry) => void;
}

/** The errors a re-resolve looks at: evicted, or the backend failed. */
function isLost(err: unknown): err is WorkspaceEvicted | WorkspaceFailed {
  return err instanceof WorkspaceEvicted || err instanceof WorkspaceFailed;
}

/**
 * Whether a Resolve of the workspace's ref may repair `err`: the workspace
 * was evicted, or its backend failed in the one way the server marks as
 * repaired by a Resolve (WORKSPACE_FAILED, metadata resolve="true": a box
 * or container that ended or lost its agent). No other failure.
 */
function resolvable(err: WorkspaceEvicted | WorkspaceFailed): boolean {
  return err instanceof WorkspaceEvicted || err.metadata.resolve === 'true';
}

/** Anything writeFile accepts as content. */
export type WriteData =
  | string
  | Uint8Array
  | Iterable<Uint8Array | string>
  | AsyncIterable<Uint8Array | string>;

export interface WriteOptions extends CallOptions {
  /** Permission bits of a new file (masked to 0777); default 0644. */
  mode?: number;
  createParents?: boolean;
  /** SHA-256 (lowercase hex) the current content must have, else Conflict. */
  ifMatch?: string;
  /** Refuse to replace an existing file (AlreadyExists). */
  ifAbsent?: boolean;
}

export interface WriteResult {
  info: FileInfo;
  bytesWritten: number;
  sha256: string;
}

export interface ReadOptions extends CallOptions {
  offset?: number;
  /** Bytes to read; 0 or absent reads to the end. */
  length?: number;
}

/**
 * How to run a command. Two different limits: `timeoutMs` is the command's
 * run time, which the server enforces (the command is killed, the call
 * still answers, with cause EXIT_CAUSE_TIMEOUT); `deadlineMs` and `signal`
 * (CallOptions) bound the call itself, which then fails with
 * DeadlineExceeded or CallAborted (the server kills the command of a call
 * that goes away, unless it runs in the background).
 */
export interface ExecOptions extends CallOptions {
  cwd?: string;
  env?: Record<string, string>;
  /** The command's run time limit, enforced by the server; on expiry the cause is EXIT_CAUSE_TIMEOUT. */
  timeoutMs?: number;
  /** Keep stdin open for writeStdin (exec only; otherwise /dev/null). */
  stdin?: boolean;
  pty?: { rows: number; cols: number };
  /** Name for attach / kill. */
  tag?: string;
  /** Keep running after the Start stream ends. */
  background?: boolean;
  maxOutputBytes?: number;
  /** Names of the workspace's secrets the command gets in its environment (no other secret reaches it). */
  secrets?: string[];
}

export interface RunOptions extends Omit<ExecOptions, 'stdin' | 'background'> {
  /** Bytes fed to stdin, which is then closed (at most 1 MiB). */
  stdin?: string | Uint8Array;
}

export interface RunResult {
  stdout: Buffer;
  stderr: Buffer;
  exited: Exited__Output;
  processId: string;
}

export interface GrepOptions extends CallOptions {
  path?: string;
  include?: string;
  ignoreCase?: boolean;
  maxMatches?: number;
  maxDepth?: number;
}

/** A process named by id or tag; a bare string is an id when it looks like one. */
export type ProcessTarget = string | { id: string } | { tag: string };

/** Server process ids: "p_" and hex digits. Tags may look alike: pass {tag} then. */
const PROCESS_ID = /^p_[0-9a-f]{16,}$/;

function target(t: ProcessTarget): { id: string; tag: string } {
  if (typeof t === 'string') return PROCESS_ID.test(t) ? { id: t, tag: '' } : { id: '', tag: t };
  return 'id' in t ? { id: t.id, tag: '' } : { id: '', tag: t.tag };
}

/** What readArchive / writeArchive's trailer reports: counts, and the entries skipped with why. */
export type ArchiveTrailer = ArchiveTrailer__Output;
/** A snapshot of a workspace's files (Workspace.snapshot, Client.listSnapshots). */
export type Snapshot = Snapshot__Output;

/** The archive's format: a POSIX (pax) tar, or the same gzip-compressed. */
export type ArchiveFormat = 'tar' | 'tar.gz';
/** What writeArchive does with an existing `path`: refuse (none), replace it whole, or merge into it. */
export type ArchiveOverwrite = 'none' | 'replace' | 'merge';

function formatField(f: ArchiveFormat | undefined): 'ARCHIVE_FORMAT_TAR' | 'ARCHIVE_FORMAT_TAR_GZIP' {
  if (f === undefined || f === 'tar') return 'ARCHIVE_FORMAT_TAR';
  if (f === 'tar.gz') return 'ARCHIVE_FORMAT_TAR_GZIP';
  throw new TypeError(`format: 'tar' or 'tar.gz', not ${JSON.stringify(f)}`);
}

function overwriteField(o: ArchiveOverwrite | undefined) {
  const v = { none: 'ARCHIVE_OVERWRITE_NONE', replace: 'ARCHIVE_OVERWRITE_REPLACE', merge: 'ARCHIVE_OVERWRITE_MERGE' } as const;
  const f = v[o ?? 'none'];
  if (!f) throw new TypeError(`overwrite: 'none', 'replace' or 'merge', not ${JSON.stringify(o)}`);
  return f;
}

export interface ReadArchiveOptions extends CallOptions {
  /** Default 'tar'. */
  format?: ArchiveFormat;
  /** Globs on the path relative to `path`: an entry is stored when it matches some include (none: all) and no exclude. */
  include?: string[];
  exclude?: string[];
}

export interface WriteArchiveOptions extends CallOptions {
  /** Default 'tar'. */
  format?: ArchiveFormat;
  /** Default 'none': `path` must not exist. */
  overwrite?: ArchiveOverwrite;
  /** Create missing parent directories of `path`. */
  createParents?: boolean;
}

export interface DownloadTreeOptions extends Omit<ReadArchiveOptions, 'format'>, ExtractOptions {}

export type WatchEventType = 'ready' | 'created' | 'modified' | 'removed' | 'moved' | 'overflow' | 'gone';
export type FileTypeName = 'unspecified' | 'regular' | 'directory' | 'symlink' | 'other';

/** One change a watch reports; `path` and `fromPath` are workspace-relative. */
export interface WatchEvent {
  type: WatchEventType;
  path: string;
  /** moved: the old path ('' otherwise). */
  fromPath: string;
  /** The entry's type when known ('unspecified' otherwise). */
  fileType: FileTypeName;
  /** overflow: events dropped (0 when the kernel dropped an unknown number). */
  dropped: number;
  /** Raw bytes of a path that is not valid UTF-8 (`path` is then ''). */
  pathBytes: Buffer;
  fromPathBytes: Buffer;
}

export interface WatchOptions extends CallOptions {
  /** Also every directory below `path`, including ones created later. */
  recursive?: boolean;
  /** Globs on the workspace-relative path (FileSystem.Glob's syntax). */
  include?: string[];
  exclude?: string[];
  /** Events for one path within this window are merged (0: the server's 10 ms; at most 1000). */
  coalesceMs?: number;
}

function watchEvent(m: WatchEvent__Output): WatchEvent {
  return {
    type: String(m.type).replace(/^WATCH_EVENT_/, '').toLowerCase() as WatchEventType,
    path: m.path,
    fromPath: m.fromPath,
    fileType: String(m.fileType).replace(/^FILE_TYPE_/, '').toLowerCase() as FileTypeName,
    dropped: Number(m.dropped),
    pathBytes: m.pathBytes,
    fromPathBytes: m.fromPathBytes,
  };
}

/** What restore() reports: the snapshot restored, and how many commands `force` ended. */
export interface RestoreResult {
  snapshot: Snapshot;
  processesEnded: number;
}

/**
 * A server stream made once per iteration: retried once after a
 * re-resolve when it failed before its first message (nothing was
 * delivered yet), never after. Ending the iteration early (break, return,
 * an abort of `signal`) cancels the call.
 */
async function* serverStream<M>(
  t: Transport,
  resolved: ResolvedCall,
  start: (options: grpc.CallOptions) => grpc.ClientReadableStream<M>,
  reresolve: (err: WorkspaceEvicted | WorkspaceFailed) => Promise<boolean>,
): AsyncGenerator<M> {
  let first = true;
  for (let attempt = 1; ; attempt++) {
    if (resolved.signal?.aborted) throw new CallAborted(resolved.signal.reason);
    const call = start(t.grpcOptions(resolved));
    const unwatch = onAbort(resolved.signal, () => call.cancel());
    try {
      for await (const msg of call as AsyncIterable<M>) {
        first = false;
        yield msg;
      }
      return;
    } catch (e) {
      const err = t.failure(e, resolved.signal);
      if (!(first && attempt === 1 && isLost(err) && (await reresolve(err)))) throw err;
    } finally {
      unwatch();
      call.cancel();
    }
  }
}

/**
 * A tar streamed from the workspace (Workspace.readArchive): iterate it
 * for the archive's bytes; `trailer` is set once the iteration ended.
 */
export class ArchiveStream implements AsyncIterable<Buffer> {
  trailer?: ArchiveTrailer;
  /** @internal */
  constructor(private readonly messages: () => AsyncGenerator<ReadArchiveResponse__Output>) {}

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    for await (const m of this.messages()) {
      if (m.data.length) yield m.data;
      if (m.trailer) this.trailer = m.trailer;
    }
  }

  /** The whole archive as one Buffer (`trailer` is then set). */
  async toBuffer(): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const c of this) parts.push(c);
    return Buffer.concat(parts);
  }
}

/**
 * The events of a watch (Workspace.watch): iterate them; `ready` comes
 * first. Breaking out of the loop, cancel(), or an abort of the call's
 * `signal` ends the call (the loop then ends quietly after cancel()).
 */
export class WatchStream implements AsyncIterable<WatchEvent> {
  private readonly ctl = new AbortController();
  /** @internal */
  constructor(private readonly events: (signal: AbortSignal) => AsyncGenerator<WatchEvent__Output>) {}

  async *[Symbol.asyncIterator](): AsyncIterator<WatchEvent> {
    try {
      for await (const m of this.events(this.ctl.signal)) yield watchEvent(m);
    } catch (e) {
      if (this.ctl.signal.aborted && e instanceof CallAborted) return;
      throw e;
    }
  }

  /** Ends the watch. */
  cancel(): void {
    this.ctl.abort(new Error('watch cancelled'));
  }
}

/** Messages stay well under the server's 4 MiB limit. */
const WRITE_CHUNK = 1024 * 1024;

function toBuffer(c: Uint8Array | string): Buffer {
  return typeof c === 'string' ? Buffer.from(c) : Buffer.from(c.buffer, c.byteOffset, c.byteLength);
}

/** Re-chunks any source into Buffers of at most WRITE_CHUNK bytes. */
async function* chunks(data: WriteData): AsyncGenerator<Buffer> {
  if (typeof data === 'string' || data instanceof Uint8Array) data = [data];
  for await (const c of data as AsyncIterable<Uint8Array | string>) {
    const b = toBuffer(c);
    for (let off = 0; off < b.length; off += WRITE_CHUNK) yield b.subarray(off, off + WRITE_CHUNK);
  }
}

function processConfig(cmd: string | string[], o: ExecOptions): ProcessConfig {
  return {
    ...(Array.isArray(cmd) ? { argv: cmd } : { command: cmd }),
    cwd: o.cwd ?? '',
    env: o.env ?? {},
    timeoutMs: o.timeoutMs ?? 0,
    stdin: o.stdin ?? false,
    pty: o.pty ?? null,
    tag: o.tag ?? '',
    maxOutputBytes: o.maxOutputBytes ?? 0,
    background: o.background ?? false,
    secrets: o.secrets ?? [],
  };
}

function lifetimeOf(l: Lifetime__Output | null | undefined): Lifetime {
  return { ttlMs: l?.ttlMs ?? 0, idleTimeoutMs: l?.idleTimeoutMs ?? 0 };
}

/** Largest SendInput: the server takes at most 1 MiB per call. */
const INPUT_CHUNK = 1024 * 1024;

/** Result of grep(): iterate the matches; `summary` is set once iteration ends. */
export class GrepResults implements AsyncIterable<GrepMatch> {
  summary?: GrepSummary;
  constructor(
    private readonly call: (options: grpc.CallOptions) => grpc.ClientReadableStream<GrepResponse__Output>,
    private readonly t: Transport,
    private readonly opts: CallOptions = {},
    private readonly reresolve?: (err: WorkspaceEvicted | WorkspaceFailed) => Promise<boolean>,
  ) {}

  async *[Symbol.asyncIterator](): AsyncIterator<GrepMatch> {
    // The deadline counts from the start of the iteration, when the call is made.
    const resolved = this.t.resolveCall(this.opts);
    if (resolved.signal?.aborted) throw new CallAborted(resolved.signal.reason);
    let first = true;
    for (let attempt = 1; ; attempt++) {
      const call = this.call(this.t.grpcOptions(resolved));
      const unwatch = onAbort(resolved.signal, () => call.cancel());
      try {
        for await (const msg of call as AsyncIterable<GrepResponse__Output>) {
          first = false;
          yield* msg.matches;
          if (msg.summary) this.summary = msg.summary;
        }
        return;
      } catch (e) {
        const err = this.t.failure(e, resolved.signal);
        if (!(first && attempt === 1 && isLost(err) && this.reresolve && (await this.reresolve(err)))) {
          throw err;
        }
      } finally {
        unwatch();
        call.cancel(); // no-op when finished; stops the search when the caller broke out
      }
    }
  }

  /** All matches as an array. */
  async toArray(): Promise<GrepMatch[]> {
    const out: GrepMatch[] = [];
    for await (const m of this) out.push(m);
    return out;
  }
}

/**
 * An open workspace.
 *
 * Eviction: when a call fails with WORKSPACE_EVICTED, or with
 * WORKSPACE_FAILED whose metadata has resolve="true" (the workspace's
 * sandbox box or docker container ended or lost its agent; its files are
 * intact), and `resolveOnEviction` is set (the client's default, true),
 * the handle resolves its ref once; when that succeeds (the server still
 * holds the workspace's storage and brought it back, with a fresh box or
 * container) it takes the workspace the server names and makes the call
 * once more; when it fails, the call's own error is thrown (a
 * WorkspaceEvicted's `evictionCause` is "expired" for a workspace whose
 * lifetime ran out). Any other WorkspaceFailed (no bubblewrap, an image
 * that cannot be pulled, a bind path gone, ...) is thrown at once, without
 * a Resolve, which would not repair it. Never more than once per call,
 * and only for calls that are safe to repeat: every unary call but close,
 * writeFile of a string or bytes, and the streams (readChunks, grep, exec,
 * attach) only when they failed before their first result: a command
 * whose output already began is never started again.
 */
export class Workspace {
  private _id: string;
  private _ref: WorkspaceRef & { token: Buffer };
  private _node?: string;
  readonly provider: string;
  readonly capabilities: Capabilities__Output | null;
  /** The name given at Open ("" without one). */
  name = '';
  /** The labels given at Open. */
  labels: Record<string, string> = {};
  /** The lifetime in force, as of Open, Resolve, extend() or describe(). */
  lifetime: Lifetime = {};
  /**
   * When the workspace expires if nothing else happens, as of Open,
   * Resolve, extend() or describe(); undefined: never. An idle timeout
   * moves it with every activity.
   */
  expiresAt?: Date;
  /**
   * Re-resolve once on WORKSPACE_EVICTED, or WORKSPACE_FAILED with
   * resolve="true" (see the class); the client's resolveOnEviction by default.
   */
  resolveOnEviction: boolean;
  private readonly onEvictionRetry?: (event: EvictionRetry) => void;
  private closed = false;

  /** @internal */
  constructor(
    private readonly t: Transport,
    w: Workspace__Output,
    node?: string,
    opts: WorkspaceHandleOptions = { resolveOnEviction: true },
  ) {
    this._id = w.id;
    this._node = node;
    this._ref = { token: w.ref?.token ?? Buffer.alloc(0) };
    this.provider = w.provider;
    this.capabilities = w.capabilities;
    this.resolveOnEviction = opts.resolveOnEviction;
    this.onEvictionRetry = opts.onEvictionRetry;
    this.adopt(w);
  }

  /** The workspace id. */
  get id(): string {
    return this._id;
  }

  /** Signed, portable handle: pass it to client.resolve() later or elsewhere. */
  get ref(): WorkspaceRef & { token: Buffer } {
    return this._ref;
  }

  /**
   * Replaces the ref the handle re-resolves with (a ref kept elsewhere).
   * @internal
   */
  set ref(ref: WorkspaceRef & { token: Buffer }) {
    this._ref = ref;
  }

  /**
   * The node that holds the workspace, when a front proxy named one
   * (undefined on a direct connection). Every call about the workspace is
   * sent there; keep it with the ref and pass it to
   * client.resolve(ref, { node }) to come back later.
   */
  get node(): string | undefined {
    return this._node;
  }

  /** Takes the server's view of the workspace (Open, Resolve). */
  private adopt(w: Workspace__Output): void {
    this._id = w.id;
    if (w.ref?.token?.length) this._ref = { token: w.ref.token };
    this.name = w.name ?? '';
    this.labels = { ...(w.labels ?? {}) };
    this.lifetime = lifetimeOf(w.lifetime);
    this.expiresAt = w.expiresAtUnixMs ? new Date(w.expiresAtUnixMs) : undefined;
  }

  /**
   * Resolves the ref after `lost` when a Resolve may repair it
   * (resolvable); true when the call may be made again (the handle now
   * names the resolved workspace).
   */
  private async reresolve(lost: WorkspaceEvicted | WorkspaceFailed): Promise<boolean> {
    if (!resolvable(lost) || !this.resolveOnEviction || this.closed || !this._ref.token.length) return false;
    const workspaceId = this._id;
    try {
      const { res, node } = await this.t.unaryWithNode(
        this.t.workspaces.Resolve.bind(this.t.workspaces),
        { ref: { token: this._ref.token } },
        this._node,
      );
      this._node = node ?? this._node;
      this.adopt(res.workspace!);
    } catch (e) {
      const resolveError = this.t.error(e);
      this.onEvictionRetry?.({ workspaceId, error: lost, recovered: false, resolveError });
      return false;
    }
    this.onEvictionRetry?.({ workspaceId, error: lost, recovered: true });
    return true;
  }

  /** `call`, made once more after a successful re-resolve. */
  private async evictable<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (e) {
      if (!isLost(e) || !(await this.reresolve(e))) throw e;
    }
    return call();
  }

  /** What a process handle of this workspace re-resolves with. */
  private processReresolve = async (err: WorkspaceEvicted | WorkspaceFailed) =>
    (await this.reresolve(err)) ? { workspaceId: this._id, node: this._node } : undefined;

  /**
   * A unary call about this workspace, pinned to its node, made once more
   * after a re-resolve (the request then names the resolved workspace).
   */
  private unary<Req extends { workspaceId?: string }, Res>(
    fn: UnaryFn<Req, Res>,
    req: Req,
    opts: CallOptions | ResolvedCall = {},
  ): Promise<Res> {
    return this.evictable(() => this.t.unary(fn, { ...req, workspaceId: this._id }, this._node, opts));
  }

  /** The ref as a string (base64url), e.g. to store it; client.resolve() takes it back. */
  get refString(): string {
    return this.ref.token.toString('base64url');
  }

  // ---- lifecycle ----------------------------------------------------------

  /**
   * Closes the workspace (removing its storage) and returns whether it was
   * already closed. Idempotent: later calls return true without a round trip.
   */
  async close(opts: CallOptions = {}): Promise<boolean> {
    if (this.closed) return true;
    // Never re-resolved: a workspace that is gone is closed enough.
    const res = await this.t.unary(this.t.workspaces.Close.bind(this.t.workspaces), { workspaceId: this.id }, this._node, opts);
    this.closed = true;
    return res.alreadyClosed;
  }

  /** For `await using ws = await client.open(...)`. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /**
   * The workspace as the server sees it; `server.version` is the server's
   * release. Updates the handle's expiresAt, lifetime, labels and name.
   */
  async describe(opts: CallOptions = {}): Promise<Description> {
    const d = await this.unary(this.t.workspaces.Describe.bind(this.t.workspaces), { workspaceId: this.id }, opts);
    this.expiresAt = d.expiresAtUnixMs ? new Date(d.expiresAtUnixMs) : undefined;
    this.lifetime = lifetimeOf(d.lifetime);
    this.labels = { ...d.labels };
    this.name = d.name;
    return d;
  }

  /**
   * Changes the workspace's lifetime: with `ttlMs` it now expires that long
   * from now (within the server's --max-lifetime from its Open, else
   * Limit); with `idleTimeoutMs` that becomes its idle timeout. At least
   * one of them > 0. Resolves with the lifetime in force; `expiresAt` is
   * updated.
   */
  async extend(lifetime: Lifetime, opts: CallOptions = {}): Promise<Lifetime> {
    const ttlMs = Math.ceil(lifetime.ttlMs ?? 0);
    const idleTimeoutMs = Math.ceil(lifetime.idleTimeoutMs ?? 0);
    if (!(ttlMs > 0) && !(idleTimeoutMs > 0)) throw new TypeError('extend: ttlMs or idleTimeoutMs > 0');
    const res = await this.unary(
      this.t.workspaces.Extend.bind(this.t.workspaces),
      { workspaceId: this.id, lifetime: { ttlMs: Math.max(0, ttlMs), idleTimeoutMs: Math.max(0, idleTimeoutMs) } },
      opts,
    );
    this.expiresAt = res.expiresAtUnixMs ? new Date(res.expiresAtUnixMs) : undefined;
    this.lifetime = lifetimeOf(res.lifetime);
    return this.lifetime;
  }

  /**
   * Gives the workspace secrets (again, after a server restart: until then
   * its commands fail with SecretsMissing), merged into what it has, or
   * with `replace` exactly these.
   */
  setSecrets(secrets: Record<string, string>, opts: { replace?: boolean } & CallOptions = {}): Promise<SecretsState> {
    return this.unary(
      this.t.workspaces.SetSecrets.bind(this.t.workspaces),
      { workspaceId: this.id, secrets, replace: opts.replace ?? false },
      opts,
    );
  }

  // ---- files --------------------------------------------------------------

  /** The whole file (or a range of it) as one Buffer. */
  async readFile(path: string, opts: ReadOptions = {}): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const c of this.readChunks(path, opts)) parts.push(c);
    return Buffer.concat(parts);
  }

  /** The file as text (UTF-8 unless told otherwise). */
  async readText(path: string, encoding: BufferEncoding = 'utf8', opts: ReadOptions = {}): Promise<string> {
    return (await this.readFile(path, opts)).toString(encoding);
  }

  /**
   * The file's chunks (at most 256 KiB each) as they arrive. The call, and
   * its deadline, start with the iteration.
   */
  async *readChunks(path: string, opts: ReadOptions = {}): AsyncGenerator<Buffer> {
    const resolved = this.t.resolveCall(opts);
    let first = true;
    for (let attempt = 1; ; attempt++) {
      if (resolved.signal?.aborted) throw new CallAborted(resolved.signal.reason);
      const call = this.t.fs.ReadFile(
        { workspaceId: this.id, path, offset: opts.offset ?? 0, length: opts.length ?? 0 },
        this.t.metadata(this.node),
        this.t.grpcOptions(resolved),
      );
      const unwatch = onAbort(resolved.signal, () => call.cancel());
      try {
        for await (const msg of call as AsyncIterable<ReadFileResponse__Output>) {
          first = false;
          if (msg.data.length) yield msg.data;
        }
        return;
      } catch (e) {
        const err = this.t.failure(e, resolved.signal);
        // Nothing was read yet: safe to read again after a re-resolve.
        if (!(first && attempt === 1 && isLost(err) && (await this.reresolve(err)))) throw err;
      } finally {
        unwatch();
        call.cancel(); // no-op when finished; frees the call when the caller stopped early
      }
    }
  }

  /** The file as a Node Readable (which is also an async iterable of Buffers). */
  readFileStream(path: string, opts: ReadOptions = {}): Readable {
    return Readable.from(this.readChunks(path, opts), { objectMode: false });
  }

  /**
   * Writes a file from a string, bytes, or any (async) iterable of chunks
   * such as a Readable. The new content becomes visible atomically when the
   * last chunk is sent; on any failure (an abort or a deadline included)
   * the old content stays.
   */
  writeFile(path: string, data: WriteData, opts: WriteOptions = {}): Promise<WriteResult> {
    const resolved = this.t.resolveCall(opts);
    // A string or bytes can be sent again after a re-resolve; an iterable
    // is consumed by the first attempt.
    if (typeof data === 'string' || data instanceof Uint8Array) {
      return this.evictable(() => this.writeOnce(path, data, opts, resolved));
    }
    return this.writeOnce(path, data, opts, resolved);
  }

  private writeOnce(path: string, data: WriteData, opts: WriteOptions, resolved: ResolvedCall): Promise<WriteResult> {
    const signal = resolved.signal;
    if (signal?.aborted) return Promise.reject(new CallAborted(signal.reason));
    return new Promise<WriteResult>((resolve, reject) => {
      let failed: WorkspacedError | undefined;
      let unwatch = () => undefined as void;
      const call = this.t.fs.WriteFile(this.t.metadata(this.node), this.t.grpcOptions(resolved), (err, res) => {
        unwatch();
        if (err) {
          failed = this.t.failure(err, signal);
          reject(failed);
        } else {
          resolve({ info: res!.info!, bytesWritten: res!.bytesWritten, sha256: res!.sha256 } as WriteResult);
        }
      });
      unwatch = onAbort(signal, () => {
        failed = new CallAborted(signal!.reason);
        call.cancel();
      });
      const send = (msg: WriteFileRequest) =>
        new Promise<void>((res) => {
          // write()'s callback gives backpressure: the next chunk is read from
          // the source only when this one has gone to the transport.
          call.write(msg, () => res());
        });

      (async () => {
        await send({
          header: {
            workspaceId: this.id,
            path,
            mode: opts.mode ?? 0,
            createParents: opts.createParents ?? false,
            ifMatch: opts.ifMatch ?? '',
            ifAbsent: opts.ifAbsent ?? false,
            // The last message carries finish: a cancelled stream, which can
            // reach the server looking like a half-close, never commits.
            requireFinish: true,
          },
          // An empty source commits with the header; otherwise the last
          // data chunk carries finish (one chunk of look-ahead below).
          finish: false,
        });
        let pending: Buffer | undefined;
        for await (const c of chunks(data)) {
          if (failed) return; // the server already refused (e.g. SIZE_CAP): stop reading the source
          if (pending) await send({ data: pending });
          pending = c;
        }
        if (failed) return;
        // `finish` makes the commit explicit rather than relying on the
        // half-close, which a cancelled stream can look like.
        await send(pending ? { data: pending, finish: true } : { finish: true });
        call.end();
      })().catch((e) => {
        // The source itself failed: cancel, so the server commits nothing.
        call.cancel();
        reject(e);
      });
    });
  }

  stat(path: string, opts: CallOptions = {}): Promise<FileInfo> {
    return this
      .unary(this.t.fs.Stat.bind(this.t.fs), { workspaceId: this.id, path }, opts)
      .then((r) => r.info!);
  }

  /**
   * Entries of a directory (depth > 1 walks down); `truncated` when cut
   * short, and `truncatedReason` saying what did ("max_results",
   * "response_size", "entries_budget"; "" from a server that predates
   * reasons).
   */
  listDir(
    path = '.',
    opts: { depth?: number; maxEntries?: number } & CallOptions = {},
  ): Promise<{ entries: FileInfo[]; truncated: boolean; truncatedReason: string }> {
    return this.unary(
      this.t.fs.ListDir.bind(this.t.fs),
      {
        workspaceId: this.id,
        path,
        depth: opts.depth ?? 0,
        maxEntries: opts.maxEntries ?? 0,
      },
      opts,
    );
  }

  makeDir(path: string, opts: { parents?: boolean; mode?: number } & CallOptions = {}): Promise<FileInfo> {
    return this
      .unary(
        this.t.fs.MakeDir.bind(this.t.fs),
        { workspaceId: this.id, path, parents: opts.parents ?? false, mode: opts.mode ?? 0 },
        opts,
      )
      .then((r) => r.info!);
  }

  /** Removes a file, symlink or (with recursive) a directory tree; returns entries removed. */
  remove(path: string, opts: { recursive?: boolean } & CallOptions = {}): Promise<number> {
    return this
      .unary(this.t.fs.Remove.bind(this.t.fs), { workspaceId: this.id, path, recursive: opts.recursive ?? false }, opts)
      .then((r) => r.removed);
  }

  move(from: string, to: string, opts: { replace?: boolean } & CallOptions = {}): Promise<FileInfo> {
    return this
      .unary(
        this.t.fs.Move.bind(this.t.fs),
        { workspaceId: this.id, fromPath: from, toPath: to, replace: opts.replace ?? false },
        opts,
      )
      .then((r) => r.info!);
  }

  /** Paths matching `pattern` (`**`, `*`, `?`, `[...]`); truncation as for listDir. */
  glob(
    pattern: string,
    opts: { path?: string; maxResults?: number } & CallOptions = {},
  ): Promise<{ matches: FileInfo[]; truncated: boolean; truncatedReason: string }> {
    return this.unary(
      this.t.fs.Glob.bind(this.t.fs),
      {
        workspaceId: this.id,
        pattern,
        path: opts.path ?? '',
        maxResults: opts.maxResults ?? 0,
      },
      opts,
    );
  }

  /** PCRE2 search; iterate the matches as they stream in. */
  grep(pattern: string, opts: GrepOptions = {}): GrepResults {
    return new GrepResults(
      (options) =>
        this.t.fs.Grep(
          {
            workspaceId: this.id,
            pattern,
            path: opts.path ?? '',
            include: opts.include ?? '',
            ignoreCase: opts.ignoreCase ?? false,
            maxMatches: opts.maxMatches ?? 0,
            maxDepth: opts.maxDepth ?? 0,
          },
          this.t.metadata(this.node),
          options,
        ),
      this.t,
      opts,
      (err) => this.reresolve(err),
    );
  }

  /** Replaces oldText (exactly once unless replaceAll) atomically. */
  editFile(
    path: string,
    oldText: string,
    newText: string,
    opts: { replaceAll?: boolean; ifMatch?: string } & CallOptions = {},
  ): Promise<EditFileResponse__Output> {
    return this.unary(
      this.t.fs.EditFile.bind(this.t.fs),
      {
        workspaceId: this.id,
        path,
        oldText,
        newText,
        replaceAll: opts.replaceAll ?? false,
        ifMatch: opts.ifMatch ?? '',
      },
      opts,
    );
  }

  // ---- watch, archives, snapshots ----------------------------------------

  /**
   * Watches a directory (or a file) for changes, whoever makes them. The
   * first event is `ready`: from then on every change is reported. The
   * call has no default deadline; end it with cancel(), by breaking out of
   * the loop, or through `signal`. Made again once after a re-resolve
   * when it failed before its first event.
   */
  watch(path = '.', opts: WatchOptions = {}): WatchStream {
    return new WatchStream((stop) => {
      // The caller's signal and cancel() both end the call.
      const both = new AbortController();
      const relay = (s: AbortSignal) => onAbort(s, () => both.abort(s.reason));
      relay(stop);
      if (opts.signal) relay(opts.signal);
      const resolved = this.t.resolveCall({ ...opts, signal: both.signal }, false);
      return serverStream(
        this.t,
        resolved,
        (options) =>
          this.t.fs.Watch(
            {
              workspaceId: this.id,
              path,
              recursive: opts.recursive ?? false,
              include: opts.include ?? [],
              exclude: opts.exclude ?? [],
              coalesceMs: opts.coalesceMs ?? 0,
            },
            this.t.metadata(this.node),
            options,
          ),
        (err) => this.reresolve(err),
      );
    });
  }

  /**
   * A tar (or tar.gz) of `path` ("." for the whole workspace), streamed:
   * iterate the returned ArchiveStream for its bytes; its `trailer` (counts,
   * skipped entries) is set when the iteration ends. The call and its
   * deadline start with the iteration; made again once after a re-resolve
   * when it failed before its first message.
   */
  readArchive(path = '.', opts: ReadArchiveOptions = {}): ArchiveStream {
    const format = formatField(opts.format);
    return new ArchiveStream(() =>
      serverStream(
        this.t,
        this.t.resolveCall(opts),
        (options) =>
          this.t.fs.ReadArchive(
            { workspaceId: this.id, path, format, include: opts.include ?? [], exclude: opts.exclude ?? [] },
            this.t.metadata(this.node),
            options,
          ),
        (err) => this.reresolve(err),
      ),
    );
  }

  /**
   * Copies `path` of the workspace into the local directory `localDir`
   * (made when missing) through readArchive, extracting on this side
   * without ever writing outside `localDir`: absolute names, ".."
   * components, entries through a symlink, hard links to anything but an
   * earlier entry, and symlinks that lead outside (unless
   * allowOutsideSymlinks) are refused with UnsafeArchive. Resolves with
   * the server's trailer.
   */
  async downloadTree(path: string, localDir: string, opts: DownloadTreeOptions = {}): Promise<ArchiveTrailer> {
    const stream = this.readArchive(path, { ...opts, format: 'tar' });
    await extractTar(stream, localDir, opts);
    return stream.trailer!;
  }

  /**
   * Extracts a tar (bytes, or any (async) iterable of chunks such as a
   * Readable) into `path`. The server stages it and publishes it only when
   * every entry passed: a refused archive (BadArchive with `entry` and
   * `problem`), a failure or an abort leaves the workspace as it was.
   * Commits on an explicit finish with the last message. Not made again
   * on failure unless the workspace was evicted before it ran.
   */
  writeArchive(path: string, data: WriteData, opts: WriteArchiveOptions = {}): Promise<ArchiveTrailer> {
    const resolved = this.t.resolveCall(opts);
    const header = {
      workspaceId: this.id,
      path,
      format: formatField(opts.format),
      overwrite: overwriteField(opts.overwrite),
      createParents: opts.createParents ?? false,
      requireFinish: true,
    };
    const signal = resolved.signal;
    if (signal?.aborted) return Promise.reject(new CallAborted(signal.reason));
    return new Promise<ArchiveTrailer>((resolve, reject) => {
      let failed: WorkspacedError | undefined;
      let unwatch = () => undefined as void;
      const call = this.t.fs.WriteArchive(this.t.metadata(this.node), this.t.grpcOptions(resolved), (err, res) => {
        unwatch();
        if (err) {
          failed = this.t.failure(err, signal);
          reject(failed);
        } else {
          resolve(res!.trailer!);
        }
      });
      unwatch = onAbort(signal, () => {
        failed = new CallAborted(signal!.reason);
        call.cancel();
      });
      const send = (msg: WriteArchiveRequest) => new Promise<void>((res) => call.write(msg, () => res()));
      (async () => {
        await send({ header, finish: false });
        let pending: Buffer | undefined;
        for await (const c of chunks(data)) {
          if (failed) return;
          if (pending) await send({ data: pending });
          pending = c;
        }
        if (failed) return;
        await send(pending ? { data: pending, finish: true } : { finish: true });
        call.end();
      })().catch((e) => {
        call.cancel();
        reject(e);
      });
    });
  }

  /**
   * Uploads the local directory `localDir`'s contents to `path` through
   * writeArchive: a tar made here (symlinks stored as links, never
   * followed; FIFOs, sockets and devices left out), gzip-compressed with
   * format 'tar.gz'.
   */
  uploadTree(localDir: string, path: string, opts: WriteArchiveOptions = {}): Promise<ArchiveTrailer> {
    const tar = Readable.from(tarDirectory(localDir));
    const data = opts.format === 'tar.gz' ? tar.pipe(createGzip()) : tar;
    return this.writeArchive(path, data, opts);
  }

  /** Takes a snapshot of the workspace's files (see Workspaces.Snapshot); `name` unique among the tenant's snapshots. */
  async snapshot(name = '', labels: Record<string, string> = {}, opts: CallOptions = {}): Promise<Snapshot> {
    const res = await this.unary(this.t.workspaces.Snapshot.bind(this.t.workspaces), { workspaceId: this.id, name, labels }, opts);
    return res.snapshot!;
  }

  /**
   * Puts the workspace's files back to a snapshot's content (of any
   * workspace of the tenant). Refused with Busy while commands run,
   * unless `force`, which ends them first.
   */
  async restore(snapshotId: string, opts: { force?: boolean } & CallOptions = {}): Promise<RestoreResult> {
    const res = await this.unary(
      this.t.workspaces.Restore.bind(this.t.workspaces),
      { workspaceId: this.id, snapshotId, force: opts.force ?? false },
      opts,
    );
    return { snapshot: res.snapshot!, processesEnded: res.processesEnded };
  }

  // ---- exec ---------------------------------------------------------------

  /**
   * Starts a command (argv array: run directly; string: tokenized by the
   * server's shell guard, never by a shell) and returns its handle at once;
   * `await proc.started` for the pid and id, iterate it for output, and
   * `await proc.wait()` for the exit record. An abort of `signal` before
   * the process started rejects `started` and `wait()` with CallAborted;
   * after, it is cancel(): wait() yields the record, cause
   * EXIT_CAUSE_CANCELLED.
   */
  exec(cmd: string | string[], opts: ExecOptions = {}): Process {
    const call = this.t.resolveCall(opts, false);
    const p = Process.start(this.t, { workspaceId: this.id, process: processConfig(cmd, opts) }, this.node, call);
    p.reresolve = this.processReresolve;
    p.control = (id) => this.process({ id });
    return p;
  }

  /**
   * Runs a command to completion (unary Exec.Run): head/tail of each stream
   * plus the exit record. `timeoutMs` limits the command (the answer then
   * has cause EXIT_CAUSE_TIMEOUT); `deadlineMs` and `signal` the call
   * (DeadlineExceeded, CallAborted), whose end also ends the command.
   */
  async run(cmd: string | string[], opts: RunOptions = {}): Promise<RunResult> {
    const { stdin, ...rest } = opts;
    const res = await this.unary(
      this.t.exec.Run.bind(this.t.exec),
      {
        workspaceId: this.id,
        process: processConfig(cmd, rest),
        stdinData: stdin === undefined ? Buffer.alloc(0) : toBuffer(stdin),
      },
      this.t.resolveCall(opts, false),
    );
    return { stdout: res.stdout, stderr: res.stderr, exited: res.exited!, processId: res.processId };
  }

  /**
   * Reconnects to a running or recently finished process, replaying from
   * `offset`. An abort of `signal` detaches (the process keeps running).
   */
  attach(t: ProcessTarget, opts: { offset?: number } & CallOptions = {}): AttachedProcess {
    const p = AttachedProcess.open(this.t, this.id, target(t), opts.offset ?? 0, this.node, this.t.resolveCall(opts, false));
    p.reresolve = this.processReresolve;
    p.control = (id) => this.process({ id });
    return p;
  }

  /** The workspace's running and recently finished processes. */
  async ps(opts: CallOptions = {}): Promise<ProcessInfo[]> {
    const res = await this.unary(this.t.exec.ListProcesses.bind(this.t.exec), { workspaceId: this.id }, opts);
    return res.processes;
  }

  /**
   * A handle on a process of this workspace by id or tag, whether or not
   * this client started it (another client, a previous run): its stdin
   * and terminal through the unary Exec.SendInput, CloseInput and Resize,
   * its signals, and attach() for its output. Makes no call: a process
   * that does not exist fails the first one with NoSuchProcess.
   */
  process(t: ProcessTarget): ProcessHandle {
    const which = target(t);
    if (!which.id && !which.tag) throw new TypeError('process: an id or a tag');
    return new ProcessHandle(this, which, {
      unary: (fn, req, opts) => this.unary(fn, req, opts),
      exec: this.t.exec,
    });
  }

  /** Signals a process tree by id or tag (default SIGTERM). */
  async kill(t: ProcessTarget, sig: SignalLike = 'SIGTERM', opts: CallOptions = {}): Promise<void> {
    await this.unary(
      this.t.exec.SendSignal.bind(this.t.exec),
      {
        workspaceId: this.id,
        ...target(t),
        signal: signalNumber(sig),
      },
      opts,
    );
  }
}

/** What a ProcessHandle calls through its workspace. @internal */
interface HandleCalls {
  unary<Req extends { workspaceId?: string }, Res>(fn: UnaryFn<Req, Res>, req: Req, opts?: CallOptions): Promise<Res>;
  exec: Transport['exec'];
}

/**
 * A process of a workspace by id or tag (Workspace.process): each method is
 * one unary call, so it works for a process this client did not start.
 *
 * `inputOffset` is the process's stdin offset as the last sendInput or
 * closeInput reported it (undefined before the first). To make a retried
 * send exactly-once, give it an explicit offset: bytes the process already
 * took are skipped, and an offset past them is InputGap (its
 * `expectedOffset` says where to resume).
 */
export class ProcessHandle implements InputControl {
  readonly id: string;
  readonly tag: string;
  inputOffset?: number;

  /** @internal */
  constructor(
    private readonly ws: Workspace,
    which: { id: string; tag: string },
    private readonly calls: HandleCalls,
  ) {
    this.id = which.id;
    this.tag = which.tag;
  }

  private get target(): ProcessTarget {
    return this.id ? { id: this.id } : { tag: this.tag };
  }

  async sendInput(data: Buffer | Uint8Array | string, opts: SendInputOptions = {}): Promise<number> {
    const b = typeof data === 'string' ? Buffer.from(data) : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    if (opts.offset !== undefined && (!Number.isInteger(opts.offset) || opts.offset < 0)) {
      throw new TypeError(`offset: an integer >= 0, not ${String(opts.offset)}`);
    }
    let at = opts.offset;
    let off = 0;
    do {
      const piece = b.subarray(off, off + INPUT_CHUNK);
      const res = await this.calls.unary(
        this.calls.exec.SendInput.bind(this.calls.exec),
        { workspaceId: this.ws.id, id: this.id, tag: this.tag, data: piece, offset: at ?? 0, append: at === undefined },
        opts,
      );
      this.inputOffset = res.offset;
      if (at !== undefined) at += piece.length;
      off += piece.length;
    } while (off < b.length);
    return this.inputOffset!;
  }

  async closeInput(opts: CallOptions = {}): Promise<number> {
    const res = await this.calls.unary(
      this.calls.exec.CloseInput.bind(this.calls.exec),
      { workspaceId: this.ws.id, id: this.id, tag: this.tag },
      opts,
    );
    this.inputOffset = res.offset;
    return res.offset;
  }

  async resize(rows: number, cols: number, opts: CallOptions = {}): Promise<void> {
    await this.calls.unary(
      this.calls.exec.Resize.bind(this.calls.exec),
      { workspaceId: this.ws.id, id: this.id, tag: this.tag, size: { rows, cols } },
      opts,
    );
  }

  /** Sends a signal to the process's tree (default SIGTERM). */
  signal(sig: SignalLike = 'SIGTERM', opts: CallOptions = {}): Promise<void> {
    return this.ws.kill(this.target, sig, opts);
  }

  /** Follows the process's output from `offset` (see Workspace.attach). */
  attach(opts: { offset?: number } & CallOptions = {}): AttachedProcess {
    return this.ws.attach(this.target, opts);
  }

  /** The process's ProcessInfo (running, stdinOpen, stdinOffset, pty, ...), from ListProcesses. */
  async info(opts: CallOptions = {}): Promise<ProcessInfo> {
    const found = (await this.ws.ps(opts)).filter((p) => (this.id ? p.id === this.id : p.tag === this.tag));
    if (!found.length) throw new NoSuchProcess(5, 'NO_SUCH_PROCESS', `no such process: ${this.id || this.tag}`);
    return found[found.length - 1];
  }
}
