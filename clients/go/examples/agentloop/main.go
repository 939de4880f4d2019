// Command agentloop is the smallest agent loop: open a workspace, write a
// file, run a command over it with its output streamed as it arrives, read
// the result back, and close the workspace.
//
// It uses the local-sandbox provider (bubblewrap namespaces plus seccomp),
// which a server offers by default: the provider for untrusted agents when
// there is no Docker.
//
// Usage: agentloop [ADDR]   (default: $WORKSPACED_ADDR, else the server's
// default socket unix:/run/workspaced/workspaced.sock)
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"workspaced/clients/go/workspaced"
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

func run(ctx context.Context, addr string) error {
	c, err := workspaced.Connect(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()

	ws, err := c.Open(ctx, workspaced.LocalSandbox(nil), &workspaced.Capabilities{
		Fs:    &workspaced.FsCapability{},
		Shell: &workspaced.ShellCapability{AllowedCommands: []string{"sh", "wc"}},
	})
	if err != nil {
		return err
	}
	// Close removes the workspace's storage; it is idempotent, so the
	// deferred call is harmless after the explicit one below.
	defer ws.Close(ctx)
	fmt.Printf("opened %s (%s)\n", ws.ID(), ws.Provider())

	if _, err := ws.WriteFile(ctx, "notes/todo.txt", []byte("write code\ntest it\nship it\n"), workspaced.CreateParents()); err != nil {
		return err
	}

	// The script reports progress before its slow step: the first line
	// is printed while the command still runs.
	p, err := ws.Exec(ctx, workspaced.Cmd{
		Argv: []string{"sh", "-c", "echo counting; sleep 1; wc -l < notes/todo.txt > notes/count.txt; echo done"},
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
