// Retry with exponential backoff and full jitter for transient failures of
// Workspaces.Open (a backend that is starting up, a server not listening
// yet). Non-transient errors are never retried: retrying a PATH_ESCAPE or a
// CAPABILITY_MISSING cannot succeed and only hides the bug.
import { status as GrpcStatus } from '@grpc/grpc-js';

import { CallAborted, WorkspacedError } from './errors';

export interface RetryPolicy {
  /** Attempts in all, the first included; 1 disables retries. */
  maxAttempts: number;
  /** Backoff cap before the first retry, in milliseconds. */
  initialBackoffMs: number;
  /** Upper bound of any backoff, in milliseconds. */
  maxBackoffMs: number;
  /** Growth of the cap per retry. */
  multiplier: number;
  /**
   * Waits `ms` milliseconds; injectable so tests can run the schedule
   * without real time. Default: setTimeout.
   */
  sleep?: (ms: number) => Promise<void>;
  /** Uniform random in [0, 1); injectable for deterministic jitter. */
  random?: () => number;
  /** Called before each backoff, e.g. for logging. */
  onRetry?: (error: WorkspacedError, attempt: number, delayMs: number) => void;
}

export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = Object.freeze({
  maxAttempts: 4,
  initialBackoffMs: 200,
  maxBackoffMs: 5000,
  multiplier: 2,
});

/**
 * Delay before retry number `retry` (0 for the first retry): a uniform
 * random fraction of min(maxBackoff, initial * multiplier^retry). Full
 * jitter (as in gRPC's own connection backoff) keeps many clients that
 * failed together from retrying in lockstep.
 */
export function backoffDelayMs(policy: RetryPolicy, retry: number, random: () => number = Math.random): number {
  const cap = Math.min(policy.maxBackoffMs, policy.initialBackoffMs * Math.pow(policy.multiplier, retry));
  return Math.max(0, cap * random());
}

/** Transient: the server said so in ErrorInfo, or the call was UNAVAILABLE. */
export function isTransient(err: WorkspacedError): boolean {
  return err.transient || err.code === GrpcStatus.UNAVAILABLE;
}

/**
 * Waits `ms` milliseconds (through `sleep` when one is injected), unless
 * `signal` aborts first: then rejects with CallAborted at once, and the
 * timer of the default sleep is cleared so it does not keep the process
 * alive.
 */
function backoff(ms: number, sleep: RetryPolicy['sleep'], signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(new CallAborted(signal.reason));
  return new Promise<void>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const onAbort = () => {
      clearTimeout(timer);
      reject(new CallAborted(signal!.reason));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const done = (err?: unknown) => {
      signal?.removeEventListener('abort', onAbort);
      if (err === undefined) resolve();
      else reject(err);
    };
    if (sleep) sleep(ms).then(() => done(), (e) => done(e ?? new Error('sleep failed')));
    else timer = setTimeout(done, ms);
  });
}

/**
 * Runs `attempt` until it succeeds, fails non-transiently, or attempts run
 * out. An abort of `signal` ends a backoff at once with CallAborted.
 */
export async function withRetry<T>(policy: RetryPolicy, attempt: (n: number) => Promise<T>, signal?: AbortSignal): Promise<T> {
  const max = Math.max(1, Math.floor(policy.maxAttempts));
  const random = policy.random ?? Math.random;
  for (let n = 1; ; n++) {
    try {
      return await attempt(n);
    } catch (err) {
      if (!(err instanceof WorkspacedError) || !isTransient(err) || n >= max) throw err;
      const delay = backoffDelayMs(policy, n - 1, random);
      policy.onRetry?.(err, n, delay);
      await backoff(delay, policy.sleep, signal);
    }
  }
}
