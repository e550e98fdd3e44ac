// Package await gives tests waits that end: every wait has a deadline, and
// one that runs out fails the test with a sentence saying what did not
// happen, instead of hanging until go test's own timeout.
//
// Deadlines here are limits, not expectations: a test on a busy machine
// may take far longer than on a quiet one, so a deadline is set where
// waiting longer would only mean something is broken (tens of seconds for
// what takes milliseconds when it works). Nothing a test asserts may
// depend on how fast the wait ended.
package await

import (
	"sync"
	"testing"
	"time"
)

// tick is how often Until asks again.
const tick = 20 * time.Millisecond

// Until asks cond every few milliseconds until it holds. When within has
// passed first it logs each explain's text (a process's output, the state
// it saw) and fails the test: "<what> did not happen within <within>".
func Until(t testing.TB, within time.Duration, what string, cond func() bool, explain ...func() string) {
	t.Helper()
	if Poll(within, cond) {
		return
	}
	for _, e := range explain {
		t.Log(e())
	}
	t.Fatalf("%s did not happen within %s", what, within)
}

// Poll asks cond every few milliseconds until it holds (true) or within
// has passed (false), for a caller that decides itself what a timeout
// means.
func Poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(min(tick, time.Until(deadline)+time.Millisecond))
	}
}

// Recv receives one value from ch, failing the test when none arrives
// within (or ch is closed without one): "<what> did not happen within
// <within>".
func Recv[T any](t testing.TB, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("%s did not happen: its channel was closed", what)
		}
		return v
	case <-timer.C:
		t.Fatalf("%s did not happen within %s", what, within)
	}
	panic("unreachable")
}

// Closed waits for ch to be closed (or to deliver), failing the test
// after within: "<what> did not happen within <within>".
func Closed[T any](t testing.TB, ch <-chan T, within time.Duration, what string) {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("%s did not happen within %s", what, within)
	}
}

// Either waits for the first of two channels: ok's value, or a failure
// with want's sentence when other delivers first (an early return that
// would otherwise leave ok open for ever) or nothing came within.
func Either[T, U any](t testing.TB, ok <-chan T, other <-chan U, within time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v := <-ok:
		return v
	case u := <-other:
		t.Fatalf("%s did not happen: it ended first with %v", what, u)
	case <-timer.C:
		t.Fatalf("%s did not happen within %s", what, within)
	}
	panic("unreachable")
}

// Group waits for wg, failing the test after within: "<what> did not
// happen within <within>". The goroutines go on; the test ends.
func Group(t testing.TB, wg *sync.WaitGroup, within time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	Closed(t, done, within, what)
}
