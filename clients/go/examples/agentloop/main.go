// Command agentloop is the smallest agent loop: open a workspace, write a
// file, run a command over it with its output streamed as it arrives, read
// the result back, and close the workspace.
//
// The workspace is opened with a lifetime (it expires after 10 minutes, or
// 2 idle ones, should the agent die without closing it), labels (List finds
// the agent's workspaces by them) and a secret, which only the command that
// names it gets in its environment: the server keeps its value in memory,
// never on disk, in a log or in Describe. The secret's value comes from
// $AGENT_API_TOKEN, else a placeholder. Each turn of the loop extends the
// lifetime, as an agent that is still working would.
//
// The command runs in a local-sandbox workspace (bubblewrap namespaces plus
// seccomp), which a server offers by default where bubblewrap works. When
// the server says local-sandbox is not available, the example works with
// files only, in a memory workspace, and runs no command. It never falls
// back to local-bash with "sh" allowed: `sh -c` runs any program, so once
// sh is allowed the command guard constrains nothing, and local-bash has
// no isolation of its own.
//
// Usage: agentloop [ADDR]   (default: $WORKSPACED_ADDR, else the server's
// default socket unix:/run/workspaced/workspaced.sock)
package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"workspaced.dev/go/workspaced"
)

func main() {
	log.SetFlags(0)
	addr := ""
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, addr); err != nil {
		log.Fatalf("agentloop: %v", err)
	}
}

// sandboxState reports whether the server offers local-sandbox to this
// caller now and, if not, why.
func sandboxState(ctx context.Context, c *workspaced.Client) (bool, string, error) {
	providers, err := c.Providers(ctx)
	if err != nil {
		return false, "", err
	}
	for _, p := range providers {
		if p.GetKind() == "local-sandbox" {
			return p.GetAvailable(), p.GetReason(), nil
		}
	}
	return false, "the server does not list it", nil
}

func run(ctx context.Context, addr string) error {
	c, err := workspaced.Connect(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()

	sandbox, why, err := sandboxState(ctx, c)
	if err != nil {
		return err
	}
	lifetime := []workspaced.OpenOption{
		workspaced.WithTTL(10 * time.Minute),
		workspaced.WithIdleTimeout(2 * time.Minute),
		workspaced.WithLabels(map[string]string{"app": "agentloop", "example.com/owner": "docs"}),
	}
	token := os.Getenv("AGENT_API_TOKEN")
	if token == "" {
		token = "placeholder-token"
	}
	var ws *workspaced.Workspace
	if sandbox {
		ws, err = c.Open(ctx, workspaced.LocalSandbox(nil), &workspaced.Capabilities{
			Fs:    &workspaced.FsCapability{},
			Shell: &workspaced.ShellCapability{AllowedCommands: []string{"sh", "wc"}},
		}, append(lifetime, workspaced.WithSecrets(map[string]string{"AGENT_API_TOKEN": token}))...)
	} else {
		fmt.Printf("local-sandbox is not available (%s): files only, no commands\n", why)
		ws, err = c.Open(ctx, workspaced.Memory(), &workspaced.Capabilities{Fs: &workspaced.FsCapability{}}, lifetime...)
	}
	if err != nil {
		return err
	}
	// Close removes the workspace's storage; it is idempotent, so the
	// deferred call is harmless after the explicit one below.
	defer ws.Close(ctx)
	fmt.Printf("opened %s (%s), app=%s, expires in at most %v\n", ws.ID(), ws.Provider(),
		ws.Labels()["app"], time.Until(ws.ExpiresAt()).Round(time.Minute))
	mine, err := c.List(ctx, workspaced.LabelSelector("app=agentloop"))
	if err != nil {
		return err
	}
	fmt.Printf("workspaces labelled app=agentloop: %d\n", len(mine))

	if _, err := ws.WriteFile(ctx, "notes/todo.txt", []byte("write code\ntest it\nship it\n"), workspaced.CreateParents()); err != nil {
		return err
	}

	if !sandbox {
		// Without a command, the agent reads the file back and counts
		// the lines itself.
		todo, err := ws.ReadFile(ctx, "notes/todo.txt")
		if err != nil {
			return err
		}
		fmt.Printf("lines: %d\n", bytes.Count(todo, []byte("\n")))
		return ws.Close(ctx)
	}

	// A turn of the loop: the agent is still at work, so it moves the
	// expiry on.
	if _, err := ws.Extend(ctx, 10*time.Minute, 0); err != nil {
		return err
	}
	// The script reports progress before its slow step: the first line
	// is printed while the command still runs. It names the secret, so
	// it gets it in its environment (and shows only its length).
	p, err := ws.Exec(ctx, workspaced.Cmd{
		Argv: []string{"sh", "-c", `echo counting; echo "token: ${#AGENT_API_TOKEN} bytes"; sleep 1; ` +
			`wc -l < notes/todo.txt > notes/count.txt; echo done`},
		Secrets: []string{"AGENT_API_TOKEN"},
	})
	if err != nil {
		return err
	}
	for ev := range p.Output() {
		switch {
		case ev.Gap:
			fmt.Printf("[%d bytes of output lost]\n", ev.Dropped)
		case ev.Stream == workspaced.StreamStderr:
			fmt.Fprintf(os.Stderr, "%s", ev.Data)
		default:
			fmt.Printf("[%s] %s", time.Now().Format("15:04:05.000"), ev.Data)
		}
	}
	exited, err := p.Wait()
	if err != nil {
		return err
	}
	fmt.Printf("exited: cause=%s code=%d wall=%dms\n", exited.GetCause(), exited.GetExitCode(), exited.GetWallTimeMs())

	count, err := ws.ReadFile(ctx, "notes/count.txt")
	if err != nil {
		return err
	}
	fmt.Printf("lines: %s", count)
	return ws.Close(ctx)
}
