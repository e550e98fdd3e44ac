package pgcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// inspect checks the data directory before anything touches it and reports whether
// it still needs initdb. Existing data is never modified here; an empty directory
// owned by onceplan's own account is given to the PostgreSQL account.
func (c *Cluster) inspect() (fresh bool, err error) {
	fi, err := os.Stat(c.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, errorf(err, "could not examine %s: %v", c.dir, err)
	}
	if !fi.IsDir() {
		return false, errorf(nil, "%s is not a directory: choose a --data-dir where onceplan can keep its PostgreSQL cluster in the pg subdirectory", c.dir)
	}
	owner, uid := describeOwner(fi)
	ownerErr := func() error {
		return errorf(nil, "%s is owned by %s, but PostgreSQL runs as %q (uid %d), which must own its data directory: choose another --data-dir, or, if that directory is meant for this cluster, give it to that account yourself (chown -R %s %s)",
			c.dir, owner, c.acct.name, c.acct.uid, c.acct.name, c.dir)
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) && uid != c.acct.uid {
			return false, ownerErr()
		}
		return false, errorf(err, "could not list %s: %v", c.dir, err)
	}
	if len(entries) == 0 {
		switch uid {
		case c.acct.uid:
			return true, nil
		case os.Geteuid():
			// Empty and ours (e.g. made by mkdir -p): nothing to lose in handing it over.
			if err := c.acct.chown(c.dir); err != nil {
				return false, errorf(err, "could not give the empty directory %s to account %q: %v", c.dir, c.acct.name, err)
			}
			if err := os.Chmod(c.dir, 0o700); err != nil {
				return false, errorf(err, "could not make %s private (chmod 0700): %v", c.dir, err)
			}
			return true, nil
		default:
			return false, ownerErr()
		}
	}
	versionData, err := os.ReadFile(filepath.Join(c.dir, "PG_VERSION"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, errorf(nil, "%s is not empty and is not a PostgreSQL data directory (it has no PG_VERSION file): choose an empty or new directory for the cluster; onceplan does not touch the files there", c.dir)
	}
	if uid != c.acct.uid {
		return false, ownerErr()
	}
	if err != nil {
		return false, errorf(err, "could not read %s: %v", filepath.Join(c.dir, "PG_VERSION"), err)
	}
	if perm := fi.Mode().Perm(); perm&0o700 != 0o700 || perm&0o027 != 0 {
		return false, errorf(nil, "%s has mode %04o, but PostgreSQL needs its data directory to be 0700 (or 0750): run chmod 0700 %s", c.dir, perm, c.dir)
	}
	if version := strings.TrimSpace(string(versionData)); version != c.major {
		return false, errorf(nil, "%s holds a PostgreSQL %s cluster, but the server binaries in %s are PostgreSQL %s: set ONCEPLAN_PG_BINDIR to PostgreSQL %s binaries, or upgrade the cluster with pg_upgrade",
			c.dir, version, c.binDir, c.major, version)
	}
	return false, nil
}

// initdb creates the cluster. When the directory does not exist yet, initdb works in
// "<dir>.initdb", renamed into place on success, so an interrupted initdb never leaves
// a half-made cluster where the next Open would try to start it.
func (c *Cluster) initdb(ctx context.Context) error {
	target := c.dir
	if _, err := os.Stat(c.dir); errors.Is(err, fs.ErrNotExist) {
		target = c.dir + ".initdb"
		// Left over from an interrupted initdb; it never became the cluster.
		if err := os.RemoveAll(target); err != nil {
			return errorf(err, "could not remove the unfinished cluster %s: %v", target, err)
		}
		if err := os.Mkdir(target, 0o700); err != nil {
			return errorf(err, "could not create %s: %v", target, err)
		}
		if err := c.acct.chown(target); err != nil {
			return errorf(err, "could not give %s to account %q: %v", target, c.acct.name, err)
		}
	}
	c.log.Info("creating PostgreSQL cluster (initdb)", "dir", c.dir, "bindir", c.binDir)
	run := func(locale string) ([]byte, error) {
		args := []string{"-D", target, "-U", superuser, "--auth=trust", "-E", "UTF8", "--locale=" + locale}
		if n, _ := strconv.Atoi(c.major); n >= 14 {
			args = append(args, "--no-instructions")
		}
		if strings.EqualFold(c.settings["fsync"], "off") {
			args = append(args, "--no-sync") // the server will not fsync either
		}
		return c.acct.command(ctx, c.bin("initdb"), args...).CombinedOutput()
	}
	out, err := run("C.UTF-8")
	if err != nil && ctx.Err() == nil && bytes.Contains(bytes.ToLower(out), []byte("locale")) {
		out, err = run("C") // systems without the C.UTF-8 locale
	}
	if err != nil {
		if ctx.Err() != nil {
			return errorf(ctx.Err(), "initdb in %s was interrupted: %v", target, ctx.Err())
		}
		return errorf(err, "initdb could not create a PostgreSQL cluster in %s: %s", target, describeFailure(out, err))
	}
	if err := appendInclude(filepath.Join(target, "postgresql.conf")); err != nil {
		return err
	}
	if target != c.dir {
		if err := os.Rename(target, c.dir); err != nil {
			return errorf(err, "could not move the new cluster from %s to %s: %v", target, c.dir, err)
		}
	}
	return nil
}

// appendInclude makes postgresql.conf include onceplan.conf (last, so it wins).
func appendInclude(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return errorf(err, "could not read %s: %v", path, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.TrimSpace(line) == includeLine {
			return nil
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = io.WriteString(f, "\n# Added by onceplan: the embedded cluster's settings, rewritten before every start.\n"+includeLine+"\n")
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return errorf(err, "could not add the include of %s to %s: %v", confName, path, err)
	}
	return nil
}

// settingNameRE matches PostgreSQL setting names (including extension.name).
var settingNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

func mergeSettings(extra map[string]string) (map[string]string, error) {
	s := map[string]string{
		"listen_addresses": "", // unix socket only
		"max_connections":  "200",
		"shared_buffers":   "128MB",
		"fsync":            "on",
	}
	for k, v := range extra {
		switch {
		case !settingNameRE.MatchString(k):
			return nil, errorf(nil, "%q is not a PostgreSQL setting name (pgcluster.Options.Settings)", k)
		case strings.ContainsAny(v, "\n\r\x00"):
			return nil, errorf(nil, "the value of PostgreSQL setting %s contains a line break or NUL (pgcluster.Options.Settings)", k)
		case strings.EqualFold(k, "port") || strings.EqualFold(k, "unix_socket_directories"):
			return nil, errorf(nil, "PostgreSQL setting %s is chosen by onceplan and cannot be set in pgcluster.Options.Settings", k)
		}
		s[strings.ToLower(k)] = v
	}
	return s, nil
}

// quoteConf quotes a value for postgresql.conf.
func quoteConf(v string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), `'`, `''`) + "'"
}

// writeConf rewrites onceplan.conf with the settings for this start.
func (c *Cluster) writeConf() error {
	if err := appendInclude(filepath.Join(c.dir, "postgresql.conf")); err != nil {
		return err
	}
	s := maps.Clone(c.settings)
	s["port"] = "5432"
	s["unix_socket_directories"] = c.sockDir
	var b strings.Builder
	b.WriteString("# Written by onceplan before every start of this cluster; edits are overwritten.\n")
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, quoteConf(s[k]))
	}
	path := filepath.Join(c.dir, confName)
	tmp := path + ".tmp"
	err := os.WriteFile(tmp, []byte(b.String()), 0o600)
	if err == nil {
		err = c.acct.chown(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return errorf(err, "could not write %s: %v", path, err)
	}
	return nil
}

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

// prepareSocketDir creates the private socket directory under /tmp when the data
// directory's path is too long for a socket.
func (c *Cluster) prepareSocketDir() error {
	if c.sockDir == c.dir {
		return nil
	}
	fi, err := os.Lstat(c.sockDir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(c.sockDir, 0o700); err != nil {
			return errorf(err, "could not create the socket directory %s: %v", c.sockDir, err)
		}
		if err := c.acct.chown(c.sockDir); err != nil {
			return errorf(err, "could not give the socket directory %s to account %q: %v", c.sockDir, c.acct.name, err)
		}
		return nil
	}
	if err != nil {
		return errorf(err, "could not examine the socket directory %s: %v", c.sockDir, err)
	}
	if !fi.IsDir() || ownerUID(fi) != c.acct.uid {
		owner, _ := describeOwner(fi)
		return errorf(nil, "%s, the socket directory for %s, is not a directory owned by %q (it belongs to %s): remove it and start again; do not let others create it", c.sockDir, c.dir, c.acct.name, owner)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(c.sockDir, 0o700); err != nil {
			return errorf(err, "could not make the socket directory %s private (chmod 0700): %v", c.sockDir, err)
		}
	}
	return nil
}

// socketDirFor returns the directory for the server's socket: the data directory
// itself when the socket path fits, else a directory under /tmp derived from the data
// directory's path, so every onceplan process given that data directory finds it.
func socketDirFor(dir string) string {
	if len(dir)+1+len(socketName) <= maxSocketPath {
		return dir
	}
	sum := sha256.Sum256([]byte(dir))
	return "/tmp/onceplan-pg-" + hex.EncodeToString(sum[:])[:12]
}

// prepareDir resolves the data directory to an absolute path without symbolic links,
// checks the PostgreSQL account can enter every directory above it, and creates the
// missing parents (not the directory itself: initdb does).
func prepareDir(ctx context.Context, acct *account, raw string) (string, error) {
	abs, err := filepath.Abs(raw)
	if err != nil {
		return "", errorf(err, "could not make %s absolute: %v", raw, err)
	}
	existing := abs
	var missing []string
	for {
		_, err := os.Stat(existing)
		if err == nil {
			break
		}
		if errors.Is(err, fs.ErrNotExist) && existing != filepath.Dir(existing) {
			missing = append([]string{filepath.Base(existing)}, missing...)
			existing = filepath.Dir(existing)
			continue
		}
		if errors.Is(err, fs.ErrPermission) {
			if blocked, _ := acct.firstUnenterable(ctx, prefixes(abs)); blocked != "" {
				return "", unreachableError(acct, blocked)
			}
		}
		return "", errorf(err, "could not examine %s: %v", existing, err)
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", errorf(err, "could not resolve %s: %v", existing, err)
	}
	check := prefixes(real)
	if len(missing) == 0 {
		check = check[:len(check)-1] // the data directory itself is inspected later
	}
	if fi, err := os.Stat(real); err == nil && !fi.IsDir() && len(missing) > 0 {
		return "", errorf(nil, "%s is not a directory, so %s cannot be created", real, abs)
	}
	blocked, err := acct.firstUnenterable(ctx, check)
	if err != nil {
		return "", err
	}
	if blocked != "" {
		return "", unreachableError(acct, blocked)
	}
	// Parents made here must let the PostgreSQL account through: 0711 lets it enter
	// without letting anyone list them.
	mode := os.FileMode(0o700)
	if acct.switched() {
		mode = 0o711
	}
	cur := real
	for i, name := range missing {
		cur = filepath.Join(cur, name)
		if i == len(missing)-1 {
			break
		}
		if err := os.Mkdir(cur, mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", errorf(err, "could not create %s: %v", cur, err)
		} else if err == nil {
			if err := os.Chmod(cur, mode); err != nil { // umask may have narrowed it
				return "", errorf(err, "could not set the mode of %s: %v", cur, err)
			}
		}
	}
	return cur, nil
}

// prefixes lists "/", "/a", "/a/b" for "/a/b".
func prefixes(p string) []string {
	var out []string
	for d := p; ; d = filepath.Dir(d) {
		out = append(out, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	slices.Reverse(out)
	return out
}

func unreachableError(acct *account, dir string) error {
	mode := "mode unknown"
	if fi, err := os.Stat(dir); err == nil {
		mode = fmt.Sprintf("mode %04o", fi.Mode().Perm())
	}
	return errorf(nil, "PostgreSQL runs as %q, which cannot enter %s (%s): choose a --data-dir that account can reach, e.g. /var/lib/onceplan", acct.name, dir, mode)
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
