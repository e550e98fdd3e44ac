package pgcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pidFile is what postmaster.pid says. Its lines are, per PostgreSQL's pidfile.h:
// pid, data directory, start time, port, socket directory, listen address, shmem
// key, status ("starting", "stopping", "ready", "standby").
type pidFile struct {
	pid    int
	status string
}

// errCorruptPidFile marks a postmaster.pid whose first line is not a process id.
var errCorruptPidFile = errors.New("corrupt postmaster.pid")

// readPidFile reads a PostgreSQL lock file (postmaster.pid, or a socket's .lock, which
// starts the same way); ok is false when there is none.
func readPidFile(path string) (pf pidFile, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return pidFile{}, false, nil
	}
	if err != nil {
		return pidFile{}, true, err
	}
	lines := strings.Split(string(data), "\n")
	first := strings.TrimSpace(lines[0])
	pid, perr := strconv.Atoi(first)
	if perr != nil || pid <= 0 {
		what := fmt.Sprintf("its first line is %q, not a process id", truncate(first, 40))
		if len(bytes.TrimSpace(data)) == 0 {
			what = "it is empty"
		}
		return pidFile{}, true, fmt.Errorf("%w: %s", errCorruptPidFile, what)
	}
	pf.pid = pid
	if len(lines) > 7 {
		pf.status = strings.TrimSpace(lines[7])
	}
	return pf, true, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// processAlive reports whether pid names a process that is not a zombie.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if !pidExists(pid) {
		return false
	}
	state, ok := procState(pid)
	return !ok || (state != 'Z' && state != 'X')
}

// pidExists reports whether any process, zombies included, has pid.
func pidExists(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// procState returns the state letter from /proc/<pid>/stat.
func procState(pid int) (byte, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0, false
	}
	return data[i+2], true
}

// procPPid returns the parent pid from /proc/<pid>/stat, or 0.
func procPPid(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(fields[1])
	return n
}

// postgresOn reports whether pid is a live PostgreSQL process working in dir (every
// PostgreSQL server process makes its data directory its working directory).
// known is false when /proc cannot tell (no /proc, or another user's process).
func postgresOn(pid int, dir string) (yes, known bool) {
	if !processAlive(pid) {
		return false, true
	}
	base := "/proc/" + strconv.Itoa(pid)
	comm, err := os.ReadFile(base + "/comm")
	if err != nil {
		return false, false
	}
	if name := strings.TrimSpace(string(comm)); name != "postgres" && name != "postmaster" {
		return false, true
	}
	cwd, err := os.Readlink(base + "/cwd")
	if err != nil {
		return false, false
	}
	return cwd == dir, true
}

// postgresProcsOn lists the live PostgreSQL processes working in dir, postmaster
// (the one whose parent is not among them) first.
func postgresProcsOn(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if yes, _ := postgresOn(pid, dir); yes {
			pids = append(pids, pid)
		}
	}
	in := make(map[int]bool, len(pids))
	for _, p := range pids {
		in[p] = true
	}
	for i, p := range pids {
		if !in[procPPid(p)] {
			pids[0], pids[i] = pids[i], pids[0]
			break
		}
	}
	return pids
}

func joinPids(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, " ")
}
