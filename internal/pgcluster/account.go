package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// account is the operating-system account that runs initdb, pg_ctl and postgres.
type account struct {
	name string
	uid  int
	gid  int
	home string
	// cred switches to this account in child processes; nil when it is the account
	// onceplan already runs as.
	cred *syscall.Credential
}

// runAccount picks the account PostgreSQL runs as: the current one, or, when onceplan
// runs as root, "postgres" (or $ONCEPLAN_PG_USER), because PostgreSQL refuses root.
// ONCEPLAN_PG_USER is ignored when not root: only root can switch accounts.
func runAccount() (*account, error) {
	if os.Geteuid() != 0 {
		a := &account{uid: os.Geteuid(), gid: os.Getegid(), name: strconv.Itoa(os.Geteuid())}
		if u, err := user.Current(); err == nil {
			a.name, a.home = u.Username, u.HomeDir
		}
		return a, nil
	}
	name := os.Getenv("ONCEPLAN_PG_USER")
	fromEnv := name != ""
	if !fromEnv {
		name = "postgres"
	}
	u, err := user.Lookup(name)
	if err != nil {
		if fromEnv {
			return nil, errorf(err, "PostgreSQL refuses to run as root and ONCEPLAN_PG_USER names %q, which is not an account on this machine: create it (e.g. `adduser --system --group %s`) or set ONCEPLAN_PG_USER to an existing unprivileged account", name, name)
		}
		return nil, errorf(err, "PostgreSQL refuses to run as root and there is no \"postgres\" account to run it as: create an unprivileged account (e.g. `adduser --system --group postgres`) or set ONCEPLAN_PG_USER to one")
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, errorf(err, "account %q has a non-numeric uid or gid (%s:%s)", name, u.Uid, u.Gid)
	}
	if uid == 0 {
		return nil, errorf(nil, "PostgreSQL refuses to run as root, and ONCEPLAN_PG_USER=%s is root too: set ONCEPLAN_PG_USER to an unprivileged account (e.g. one made with `adduser --system --group postgres`)", name)
	}
	var groups []uint32
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.Atoi(s); err == nil {
				groups = append(groups, uint32(g))
			}
		}
	}
	return &account{
		name: name, uid: uid, gid: gid, home: u.HomeDir,
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups},
	}, nil
}

// switched reports whether children run as another account than onceplan.
func (a *account) switched() bool { return a.cred != nil }

// command prepares a child process running as the account: in its own session (so a
// terminal ^C aimed at onceplan's process group never reaches PostgreSQL directly;
// stopping it is Close's job), from "/" (onceplan's working directory may be one the
// account cannot enter), without PG* variables that would redirect the tools.
func (a *account) command(ctx context.Context, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: a.cred}
	// SIGTERM first: initdb then removes what it made, pg_ctl simply exits.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") {
			continue
		}
		if a.switched() && (k == "HOME" || k == "USER" || k == "LOGNAME") {
			continue
		}
		env = append(env, kv)
	}
	if a.switched() {
		env = append(env, "HOME="+a.home, "USER="+a.name, "LOGNAME="+a.name)
	}
	cmd.Env = env
	return cmd
}

// chown gives path to the account when onceplan runs as someone else.
func (a *account) chown(path string) error {
	if !a.switched() {
		return nil
	}
	return os.Lchown(path, a.uid, a.gid)
}

// firstUnenterable returns the first of dirs the account cannot enter (search
// permission), or "" when it can enter them all. As root it asks the account itself
// (a shell running as it), which honours ACLs and group membership exactly.
func (a *account) firstUnenterable(ctx context.Context, dirs []string) (string, error) {
	if !a.switched() {
		for _, d := range dirs {
			if err := unix.Access(d, unix.X_OK); err != nil {
				return d, nil
			}
		}
		return "", nil
	}
	const script = `for d in "$@"; do if ! test -x "$d"; then printf '%s' "$d"; exit 3; fi; done`
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := a.command(cctx, "/bin/sh", append([]string{"-c", script, "sh"}, dirs...)...)
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "", nil
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		return string(out), nil
	default:
		return "", errorf(err, "could not check, as account %q, which directories it can enter: %v", a.name, err)
	}
}

// describeOwner names the owner of fi as "name (uid N)".
func describeOwner(fi fs.FileInfo) (string, int) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "unknown", -1
	}
	uid := int(st.Uid)
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid), uid
	}
	return fmt.Sprintf("uid %d", uid), uid
}

// ownerUID returns the uid owning fi, or -1.
func ownerUID(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
