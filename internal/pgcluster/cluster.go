package pgcluster

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// superuser is the bootstrap superuser initdb creates; onceplan connects as it.
	superuser = "onceplan"
	// socketName is the socket PostgreSQL creates for port 5432; the port only names
	// the socket, which is unique per socket directory.
	socketName = ".s.PGSQL.5432"
	// maxSocketPath is the longest unix socket path (sun_path is 108 bytes with NUL).
	maxSocketPath = 107
	// confName is the file, included from postgresql.conf, that onceplan rewrites
	// before every start with the settings in Options.
	confName     = "onceplan.conf"
	includeLine  = "include = '" + confName + "'"
	logName      = "postgresql.log"
	waitTimeout  = 60 * time.Second
	pgCtlTimeout = "60"
)

// Options configures Open.
type Options struct {
	// Dir is the PGDATA directory, e.g. "<data-dir>/pg". It is created if missing
	// (parent directories too); lock files "<Dir>.lock" and "<Dir>.start.lock" are
	// kept next to it.
	Dir string
	// BinDir holds initdb, pg_ctl and postgres. Empty means discover it:
	// $ONCEPLAN_PG_BINDIR, PATH, `pg_config --bindir`, the highest
	// /usr/lib/postgresql/*/bin.
	BinDir string
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
	// Database is created if it does not exist; empty means "onceplan".
	Database string
	// Settings are postgresql.conf settings applied on top of onceplan's defaults
	// (listen_addresses='', max_connections=200, shared_buffers=128MB, fsync=on)
	// when this Open starts the server; test harnesses use them to turn fsync,
	// synchronous_commit and full_page_writes off. They do not change a server that
	// is already running. port and unix_socket_directories cannot be set.
	Settings map[string]string
	// Roles, when set, are created on the cluster beside the bootstrap superuser,
	// and Database is handed to Roles.Owner (see Roles). Nil leaves the superuser
	// as the only role, as test harnesses want.
	Roles *Roles
}

// Cluster is one process's use of the cluster in a data directory. Close it when done:
// the last user to Close stops the server.
type Cluster struct {
	dir      string
	binDir   string
	sockDir  string
	database string
	major    string
	settings map[string]string
	roles    *Roles
	acct     *account
	log      *slog.Logger

	started        bool
	startAttempted bool

	mu      sync.Mutex
	useLock *os.File // shared flock on <dir>.lock; nil once closed
}

// Open makes the cluster in opts.Dir usable and returns once it accepts connections
// and opts.Database exists: it runs initdb the first time, then starts the server, or
// adopts one already running on the directory (started by another onceplan process,
// or left behind by one that was killed).
func Open(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errorf(nil, "no directory was given for the embedded PostgreSQL cluster (pgcluster.Options.Dir is empty)")
	}
	settings, err := mergeSettings(opts.Settings)
	if err != nil {
		return nil, err
	}
	c := &Cluster{database: opts.Database, settings: settings, log: opts.Logger}
	if c.database == "" {
		c.database = "onceplan"
	}
	if opts.Roles != nil {
		if err := opts.Roles.validate(); err != nil {
			return nil, err
		}
		roles := *opts.Roles
		c.roles = &roles
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.binDir, err = findBinDir(ctx, opts.BinDir); err != nil {
		return nil, err
	}
	if c.major, err = serverMajor(ctx, c.binDir); err != nil {
		return nil, err
	}
	if c.acct, err = runAccount(); err != nil {
		return nil, err
	}
	if c.dir, err = prepareDir(ctx, c.acct, opts.Dir); err != nil {
		return nil, err
	}
	c.sockDir = socketDirFor(c.dir)

	startLock, err := openLockFile(c.dir + ".start.lock")
	if err != nil {
		return nil, err
	}
	defer startLock.Close() // releases the exclusive lock
	if err := lockWait(ctx, startLock, unix.LOCK_EX); err != nil {
		return nil, err
	}
	if c.useLock, err = openLockFile(c.dir + ".lock"); err != nil {
		return nil, err
	}
	// Only Close takes this lock exclusively, and only while holding startLock, so
	// this never waits long.
	if err := lockWait(ctx, c.useLock, unix.LOCK_SH); err != nil {
		c.releaseUse()
		return nil, err
	}
	if err := c.bringUp(ctx); err != nil {
		if c.startAttempted {
			// Do not leave a server we started half-way behind, unless others use it.
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*waitTimeout)
			_ = c.stopIfLast(stopCtx)
			cancel()
		} else {
			c.releaseUse()
		}
		return nil, err
	}
	return c, nil
}

// URL returns a connection URL for database (opts.Database when empty) through the
// cluster's unix socket, e.g.
// "postgres://onceplan@/onceplan?host=%2Fvar%2Flib%2Fonceplan%2Fpg&sslmode=disable".
func (c *Cluster) URL(database string) string {
	if database == "" {
		database = c.database
	}
	return "postgres://" + superuser + "@/" + url.PathEscape(database) +
		"?host=" + url.QueryEscape(c.sockDir) + "&sslmode=disable"
}

// Dir returns the absolute PGDATA directory (symbolic links resolved).
func (c *Cluster) Dir() string { return c.dir }

// BinDir returns the directory of the server binaries in use.
func (c *Cluster) BinDir() string { return c.binDir }

// Started reports whether this Open started the server (false when it adopted one
// that was already running).
func (c *Cluster) Started() bool { return c.started }

// Close ends this process's use of the cluster and stops the server (pg_ctl stop -m
// fast) if no other Cluster, in this or another process, still uses it. It is safe to
// call more than once. Close connections to the cluster first: a fast stop ends them.
func (c *Cluster) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.useLock == nil {
		return nil
	}
	startLock, err := openLockFile(c.dir + ".start.lock")
	if err != nil {
		c.releaseUse()
		return err
	}
	defer startLock.Close()
	if err := lockWait(ctx, startLock, unix.LOCK_EX); err != nil {
		c.releaseUse()
		return err
	}
	return c.stopIfLast(ctx)
}

// releaseUse drops this Cluster's shared lock.
func (c *Cluster) releaseUse() {
	if c.useLock != nil {
		_ = c.useLock.Close()
		c.useLock = nil
	}
}

// stopIfLast stops the server if nobody else holds <dir>.lock, then drops the lock.
// The caller holds <dir>.start.lock, so no Open can join in between.
func (c *Cluster) stopIfLast(ctx context.Context) error {
	defer c.releaseUse()
	last, err := tryLock(c.useLock, unix.LOCK_EX)
	if err != nil {
		return err
	}
	if !last {
		c.log.Info("leaving PostgreSQL running for the other processes using it", "dir", c.dir)
		return nil
	}
	return c.stop(ctx)
}

// stop shuts the server down and waits until it is gone.
func (c *Cluster) stop(ctx context.Context) error {
	pf, exists, err := readPidFile(filepath.Join(c.dir, "postmaster.pid"))
	switch {
	case !exists:
		c.removeSocketDir()
		return nil
	case errors.Is(err, errCorruptPidFile):
		return c.corruptPidFileError(err)
	case err != nil:
		return errorf(err, "could not read %s to stop PostgreSQL: %v", filepath.Join(c.dir, "postmaster.pid"), err)
	case !processAlive(pf.pid):
		// The server died; its stale postmaster.pid is dealt with by the next start.
		return nil
	}
	// Not cancelled with ctx (-t bounds it): a shutdown already begun completes anyway,
	// and a caller shutting down on a cancelled context still wants the server gone.
	cmd := c.acct.command(context.WithoutCancel(ctx), c.bin("pg_ctl"), "stop", "-D", c.dir, "-m", "fast", "-w", "-t", pgCtlTimeout, "-s")
	if out, err := cmd.CombinedOutput(); err != nil && processAlive(pf.pid) {
		return errorf(err, "could not stop PostgreSQL on %s (pid %d): %s", c.dir, pf.pid, describeFailure(out, err))
	}
	// pg_ctl returns when postmaster.pid is gone, moments before the process is.
	for deadline := time.Now().Add(10 * time.Second); processAlive(pf.pid) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	c.log.Info("stopped PostgreSQL", "dir", c.dir)
	c.removeSocketDir()
	return nil
}

func (c *Cluster) removeSocketDir() {
	if c.sockDir != c.dir {
		_ = os.Remove(c.sockDir) // only if empty; harmless when it is not
	}
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.binDir, name) }

// errServerGone means the postmaster we were waiting for exited.
var errServerGone = errors.New("postmaster exited")

// bringUp initialises, starts or adopts the server and ensures the database exists.
// The caller holds <dir>.start.lock.
func (c *Cluster) bringUp(ctx context.Context) error {
	fresh, err := c.inspect()
	if err != nil {
		return err
	}
	if fresh {
		if err := c.initdb(ctx); err != nil {
			return err
		}
	}
	if err := c.prepareSocketDir(); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if attempt == 3 {
			return errorf(nil, "PostgreSQL on %s kept exiting while onceplan was starting it: see %s", c.dir, filepath.Join(c.dir, logName))
		}
		pidPath := filepath.Join(c.dir, "postmaster.pid")
		pf, exists, err := readPidFile(pidPath)
		if errors.Is(err, errCorruptPidFile) {
			// A server being started by someone else writes the file in steps.
			if err := sleepCtx(ctx, 500*time.Millisecond); err != nil {
				return err
			}
			pf, exists, err = readPidFile(pidPath)
		}
		if errors.Is(err, errCorruptPidFile) {
			return c.corruptPidFileError(err)
		}
		if err != nil {
			return errorf(err, "could not read %s: %v", filepath.Join(c.dir, "postmaster.pid"), err)
		}
		if exists {
			running, known := postgresOn(pf.pid, c.dir)
			if running {
				err := c.waitReady(ctx, pf.pid)
				if errors.Is(err, errServerGone) {
					continue
				}
				if err != nil {
					return err
				}
				c.log.Info("using the PostgreSQL server already running", "dir", c.dir, "pid", pf.pid)
				break
			}
			if err := c.waitNoServerProcesses(ctx); err != nil {
				return err
			}
			if known {
				if err := c.clearStalePidFile(ctx, pf.pid); err != nil {
					return err
				}
			}
		} else if err := c.waitNoServerProcesses(ctx); err != nil {
			return err
		}
		if err := c.start(ctx); err != nil {
			return err
		}
		pf, _, _ = readPidFile(pidPath)
		err = c.waitReady(ctx, pf.pid)
		if errors.Is(err, errServerGone) {
			continue
		}
		if err != nil {
			return err
		}
		c.started = true
		break
	}
	if err := c.ensureDatabase(ctx); err != nil {
		return err
	}
	return c.ensureRoles(ctx)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
