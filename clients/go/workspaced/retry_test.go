package workspaced

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// recorder stands in for time.Sleep so the backoff schedule can be checked
// exactly and the test does not wait.
type recorder struct{ delays []time.Duration }

func (r *recorder) sleep(_ context.Context, d time.Duration) error {
	r.delays = append(r.delays, d)
	return nil
}

func testPolicy(r *recorder) RetryPolicy {
	return RetryPolicy{
		MaxAttempts:    4,
		InitialBackoff: 200 * time.Millisecond,
		MaxBackoff:     500 * time.Millisecond,
		Multiplier:     2,
		Jitter:         0.5,
		Sleep:          r.sleep,
		Rand:           func() float64 { return 0.5 }, // jitter takes 25 % off
	}
}

// A Docker workspace on a server whose daemon is unreachable fails with
// WORKSPACE_FAILED transient=true: Open retries it MaxAttempts times with
// exponential, capped, jittered delays, then returns the typed error.
func TestOpenRetriesTransientFailures(t *testing.T) {
	noDaemon := "DOCKER_HOST=unix://" + filepath.Join(t.TempDir(), "no-docker.sock")
	c, _ := connect(t, noDaemon)
	ctx := testCtx(t)

	var r recorder
	_, err := c.Open(ctx, Docker(&DockerConfig{Image: "debian:stable"}), nil, OpenRetry(testPolicy(&r)))
	var wf *WorkspaceFailed
	if !errors.As(err, &wf) || !wf.Transient() {
		t.Fatalf("Open docker without a daemon: %v, want transient *WorkspaceFailed", err)
	}
	want := []time.Duration{150 * time.Millisecond, 300 * time.Millisecond, 375 * time.Millisecond}
	if len(r.delays) != len(want) {
		t.Fatalf("slept %v, want %v (4 attempts)", r.delays, want)
	}
	for i := range want {
		if r.delays[i] != want[i] {
			t.Fatalf("slept %v, want %v", r.delays, want)
		}
	}

	// Non-transient failures are never retried.
	r = recorder{}
	_, err = c.Open(ctx, Memory(), shellCaps(), OpenRetry(testPolicy(&r)))
	if !errors.As(err, new(*CapabilityMissing)) || len(r.delays) != 0 {
		t.Fatalf("non-transient: %v after sleeps %v", err, r.delays)
	}

	// MaxAttempts 1 disables retries.
	r = recorder{}
	p := testPolicy(&r)
	p.MaxAttempts = 1
	if _, err := c.Open(ctx, Docker(&DockerConfig{Image: "debian:stable"}), nil, OpenRetry(p)); err == nil || len(r.delays) != 0 {
		t.Fatalf("MaxAttempts 1: %v after sleeps %v", err, r.delays)
	}
}

// The retry loop stops at the first success, and when the sleep is cut
// short by the context it returns the last real error.
func TestRetryPolicyDo(t *testing.T) {
	var r recorder
	p := testPolicy(&r)
	transient := &WorkspaceFailed{&Error{Code: codes.Unavailable, Reason: "WORKSPACE_FAILED", Metadata: map[string]string{"transient": "true"}}}
	calls := 0
	err := p.Do(context.Background(), func(context.Context) error {
		calls++
		if calls < 3 {
			return transient
		}
		return nil
	})
	if err != nil || calls != 3 || len(r.delays) != 2 {
		t.Fatalf("Do: %v after %d calls, sleeps %v", err, calls, r.delays)
	}

	p.Sleep = func(ctx context.Context, d time.Duration) error { return context.Canceled }
	calls = 0
	err = p.Do(context.Background(), func(context.Context) error { calls++; return transient })
	if err != transient || calls != 1 {
		t.Fatalf("cancelled sleep: %v after %d calls", err, calls)
	}

	// transient="false" wins over the UNAVAILABLE code.
	notTransient := &Error{Code: codes.Unavailable, Reason: "WORKSPACE_FAILED", Metadata: map[string]string{"transient": "false"}}
	calls = 0
	_ = DefaultRetryPolicy().Do(context.Background(), func(context.Context) error { calls++; return notTransient })
	if calls != 1 {
		t.Fatalf("transient=false retried: %d calls", calls)
	}
}

func TestDefaultBackoffSchedule(t *testing.T) {
	p := DefaultRetryPolicy()
	if p.MaxAttempts != 4 || p.InitialBackoff != 200*time.Millisecond || p.MaxBackoff != 5*time.Second || p.Multiplier != 2 {
		t.Fatalf("default policy %+v", p)
	}
	p.Jitter = 0
	want := []time.Duration{200, 400, 800, 1600, 3200, 5000, 5000}
	for i, w := range want {
		if got := p.Backoff(i + 1); got != w*time.Millisecond {
			t.Fatalf("Backoff(%d) = %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	// With jitter every delay stays within [d*(1-j), d].
	p = DefaultRetryPolicy()
	for i := 0; i < 100; i++ {
		if d := p.Backoff(2); d < 320*time.Millisecond || d > 400*time.Millisecond {
			t.Fatalf("jittered Backoff(2) = %v", d)
		}
	}
}
