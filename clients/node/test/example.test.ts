// The example runs end to end as a child process against a real server:
// on local-sandbox when the server offers it, on memory (files only)
// when it does not, and never with a shell.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

import { connect } from '../src';
import { startServer } from './server';

async function runExample(address: string, name = 'agent-loop', env: NodeJS.ProcessEnv = {}): Promise<string[]> {
  const script = path.join(__dirname, '..', 'examples', `${name}.js`);
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, WORKSPACED_ADDR: address, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  const code = await new Promise<number | null>((r) => child.on('exit', r));
  assert.equal(code, 0, `example failed:\n${out}\n${err}`);
  return out.split('\n');
}

const version = () => fs.readFileSync(process.env.WORKSPACED_VERSION_FILE ?? '', 'utf8').trim();

test('examples/agent-loop uses local-sandbox without a shell, and closes its workspace', async () => {
  // The operator's default policy: the example asks for nothing more.
  const srv = await startServer({ policy: [] });
  const c = connect({ address: srv.address });
  try {
    const lines = await runExample(srv.address);
    const out = lines.join('\n');
    const m = /^opened (ws_[0-9a-f]{32}) \(local-sandbox\); server (\S+), client (\S+)$/.exec(lines[0]);
    assert.ok(m, `unexpected first line: ${lines[0]}`);
    assert.equal(m[2], version());
    assert.equal(m[3], version());
    assert.ok(lines.includes('[stdout] 3 notes/todo.txt'), out);
    assert.ok(lines.some((l) => /^exit: cause=EXIT_CAUSE_EXITED code=0 /.test(l)), out);
    assert.ok(lines.includes('sh refused: COMMAND_NOT_ALLOWED'), out);
    assert.ok(lines.includes('todo.txt: 1 of 3 done'), out);
    // The example's workspace was closed on the way out.
    const w = (await c.list()).find((x) => x.id === m[1]);
    assert.ok(!w || w.state === 'STATE_CLOSED', `workspace left in ${w?.state}`);
  } finally {
    c.close();
    await srv.stop();
  }
});

test('examples/agent-loop falls back to memory, files only, without local-sandbox', async () => {
  const srv = await startServer({ policy: [], args: ['--providers', 'memory'] });
  try {
    const lines = await runExample(srv.address);
    const out = lines.join('\n');
    assert.match(lines[0], /^opened ws_[0-9a-f]{32} \(memory\); /, out);
    assert.ok(lines.includes('no local-sandbox on this server: files only'), out);
    assert.ok(!lines.some((l) => l.startsWith('[stdout]') || l.startsWith('exit:')), out);
    assert.ok(lines.includes('todo.txt: 1 of 3 done'), out);
  } finally {
    await srv.stop();
  }
});

test('examples/agent-session: a lifetime, labels and a secret only the command that names it sees', async () => {
  const srv = await startServer({ policy: [] });
  const c = connect({ address: srv.address });
  try {
    const lines = await runExample(srv.address, 'agent-session', { AGENT_API_TOKEN: 'tok-123456' });
    const out = lines.join('\n');
    assert.ok(!out.includes('tok-123456'), out);
    const m = /^opened (ws_[0-9a-f]{32}) \(local-sandbox\), expires at \d{4}-\d\d-\d\dT/.exec(lines[0]);
    assert.ok(m, out);
    assert.ok(lines.includes('found by label: yes'), out);
    assert.ok(lines.includes('without the secret: exit 1'), out);
    assert.ok(lines.includes('with the secret: the command saw 10 bytes, the right token: true'), out);
    assert.ok(lines.includes('extended: ttl 900s, secrets API_TOKEN'), out);
    assert.ok(lines.includes('workspace closed'), out);
    const w = (await c.list()).find((x) => x.id === m[1]);
    assert.ok(!w || w.state === 'STATE_CLOSED', `workspace left in ${w?.state}`);
  } finally {
    c.close();
    await srv.stop();
  }
});
