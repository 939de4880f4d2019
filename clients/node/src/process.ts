// Handles on running commands: Process wraps one Exec.Start bidi stream,
// AttachedProcess one Exec.Attach server stream. Both expose the output as
// an async iterator of events, the Started info, and wait() for the full
// Exited record.
import { constants as osConstants } from 'node:os';
import * as grpc from '@grpc/grpc-js';

import { CallAborted, WorkspaceEvicted, WorkspacedError, WorkspaceFailed } from './errors';
import { onAbort } from './transport';
import type { CallOptions } from './transport';
import type { ResolvedCall, Transport } from './transport';
import type { Exited__Output } from '../gen/workspace/v1/Exited';
import type { ProcessEvent__Output } from '../gen/workspace/v1/ProcessEvent';
import type { StartRequest } from '../gen/workspace/v1/StartRequest';

export type StreamName = 'stdout' | 'stderr' | 'pty';

/** A piece of output; `offset` is the stream offset of data[0]. */
export interface OutputEvent {
  type: StreamName;
  data: Buffer;
  offset: number;
}

/**
 * Output between offset and offset + bytesDropped never reached this
 * handle (it had left the server's replay ring). Surfaced, never dropped.
 */
export interface GapEvent {
  type: 'gap';
  stream: StreamName;
  offset: number;
  bytesDropped: number;
}

export type ProcessOutputEvent = OutputEvent | GapEvent;

export interface StartedInfo {
  pid: number;
  id: string;
  tag: string;
}

/** The complete Exited record, plus `ok` (exited by itself with status 0). */
export type ExitResult = Exited__Output & { ok: boolean };

/** Signal names ("SIGTERM", "TERM") or numbers. */
export type SignalLike = number | string;

export function signalNumber(sig: SignalLike): number {
  if (typeof sig === 'number') return sig;
  const name = (sig.toUpperCase().startsWith('SIG') ? sig.toUpperCase() : `SIG${sig.toUpperCase()}`) as keyof typeof osConstants.signals;
  const n = osConstants.signals[name];
  if (typeof n !== 'number') throw new TypeError(`unknown signal ${sig}`);
  return n;
}

const STREAM_OF_GAP: Record<string, StreamName> = {
  OUTPUT_STREAM_STDOUT: 'stdout',
  OUTPUT_STREAM_STDERR: 'stderr',
  OUTPUT_STREAM_PTY: 'pty',
};

/**
 * What a handle needs to re-resolve its workspace after a failure a
 * Resolve may repair (WORKSPACE_EVICTED, or WORKSPACE_FAILED with metadata
 * resolve="true"): resolves with the workspace (id and node) to start
 * again on, or undefined when the call must fail with `err` (any other
 * failure, the retry turned off, or a Resolve that failed). @internal
 */
export type Reresolve = (
  err: WorkspaceEvicted | WorkspaceFailed,
) => Promise<{ workspaceId: string; node?: string } | undefined>;

/** Options of sendInput. */
export interface SendInputOptions extends CallOptions {
  /**
   * The stdin offset of data[0]: bytes the process already took are
   * skipped (a retried send delivers nothing twice), and an offset past
   * them is InputGap. Absent: appended after whatever it took.
   */
  offset?: number;
}

/**
 * The unary stdin and terminal calls on one process (Exec.SendInput,
 * CloseInput, Resize), by id or tag: Workspace.process() makes one. Each
 * method is one call (sendInput of more than 1 MiB: several).
 */
export interface InputControl {
  /** Feeds stdin; resolves with the stdin offset after the bytes. */
  sendInput(data: Buffer | Uint8Array | string, opts?: SendInputOptions): Promise<number>;
  /** Closes stdin (idempotent); resolves with the bytes it took in all. */
  closeInput(opts?: CallOptions): Promise<number>;
  /** Resizes the terminal (NoPty for a process without one). */
  resize(rows: number, cols: number, opts?: CallOptions): Promise<void>;
}

/** Swallows a rejection nobody may ever observe (Node aborts on unhandled ones). */
function quiet<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = quiet(new Promise<T>((res, rej) => ((resolve = res), (reject = rej))));
  return { promise, resolve, reject };
}

/**
 * Read side common to Start and Attach. Events are queued as they arrive so
 * that output produced before anyone iterates is not lost; iterate to
 * consume them (the queue is unbounded: use Exec.Run, or drain the
 * iterator, for chatty commands).
 */
export class ProcessStream implements AsyncIterable<ProcessOutputEvent> {
  /** Resolves with pid, id and tag once the server has started (or found) the process. */
  readonly started: Promise<StartedInfo>;
  /** Set once `started` has resolved. */
  info?: StartedInfo;

  protected readonly transport: Transport;
  protected workspaceId: string;
  /** The node the workspace is pinned to (behind a front proxy). */
  protected node?: string;
  /** The unary calls on this process by id (set by Workspace). @internal */
  control?: (id: string) => InputControl;
  /** Re-resolves the workspace when the stream met an eviction before `started`. @internal */
  reresolve?: Reresolve;
  /** The eviction retry was used (at most once per handle). */
  protected evictionTried = false;
  /** Next stream offset not yet handed out, per stream (to de-duplicate a resume). */
  protected readonly next: Record<StreamName, number> = { stdout: 0, stderr: 0, pty: 0 };
  private readonly startedD = deferred<StartedInfo>();
  private readonly exitD = deferred<ExitResult>();
  private readonly queue: ProcessOutputEvent[] = [];
  private wake?: () => void;
  private ended = false;
  private failure?: WorkspacedError;
  private iterating = false;
  /** An exited event arrived (on any of the streams feeding this handle). */
  protected exitSeen = false;
  /** The caller's signal: a stream that fails after it aborted failed with CallAborted. */
  protected abortSignal?: AbortSignal;
  /** Stops watching the signal; called once the handle is done. */
  protected unwatch: () => void = () => undefined;

  protected constructor(transport: Transport, workspaceId: string, node?: string) {
    this.transport = transport;
    this.workspaceId = workspaceId;
    this.node = node;
    this.started = this.startedD.promise;
  }

  /** Feeds one server stream into the handle; `onError` may take over (resume). */
  protected pump(
    call: grpc.ClientReadableStream<ProcessEvent__Output> | grpc.ClientDuplexStream<StartRequest, ProcessEvent__Output>,
    onError?: (err: WorkspacedError) => boolean,
  ): void {
    let sawExit = false;
    call.on('data', (ev: ProcessEvent__Output) => {
      switch (ev.event) {
        case 'started': {
          const s = ev.started!;
          this.info = { pid: s.pid, id: s.id, tag: s.tag };
          this.startedD.resolve(this.info);
          break;
        }
        case 'stdout':
        case 'stderr':
        case 'pty': {
          const stream = ev.event;
          const chunk = ev[stream]!;
          // Drop what this handle already delivered (a resumed stream starts
          // at the smallest offset of all streams).
          const skip = Math.max(0, this.next[stream] - chunk.offset);
          if (skip >= chunk.data.length) break;
          const data = skip ? chunk.data.subarray(skip) : chunk.data;
          this.next[stream] = chunk.offset + chunk.data.length;
          this.push({ type: stream, data, offset: chunk.offset + skip });
          break;
        }
        case 'gap': {
          const g = ev.gap!;
          const stream = STREAM_OF_GAP[g.stream as unknown as string] ?? 'stdout';
          const end = g.offset + g.bytesDropped;
          if (end <= this.next[stream]) break;
          this.next[stream] = end;
          this.push({ type: 'gap', stream, offset: g.offset, bytesDropped: g.bytesDropped });
          break;
        }
        case 'exited': {
          sawExit = true;
          this.exitSeen = true;
          const x = ev.exited!;
          this.exitD.resolve({ ...x, ok: x.cause === ('EXIT_CAUSE_EXITED' as typeof x.cause) && x.exitCode === 0 });
          break;
        }
      }
    });
    // grpc-js pushes the end of the stream, emits 'error' (non-OK) and then
    // 'status', while data already received may still sit in the stream's
    // buffer. Settle on 'end', which comes after the last 'data', so no
    // output or exited event is lost to the ordering.
    let failure: WorkspacedError | undefined;
    call.on('error', (e) => {
      failure = this.transport.failure(e, this.abortSignal);
    });
    call.on('end', () => {
      if (failure && !sawExit && onError?.(failure)) return; // taken over (resumed through Attach)
      this.onStreamDone();
      if (sawExit) this.finish();
      else this.finish(failure ?? new WorkspacedError(grpc.status.INTERNAL, '', 'process stream ended without an exited event'));
    });
  }

  /** Hook for Process: release the request side once the call is over. */
  protected onStreamDone(): void {}

  private push(ev: ProcessOutputEvent): void {
    this.queue.push(ev);
    this.wake?.();
  }

  protected finish(err?: WorkspacedError): void {
    if (this.ended) return;
    this.ended = true;
    this.unwatch();
    this.onStreamDone();
    if (err) {
      this.failure = err;
      this.startedD.reject(err);
      this.exitD.reject(err);
    } else {
      // Attach to a process that never reports started cannot happen; be safe.
      this.startedD.reject(new WorkspacedError(grpc.status.INTERNAL, '', 'no started event'));
    }
    this.wake?.();
  }

  /** True once the stream is over (exited, or failed). */
  get done(): boolean {
    return this.ended;
  }

  /**
   * The output events in arrival order. One consumer: a second concurrent
   * iteration would split the events arbitrarily, so it is refused. Ends
   * after the last event; throws the stream's error if it failed.
   */
  async *[Symbol.asyncIterator](): AsyncIterator<ProcessOutputEvent> {
    if (this.iterating) throw new Error('process output is already being iterated');
    this.iterating = true;
    try {
      for (;;) {
        if (this.queue.length) {
          yield this.queue.shift()!;
          continue;
        }
        if (this.ended) {
          if (this.failure) throw this.failure;
          return;
        }
        await new Promise<void>((r) => (this.wake = r));
        this.wake = undefined;
      }
    } finally {
      this.iterating = false;
    }
  }

  /**
   * Waits for the end and returns the full Exited record (cause, exit code,
   * signal, times, peak memory, per-stream counts). Rejects with the typed
   * error when the stream failed before the process ended.
   */
  wait(): Promise<ExitResult> {
    return this.exitD.promise;
  }

  /** The unary calls on this process, once it started. */
  private async inputControl(): Promise<InputControl> {
    const info = await this.started;
    if (!this.control) throw new WorkspacedError(grpc.status.FAILED_PRECONDITION, '', 'this handle has no workspace');
    return this.control(info.id);
  }

  /**
   * Feeds stdin through Exec.SendInput (the process was started with
   * stdin or a PTY), at `opts.offset` or appended; resolves with the stdin
   * offset after the bytes. Works on any handle, an attached one included.
   */
  async sendInput(data: Buffer | Uint8Array | string, opts: SendInputOptions = {}): Promise<number> {
    return (await this.inputControl()).sendInput(data, opts);
  }

  /** Closes stdin through Exec.CloseInput; resolves with the bytes it took. */
  async closeInput(opts: CallOptions = {}): Promise<number> {
    return (await this.inputControl()).closeInput(opts);
  }

  /**
   * Whether a stream that failed with `err` before `started` may be made
   * again after a successful re-resolve: it met WORKSPACE_EVICTED or
   * WORKSPACE_FAILED (the workspace's reresolve makes a Resolve only for
   * the one that carries resolve="true"), nothing ran, and no retry was
   * made yet. On true, `restart` is called with the workspace to use; when
   * no re-resolve is made, or it fails, the handle fails with `err`.
   */
  protected retryEviction(err: WorkspacedError, restart: () => void): boolean {
    const lost = err instanceof WorkspaceEvicted || err instanceof WorkspaceFailed;
    if (!lost || this.info || this.evictionTried || !this.reresolve) return false;
    this.evictionTried = true;
    this.reresolve(err).then(
      (target) => {
        if (!target) return this.finish(err);
        this.workspaceId = target.workspaceId;
        this.node = target.node;
        restart();
      },
      () => this.finish(err),
    );
    return true;
  }

  /** Reads every remaining event: output of each stream concatenated, plus the exit. */
  async collect(): Promise<{ stdout: Buffer; stderr: Buffer; pty: Buffer; gaps: GapEvent[]; exited: ExitResult }> {
    const parts: Record<StreamName, Buffer[]> = { stdout: [], stderr: [], pty: [] };
    const gaps: GapEvent[] = [];
    for await (const ev of this) {
      if (ev.type === 'gap') gaps.push(ev);
      else parts[ev.type].push(ev.data);
    }
    return {
      stdout: Buffer.concat(parts.stdout),
      stderr: Buffer.concat(parts.stderr),
      pty: Buffer.concat(parts.pty),
      gaps,
      exited: await this.wait(),
    };
  }
}

/** A read-only handle from Exec.Attach: replays from an offset, then follows. */
export class AttachedProcess extends ProcessStream {
  private call?: grpc.ClientReadableStream<ProcessEvent__Output>;

  /** @internal */
  static open(
    t: Transport,
    workspaceId: string,
    target: { id?: string; tag?: string },
    offset: number,
    node?: string,
    call: ResolvedCall = { resolved: true },
  ): AttachedProcess {
    const p = new AttachedProcess(t, workspaceId, node);
    p.abortSignal = call.signal;
    if (call.signal?.aborted) {
      p.finish(new CallAborted(call.signal.reason));
      return p;
    }
    const begin = () => {
      p.call = t.exec.Attach(
        { workspaceId: p.workspaceId, id: target.id ?? '', tag: target.tag ?? '', offset },
        t.metadata(p.node),
        t.grpcOptions(call),
      );
      p.pump(p.call, (err) => p.retryEviction(err, begin));
    };
    // The caller sets reresolve and control right after this returns,
    // before any event can arrive.
    begin();
    p.unwatch = onAbort(call.signal, () => p.detach());
    return p;
  }

  /** Resizes the process's terminal through Exec.Resize. */
  async resize(rows: number, cols: number, opts: CallOptions = {}): Promise<void> {
    const info = await this.started;
    if (!this.control) throw new WorkspacedError(grpc.status.FAILED_PRECONDITION, '', 'this handle has no workspace');
    await this.control(info.id).resize(rows, cols, opts);
  }

  /** Stops following (the process keeps running). */
  detach(): void {
    this.call?.cancel();
  }
}

export interface StartOptions {
  workspaceId: string;
  process: import('../gen/workspace/v1/ProcessConfig').ProcessConfig;
}

/** Largest stdin message: the server takes at most 1 MiB per message. */
const STDIN_CHUNK = 1024 * 1024;

/** A command started with Exec.Start; owns the bidi stream. */
export class Process extends ProcessStream {
  private call!: grpc.ClientDuplexStream<StartRequest, ProcessEvent__Output>;
  private cancelled = false;
  private requestsClosed = false;
  /** Something went on the stream after the start message (stdin, a signal). */
  private sentMore = false;

  /** @internal */
  static start(t: Transport, req: StartOptions, node?: string, call: ResolvedCall = { resolved: true }): Process {
    const p = new Process(t, req.workspaceId, node);
    p.abortSignal = call.signal;
    if (call.signal?.aborted) {
      // Nothing is sent: the handle is over before it began.
      p.requestsClosed = true;
      p.finish(new CallAborted(call.signal.reason));
      return p;
    }
    const begin = () => {
      p.requestsClosed = false;
      p.call = t.exec.Start(t.metadata(p.node), t.grpcOptions(call));
      p.pump(p.call, (err) => p.resumeAfterCancel(err) || (!p.cancelled && !p.sentMore && p.retryEviction(err, begin)));
      p.call.write({ start: { ...req, workspaceId: p.workspaceId } });
    };
    begin();
    p.unwatch = onAbort(call.signal, () => p.cancel());
    return p;
  }

  /**
   * After cancel() the local call is gone, but the server still ends the
   * process (cause CANCELLED) and keeps its record for a while: follow it
   * through Attach so wait() yields the real Exited record and the output
   * produced before the abort is still delivered.
   */
  private resumeAfterCancel(err: WorkspacedError): boolean {
    if (!this.cancelled || this.exitSeen || err.code !== grpc.status.CANCELLED || !this.info) return false;
    const from = Math.min(this.next.stdout, this.next.stderr, this.next.pty);
    const call = this.transport.exec.Attach(
      { workspaceId: this.workspaceId, id: this.info.id, tag: '', offset: from },
      this.transport.metadata(this.node),
    );
    this.pump(call);
    return true;
  }

  protected onStreamDone(): void {
    if (!this.requestsClosed) {
      this.requestsClosed = true;
      this.call?.end();
    }
  }

  private send(msg: StartRequest): Promise<void> {
    if (this.done || this.requestsClosed) {
      return Promise.reject(new WorkspacedError(grpc.status.FAILED_PRECONDITION, '', 'the process stream has ended'));
    }
    this.sentMore = true;
    return new Promise<void>((resolve, reject) => {
      // The callback fires once the message is handed to the transport,
      // which gives stdin writes backpressure.
      this.call.write(msg, (err: unknown) => (err ? reject(this.transport.error(err)) : resolve()));
    });
  }

  /** Sends bytes to the command's stdin (needs `stdin: true` or a PTY). */
  async writeStdin(data: Buffer | Uint8Array | string): Promise<void> {
    const b = typeof data === 'string' ? Buffer.from(data) : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    for (let off = 0; off < b.length; off += STDIN_CHUNK) {
      await this.send({ stdin: b.subarray(off, off + STDIN_CHUNK) });
    }
  }

  /** Closes stdin: the command reads EOF. */
  closeStdin(): Promise<void> {
    return this.send({ closeStdin: true });
  }

  /** Sends a signal to the whole process tree. */
  signal(sig: SignalLike): Promise<void> {
    return this.send({ signal: signalNumber(sig) });
  }

  /** Resizes the PTY. */
  resize(rows: number, cols: number): Promise<void> {
    return this.send({ resize: { rows, cols } });
  }

  /**
   * Cancels the Start stream: the server kills the process tree (unless it
   * runs in the background) and wait() then resolves with cause
   * EXIT_CAUSE_CANCELLED. Idempotent.
   */
  cancel(): void {
    if (this.cancelled || this.done || !this.call) return;
    this.cancelled = true;
    this.requestsClosed = true;
    this.call.cancel();
  }
}
