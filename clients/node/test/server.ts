// Starts a real workspaced for a test file: fresh state dir, port 0, and
// SIGTERM at the end. The binary comes from $WORKSPACED_BIN; a missing one
// is an error, never a skip, so a broken setup cannot pass silently.
import { ChildProcess, spawn } from 'node:child_process';
import * as fs from 'node:fs';
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

export interface Server {
  address: string;
  port: number;
  stateDir: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** Starts the server; `port` 0 lets it pick one (read back from its banner). */
export function startServer(opts: { port?: number; env?: NodeJS.ProcessEnv; args?: string[] } = {}): Promise<Server> {
  const bin = serverBin();
  const base = process.env.TEST_TMPDIR ?? os.tmpdir();
  const stateDir = fs.mkdtempSync(path.join(base, 'wsd-state-'));
  const args = ['--listen', `127.0.0.1:${opts.port ?? 0}`, '--state-dir', stateDir, ...(opts.args ?? [])];
  const proc = spawn(bin, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...opts.env },
  });
  let stderr = '';
  proc.stderr!.on('data', (d) => (stderr += d));
  return new Promise<Server>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`workspaced did not start within 15s; stderr:\n${stderr}`));
    }, 15000);
    proc.on('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`workspaced exited early (code ${code}, signal ${sig}); stderr:\n${stderr}`));
    });
    proc.stdout!.on('data', (d) => {
      out += d;
      const m = /workspaced listening on (\S+):(\d+)/.exec(out);
      if (!m) return;
      clearTimeout(timer);
      proc.removeAllListeners('exit');
      const port = Number(m[2]);
      resolve({
        address: `${m[1]}:${port}`,
        port,
        stateDir,
        proc,
        stop: () =>
          new Promise<void>((res) => {
            if (proc.exitCode !== null || proc.signalCode !== null) return res();
            proc.once('exit', () => {
              fs.rmSync(stateDir, { recursive: true, force: true });
              res();
            });
            proc.kill('SIGTERM');
          }),
      });
    });
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
  proc.stderr!.on('data', (d) => (stderr += d));
  return new Promise<Front>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`front.sh did not start within 15s; stderr:\n${stderr}`));
    }, 15000);
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
        stop: () =>
          new Promise<void>((res) => {
            if (proc.exitCode !== null || proc.signalCode !== null) return res();
            proc.once('exit', () => {
              fs.rmSync(dir, { recursive: true, force: true });
              res();
            });
            proc.kill('SIGTERM');
          }),
      });
    });
  });
}
