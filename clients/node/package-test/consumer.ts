// Compiles (tsc --noEmit, strict) against the installed package's
// declarations: the names a TypeScript user imports exist and are typed.
import {
  CallAborted,
  type CallOptions,
  connect,
  type ConnectOptions,
  DeadlineExceeded,
  type ExitResult,
  PathEscape,
  VERSION,
  type Workspace,
  WorkspacedError,
} from '@workspaced/client';

const options: ConnectOptions = { address: 'unix:/run/workspaced/workspaced.sock', deadlineMs: 5_000 };

export async function step(signal: AbortSignal): Promise<string> {
  const call: CallOptions = { signal, deadlineMs: 1_000 };
  const client = connect(options);
  const ws: Workspace = await client.open('memory', { fs: {} }, call);
  try {
    await ws.writeFile('a.txt', 'hello\n', call);
    const data: Buffer = await ws.readFile('a.txt', call);
    const exit: ExitResult = await ws.exec(['true'], { timeoutMs: 1_000, deadlineMs: 2_000, signal }).wait();
    return `${VERSION} ${data.toString()} ${exit.cause} ${(await client.serverVersion()).length}`;
  } catch (e) {
    if (e instanceof CallAborted || e instanceof DeadlineExceeded || e instanceof PathEscape) return e.reason;
    if (e instanceof WorkspacedError) return e.codeName;
    throw e;
  } finally {
    await ws.close();
    client.close();
  }
}

// @ts-expect-error: a deadline is a number of milliseconds
connect({ deadlineMs: 'soon' });
