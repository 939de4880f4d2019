// The channel, the stubs and the per-call plumbing (auth metadata, node
// pinning, error decoding) shared by Client, Workspace and Process.
import * as fs from 'node:fs';

import * as grpc from '@grpc/grpc-js';

import { CallAborted, toWorkspacedError, WorkspacedError } from './errors';
import { load, Services } from './proto';
import type { ExecClient } from '../gen/workspace/v1/Exec';
import type { FileSystemClient } from '../gen/workspace/v1/FileSystem';
import type { HealthClient } from '../gen/grpc/health/v1/Health';
import type { ProvidersClient } from '../gen/workspace/v1/Providers';
import type { WorkspacesClient } from '../gen/workspace/v1/Workspaces';

export interface TlsOptions {
  /** PEM root certificates; default: the system roots. */
  rootCerts?: Buffer | string;
  /** PEM client certificate chain and key, for mutual TLS. */
  certChain?: Buffer | string;
  privateKey?: Buffer | string;
  /** Expected server name, when it differs from the address's host. */
  serverNameOverride?: string;
}

/** Where tlsFiles() reads the PEM files of a TLS or mutual TLS connection. */
export interface TlsFiles {
  /** CA bundle that verifies the server; omitted: the system roots. */
  ca?: string;
  /** Client certificate (chain) and its key, for mutual TLS: both or neither. */
  cert?: string;
  key?: string;
  /** The name the server's certificate must carry, when it is not the address's host. */
  serverName?: string;
}

/**
 * TlsOptions from file paths, read now: a missing or unreadable file throws
 * here (ENOENT, EACCES, ...), a file without PEM a TypeError, rather than a
 * failed handshake later.
 */
export function tlsFiles(files: TlsFiles): TlsOptions {
  if (!files.cert !== !files.key) throw new TypeError('tlsFiles: cert and key go together');
  const read = (p: string | undefined) => {
    if (p === undefined) return undefined;
    const pem = fs.readFileSync(p);
    // An empty CA would quietly mean the system roots.
    if (!pem.includes('-----BEGIN ')) throw new TypeError(`${p}: not a PEM file`);
    return pem;
  };
  return {
    rootCerts: read(files.ca),
    certChain: read(files.cert),
    privateKey: read(files.key),
    serverNameOverride: files.serverName,
  };
}

export interface TransportOptions {
  address: string;
  token?: string;
  tls?: TlsOptions | boolean;
  protoDir: string;
  channelOptions?: grpc.ChannelOptions;
  /** The deadline of calls that name none (see CallOptions.deadlineMs); 0 or absent: none. */
  defaultDeadlineMs?: number;
}

/**
 * Options every call takes, apart from what the call itself is about.
 *
 * `deadlineMs` bounds the RPC, not a command: a command's own run time is
 * ExecOptions.timeoutMs, enforced by the server, which ends the command
 * with cause EXIT_CAUSE_TIMEOUT and still answers. A call past its
 * deadline is cancelled and rejects with DeadlineExceeded.
 */
export interface CallOptions {
  /**
   * Aborting it cancels the call: the returned promise (or iterator)
   * rejects with CallAborted, whose `cause` is the signal's reason. A
   * signal already aborted sends nothing.
   */
  signal?: AbortSignal;
  /**
   * Milliseconds from the start of the call to its deadline; default the
   * client's `deadlineMs` (connect()), which exec, run and attach do not
   * take: their length is the command's. 0 or Infinity: no deadline.
   */
  deadlineMs?: number;
}

/** CallOptions resolved for one call: `deadline` is an instant (epoch ms). @internal */
export interface ResolvedCall {
  resolved: true;
  signal?: AbortSignal;
  deadline?: number;
}

/**
 * Calls `onAbort` once when `signal` aborts; returns the function that
 * stops watching (to call when the call is over, so a long-lived signal
 * does not collect listeners).
 */
export function onAbort(signal: AbortSignal | undefined, onAbortFn: () => void): () => void {
  if (!signal) return () => undefined;
  signal.addEventListener('abort', onAbortFn, { once: true });
  return () => signal.removeEventListener('abort', onAbortFn);
}

/**
 * Names the node that holds a workspace behind a front proxy: the front
 * puts it in the response headers of Open and Resolve, and routes a call
 * that carries it to that node.
 */
export const NODE_HEADER = 'x-workspace-node';

/**
 * A bound unary stub method. Typed by its (request, callback) overload,
 * the one TypeScript infers Req and Res from; it is called with metadata.
 */
export type UnaryFn<Req, Res> = (req: Req, cb: grpc.requestCallback<Res>) => unknown;
type UnaryWithOptions<Req, Res> = (
  req: Req,
  md: grpc.Metadata,
  options: grpc.CallOptions,
  cb: grpc.requestCallback<Res>,
) => grpc.ClientUnaryCall;

/** A deadline in milliseconds: a number >= 0 (0 and Infinity: none). */
function checkDeadline(ms: number | undefined, what: string): number {
  if (ms === undefined) return 0;
  if (typeof ms !== 'number' || Number.isNaN(ms) || ms < 0) {
    throw new TypeError(`${what}: milliseconds >= 0 (0 or Infinity for none), not ${String(ms)}`);
  }
  return ms;
}

const buf = (v: Buffer | string | undefined) => (v === undefined ? null : Buffer.isBuffer(v) ? v : Buffer.from(v));

export class Transport {
  readonly providers: ProvidersClient;
  readonly workspaces: WorkspacesClient;
  readonly fs: FileSystemClient;
  readonly exec: ExecClient;
  readonly health: HealthClient;
  private readonly decode: ReturnType<typeof load>['decodeStatus'];
  private readonly defaultDeadlineMs: number;

  constructor(opts: TransportOptions) {
    const { services, decodeStatus } = load(opts.protoDir);
    this.decode = decodeStatus;
    this.defaultDeadlineMs = checkDeadline(opts.defaultDeadlineMs, 'deadlineMs');

    let creds: grpc.ChannelCredentials;
    const channelOptions: grpc.ChannelOptions = {
      // The server's message limit is 4 MiB; Grep / ListDir responses are
      // kept under it, so the client must accept that much.
      'grpc.max_receive_message_length': 8 * 1024 * 1024,
      ...opts.channelOptions,
    };
    if (opts.tls) {
      const t: TlsOptions = opts.tls === true ? {} : opts.tls;
      creds = grpc.credentials.createSsl(buf(t.rootCerts), buf(t.privateKey), buf(t.certChain));
      if (t.serverNameOverride) channelOptions['grpc.ssl_target_name_override'] = t.serverNameOverride;
    } else {
      creds = grpc.credentials.createInsecure();
    }

    // The token rides as call metadata added by an interceptor rather than
    // as call credentials: grpc-js refuses call credentials on an insecure
    // channel, and a token may well be sent in plain text over loopback TCP
    // or a unix socket.
    const token = opts.token;
    const interceptors: grpc.Interceptor[] = token
      ? [
          (options, nextCall) =>
            new grpc.InterceptingCall(nextCall(options), {
              start(metadata, listener, next) {
                metadata.set('authorization', `Bearer ${token}`);
                next(metadata, listener);
              },
            }),
        ]
      : [];

    const v1 = (services as Services).workspace.v1;
    // One channel for all stubs: later stubs reuse the first one's.
    this.providers = new v1.Providers(opts.address, creds, { ...channelOptions, interceptors });
    const channel = { channelOverride: this.providers.getChannel(), interceptors } as grpc.ClientOptions;
    this.workspaces = new v1.Workspaces(opts.address, creds, channel);
    this.fs = new v1.FileSystem(opts.address, creds, channel);
    this.exec = new v1.Exec(opts.address, creds, channel);
    this.health = new (services as Services).grpc.health.v1.Health(opts.address, creds, channel);
  }

  error(err: unknown): WorkspacedError {
    return toWorkspacedError(err, this.decode);
  }

  /**
   * The typed error of a call that failed: CallAborted when the caller's
   * signal aborted it (grpc-js then reports a plain CANCELLED), else the
   * error decoded from the status.
   */
  failure(err: unknown, signal?: AbortSignal): WorkspacedError {
    if (signal?.aborted) return err instanceof CallAborted ? err : new CallAborted(signal.reason);
    return this.error(err);
  }

  /**
   * Resolves a call's options now: its deadline becomes an instant, from
   * `deadlineMs` or, when `useDefault`, the client's default.
   */
  resolveCall(opts: CallOptions = {}, useDefault = true): ResolvedCall {
    const ms =
      opts.deadlineMs !== undefined ? checkDeadline(opts.deadlineMs, 'deadlineMs') : useDefault ? this.defaultDeadlineMs : 0;
    return { resolved: true, signal: opts.signal, deadline: ms > 0 && Number.isFinite(ms) ? Date.now() + ms : undefined };
  }

  /** grpc-js call options of a resolved call. */
  grpcOptions(call: ResolvedCall): grpc.CallOptions {
    return call.deadline !== undefined ? { deadline: call.deadline } : {};
  }

  /**
   * Call metadata pinning a call to `node` (none when undefined: a direct
   * connection, or a call about no workspace). The token is added by the
   * interceptor.
   */
  metadata(node?: string): grpc.Metadata {
    const md = new grpc.Metadata();
    if (node) md.set(NODE_HEADER, node);
    return md;
  }

  /**
   * Promise form of a unary call with typed errors, pinned to `node` when
   * given, under the call's signal and deadline.
   */
  async unary<Req, Res>(fn: UnaryFn<Req, Res>, req: Req, node?: string, call?: CallOptions | ResolvedCall): Promise<Res> {
    return (await this.unaryWithNode(fn, req, node, call)).res;
  }

  /**
   * A unary call that also returns the node a front proxy names in the
   * response headers (undefined when none does). `call` is either the
   * caller's CallOptions or options already resolved (an Open's deadline
   * covers all of its attempts).
   */
  unaryWithNode<Req, Res>(
    fn: UnaryFn<Req, Res>,
    req: Req,
    node?: string,
    call: CallOptions | ResolvedCall = {},
  ): Promise<{ res: Res; node?: string }> {
    const resolved = 'resolved' in call ? call : this.resolveCall(call);
    const signal = resolved.signal;
    if (signal?.aborted) return Promise.reject(new CallAborted(signal.reason));
    return new Promise((resolve, reject) => {
      let answered: string | undefined;
      let unwatch = () => undefined as void;
      // 'metadata' (the response headers) is emitted before the callback.
      const c = (fn as unknown as UnaryWithOptions<Req, Res>)(req, this.metadata(node), this.grpcOptions(resolved), (err, res) => {
        unwatch();
        if (err) reject(this.failure(err, signal));
        else resolve({ res: res as Res, node: answered });
      });
      unwatch = onAbort(signal, () => c.cancel());
      c.on('metadata', (md: grpc.Metadata) => {
        const v = md.get(NODE_HEADER)[0];
        if (v) answered = String(v);
      });
    });
  }

  close(): void {
    this.providers.close();
  }
}
