// This client's release. It equals the repository's VERSION file and the
// package.json version (test/version.test.ts checks both), so that a
// caller can compare it with Client.serverVersion().
export const VERSION = '0.1.0';
