package pgcluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// serverBinaries are the programs a data directory needs; pg_ctl finds postgres next
// to itself, so all three must live in one directory.
var serverBinaries = []string{"initdb", "pg_ctl", "postgres"}

// hasServerBinaries reports whether dir holds executable initdb, pg_ctl and postgres.
func hasServerBinaries(dir string) bool {
	if dir == "" {
		return false
	}
	for _, name := range serverBinaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// findBinDir returns the directory holding the server binaries: explicit when given,
// else $ONCEPLAN_PG_BINDIR, else the directory of pg_ctl on PATH, else
// `pg_config --bindir`, else the highest /usr/lib/postgresql/*/bin.
func findBinDir(ctx context.Context, explicit string) (string, error) {
	if explicit != "" {
		if hasServerBinaries(explicit) {
			return explicit, nil
		}
		return "", errorf(ErrNoServerBinaries,
			"PostgreSQL server binaries (initdb, pg_ctl, postgres) are not all in %s, the configured bin directory: point it at the directory holding them (e.g. /usr/lib/postgresql/15/bin after `apt-get install postgresql`), or pass --database-url to use another PostgreSQL", explicit)
	}
	if env := os.Getenv("ONCEPLAN_PG_BINDIR"); env != "" {
		if hasServerBinaries(env) {
			return env, nil
		}
		return "", errorf(ErrNoServerBinaries,
			"PostgreSQL server binaries (initdb, pg_ctl, postgres) are not all in ONCEPLAN_PG_BINDIR=%s: point it at the directory holding them (e.g. /usr/lib/postgresql/15/bin after `apt-get install postgresql`), unset it, or pass --database-url to use another PostgreSQL", env)
	}

	if p, err := exec.LookPath("pg_ctl"); err == nil {
		// Debian-style symlinks in /usr/local/bin point into the real bin directory;
		// prefer that one, it is also what pg_ctl itself uses to find postgres.
		if real, err := filepath.EvalSymlinks(p); err == nil && hasServerBinaries(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if hasServerBinaries(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	if p, err := exec.LookPath("pg_config"); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(cctx, p, "--bindir").Output()
		cancel()
		if dir := strings.TrimSpace(string(out)); err == nil && hasServerBinaries(dir) {
			return dir, nil
		}
	}
	if dirs := debianBinDirs(); len(dirs) > 0 {
		return dirs[0], nil
	}
	return "", errorf(ErrNoServerBinaries,
		"PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found in $ONCEPLAN_PG_BINDIR, on PATH, in `pg_config --bindir` or in /usr/lib/postgresql/*/bin: install them (`apt-get install postgresql` on Debian/Ubuntu), set ONCEPLAN_PG_BINDIR to their directory, or pass --database-url to use another PostgreSQL")
}

// debianBinDirs lists /usr/lib/postgresql/*/bin directories holding the server
// binaries, highest major version first.
func debianBinDirs() []string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	type cand struct {
		dir     string
		version []int
	}
	var cands []cand
	for _, m := range matches {
		if !hasServerBinaries(m) {
			continue
		}
		var v []int
		for _, part := range strings.Split(filepath.Base(filepath.Dir(m)), ".") {
			n, err := strconv.Atoi(part)
			if err != nil {
				n = -1
			}
			v = append(v, n)
		}
		cands = append(cands, cand{m, v})
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i].version, cands[j].version
		for k := 0; k < len(a) && k < len(b); k++ {
			if a[k] != b[k] {
				return a[k] > b[k]
			}
		}
		return len(a) > len(b)
	})
	dirs := make([]string, len(cands))
	for i, c := range cands {
		dirs[i] = c.dir
	}
	return dirs
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

// serverMajor returns the major version of the postgres binary in binDir in the form
// PG_VERSION uses: "15" for 15.x, "9.6" for 9.6.x.
func serverMajor(ctx context.Context, binDir string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	postgres := filepath.Join(binDir, "postgres")
	out, err := exec.CommandContext(cctx, postgres, "-V").Output()
	if err != nil {
		return "", errorf(err, "could not run %s -V to learn its version: %v", postgres, err)
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return "", errorf(nil, "could not read the version of %s from %q", postgres, strings.TrimSpace(string(out)))
	}
	if n, _ := strconv.Atoi(m[1]); n < 10 && m[2] != "" {
		return m[1] + "." + m[2], nil
	}
	return m[1], nil
}
