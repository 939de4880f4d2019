// gRPC server reflection of the real server, through a third-party
// reflection client (grpc-js-reflection-client) and raw streams, checked
// against the protos read independently (protobufjs over proto/), and the
// shipped workspace.protoset checked against the same protos.
//
// Environment (set by run_test.sh): WORKSPACED_BIN, WORKSPACED_PROTO_DIR,
// WORKSPACED_PROTOSET, TEST_TMPDIR.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');
const { FileDescriptorSet, FileDescriptorProto } = require('protobufjs/ext/descriptor');
const { GrpcReflection } = require('grpc-js-reflection-client');

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run under bazel test)`);
  return v;
};
const BIN = env('WORKSPACED_BIN');
const PROTO_DIR = env('WORKSPACED_PROTO_DIR');
const PROTOSET = env('WORKSPACED_PROTOSET');
const TMP = env('TEST_TMPDIR');

const API_PROTOS = [
  'workspace/v1/common.proto',
  'workspace/v1/providers.proto',
  'workspace/v1/workspaces.proto',
  'workspace/v1/filesystem.proto',
  'workspace/v1/exec.proto',
  'google/rpc/status.proto',
  'google/rpc/error_details.proto',
  'grpc/health/v1/health.proto',
];
const REFLECTION_PROTOS = ['grpc/reflection/v1alpha/reflection.proto', 'grpc/reflection/v1/reflection.proto'];
const TOKEN = 'reflection-test-token';
const NOT_FOUND = grpc.status.NOT_FOUND;

// protobufjs over the proto sources: the reference the server is held to.
function loadSources(files) {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => {
    const local = path.join(PROTO_DIR, target);
    return fs.existsSync(local) ? local : path.join('/usr/include', target);
  };
  root.loadSync(files, { keepCase: true });
  root.resolveAll();
  return root;
}

function services(root) {
  const out = [];
  const walk = (ns) => {
    for (const o of ns.nestedArray) {
      if (o instanceof protobuf.Service) out.push(o);
      else if (o.nestedArray) walk(o);
    }
  };
  walk(root);
  return out;
}

// A service's methods as comparable rows.
function methodRows(svc) {
  return svc.methodsArray
    .map((m) => ({
      name: m.name,
      request: m.resolvedRequestType.fullName,
      response: m.resolvedResponseType.fullName,
      requestStream: !!m.requestStream,
      responseStream: !!m.responseStream,
    }))
    .sort((a, b) => a.name.localeCompare(b.name));
}

const sources = loadSources([...API_PROTOS, ...REFLECTION_PROTOS]);
const expected = new Map(services(sources).map((s) => [s.fullName.slice(1), s]));

let server;
let target;
let stderr = '';

before(async () => {
  const dir = fs.mkdtempSync(path.join(TMP, 'refl-'));
  // Workspace uids need the state directory's parents searchable.
  fs.chmodSync(dir, 0o711);
  const hash = createHash('sha256').update(TOKEN).digest('hex');
  fs.writeFileSync(path.join(dir, 'tokens'), `reflect ${hash}\n`);
  server = spawn(
    BIN,
    ['--listen', '127.0.0.1:0', '--state-dir', path.join(dir, 'state'), '--tokens-file', path.join(dir, 'tokens')],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  server.stderr.on('data', (d) => (stderr += d));
  target = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`workspaced did not start within 15s; stderr:\n${stderr}`)), 15000);
    server.on('exit', (code, sig) => reject(new Error(`workspaced exited (code ${code}, signal ${sig}); stderr:\n${stderr}`)));
    server.stdout.on('data', (d) => {
      out += d;
      const m = /workspaced listening on (\S+)\n/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
  });
  server.removeAllListeners('exit');
});

after(async () => {
  if (!server) return;
  const exited = new Promise((resolve) => server.on('exit', (code, sig) => resolve({ code, sig })));
  server.kill('SIGTERM');
  const { code, sig } = await exited;
  assert.equal(code, 0, `workspaced did not exit cleanly (code ${code}, signal ${sig}); stderr:\n${stderr}`);
});

function authMetadata() {
  const md = new grpc.Metadata();
  md.set('authorization', `Bearer ${TOKEN}`);
  return md;
}

function reflectionClient(version) {
  return new GrpcReflection(target, grpc.credentials.createInsecure(), {}, version);
}

for (const version of ['v1', 'v1alpha']) {
  test(`${version}: list_services names every service the server serves`, async () => {
    const got = await reflectionClient(version).listServices('*', authMetadata());
    assert.deepEqual([...got].sort(), [...expected.keys()].sort());
  });
}

test('each service resolves to a descriptor with the methods of the protos', async () => {
  const client = reflectionClient('v1');
  for (const [name, want] of expected) {
    const descriptor = await client.getDescriptorBySymbol(name, authMetadata());
    const root = descriptor.getProtobufJsRoot();
    root.resolveAll();
    const svc = root.lookupService(name);
    assert.deepEqual(methodRows(svc), methodRows(want), name);

    // The client's own view of the same descriptor, as a grpc-js service
    // definition: paths and streaming flags.
    const listed = await client.listMethods(name, authMetadata());
    assert.deepEqual(
      listed.map((m) => [m.definition.path, m.definition.requestStream, m.definition.responseStream]).sort(),
      want.methodsArray.map((m) => [`/${name}/${m.name}`, !!m.requestStream, !!m.responseStream]).sort(),
      name,
    );
  }
});

test('methods, messages, fields and enum values name their file', async () => {
  const s = rawStream('v1alpha');
  const cases = {
    'workspace.v1.Exec.Start': 'workspace/v1/exec.proto',
    'workspace.v1.FileSystem.ReadFile': 'workspace/v1/filesystem.proto',
    'workspace.v1.ServerInfo': 'workspace/v1/common.proto',
    'workspace.v1.ServerInfo.version': 'workspace/v1/common.proto',
    'workspace.v1.ErrorReason': 'workspace/v1/common.proto',
    'workspace.v1.ERROR_REASON_UNSPECIFIED': 'workspace/v1/common.proto',
    'workspace.v1': 'workspace/v1/common.proto',
    'grpc.health.v1.HealthCheckResponse.ServingStatus': 'grpc/health/v1/health.proto',
    'grpc.health.v1.HealthCheckResponse.SERVING': 'grpc/health/v1/health.proto',
    'google.rpc.ErrorInfo': 'google/rpc/error_details.proto',
    'google.protobuf.Any': 'google/protobuf/any.proto',
    'grpc.reflection.v1.ServerReflection': 'grpc/reflection/v1/reflection.proto',
    'grpc.reflection.v1alpha.ServerReflection.ServerReflectionInfo': 'grpc/reflection/v1alpha/reflection.proto',
  };
  for (const [symbol, file] of Object.entries(cases)) {
    s.send({ file_containing_symbol: symbol });
    const r = await s.next();
    assert.equal(r.message_response, 'file_descriptor_response', symbol);
    assert.equal(FileDescriptorProto.decode(r.file_descriptor_response.file_descriptor_proto[0]).name, file, symbol);
  }
  // Near misses: a prefix, a suffix, a name in the wrong scope.
  for (const symbol of ['workspace.v1.Exec.Sta', 'workspace.v1.Exec.Start.x', 'workspace.v1.version', 'workspace', 'Exec']) {
    s.send({ file_containing_symbol: symbol });
    const r = await s.next();
    assert.equal(r.error_response?.error_code, NOT_FOUND, symbol);
  }
  assert.equal(await s.end(), null);
});

test('file_by_filename of workspace/v1/common.proto holds ErrorReason with every value', async () => {
  const root = (await reflectionClient('v1').getDescriptorByFileName('workspace/v1/common.proto', authMetadata()))
    .getProtobufJsRoot();
  const served = root.lookupEnum('workspace.v1.ErrorReason');
  const want = sources.lookupEnum('workspace.v1.ErrorReason');
  assert.ok(Object.keys(want.values).length > 1);
  assert.deepEqual({ ...served.values }, { ...want.values });
});

// A raw stream of the reflection service: several requests on one stream,
// and the error codes the library does not expose.
function rawStream(version, metadata = authMetadata()) {
  const def = protoLoader.loadSync(`grpc/reflection/${version}/reflection.proto`, {
    includeDirs: [PROTO_DIR],
    keepCase: true,
    oneofs: true,
  });
  const pkg = grpc.loadPackageDefinition(def).grpc.reflection[version];
  const client = new pkg.ServerReflection(target, grpc.credentials.createInsecure());
  const call = client.ServerReflectionInfo(metadata);
  const responses = [];
  const waiters = [];
  let done = false;
  let error = null;
  const wake = () => waiters.splice(0).forEach((w) => w());
  const wait = () => new Promise((r) => waiters.push(r));
  call.on('data', (r) => {
    responses.push(r);
    wake();
  });
  call.on('error', (e) => {
    done = true;
    error = e;
    wake();
  });
  call.on('end', () => {
    done = true;
    wake();
  });
  // The call's outcome: null when it ended with OK, else its error.
  const ended = async () => {
    while (!done) await wait();
    client.close();
    return error;
  };
  return {
    send: (req) => call.write(req),
    async next() {
      while (responses.length === 0) {
        if (done) throw error ?? new Error('the stream ended without an answer');
        await wait();
      }
      return responses.shift();
    },
    end() {
      call.end();
      return ended();
    },
    ended,
  };
}

test('unknown names get an in-band NOT_FOUND and the stream goes on', async () => {
  const s = rawStream('v1');
  const asks = [
    [{ file_containing_symbol: 'workspace.v1.NoSuchThing' }, 'error_response', NOT_FOUND],
    [{ file_by_filename: 'workspace/v1/nope.proto' }, 'error_response', NOT_FOUND],
    [{ file_containing_extension: { containing_type: 'workspace.v1.ServerInfo', extension_number: 100 } }, 'error_response', NOT_FOUND],
    [{ all_extension_numbers_of_type: 'workspace.v1.NoSuchThing' }, 'error_response', NOT_FOUND],
    [{ all_extension_numbers_of_type: 'workspace.v1.ServerInfo' }, 'all_extension_numbers_response'],
    [{ host: 'h' }, 'error_response', grpc.status.INVALID_ARGUMENT],
    // Past the server's longest symbol (1024 bytes): not looked up.
    [{ file_containing_symbol: `workspace.v1.${'X'.repeat(1 << 20)}` }, 'error_response', NOT_FOUND],
    [{ file_containing_symbol: 'workspace.v1.Workspaces' }, 'file_descriptor_response'],
  ];
  for (const [req, kind, code] of asks) {
    s.send(req);
    const r = await s.next();
    assert.equal(r.message_response, kind, JSON.stringify(req));
    assert.deepEqual(r.original_request[r.original_request.message_request], req[r.original_request.message_request]);
    if (code !== undefined) assert.equal(r.error_response.error_code, code, JSON.stringify(req));
  }
  assert.equal(await s.end(), null);
});

test('a file comes with its imports, itself first, comments included', async () => {
  const s = rawStream('v1alpha');
  s.send({ file_by_filename: 'workspace/v1/workspaces.proto' });
  const r = await s.next();
  const files = r.file_descriptor_response.file_descriptor_proto.map((b) => FileDescriptorProto.decode(b));
  assert.equal(files[0].name, 'workspace/v1/workspaces.proto');
  const names = new Set(files.map((f) => f.name));
  for (const f of files) for (const dep of f.dependency ?? []) assert.ok(names.has(dep), `${f.name} imports ${dep}, not sent`);
  assert.equal(names.size, files.length, 'a file was sent twice');
  assert.ok(files[0].sourceCodeInfo?.location?.some((l) => l.leadingComments), 'no comments in the descriptor');
  assert.equal(await s.end(), null);
});

test('a long stream is answered request by request, in order', async () => {
  const s = rawStream('v1');
  const n = 300;
  const symbols = [...expected.keys()];
  for (let i = 0; i < n; i++) s.send({ host: `h${i}`, file_containing_symbol: symbols[i % symbols.length] });
  for (let i = 0; i < n; i++) {
    const r = await s.next();
    assert.equal(r.valid_host, `h${i}`);
    assert.equal(r.message_response, 'file_descriptor_response');
  }
  assert.equal(await s.end(), null);
});

test('reflection needs the same authentication as every call', async () => {
  const s = rawStream('v1', new grpc.Metadata());
  s.send({ list_services: '*' });
  const err = await s.ended();
  assert.equal(err?.code, grpc.status.UNAUTHENTICATED);
});

test('workspace.protoset holds the API with comments', () => {
  const set = FileDescriptorSet.decode(fs.readFileSync(PROTOSET));
  const names = set.file.map((f) => f.name);
  for (const f of API_PROTOS) assert.ok(names.includes(f), `${f} is not in the protoset`);
  assert.ok(names.includes('google/protobuf/any.proto'), 'the protoset lacks its imports');
  assert.ok(
    set.file.find((f) => f.name === 'workspace/v1/common.proto').sourceCodeInfo?.location?.some((l) => l.leadingComments),
    'the protoset has no comments',
  );
  const root = protobuf.Root.fromDescriptor(set);
  root.resolveAll();
  const got = new Map(services(root).map((s) => [s.fullName.slice(1), s]));
  const want = [...expected.keys()].filter((n) => !n.startsWith('grpc.reflection.'));
  assert.deepEqual([...got.keys()].sort(), want.sort());
  for (const name of want) assert.deepEqual(methodRows(got.get(name)), methodRows(expected.get(name)), name);
});
