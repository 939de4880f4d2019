// One version everywhere: the repository's VERSION file, package.json, the
// VERSION constant, and what the server reports.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

import { connect, VERSION } from '../src';
import { startServer } from './server';

function versionFile(): string {
  const file = process.env.WORKSPACED_VERSION_FILE;
  if (!file) throw new Error('WORKSPACED_VERSION_FILE is not set: point it at the repository\'s VERSION file');
  return fs.readFileSync(file, 'utf8').trim();
}

test('VERSION equals the VERSION file and package.json', () => {
  const expected = versionFile();
  assert.match(expected, /^\d+\.\d+\.\d+$/);
  assert.equal(VERSION, expected);
  const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8'));
  assert.equal(pkg.version, expected);
});

test('serverVersion() and describe().server carry the server release', async () => {
  const srv = await startServer({ policy: [] });
  const c = connect({ address: srv.address });
  try {
    assert.equal(await c.serverVersion(), versionFile());
    const ws = await c.open('memory', { fs: {} });
    try {
      assert.equal((await ws.describe()).server?.version, versionFile());
    } finally {
      await ws.close();
    }
  } finally {
    c.close();
    await srv.stop();
  }
});
