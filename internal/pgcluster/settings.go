package pgcluster

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

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
