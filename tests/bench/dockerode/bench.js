#!/usr/bin/env node
// The dockerode side of docker_bench (tests/bench/README.md, "Docker
// provider"): the same three measurements made the way a Node.js client
// of the Engine API would make them, with dockerode and its docker-modem.
//
//   node bench.js --serve --body FILE [--socket PATH] [--api v1.41]
//                 [--label-key KEY] [--name-prefix PREFIX]
//   node bench.js --body FILE [--opens N] [--runs N] [--stream-mib N]
//                 [--stream-runs N] [...]
//
// --body is the POST /containers/create document to use (docker_bench
// writes the one the server would send, from the server's own code, so
// every side creates the same hardened container). Each container gets the
// name PREFIX + "n" + a counter and its KEY label set to the same string.
//
// With --serve it reads commands from stdin, one per line, and answers
// each with one line on stdout: "ok ..." or "error MESSAGE". docker_bench
// drives it that way, block by block, so that its figures are taken in the
// same run and under the same load as the other sides':
//   open N       N x (createContainer + start), each timed, then removed
//                (force, untimed); answers the N times in nanoseconds
//   setup        creates and starts the container the next two commands use
//   run N        N x (exec of /bin/true + start with hijack, demuxed and
//                read to its end + exec.inspect); answers the N times
//   stream BYTES one exec of `/bin/head -c BYTES /dev/zero`, the same way,
//                payload counted; answers "ok NS STDOUT_BYTES STDERR_BYTES
//                EXIT_CODE"
//   teardown     removes the container of `setup`
// Without --serve it runs the three measurements once and prints a summary.
'use strict';

const fs = require('fs');
const { Writable } = require('stream');
const readline = require('readline');
const Docker = require('dockerode');

function parseArgs(argv) {
  const o = {
    serve: false,
    socket: '/var/run/docker.sock',
    api: '',
    body: '',
    labelKey: 'dev.workspaced.workspace',
    namePrefix: `dockerode_bench-${process.pid}-`,
    opens: 30,
    runs: 100,
    streamMiB: 200,
    streamRuns: 3,
  };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    const num = () => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 1) throw new Error(`${a} needs a positive integer`);
      i++;
      return n;
    };
    switch (a) {
      case '--serve': o.serve = true; break;
      case '--socket': o.socket = v; i++; break;
      case '--api': o.api = v; i++; break;
      case '--body': o.body = v; i++; break;
      case '--label-key': o.labelKey = v; i++; break;
      case '--name-prefix': o.namePrefix = v; i++; break;
      case '--opens': o.opens = num(); break;
      case '--runs': o.runs = num(); break;
      case '--stream-mib': o.streamMiB = num(); break;
      case '--stream-runs': o.streamRuns = num(); break;
      default: throw new Error(`unknown argument ${a}`);
    }
  }
  if (!o.body) throw new Error('--body FILE is required');
  return o;
}

const opt = parseArgs(process.argv);
const template = JSON.parse(fs.readFileSync(opt.body, 'utf8'));
const docker = new Docker(opt.api ? { socketPath: opt.socket, version: opt.api }
                                  : { socketPath: opt.socket });
let counter = 0;
let runContainer = null;

function now() {
  return process.hrtime.bigint();
}

// A fresh create document: dockerode takes `name` from the options (it
// puts them in the query string as well as in the body, as it always does).
function createOptions() {
  const name = `${opt.namePrefix}n${counter++}`;
  const body = structuredClone(template);
  body.Labels = Object.assign({}, body.Labels, { [opt.labelKey]: name });
  body.name = name;
  return body;
}

async function openOnce() {
  const options = createOptions();
  const t0 = now();
  const c = await docker.createContainer(options);
  await c.start();
  const ns = now() - t0;
  await c.remove({ force: true, v: true });
  return ns;
}

class Counter extends Writable {
  constructor() {
    super();
    this.bytes = 0;
  }
  _write(chunk, encoding, callback) {
    this.bytes += chunk.length;
    callback();
  }
}

// One exec to its end: create, start on a hijacked connection with the
// multiplexed stream demuxed into two counting streams, inspect.
async function execOnce(container, cmd) {
  const exec = await container.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
  const sock = await exec.start({ hijack: true, stdin: false });
  const out = new Counter();
  const err = new Counter();
  await new Promise((resolve, reject) => {
    sock.on('end', resolve);
    sock.on('error', reject);
    docker.modem.demuxStream(sock, out, err);
  });
  const info = await exec.inspect();
  return { stdout: out.bytes, stderr: err.bytes, exitCode: info.ExitCode, running: info.Running };
}

async function setup() {
  if (runContainer) return runContainer.id;
  const c = await docker.createContainer(createOptions());
  await c.start();
  runContainer = c;
  return c.id;
}

async function teardown() {
  if (!runContainer) return;
  const c = runContainer;
  runContainer = null;
  await c.remove({ force: true, v: true });
}

async function runOnce() {
  const t0 = now();
  const r = await execOnce(runContainer, ['/bin/true']);
  const ns = now() - t0;
  if (r.exitCode !== 0 || r.running || r.stdout || r.stderr)
    throw new Error(`/bin/true: exit code ${r.exitCode}, running ${r.running}, ` +
                    `${r.stdout} B of stdout, ${r.stderr} B of stderr`);
  return ns;
}

async function streamOnce(bytes) {
  const t0 = now();
  const r = await execOnce(runContainer, ['/bin/head', '-c', String(bytes), '/dev/zero']);
  const ns = now() - t0;
  return { ns, ...r };
}

async function repeat(n, fn) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await fn());
  return out;
}

async function command(line) {
  const [verb, arg] = line.trim().split(/\s+/);
  const n = Number(arg);
  switch (verb) {
    case 'open':
      return (await repeat(n, openOnce)).join(' ');
    case 'setup':
      return setup();
    case 'run':
      if (!runContainer) throw new Error('run before setup');
      return (await repeat(n, runOnce)).join(' ');
    case 'stream': {
      if (!runContainer) throw new Error('stream before setup');
      const r = await streamOnce(n);
      return `${r.ns} ${r.stdout} ${r.stderr} ${r.exitCode}`;
    }
    case 'teardown':
      await teardown();
      return '';
    default:
      throw new Error(`unknown command ${JSON.stringify(line)}`);
  }
}

// Commands strictly one after the other: a block is timed alone.
async function serve() {
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const line of rl) {
    if (!line.trim()) continue;
    let reply;
    try {
      reply = `ok ${await command(line)}`.trimEnd();
    } catch (e) {
      reply = `error ${String(e && e.message ? e.message : e).replace(/\s+/g, ' ')}`;
    }
    process.stdout.write(reply + '\n');
  }
  await teardown().catch(() => {});
}

function stats(ns) {
  const v = ns.map(Number).sort((a, b) => a - b);
  const at = (q) => v[Math.min(v.length - 1, Math.round(q * (v.length - 1)))];
  return { median: at(0.5), p90: at(0.9), mean: v.reduce((a, b) => a + b, 0) / v.length };
}

function ms(x) {
  return `${(x / 1e6).toFixed(2)} ms`;
}

async function standalone() {
  const opens = await repeat(opt.opens, openOnce);
  await setup();
  try {
    await repeat(Math.min(10, opt.runs), runOnce);
    const runs = await repeat(opt.runs, runOnce);
    const bytes = opt.streamMiB * 1024 * 1024;
    const streams = await repeat(opt.streamRuns, () => streamOnce(bytes));
    for (const s of streams)
      if (s.stdout !== bytes || s.exitCode !== 0)
        throw new Error(`stream: ${s.stdout} of ${bytes} B, exit code ${s.exitCode}`);
    const o = stats(opens), r = stats(runs), s = stats(streams.map((x) => x.ns));
    console.log(`dockerode ${require('dockerode/package.json').version}, node ${process.version}`);
    console.log(`createContainer+start (${opt.opens}): median ${ms(o.median)}, p90 ${ms(o.p90)}, mean ${ms(o.mean)}`);
    console.log(`exec /bin/true (${opt.runs}): median ${ms(r.median)}, p90 ${ms(r.p90)}, mean ${ms(r.mean)}`);
    console.log(`head -c ${bytes} (${opt.streamRuns}): median ${(bytes / (s.median / 1e9) / 1e6).toFixed(0)} MB/s`);
  } finally {
    await teardown();
  }
}

(opt.serve ? serve() : standalone()).catch((e) => {
  console.error(`bench.js: ${e && e.stack ? e.stack : e}`);
  process.exitCode = 1;
});
