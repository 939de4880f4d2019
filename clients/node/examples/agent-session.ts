// An agent session with a bounded life: a lifetime, labels and a secret.
//
// Opens a workspace that cleans itself up (it expires 15 minutes after
// Open, or after 5 idle minutes, even if this process dies before closing
// it), labelled so that a supervisor can find the session's workspaces,
// with an API token held as a secret: the server keeps it in memory only,
// and a command gets it only when it names it. The open is idempotent: a
// retry after a lost answer returns the same workspace. Then it finds the
// workspace by label, runs a command that needs the token, extends the
// lifetime because the agent is not done, and closes the workspace.
//
//   node dist/examples/agent-session.js [ADDRESS]
//
// ADDRESS as for agent-loop. The token comes from $AGENT_API_TOKEN (a demo
// value when unset); it is never printed.
import { randomUUID } from 'node:crypto';

import { connect, WorkspacedError } from '../src';

// Programs the agent may start; never a shell (see agent-loop.ts).
const COMMANDS = ['printenv', 'wc'];

async function main(): Promise<void> {
  const token = process.env.AGENT_API_TOKEN ?? 'demo-token-not-a-real-one';
  const session = `s-${randomUUID().slice(0, 12)}`;
  const client = connect({ address: process.argv[2], deadlineMs: 30_000 });
  try {
    const sandbox = (await client.providers()).some((p) => p.kind === 'local-sandbox' && p.available);
    await using ws = await client.open(
      sandbox ? 'local-sandbox' : 'memory',
      sandbox ? { fs: {}, shell: { allowedCommands: COMMANDS, maxDurationMs: 60_000 } } : { fs: {} },
      {
        lifetime: { ttlMs: 15 * 60_000, idleTimeoutMs: 5 * 60_000 },
        labels: { app: 'agent-session', session },
        // Secrets are for commands: a files-only workspace takes none.
        secrets: sandbox ? { API_TOKEN: token } : {},
      },
    );
    console.log(`opened ${ws.id} (${ws.provider}), expires at ${ws.expiresAt?.toISOString()}`);

    // What a supervisor does: find the session's workspaces by label.
    const found: string[] = [];
    for await (const w of client.listAll({ labelSelector: `app=agent-session,session=${session}` })) found.push(w.id);
    console.log(`found by label: ${found.length === 1 && found[0] === ws.id ? 'yes' : 'no'}`);

    await ws.writeFile('task.txt', 'call the API\nsummarize\n');
    if (sandbox) {
      // Only a command that names the secret gets it.
      const without = await ws.run(['printenv', 'API_TOKEN']);
      console.log(`without the secret: exit ${without.exited.exitCode}`);
      const used = await ws.run(['printenv', 'API_TOKEN'], { secrets: ['API_TOKEN'] });
      const seen = used.stdout.toString().replace(/\n$/, '');
      console.log(`with the secret: the command saw ${seen.length} bytes, the right token: ${seen === token}`);
    } else {
      console.log('no local-sandbox on this server: files only');
    }

    // Not done yet: another 15 minutes from now.
    const lifetime = await ws.extend({ ttlMs: 15 * 60_000 });
    const d = await ws.describe();
    console.log(`extended: ttl ${lifetime.ttlMs! / 1000}s, secrets ${d.secretNames.join(',') || 'none'}`);
  } finally {
    client.close();
  }
  console.log('workspace closed');
}

main().catch((err: unknown) => {
  if (err instanceof WorkspacedError) console.error(`${err.name} (${err.reason || err.codeName}): ${err.message}`);
  else console.error(err);
  process.exit(1);
});
