package workspaced

import (
	"os"
	"strings"
	"testing"
)

// versionFile is the VERSION file at the root of the source tree:
// $WORKSPACED_VERSION_FILE (set by the build scripts), else its place
// relative to this package (clients/go/workspaced).
func versionFile(t *testing.T) string {
	t.Helper()
	path := os.Getenv("WORKSPACED_VERSION_FILE")
	if path == "" {
		path = "../../../VERSION"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the VERSION file (set WORKSPACED_VERSION_FILE): %v", err)
	}
	return strings.TrimSpace(string(b))
}

// Version is the VERSION file, and the server built from the same tree
// reports the same release through ListProviders and Describe.
func TestVersion(t *testing.T) {
	want := versionFile(t)
	if Version != want {
		t.Fatalf("Version = %q, the VERSION file says %q", Version, want)
	}
	c, _ := connect(t)
	ctx := testCtx(t)
	got, err := c.ServerVersion(ctx)
	if err != nil || got != want {
		t.Fatalf("ServerVersion = %q, %v; want %q", got, err, want)
	}
	ws, err := c.Open(ctx, Memory(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close(ctx)
	d, err := ws.Describe(ctx)
	if err != nil || d.GetServer().GetVersion() != want {
		t.Fatalf("Describe's server = %v, %v; want version %q", d.GetServer(), err, want)
	}
}
