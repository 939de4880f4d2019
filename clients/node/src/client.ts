// Entry point: connect() -> Client -> open()/resolve() -> Workspace.
import * as grpc from '@grpc/grpc-js';

import { WorkspacedError } from './errors';
import type { CallOptions } from './transport';
import { resolveProtoDir } from './proto';
import { DEFAULT_RETRY_POLICY, RetryPolicy, withRetry } from './retry';
import { TlsFiles, tlsFiles, TlsOptions, Transport } from './transport';
import { randomUUID } from 'node:crypto';

import { EvictionRetry, Workspace } from './workspace';
import type { Lifetime, Snapshot } from './workspace';
import type { Capabilities } from '../gen/workspace/v1/Capabilities';
import type { DockerConfig } from '../gen/workspace/v1/DockerConfig';
import type { LocalBashConfig } from '../gen/workspace/v1/LocalBashConfig';
import type { LocalSandboxConfig } from '../gen/workspace/v1/LocalSandboxConfig';
import type { OpenRequest } from '../gen/workspace/v1/OpenRequest';
import type { Policy__Output } from '../gen/workspace/v1/Policy';
import type { ProviderInfo__Output } from '../gen/workspace/v1/ProviderInfo';
import type { RuntimeInfo__Output } from '../gen/workspace/v1/RuntimeInfo';
import type { WorkspaceRef } from '../gen/workspace/v1/WorkspaceRef';
import type { WorkspaceSummary__Output } from '../gen/workspace/v1/WorkspaceSummary';
import type { ListRequest } from '../gen/workspace/v1/ListRequest';

export type { Capabilities, CallOptions, DockerConfig, LocalBashConfig, LocalSandboxConfig, TlsFiles, TlsOptions };
export { tlsFiles };
export type ProviderInfo = ProviderInfo__Output;
/** A docker runtime ("runc", "runsc") and whether an Open may name it now. */
export type RuntimeInfo = RuntimeInfo__Output;
export type WorkspaceSummary = WorkspaceSummary__Output;
/** One page of Client.list(): the summaries, and the token of the next page ("" on the last). */
export type WorkspacePage = WorkspaceSummary[] & { nextPageToken: string };
/** The operator's policy for the caller's tenant: what an Open may ask for. */
export type Policy = Policy__Output;

/** The server's default listen address: a unix socket. */
export const DEFAULT_ADDRESS = 'unix:/run/workspaced/workspaced.sock';

/**
 * Checks the form of a `unix:` address and returns `address` as given.
 * grpc-js would take `unix:relative/path` relative to the current directory
 * and read `unix://name/path` as a host `name` and a path `/path`, so that
 * a mistyped address would quietly dial another socket. Only an absolute
 * path is accepted: `unix:/ABSOLUTE/PATH` or `unix:///ABSOLUTE/PATH`.
 * Any other address (host:port, dns:..., ipv4:...) is left to grpc-js.
 */
export function checkAddress(address: string): string {
  if (!address.startsWith('unix:')) return address;
  const rest = address.slice('unix:'.length);
  const path = rest.startsWith('//') ? rest.slice(2) : rest;
  if (!path.startsWith('/') || path === '/') {
    throw new TypeError(`address ${JSON.stringify(address)}: a unix socket is unix:/ABSOLUTE/PATH (or unix:///ABSOLUTE/PATH)`);
  }
  return address;
}

export interface ConnectOptions {
  /**
   * Where the server listens: `unix:/ABSOLUTE/PATH` (a unix socket; the
   * server names the caller's tenant from its uid) or `host:port` (TCP,
   * which the server serves only with a token or a client certificate).
   * Default $WORKSPACED_ADDR, else DEFAULT_ADDRESS
   * (unix:/run/workspaced/workspaced.sock).
   */
  address?: string;
  /** Bearer token; default $WORKSPACED_TOKEN. */
  token?: string;
  /**
   * true for TLS with the system roots, or roots / client cert / name
   * override as PEM (tlsFiles() reads them from paths).
   */
  tls?: TlsOptions | boolean;
  /** Where workspace/v1/*.proto live; default $WORKSPACED_PROTO_DIR, else the repository's proto/. */
  protoDir?: string;
  /** Default retry policy of open() (merged over DEFAULT_RETRY_POLICY). */
  openRetry?: Partial<RetryPolicy>;
  /**
   * The default deadline of a call, in milliseconds from its start, for
   * every call but exec, run and attach (whose length is the command's:
   * give those a `deadlineMs` of their own when wanted). A call's own
   * `deadlineMs` overrides it (0: none for that call). Default: none.
   */
  deadlineMs?: number;
  channelOptions?: grpc.ChannelOptions;
  /**
   * The default of Workspace.resolveOnEviction (default true): a call that
   * meets WORKSPACE_EVICTED, or WORKSPACE_FAILED with metadata
   * resolve="true", resolves the workspace's ref once and, when that
   * succeeds, is made once more (see Workspace).
   */
  resolveOnEviction?: boolean;
  /** Called each time a workspace handle tried that (recovered or not), e.g. to log or count it. */
  onEvictionRetry?: (event: EvictionRetry) => void;
}

/**
 * The provider of a new workspace: a kind name, or the OpenRequest oneof
 * member with its config: { docker: { image: 'alpine', runtime: 'runsc' } }
 * (runtime '' is the daemon's default, runc; 'runsc' is gVisor), or
 * { localBash: { pidsLimit: 64, memoryMb: 512, cpus: 1 } } (caps the server
 * enforces or refuses the Open over; 0 or absent: none).
 */
export type ProviderConfig =
  | 'memory'
  | 'local-bash'
  | 'local-sandbox'
  | { memory: Record<string, never> }
  | { localBash: LocalBashConfig }
  | { localSandbox: LocalSandboxConfig }
  | { docker: DockerConfig };

export interface OpenOptions extends CallOptions {
  /** Overrides of the client's open retry policy; { maxAttempts: 1 } disables retries. */
  retry?: Partial<RetryPolicy>;
  /**
   * How long it lives, in milliseconds: `ttlMs` from Open (extend() moves
   * it; absent: no limit of its own, the server's --max-lifetime still
   * caps it), `idleTimeoutMs` after its last activity (absent: the
   * server's default).
   */
  lifetime?: Lifetime;
  /** Labels, for list({ labelSelector }). */
  labels?: Record<string, string>;
  /** A name unique among the caller's open workspaces ([a-z0-9-], 1-63); taken: AlreadyExists. */
  name?: string;
  /** Environment every command of the workspace gets (a command's own env overrides it). */
  env?: Record<string, string>;
  /**
   * Secrets, held in the server's memory only: a command gets one in its
   * environment only when it names it (ExecOptions.secrets).
   */
  secrets?: Record<string, string>;
  /**
   * Makes the open idempotent: an open with the same id within 10 minutes
   * returns the workspace the first one opened. Default: a fresh random
   * one (newRequestId()) per open() call, sent again by every retry of
   * that call, so that a retry whose first attempt's answer was lost can
   * never open a second workspace.
   */
  requestId?: string;
  /** Overrides the client's resolveOnEviction for this workspace. */
  resolveOnEviction?: boolean;
  /** Fork: the new workspace's files start as a copy of this snapshot (NoSuchSnapshot when unknown). */
  fromSnapshot?: string;
  /**
   * Shadow: the files start as a copy of this host directory, an absolute
   * canonical path inside one the operator allows (--source-path-allow;
   * else SourcePathDenied). Not with fromSnapshot.
   */
  fromPath?: string;
}

export interface ListSnapshotsOptions extends CallOptions {
  /** Only snapshots taken from this workspace. */
  workspaceId?: string;
  /** As ListOptions.labelSelector, on the snapshots' labels. */
  labelSelector?: string;
  name?: string;
  pageSize?: number;
  pageToken?: string;
}

/** One page of Client.listSnapshots(): the snapshots, and the token of the next page ("" on the last). */
export type SnapshotPage = Snapshot[] & { nextPageToken: string };

export interface ListOptions extends CallOptions {
  /**
   * Comma-separated requirements on the labels, all of which must hold:
   * "key=value", "key!=value", "key", "!key".
   */
  labelSelector?: string;
  /** Only the workspace of this name. */
  name?: string;
  /** At most this many per page (0 or absent: the server's 100; at most 1000). */
  pageSize?: number;
  /** nextPageToken of the previous page, with the same filters. */
  pageToken?: string;
}

/** A fresh random request id for Open (what open() sends when given none). */
export function newRequestId(): string {
  return `node-${randomUUID()}`;
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export interface ResolveOptions extends CallOptions {
  /**
   * The node that holds the workspace behind a front proxy (Workspace.node,
   * kept with the ref): the call goes there and the workspace is pinned to
   * it. A front refuses a name it does not know with UNAVAILABLE. Omit it
   * on a direct connection.
   */
  node?: string;
}

function providerField(p: ProviderConfig): Pick<OpenRequest, 'memory' | 'localBash' | 'localSandbox' | 'docker'> {
  switch (p) {
    case 'memory':
      return { memory: {} };
    case 'local-bash':
      return { localBash: {} };
    case 'local-sandbox':
      return { localSandbox: {} };
  }
  if (typeof p !== 'object' || p === null || Object.keys(p).length !== 1) {
    throw new TypeError('provider: a kind name or an object with exactly one of memory, localBash, localSandbox, docker');
  }
  return p;
}

/** The OpenRequest that Client.open sends. @internal */
export function openRequest(provider: ProviderConfig, capabilities?: Capabilities, opts: OpenOptions = {}): OpenRequest {
  if (opts.requestId !== undefined && !REQUEST_ID.test(opts.requestId)) {
    throw new TypeError(`requestId: 1-128 characters of [A-Za-z0-9._:-], not ${JSON.stringify(opts.requestId)}`);
  }
  const ms = (v: number | undefined, what: string) => {
    if (v === undefined) return 0;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new TypeError(`${what}: milliseconds >= 0, not ${String(v)}`);
    return Math.ceil(v);
  };
  const lifetime = opts.lifetime
    ? { ttlMs: ms(opts.lifetime.ttlMs, 'lifetime.ttlMs'), idleTimeoutMs: ms(opts.lifetime.idleTimeoutMs, 'lifetime.idleTimeoutMs') }
    : null;
  // Only the fields given: the encoder writes an empty string it is handed.
  return {
    ...providerField(provider),
    capabilities: capabilities ?? null,
    ...(lifetime ? { lifetime } : {}),
    ...(opts.labels ? { labels: opts.labels } : {}),
    ...(opts.name ? { name: opts.name } : {}),
    ...(opts.env ? { env: opts.env } : {}),
    ...(opts.secrets ? { secrets: opts.secrets } : {}),
    ...(opts.requestId ? { requestId: opts.requestId } : {}),
    ...(opts.fromSnapshot ? { fromSnapshot: opts.fromSnapshot } : {}),
    ...(opts.fromPath ? { fromPath: opts.fromPath } : {}),
  };
}

export class Client {
  /** @internal */
  readonly transport: Transport;
  readonly address: string;
  private readonly openRetry: RetryPolicy;
  /** The default of Workspace.resolveOnEviction for the workspaces this client opens and resolves. */
  resolveOnEviction: boolean;
  /** Called with an EvictionRetry each time a workspace handle re-resolved (or tried to). */
  onEvictionRetry?: (event: EvictionRetry) => void;

  constructor(opts: ConnectOptions = {}) {
    // An empty $WORKSPACED_ADDR counts as unset, like $WORKSPACED_TOKEN.
    this.address = checkAddress(opts.address ?? (process.env.WORKSPACED_ADDR || DEFAULT_ADDRESS));
    const token = opts.token ?? (process.env.WORKSPACED_TOKEN || undefined);
    this.transport = new Transport({
      address: this.address,
      token,
      tls: opts.tls,
      protoDir: resolveProtoDir(opts.protoDir),
      channelOptions: opts.channelOptions,
      defaultDeadlineMs: opts.deadlineMs,
    });
    this.openRetry = { ...DEFAULT_RETRY_POLICY, ...opts.openRetry };
    this.resolveOnEviction = opts.resolveOnEviction ?? true;
    this.onEvictionRetry = opts.onEvictionRetry;
  }

  /** What a new Workspace handle takes from its client. */
  private handleOptions(resolveOnEviction?: boolean) {
    return {
      resolveOnEviction: resolveOnEviction ?? this.resolveOnEviction,
      onEvictionRetry: (e: EvictionRetry) => this.onEvictionRetry?.(e),
    };
  }

  /**
   * Opens a workspace. Transient failures (ErrorInfo transient=true, or
   * UNAVAILABLE such as a server not up yet) are retried with exponential
   * backoff and jitter; any other error is thrown at once, typed. Behind a
   * front proxy the workspace is pinned to the node that answered
   * (Workspace.node); Open itself is never pinned, so a retry may land on
   * another node. The deadline (`deadlineMs`) covers all the attempts and
   * the backoffs between them; an abort of `signal` ends them at once.
   * Every attempt sends the same requestId (see OpenOptions.requestId).
   */
  open(provider: ProviderConfig, capabilities?: Capabilities, opts: OpenOptions = {}): Promise<Workspace> {
    const policy = { ...this.openRetry, ...opts.retry };
    let req: OpenRequest;
    try {
      req = openRequest(provider, capabilities, { ...opts, requestId: opts.requestId ?? newRequestId() });
    } catch (e) {
      return Promise.reject(e);
    }
    const t = this.transport;
    const call = t.resolveCall(opts);
    const handle = this.handleOptions(opts.resolveOnEviction);
    return withRetry(
      policy,
      async () => {
        const { res, node } = await t.unaryWithNode(t.workspaces.Open.bind(t.workspaces), req, undefined, call);
        return new Workspace(t, res.workspace!, node, handle);
      },
      opts.signal,
    );
  }

  /**
   * A workspace from its ref (the object, its token bytes, or
   * Workspace.refString), pinned to `opts.node` or to the node the
   * response names.
   */
  async resolve(ref: WorkspaceRef | Buffer | string, opts: ResolveOptions = {}): Promise<Workspace> {
    const token = typeof ref === 'string' ? Buffer.from(ref, 'base64url') : Buffer.isBuffer(ref) ? ref : ref.token;
    const t = this.transport;
    const { res, node } = await t.unaryWithNode(t.workspaces.Resolve.bind(t.workspaces), { ref: { token } }, opts.node, opts);
    return new Workspace(t, res.workspace!, node ?? opts.node, this.handleOptions());
  }

  /** All four provider kinds, probed live by the server. */
  async providers(opts: CallOptions = {}): Promise<ProviderInfo[]> {
    const t = this.transport;
    return (await t.unary(t.providers.ListProviders.bind(t.providers), {}, undefined, opts)).providers;
  }

  /**
   * The server's release (MAJOR.MINOR.PATCH, as `workspaced --version`
   * prints it), from ListProviders; "" from a server that predates
   * reporting it. Compare with this client's VERSION.
   */
  async serverVersion(opts: CallOptions = {}): Promise<string> {
    const t = this.transport;
    const res = await t.unary(t.providers.ListProviders.bind(t.providers), {}, undefined, opts);
    return res.server?.version ?? '';
  }

  /**
   * The operator's policy for the caller's tenant as the server applies it
   * now: the tenant's name (on a unix socket, the one the server maps the
   * caller's uid to), the providers it may open, and what an Open may ask
   * of them. A request outside it fails with PolicyDenied.
   */
  async policy(opts: CallOptions = {}): Promise<Policy> {
    const t = this.transport;
    const res = await t.unary(t.providers.ListProviders.bind(t.providers), {}, undefined, opts);
    if (!res.policy) {
      throw new WorkspacedError(grpc.status.UNIMPLEMENTED, '', 'the server reports no policy: it predates operator policies');
    }
    return res.policy;
  }

  /**
   * One page of the caller's workspaces that are not closed, in id order,
   * filtered by labels or name; `nextPageToken` asks for the next page.
   * listAll() walks every page.
   */
  async list(opts: ListOptions = {}): Promise<WorkspacePage> {
    const t = this.transport;
    const req: ListRequest = {
      labelSelector: opts.labelSelector ?? '',
      name: opts.name ?? '',
      pageSize: opts.pageSize ?? 0,
      pageToken: opts.pageToken ?? '',
    };
    const res = await t.unary(t.workspaces.List.bind(t.workspaces), req, undefined, opts);
    // Not enumerable: the page still compares and prints as the plain
    // array of summaries it always was.
    return Object.defineProperty(res.workspaces, 'nextPageToken', { value: res.nextPageToken, enumerable: false }) as WorkspacePage;
  }

  /**
   * Every workspace list() finds with these filters, page after page
   * (`for await`); each page is one call, under its own deadline.
   */
  async *listAll(opts: Omit<ListOptions, 'pageToken'> = {}): AsyncGenerator<WorkspaceSummary> {
    let pageToken = '';
    do {
      const page = await this.list({ ...opts, pageToken });
      yield* page;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /**
   * One page of the tenant's snapshots in id order, filtered by source
   * workspace, labels or name; listAllSnapshots() walks every page. Safe
   * to repeat.
   */
  async listSnapshots(opts: ListSnapshotsOptions = {}): Promise<SnapshotPage> {
    const t = this.transport;
    const res = await t.unary(
      t.workspaces.ListSnapshots.bind(t.workspaces),
      {
        workspaceId: opts.workspaceId ?? '',
        labelSelector: opts.labelSelector ?? '',
        name: opts.name ?? '',
        pageSize: opts.pageSize ?? 0,
        pageToken: opts.pageToken ?? '',
      },
      undefined,
      opts,
    );
    return Object.defineProperty(res.snapshots, 'nextPageToken', { value: res.nextPageToken, enumerable: false }) as SnapshotPage;
  }

  /** Every snapshot listSnapshots() finds with these filters, page after page (`for await`). */
  async *listAllSnapshots(opts: Omit<ListSnapshotsOptions, 'pageToken'> = {}): AsyncGenerator<Snapshot> {
    let pageToken = '';
    do {
      const page = await this.listSnapshots({ ...opts, pageToken });
      yield* page;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /** Deletes a snapshot (NoSuchSnapshot when unknown); resolves with the store bytes freed. */
  async deleteSnapshot(snapshotId: string, opts: CallOptions = {}): Promise<number> {
    const t = this.transport;
    const res = await t.unary(t.workspaces.DeleteSnapshot.bind(t.workspaces), { snapshotId }, undefined, opts);
    return res.reclaimedBytes;
  }

  /** grpc.health.v1 status of the server ("SERVING"); a service it does not serve is NoSuchService. */
  async health(service = '', opts: CallOptions = {}): Promise<string> {
    const t = this.transport;
    const res = await t.unary(t.health.Check.bind(t.health), { service }, undefined, opts);
    return String(res.status);
  }

  /** Closes the channel (workspaces stay open on the server). */
  close(): void {
    this.transport.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** Connects (lazily: the first call dials) to a workspaced server. */
export function connect(opts: ConnectOptions = {}): Client {
  return new Client(opts);
}

export { WorkspacedError };
