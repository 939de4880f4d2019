package workspaced

import (
	"context"
	"errors"
	"math"
	"math/rand"
	"sync"
	"time"
)

// RetryPolicy retries an operation that failed transiently, sleeping an
// exponentially growing, jittered delay between attempts. Only errors whose
// Transient method says so are retried: retrying a refused path or a missing
// capability would only repeat the refusal.
type RetryPolicy struct {
	// MaxAttempts counts the first try; 1 (or less) disables retries.
	MaxAttempts int
	// InitialBackoff is the delay before the second attempt.
	InitialBackoff time.Duration
	// MaxBackoff caps every delay.
	MaxBackoff time.Duration
	// Multiplier grows the delay after each failed attempt.
	Multiplier float64
	// Jitter spreads each delay uniformly over [d*(1-Jitter), d] so that
	// many clients failing together do not retry in lockstep. 0: none.
	Jitter float64

	// Sleep waits d or until ctx ends; nil: a timer. Tests replace it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a number in [0, 1) for the jitter; nil: math/rand.
	Rand func() float64
}

// DefaultRetryPolicy is 4 attempts, 0.2 s first delay doubling up to 5 s,
// with up to 20 % jitter.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		MaxAttempts:    4,
		InitialBackoff: 200 * time.Millisecond,
		MaxBackoff:     5 * time.Second,
		Multiplier:     2,
		Jitter:         0.2,
	}
}

// NoRetry tries once.
func NoRetry() RetryPolicy { return RetryPolicy{MaxAttempts: 1} }

var (
	jitterMu  sync.Mutex
	jitterRng = rand.New(rand.NewSource(time.Now().UnixNano()))
)

func defaultRand() float64 {
	jitterMu.Lock()
	defer jitterMu.Unlock()
	return jitterRng.Float64()
}

// Backoff returns the delay after the given failed attempt (1-based), with
// jitter applied.
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	mult := p.Multiplier
	if mult < 1 {
		mult = 1
	}
	d := float64(p.InitialBackoff) * math.Pow(mult, float64(attempt-1))
	if p.MaxBackoff > 0 && d > float64(p.MaxBackoff) {
		d = float64(p.MaxBackoff)
	}
	if p.Jitter > 0 {
		r := p.Rand
		if r == nil {
			r = defaultRand
		}
		d -= d * p.Jitter * r()
	}
	return time.Duration(d)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Do calls op until it succeeds, fails for good, or the attempts run out;
// it returns op's last error.
func (p RetryPolicy) Do(ctx context.Context, op func(context.Context) error) error {
	return p.do(ctx, isTransient, op)
}

// do is Do with the test of which errors are worth another attempt.
func (p RetryPolicy) do(ctx context.Context, retryable func(error) bool, op func(context.Context) error) error {
	sleep := p.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil || attempt >= p.MaxAttempts || !retryable(err) {
			return err
		}
		if serr := sleep(ctx, p.Backoff(attempt)); serr != nil {
			return err
		}
	}
}

func isTransient(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Transient()
}
