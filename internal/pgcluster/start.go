package pgcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// start runs pg_ctl start. pg_ctl detaches the postmaster (its own session, output to
// the log file), so the server outlives onceplan even when onceplan is SIGKILLed.
func (c *Cluster) start(ctx context.Context) error {
	if err := c.writeConf(); err != nil {
		return err
	}
	logPath := filepath.Join(c.dir, logName)
	var offset int64
	if fi, err := os.Stat(logPath); err == nil {
		offset = fi.Size()
	}
	c.log.Info("starting PostgreSQL", "dir", c.dir, "log", logPath)
	c.startAttempted = true
	// pg_ctl is not cancelled with ctx (its -t bounds it): killed half-way it would
	// leave a postmaster starting up that nobody waits for or stops. Once it returns,
	// Open's caller stops the server if ctx was cancelled meanwhile.
	cmd := c.acct.command(context.WithoutCancel(ctx), c.bin("pg_ctl"), "start", "-D", c.dir, "-w", "-t", pgCtlTimeout, "-s", "-l", logPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return errorf(err, "PostgreSQL failed to start on %s (pg_ctl: %s)%s", c.dir, describeFailure(out, err), logTail(logPath, offset))
	}
	if ctx.Err() != nil {
		return errorf(ctx.Err(), "gave up starting PostgreSQL on %s: %v", c.dir, ctx.Err())
	}
	return nil
}

// describeFailure condenses a failed command's output into one line.
func describeFailure(out []byte, err error) string {
	lines := nonEmptyLines(string(out))
	if len(lines) == 0 {
		return err.Error()
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " / ")
}

func nonEmptyLines(s string) []string {
	var lines []string
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// logTail returns the last lines the server logged since offset, formatted to follow
// an error sentence.
func logTail(path string, offset int64) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if offset <= int64(len(data)) {
		data = data[offset:]
	}
	lines := nonEmptyLines(string(data))
	if len(lines) == 0 {
		return ""
	}
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return "; the server log " + path + " ends with:\n\t" + strings.Join(lines, "\n\t")
}

// waitReady waits until the server accepts connections, or pid exits (errServerGone).
func (c *Cluster) waitReady(ctx context.Context, pid int) error {
	deadline := time.Now().Add(waitTimeout)
	for {
		if !processAlive(pid) {
			return errServerGone
		}
		err := c.ping(ctx)
		if err == nil {
			return nil
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code != "57P03" { // 57P03: starting up / shutting down
			return errorf(err, "PostgreSQL on %s (pid %d) refuses onceplan's connection: %s", c.dir, pid, pgErr.Message)
		}
		if time.Now().After(deadline) {
			return errorf(err, "PostgreSQL on %s (pid %d) did not accept connections through %s within %s: %v", c.dir, pid, c.sockDir, waitTimeout, err)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func (c *Cluster) connect(ctx context.Context, database string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(c.URL(database))
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = 5 * time.Second
	return pgx.ConnectConfig(ctx, cfg)
}

func (c *Cluster) ping(ctx context.Context) error {
	conn, err := c.connect(ctx, "postgres")
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// ensureDatabase creates c.database if missing. Open holds <dir>.start.lock, so
// onceplan processes never race to create it.
func (c *Cluster) ensureDatabase(ctx context.Context) error {
	conn, err := c.connect(ctx, "postgres")
	if err != nil {
		return errorf(err, "could not connect to PostgreSQL on %s: %v", c.dir, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", c.database).Scan(&exists); err != nil {
		return errorf(err, "could not look up database %q on %s: %v", c.database, c.dir, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{c.database}.Sanitize())
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P04") { // duplicate_database
		return errorf(err, "could not create database %q on %s: %v", c.database, c.dir, err)
	}
	c.log.Info("created database", "database", c.database, "dir", c.dir)
	return nil
}

// waitNoServerProcesses waits until no PostgreSQL process works in the directory.
// After a postmaster dies its backends notice and exit within moments; PostgreSQL
// refuses to start while they still hold the old shared memory.
func (c *Cluster) waitNoServerProcesses(ctx context.Context) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids := postgresProcsOn(c.dir)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errorf(nil, "PostgreSQL processes (pid %s) are still running on %s although its postmaster is gone: stop them (kill %s) and start again", joinPids(pids), c.dir, joinPids(pids))
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// clearStalePidFile deals with a postmaster.pid naming a process that exists but is
// not a PostgreSQL server on this directory: the dead postmaster as a zombie its
// parent has not reaped yet, or an unrelated program that got the pid. PostgreSQL
// would take either for a running postmaster and refuse to start. A zombie normally
// goes within moments; otherwise the file, which is only a lock and names no live
// server (no PostgreSQL process works in the directory), is removed.
func (c *Cluster) clearStalePidFile(ctx context.Context, pid int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if !pidExists(pid) {
			return nil
		}
		if state, ok := procState(pid); !ok || state != 'Z' || time.Now().After(deadline) {
			break
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	// The socket's lock file names the same pid and would stop the start the same way.
	for _, path := range []string{filepath.Join(c.dir, "postmaster.pid"), filepath.Join(c.sockDir, socketName+".lock")} {
		if pf, ok, err := readPidFile(path); !ok || err != nil || pf.pid != pid {
			continue
		}
		c.log.Info("removing a stale lock file: the process it names is not a PostgreSQL server on this directory", "path", path, "pid", pid)
		if err := os.Remove(path); err != nil {
			return errorf(err, "could not remove the stale lock file %s: %v", path, err)
		}
	}
	return nil
}

func (c *Cluster) corruptPidFileError(cause error) error {
	path := filepath.Join(c.dir, "postmaster.pid")
	why := strings.TrimPrefix(cause.Error(), errCorruptPidFile.Error()+": ")
	if pids := postgresProcsOn(c.dir); len(pids) > 0 {
		return errorf(cause, "%s is corrupt (%s) while PostgreSQL (pid %d) is still running on %s: stop that server (kill -INT %d), then remove that file and start again", path, why, pids[0], c.dir, pids[0])
	}
	return errorf(cause, "%s is corrupt (%s); if no PostgreSQL is running on %s, remove that file and start again", path, why, c.dir)
}
