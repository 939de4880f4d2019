// Handles on running commands: Process wraps one Exec.Start bidi stream,
// AttachedProcess one Exec.Attach server stream. Both expose the output as
// an async iterator of events, the Started info, and wait() for the full
// Exited record.
import { constants as osConstants } from 'node:os';
import * as grpc from '@grpc/grpc-js';

import { CallAborted, WorkspacedError } from './errors';
import { onAbort } from './transport';
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
  protected readonly workspaceId: string;
  /** The node the workspace is pinned to (behind a front proxy). */
  protected readonly node?: string;
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
    p.call = t.exec.Attach(
      { workspaceId, id: target.id ?? '', tag: target.tag ?? '', offset },
      t.metadata(node),
      t.grpcOptions(call),
    );
    p.pump(p.call);
    p.unwatch = onAbort(call.signal, () => p.detach());
    return p;
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
    p.call = t.exec.Start(t.metadata(node), t.grpcOptions(call));
    p.pump(p.call, (err) => p.resumeAfterCancel(err));
    p.call.write({ start: req });
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
