package workspaced

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func connectTo(t *testing.T, s *server) *Client {
	t.Helper()
	c, err := Connect(context.Background(), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantPolicyDenied checks that err is the server's policy refusal, typed,
// naming the rule and what was refused, and not worth retrying.
func wantPolicyDenied(t *testing.T, what string, err error, rule, key, value string) {
	t.Helper()
	var pd *PolicyDenied
	if !errors.As(err, &pd) || pd.Code != codes.PermissionDenied || pd.Reason != "POLICY" ||
		pd.Metadata["rule"] != rule || pd.Metadata[key] != value || pd.Transient() {
		t.Fatalf("%s: %v, want *PolicyDenied with rule=%s %s=%s", what, err, rule, key, value)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A server with no policy configured refuses local-bash: the client gets
// *PolicyDenied naming the rule and the provider, Open does not retry it,
// and Providers and Policy show the caller beforehand what it may open.
func TestPolicyRefusesLocalBashByDefault(t *testing.T) {
	c := connectTo(t, startServerArgs(t, nil))
	ctx := testCtx(t)

	retries := 0
	_, err := c.Open(ctx, LocalBash(), shellCaps(), OpenRetry(RetryPolicy{MaxAttempts: 3, Sleep: func(context.Context, time.Duration) error { retries++; return nil }}))
	wantPolicyDenied(t, "Open local-bash", err, "providers", "provider", "local-bash")
	if retries != 0 {
		t.Fatalf("Open retried a policy refusal %d times", retries)
	}

	pol, err := c.Policy(ctx)
	if err != nil {
		t.Fatalf("Policy: %v", err)
	}
	if contains(pol.GetProviders(), "local-bash") || !contains(pol.GetProviders(), "memory") {
		t.Fatalf("Policy().Providers = %v, want memory and not local-bash", pol.GetProviders())
	}
	if pol.GetNetwork() || len(pol.GetPassEnv()) != 0 || len(pol.GetBindRoots()) != 0 || pol.GetDockerPull() {
		t.Fatalf("default policy is not the safe one: %v", pol)
	}
	list, err := c.Providers(ctx)
	if err != nil {
		t.Fatalf("Providers: %v", err)
	}
	for _, p := range list {
		if p.GetKind() == "local-bash" && (p.GetAvailable() || !strings.HasPrefix(p.GetReason(), "POLICY")) {
			t.Fatalf("Providers shows local-bash as %v", p)
		}
	}

	// What the policy allows still opens.
	ws, err := c.Open(ctx, Memory(), nil)
	if err != nil {
		t.Fatalf("Open memory: %v", err)
	}
	if err := ws.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// With local-bash allowed, the policy gives the server's environment out
// by name only: a pass_env name outside the operator's list is refused,
// naming it, and one on the list carries the server's value.
func TestPolicyPassEnv(t *testing.T) {
	args := append(append([]string{}, bashPolicy...), "--policy-pass-env", "WSD_GO_SHARED")
	c := connectTo(t, startServerArgs(t, args, "WSD_GO_SHARED=shared-value", "WSD_GO_SECRET=secret-value"))
	ctx := testCtx(t)

	caps := shellCaps()
	caps.Shell.PassEnv = []string{"WSD_GO_SHARED", "WSD_GO_SECRET"}
	_, err := c.Open(ctx, LocalBash(), caps, OpenRetry(NoRetry()))
	wantPolicyDenied(t, "pass_env WSD_GO_SECRET", err, "pass-env", "name", "WSD_GO_SECRET")

	caps.Shell.PassEnv = []string{"WSD_GO_SHARED"}
	ws, err := c.Open(ctx, LocalBash(), caps)
	if err != nil {
		t.Fatalf("Open with pass_env WSD_GO_SHARED: %v", err)
	}
	defer ws.Close(context.Background())
	r, err := ws.Run(ctx, Cmd{Argv: []string{"sh", "-c", `echo "$WSD_GO_SHARED:$WSD_GO_SECRET"`}})
	if err != nil || string(r.Stdout) != "shared-value:\n" {
		t.Fatalf("Run = %+v, %v; want the shared value and not the secret", r, err)
	}

	if pol, err := c.Policy(ctx); err != nil || !contains(pol.GetProviders(), "local-bash") || !contains(pol.GetPassEnv(), "WSD_GO_SHARED") {
		t.Fatalf("Policy = %v, %v; want local-bash and pass_env WSD_GO_SHARED", pol, err)
	}
}
