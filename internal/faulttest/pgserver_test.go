package faulttest

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/pgcluster"
	"github.com/onceplan/onceplan/migrations"
)

// pgServer is a PostgreSQL cluster of one test's own, which the test may
// restart, stop and crash without disturbing the shared test cluster.
type pgServer struct {
	t       *testing.T
	cluster *pgcluster.Cluster
	dir     string // PGDATA
	url     string // the migrated database "onceplan", as the application role
	cred    *syscall.Credential
	home    string
}

// newPGServer starts a cluster in a temporary directory and migrates its
// database. fsync is off (the tests crash processes, never the kernel: the
// page cache survives a postmaster killed with -m immediate);
// synchronous_commit stays on, so a commit PostgreSQL acknowledged is in
// the WAL it replays after a crash, as in production.
func newPGServer(t *testing.T) *pgServer {
	t.Helper()
	root, err := os.MkdirTemp("", "onceplan-fault-pg-")
	require.NoError(t, err)
	// When we are root PostgreSQL runs as the postgres account, which must
	// be able to enter the directory.
	require.NoError(t, os.Chmod(root, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Open(ctx, pgcluster.Options{
		Dir:      filepath.Join(root, "pg"),
		BinDir:   os.Getenv("TEST_PG_BINDIR"),
		Database: "onceplan",
		Settings: map[string]string{"fsync": "off", "full_page_writes": "off", "max_connections": "300"},
		// Production's two roles: migrations run as the owner, Onceplan's
		// processes (and this test's queries) connect as the application
		// role, so the faults are recovered with its privileges alone.
		Roles: &pgcluster.Roles{Owner: migrations.OwnerRole, App: migrations.AppRole},
	})
	require.NoError(t, err, "starting a PostgreSQL cluster of the test's own")
	s := &pgServer{t: t, cluster: c, dir: c.Dir(), url: c.AppURL("onceplan")}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.Close(stopCtx); err != nil {
			t.Errorf("stopping the test's cluster: %v", err)
		}
		os.RemoveAll(root)
	})
	if os.Geteuid() == 0 {
		name := os.Getenv("ONCEPLAN_PG_USER")
		if name == "" {
			name = "postgres"
		}
		u, err := user.Lookup(name)
		require.NoError(t, err)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		s.home = u.HomeDir
	}

	pool, err := pgxpool.New(ctx, c.OwnerURL("onceplan"))
	require.NoError(t, err)
	defer pool.Close()
	_, err = migrations.Up(ctx, pool)
	require.NoError(t, err)
	return s
}

// pgCtl runs pg_ctl on the cluster as the account PostgreSQL runs as.
func (s *pgServer) pgCtl(args ...string) {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.cluster.BinDir(), "pg_ctl"), append(args, "-D", s.dir)...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: s.cred}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "PG") || (s.cred != nil && k == "HOME") {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	if s.cred != nil {
		cmd.Env = append(cmd.Env, "HOME="+s.home)
	}
	out, err := cmd.CombinedOutput()
	require.NoError(s.t, err, "pg_ctl %s: %s", strings.Join(args, " "), out)
}

func (s *pgServer) logFile() string { return filepath.Join(s.dir, "postgresql.log") }

// restart runs `pg_ctl restart -m mode` and waits until it accepts
// connections again.
func (s *pgServer) restart(mode string) {
	s.t.Helper()
	s.pgCtl("restart", "-m", mode, "-w", "-t", "60", "-s", "-l", s.logFile())
}

// stop runs `pg_ctl stop -m mode` and waits until the server is gone.
func (s *pgServer) stop(mode string) {
	s.t.Helper()
	s.pgCtl("stop", "-m", mode, "-w", "-t", "60", "-s")
}

// start runs `pg_ctl start` (crash recovery first, after -m immediate)
// and waits until it accepts connections.
func (s *pgServer) start() {
	s.t.Helper()
	s.pgCtl("start", "-w", "-t", "60", "-s", "-l", s.logFile())
}
