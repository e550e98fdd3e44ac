package pgcluster

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Two flock(2) files next to PGDATA coordinate the onceplan processes sharing it:
//
//	<Dir>.lock        held shared by every process using the cluster, from Open to
//	                  Close; Close stops the server only if it can take it exclusively.
//	<Dir>.start.lock  held exclusively while a process starts/adopts (Open) or decides
//	                  whether to stop (Close), so those never interleave.
//
// flock locks belong to the open file, so two Clusters in one process exclude each
// other like two processes do, and the kernel drops them when a process dies: a
// SIGKILLed user never blocks anyone. Files are opened O_CLOEXEC (os.OpenFile does),
// so neither PostgreSQL nor commands we run inherit them.

// openLockFile opens (creating) a lock file.
func openLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		return nil, errorf(err, "could not open the lock file %s: %v", path, err)
	}
	return f, nil
}

// tryLock attempts flock(how|LOCK_NB) and reports whether it got the lock.
func tryLock(f *os.File, how int) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		default:
			return false, errorf(err, "could not lock %s: %v", f.Name(), err)
		}
	}
}

// lockWait takes flock(how) on f, polling so that ctx can cancel the wait.
func lockWait(ctx context.Context, f *os.File, how int) error {
	delay := 5 * time.Millisecond
	for {
		ok, err := tryLock(f, how)
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return errorf(ctx.Err(), "gave up waiting for the lock %s, held by another onceplan process: %v", f.Name(), ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}
