// Starts a real workspaced for a test file: fresh state dir, a unix socket
// (or TCP with authentication, for the tests whose point is TCP), and
// SIGTERM at the end. The binary comes from $WORKSPACED_BIN; a missing one
// is an error, never a skip, so a broken setup cannot pass silently.
//
// stop() rejects unless the process exits 0 after the SIGTERM: under the
// sanitizer build a leak or a crash at shutdown makes the exit status
// non-zero, and the report is on stderr, which the error carries. A
// process that had already ended before stop() crashed under the tests and
// is rejected as well. Called from an after hook or a finally block, the
// rejection fails the suite or the test.
import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';

import { Capabilities } from '../src';

export const ALLOWED = ['sh', 'cat', 'echo', 'sleep', 'wc', 'head', 'true', 'false'];
export const CAPS: Capabilities = { fs: {}, shell: { allowedCommands: ALLOWED } };

export function serverBin(): string {
  const bin = process.env.WORKSPACED_BIN;
  if (!bin) throw new Error('WORKSPACED_BIN is not set: point it at the workspaced server binary');
  if (!fs.existsSync(bin)) throw new Error(`WORKSPACED_BIN=${bin} does not exist`);
  return bin;
}

/** "exit status N" or "killed by signal NAME". */
export function describeExit(code: number | null, signal: NodeJS.Signals | null): string {
  return code !== null ? `exit status ${code}` : `killed by signal ${signal}`;
}

const sleepMs = (ms: number) =>
  new Promise<void>((r) => {
    setTimeout(r, ms);
  });

/**
 * Stops a child the suite started (a server, a front) with SIGTERM and
 * resolves when it exited 0; rejects otherwise, naming how it ended and
 * showing its stderr.
 */
export async function stopCleanly(proc: ChildProcess, what: string, stderr: () => string): Promise<void> {
  const ended = () => proc.exitCode !== null || proc.signalCode !== null;
  if (ended()) {
    throw new Error(
      `${what} ended before the suite stopped it (${describeExit(proc.exitCode, proc.signalCode)}); its stderr:\n${stderr()}`,
    );
  }
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  // The last of stderr arrives with 'close', after 'exit'.
  const closed = new Promise<void>((r) => proc.once('close', () => r()));
  proc.kill('SIGTERM');
  // A drain is bounded by the server's grace periods; never hang the suite
  // on one that is not.
  let timer: NodeJS.Timeout | undefined;
  const inTime = await Promise.race([
    exited.then(() => true),
    new Promise<boolean>((r) => {
      timer = setTimeout(() => r(false), 60_000);
    }),
  ]);
  clearTimeout(timer);
  if (!inTime) {
    proc.kill('SIGKILL');
    await exited;
    throw new Error(`${what} did not exit within 60 s of SIGTERM; its stderr:\n${stderr()}`);
  }
  await Promise.race([closed, sleepMs(5000)]);
  if (proc.exitCode === 0) return;
  throw new Error(
    `${what} did not exit cleanly after SIGTERM (${describeExit(proc.exitCode, proc.signalCode)}); its stderr:\n${stderr()}`,
  );
}

/** Stops all of `stoppables`, then rejects with every failure together. */
export async function stopAll(...stoppables: ({ stop(): Promise<void> } | undefined)[]): Promise<void> {
  const results = await Promise.allSettled(stoppables.map((s) => s?.stop()));
  const failures = results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason)] : []));
  if (failures.length) throw new Error(failures.join('\n\n'));
}

/**
 * A loopback port that fails every connection for as long as the returned
 * listener is open: it accepts and drops each one at once, so a gRPC call
 * there is UNAVAILABLE. Holding the port (rather than releasing one found
 * free) means no other process can start listening there meanwhile.
 */
export function droppingPort(): Promise<{ port: number; close(): Promise<void> }> {
  return new Promise((resolve, reject) => {
    const s = net.createServer((sock) => {
      sock.on('error', () => undefined);
      sock.destroy();
    });
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      resolve({
        port,
        close: () => new Promise<void>((r) => s.close(() => r())),
      });
    });
  });
}

/**
 * Flags that let the server's tenants open every provider, local-bash
 * included, which the operator's default policy leaves out.
 */
export const LOCAL_BASH_POLICY: readonly string[] = ['--policy-providers', 'memory,local-bash,local-sandbox,docker'];

/**
 * The longest path a unix socket may have: sun_path holds 108 bytes with
 * the terminating NUL.
 */
const SUN_PATH_MAX = 107;

/**
 * A fresh directory for a unix socket named `name`, removed by the caller.
 * $TEST_TMPDIR when the socket's path fits in sun_path there (Bazel's is
 * usually too deep), else the system's temporary directory.
 */
export function socketDir(name = 'ws.sock'): string {
  const fits = (base: string) => path.join(base, 'wsd-XXXXXX', name).length <= SUN_PATH_MAX;
  const base = [process.env.TEST_TMPDIR, os.tmpdir(), '/tmp'].find((b) => b && fits(b));
  if (!base) throw new Error(`no temporary directory short enough for a unix socket named ${name}`);
  return fs.mkdtempSync(path.join(base, 'wsd-'));
}

export interface Server {
  /** What a client dials: unix:/PATH, or 127.0.0.1:PORT for a TCP server. */
  address: string;
  /** The TCP port; undefined on a unix socket. */
  port?: number;
  stateDir: string;
  proc: ChildProcess;
  stop(): Promise<void>;
  /**
   * SIGTERM (rejects unless it exits 0), then the same server again on the
   * same listener and state directory, as an operator's restart would.
   * Not for a TCP server on port 0 (its port would change).
   */
  restart(): Promise<void>;
}

export interface ServerOptions {
  /**
   * Listen on TCP 127.0.0.1 at this port (0: the server picks one, read
   * back from its banner) instead of a unix socket. The server refuses a
   * TCP listener without authentication, so `args` must then carry
   * --tokens-file or --tls-client-ca.
   */
  port?: number;
  /** The unix socket to listen on (its directory must exist); default ws.sock in a fresh directory. */
  socket?: string;
  env?: NodeJS.ProcessEnv;
  /** The operator policy's flags; default LOCAL_BASH_POLICY. */
  policy?: readonly string[];
  args?: string[];
}

/**
 * Starts the server, by default on a unix socket in a fresh directory
 * (removed by stop()), with the policy that allows local-bash.
 */
export function startServer(opts: ServerOptions = {}): Promise<Server> {
  const bin = serverBin();
  const base = process.env.TEST_TMPDIR ?? os.tmpdir();
  const stateDir = fs.mkdtempSync(path.join(base, 'wsd-state-'));
  const tcp = opts.port !== undefined;
  let sockDir: string | undefined;
  let listen: string;
  if (tcp) {
    listen = `127.0.0.1:${opts.port}`;
  } else if (opts.socket) {
    listen = `unix:${opts.socket}`;
  } else {
    sockDir = socketDir();
    listen = `unix:${path.join(sockDir, 'ws.sock')}`;
  }
  const cleanup = () => {
    fs.rmSync(stateDir, { recursive: true, force: true });
    if (sockDir) fs.rmSync(sockDir, { recursive: true, force: true });
  };
  const args = ['--listen', listen, '--state-dir', stateDir, ...(opts.policy ?? LOCAL_BASH_POLICY), ...(opts.args ?? [])];
  let stderr = '';
  let stopped = false;

  // One run of the server on `listen`: resolves with the process and the
  // address its banner names.
  const spawnOnce = () =>
    new Promise<{ proc: ChildProcess; address: string }>((resolve, reject) => {
      const proc = spawn(bin, args, {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, ...opts.env },
      });
      proc.stderr!.on('data', (d) => (stderr += d));
      let out = '';
      const fail = (why: string) => {
        cleanup();
        reject(new Error(`${why}; stderr:\n${stderr}`));
      };
      const timer = setTimeout(() => {
        proc.kill('SIGKILL');
        fail('workspaced did not start within 15s');
      }, 15000);
      proc.on('exit', (code, sig) => {
        clearTimeout(timer);
        fail(`workspaced exited early (code ${code}, signal ${sig})`);
      });
      proc.stdout!.on('data', (d) => {
        out += d;
        const m = /workspaced listening on (\S+)\n/.exec(out);
        if (!m) return;
        clearTimeout(timer);
        proc.removeAllListeners('exit');
        const address = m[1];
        const port = tcp ? Number(/:(\d+)$/.exec(address)?.[1]) : undefined;
        if (tcp ? !port : address !== listen) {
          proc.kill('SIGKILL');
          fail(`workspaced was asked to listen on ${listen} but says it listens on ${address}`);
          return;
        }
        resolve({ proc, address });
      });
    });

  return spawnOnce().then(({ proc, address }) => {
    const server: Server = {
      address,
      port: tcp ? Number(/:(\d+)$/.exec(address)?.[1]) : undefined,
      stateDir,
      proc,
      stop: async () => {
        if (stopped) return;
        stopped = true;
        try {
          await stopCleanly(server.proc, 'workspaced', () => stderr);
        } finally {
          cleanup();
        }
      },
      restart: async () => {
        if (stopped) throw new Error('restart of a stopped server');
        await stopCleanly(server.proc, 'workspaced', () => stderr);
        if (listen.startsWith('unix:')) fs.rmSync(listen.slice('unix:'.length), { force: true });
        const again = await spawnOnce();
        server.proc = again.proc;
      },
    };
    return server;
  });
}

export interface Front {
  address: string;
  stop(): Promise<void>;
}

/**
 * Starts the nginx front of the clients' suites ($WORKSPACED_TEST_FRONT,
 * clients/testdata/front.sh) before `addresses`, named node-1, node-2, ...
 */
export function startFront(addresses: string[]): Promise<Front> {
  const script = process.env.WORKSPACED_TEST_FRONT;
  if (!script) throw new Error('WORKSPACED_TEST_FRONT is not set: point it at clients/testdata/front.sh');
  const dir = fs.mkdtempSync(path.join(process.env.TEST_TMPDIR ?? os.tmpdir(), 'front-'));
  const proc = spawn(script, [dir, ...addresses], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  let stopped = false;
  proc.stderr!.on('data', (d) => (stderr += d));
  return new Promise<Front>((resolve, reject) => {
    let out = '';
    // front.sh may take a few attempts when its port is taken.
    const timer = setTimeout(() => {
      proc.kill('SIGTERM');
      reject(new Error(`front.sh did not start within 30s; stderr:\n${stderr}`));
    }, 30000);
    proc.on('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`front.sh exited early (code ${code}, signal ${sig}); stderr:\n${stderr}`));
    });
    proc.stdout!.on('data', (d) => {
      out += d;
      const m = /front listening on (\S+)/.exec(out);
      if (!m) return;
      clearTimeout(timer);
      proc.removeAllListeners('exit');
      resolve({
        address: m[1],
        // front.sh exits with nginx's status: 0 only for a clean shutdown.
        stop: async () => {
          if (stopped) return;
          stopped = true;
          try {
            await stopCleanly(proc, 'the front (front.sh, nginx)', () => stderr);
          } finally {
            fs.rmSync(dir, { recursive: true, force: true });
          }
        },
      });
    });
  });
}
