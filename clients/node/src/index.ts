// Public surface of the workspaced Node client.
//
// Symbol.asyncDispose / Symbol.dispose: `await using` needs them. Node 20.4+
// and TypeScript's downlevel helpers look them up at run time; older
// runtimes lack them, so define them before any class that uses them is
// created. (Registered symbols keep them identical across copies of this
// module.)
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for('Symbol.asyncDispose');
(Symbol as { dispose?: symbol }).dispose ??= Symbol.for('Symbol.dispose');

export { VERSION } from './version';
export * from './errors';
export * from './retry';
export * from './process';
export * from './workspace';
export * from './client';
export { UnsafeArchive } from './tar';
export type { ExtractOptions } from './tar';
export { resolveProtoDir, API_PROTOS, LOADER_OPTIONS } from './proto';
export type { CallOptions } from './transport';
