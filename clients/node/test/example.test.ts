// The example runs end to end as a child process against a real server.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import { test } from 'node:test';

import { connect } from '../src';
import { startServer } from './server';

test('examples/agent-loop streams output and closes its workspace', async () => {
  // The operator's default policy: the example asks for nothing more.
  const srv = await startServer({ policy: [] });
  const c = connect({ address: srv.address });
  try {
    const script = path.join(__dirname, '..', 'examples', 'agent-loop.js');
    const child = spawn(process.execPath, [script], {
      env: { ...process.env, WORKSPACED_ADDR: srv.address },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((r) => child.on('exit', r));
    assert.equal(code, 0, `example failed:\n${out}\n${err}`);

    const lines = out.split('\n');
    const id = /^opened (ws_[0-9a-f]{32}) \(local-sandbox\)$/.exec(lines[0])?.[1];
    assert.ok(id, `unexpected first line: ${lines[0]}`);
    assert.ok(lines.includes('[stdout] 3 notes/todo.txt'), out);
    assert.ok(lines.includes('[stdout] finished'), out);
    assert.ok(lines.some((l) => /^exit: cause=EXIT_CAUSE_EXITED code=0 /.test(l)), out);
    assert.ok(lines.includes('done.txt has 3 lines'), out);
    // The example's workspace was closed on the way out.
    const w = (await c.list()).find((x) => x.id === id);
    assert.ok(!w || w.state === 'STATE_CLOSED', `workspace left in ${w?.state}`);
  } finally {
    c.close();
    await srv.stop();
  }
});
