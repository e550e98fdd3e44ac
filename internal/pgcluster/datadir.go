package pgcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

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
