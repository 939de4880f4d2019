// The suites need a real server: a missing WORKSPACED_BIN must count as a
// failure (not only as cancelled hooks), so it is also a test of its own.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { serverBin } from './server';

test('WORKSPACED_BIN names the server binary', () => {
  assert.doesNotThrow(serverBin);
});
