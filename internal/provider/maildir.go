package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Maildir raw answers are one line each:
//
//	maildir: delivered new/<name>
//	maildir: delivered new/<name> (syncing new/ failed: <error>)
//	maildir: already present new/<name>          (or cur/<name>:2,<flags>)
//	maildir: error building message: <error> (nothing delivered)
//	maildir: error creating directories: <error> (nothing delivered)
//	maildir: error writing tmp/<file>: <error> (nothing delivered)
//	maildir: error linking new/<name>: <error> (nothing delivered)
//
// and a probe answers "maildir: found new/<name>" (each copy, comma
// separated, when there are several) or "maildir: not found <name>".
const (
	maildirPrefix        = "maildir: "
	maildirDelivered     = "maildir: delivered "
	maildirPresent       = "maildir: already present "
	maildirErrBuild      = "maildir: error building message: "
	maildirErrPrefix     = "maildir: error "
	maildirNothing       = " (nothing delivered)"
	maildirFileSuffix    = ".onceplan"
	maildirFileHashChars = 40
)

type maildirProvider struct {
	*limiter
	name   string
	url    string
	dir    string
	settle time.Duration

	dirsReady atomic.Bool
}

func newMaildirFromURL(name string, u *url.URL, o options) (Provider, error) {
	if u.Opaque != "" || u.Host != "" {
		return nil, errorf(name, "maildir URL %s must be maildir:///absolute/path (three slashes)", Redacted(u.String()))
	}
	if u.User != nil {
		return nil, errorf(name, "maildir URL must not have a user")
	}
	if u.Path == "" || !filepath.IsAbs(u.Path) {
		return nil, errorf(name, "maildir URL has no absolute path (want maildir:///absolute/path)")
	}
	return &maildirProvider{
		limiter: newLimiter(o.perSecond, o.concurrency, o.rateScope),
		name:    name,
		url:     u.String(),
		dir:     filepath.Clean(u.Path),
		settle:  o.settle,
	}, nil
}

// MaildirFileName is the file an effect is delivered as: the first 40 hex
// digits of SHA-256(EffectID) and ".onceplan". Being a function of the
// effect alone, a second delivery of one effect is refused by the file
// system (the link into new/ already exists).
func MaildirFileName(key string, epoch int) string {
	return effectHash(key, epoch)[:maildirFileHashChars] + maildirFileSuffix
}

func (p *maildirProvider) Name() string   { return p.name }
func (p *maildirProvider) Kind() string   { return "maildir" }
func (p *maildirProvider) String() string { return p.name + "=" + p.url }
func (p *maildirProvider) Close() error   { return nil }

// Capabilities: a maildir deduplicates by file name and can be probed; a
// file that is not there was not delivered (no settle window by default).
func (p *maildirProvider) Capabilities() Capabilities {
	return Capabilities{Dedupe: true, Probe: true, SettleWindow: p.settle}
}

// ensureDirs creates tmp/, new/ and cur/ on first use (and again after a
// failure, which may have been temporary).
func (p *maildirProvider) ensureDirs() error {
	if p.dirsReady.Load() {
		return nil
	}
	for _, d := range []string{"tmp", "new", "cur"} {
		if err := os.MkdirAll(filepath.Join(p.dir, d), 0o755); err != nil {
			return err
		}
	}
	p.dirsReady.Store(true)
	return nil
}

// find looks for the effect's file in new/ and cur/ (where a mail reader
// moves it, adding ":2,<flags>"). It returns "new/<name>" or
// "cur/<file>".
func (p *maildirProvider) find(name string) (string, bool) {
	if _, err := os.Lstat(filepath.Join(p.dir, "new", name)); err == nil {
		return "new/" + name, true
	}
	if _, err := os.Lstat(filepath.Join(p.dir, "cur", name)); err == nil {
		return "cur/" + name, true
	}
	// name is hex and ".onceplan": no glob metacharacters.
	if m, _ := filepath.Glob(filepath.Join(p.dir, "cur", name+":*")); len(m) > 0 {
		return "cur/" + filepath.Base(m[0]), true
	}
	return "", false
}

// Send delivers the message as new/<MaildirFileName>: written and synced in
// tmp/ under a unique name, then hard-linked into new/ (the link fails when
// the name exists: a repeat can never make a second file), then the tmp
// file is removed and new/ synced. ctx is only checked before starting: a
// local write is not interrupted half way.
func (p *maildirProvider) Send(ctx context.Context, r Request) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := MaildirFileName(r.Key, r.Epoch)
	if err := p.ensureDirs(); err != nil {
		return []byte(fmt.Sprintf("maildir: error creating directories: %s%s", errText(err), maildirNothing)), nil
	}
	if where, ok := p.find(name); ok {
		return []byte(maildirPresent + where), nil
	}
	msg, err := newMsg(r, time.Now())
	if err != nil {
		return []byte(maildirErrBuild + err.Error() + maildirNothing), nil
	}

	tmpName := maildirTmpName(name)
	tmp := filepath.Join(p.dir, "tmp", tmpName)
	if err := writeSynced(tmp, func(f *os.File) error { _, err := msg.WriteTo(f); return err }); err != nil {
		_ = os.Remove(tmp)
		return []byte(fmt.Sprintf("maildir: error writing tmp/%s: %s%s", tmpName, errText(err), maildirNothing)), nil
	}
	err = os.Link(tmp, filepath.Join(p.dir, "new", name))
	_ = os.Remove(tmp)
	switch {
	case errors.Is(err, fs.ErrExist):
		return []byte(maildirPresent + "new/" + name), nil
	case err != nil:
		return []byte(fmt.Sprintf("maildir: error linking new/%s: %s%s", name, errText(err), maildirNothing)), nil
	}
	if err := syncDir(filepath.Join(p.dir, "new")); err != nil {
		// The file is in new/ and readers see it: delivered. Only its
		// survival of a power cut is in question.
		return []byte(fmt.Sprintf("%snew/%s (syncing new/ failed: %s)", maildirDelivered, name, errText(err))), nil
	}
	return []byte(maildirDelivered + "new/" + name), nil
}

// writeSynced writes a new file and syncs it, holding an exclusive lock
// on it from its creation until it is closed: Sweep never removes a file
// whose writer still holds the lock, and a writer that dies (killed)
// releases it.
func writeSynced(path string, write func(*os.File) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		_ = f.Close()
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// copies lists the effect's files in new/ and cur/, as find looks for
// them. The filesystem refuses a second new/<name>, but a copy made
// outside Onceplan (a file put back into new/ after a reader moved it to
// cur/) is a second message with the one name: the probe counts it.
func (p *maildirProvider) copies(name string) []string {
	var out []string
	for _, sub := range []string{"new", "cur"} {
		if _, err := os.Lstat(filepath.Join(p.dir, sub, name)); err == nil {
			out = append(out, sub+"/"+name)
		}
	}
	m, _ := filepath.Glob(filepath.Join(p.dir, "cur", name+":*"))
	for _, f := range m {
		out = append(out, "cur/"+filepath.Base(f))
	}
	return out
}

// Probe tells whether the effect's file is in new/ or cur/, and how many
// copies of it there are.
func (p *maildirProvider) Probe(ctx context.Context, key string, epoch int) (ProbeResult, error) {
	if err := ctx.Err(); err != nil {
		return ProbeResult{}, err
	}
	name := MaildirFileName(key, epoch)
	if where := p.copies(name); len(where) > 0 {
		return ProbeResult{Found: true, Matches: len(where), Raw: []byte("maildir: found " + strings.Join(where, ", ")), Receipt: name}, nil
	}
	if _, err := os.Stat(p.dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ProbeResult{}, fmt.Errorf("probing maildir %s: %w", p.dir, err)
	}
	return ProbeResult{Raw: []byte("maildir: not found " + name)}, nil
}

// Classify interprets a maildir raw answer; see [ClassifyMaildir].
func (p *maildirProvider) Classify(raw []byte) Verdict { return ClassifyMaildir(raw) }

// ClassifyMaildir interprets a raw answer of a maildir Send: delivered or
// already present → done with the file name (without the ":2,flags" a mail
// reader adds) as receipt; an error building the message → failed for good;
// any other error (all of them happen before the link into new/, so nothing
// was delivered) → failed, retryable. Anything else → unknown.
func ClassifyMaildir(raw []byte) Verdict {
	s := string(raw)
	switch {
	case strings.HasPrefix(s, maildirDelivered):
		return Verdict{Outcome: OutcomeDone, Receipt: maildirReceipt(s[len(maildirDelivered):])}
	case strings.HasPrefix(s, maildirPresent):
		return Verdict{Outcome: OutcomeDone, Receipt: maildirReceipt(s[len(maildirPresent):])}
	case strings.HasPrefix(s, maildirErrBuild):
		return Verdict{Outcome: OutcomeFailed, Reason: oneLine(strings.TrimPrefix(s, maildirPrefix))}
	case strings.HasPrefix(s, maildirErrPrefix) && strings.HasSuffix(s, maildirNothing):
		return Verdict{Outcome: OutcomeFailed, Retryable: true, Reason: oneLine(strings.TrimPrefix(s, maildirPrefix))}
	}
	return Verdict{Outcome: OutcomeUnknown, Reason: "unrecognised maildir answer: " + oneLine(s)}
}

// maildirReceipt turns "new/<name> (…)" or "cur/<name>:2,S" into <name>.
func maildirReceipt(where string) string {
	where, _, _ = strings.Cut(where, " ")
	name := path.Base(where)
	name, _, _ = strings.Cut(name, ":")
	return name
}

// MaildirTmpMaxAge is how old a file in a maildir's tmp/ must be (since it
// was last written) before Sweep may remove it: many times the longest
// write of a message, which is synced and linked into new/ as soon as it
// is written. Age alone is not trusted: a file whose writer still holds
// its lock is never removed, however old.
const MaildirTmpMaxAge = time.Hour

// Sweeper is a provider that leaves files behind when a process dies in
// the middle of a call (a maildir's tmp/): Sweep removes those no process
// may still be writing and names them. Maintenance calls it.
type Sweeper interface {
	Sweep(ctx context.Context, now time.Time) (removed []string, err error)
}

// maildirTmpName is a unique name in tmp/ for writing the file name:
// "<name>.<pid>.<16 hex>" (isMaildirTmpName).
func maildirTmpName(name string) string {
	var uniq [8]byte
	_, _ = rand.Read(uniq[:])
	return fmt.Sprintf("%s.%d.%s", name, os.Getpid(), hex.EncodeToString(uniq[:]))
}

// isMaildirTmpName reports whether name is a tmp/ file Send writes:
// "<40 hex>.onceplan.<pid>.<16 hex>". Other files (another program's
// delivery in progress) are never touched.
func isMaildirTmpName(name string) bool {
	base, rest, ok := strings.Cut(name, maildirFileSuffix+".")
	if !ok || len(base) != maildirFileHashChars || !isHex(base) {
		return false
	}
	pid, uniq, ok := strings.Cut(rest, ".")
	return ok && pid != "" && strings.Trim(pid, "0123456789") == "" && len(uniq) == 16 && isHex(uniq)
}

func isHex(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdef") == ""
}

// Sweep removes the files Send left in tmp/ when its process died between
// writing a message and linking it into new/: only files named as Send
// names them, last written at least MaildirTmpMaxAge before now, and not
// locked by a live writer (Send holds an exclusive lock while it writes;
// Sweep removes a file only while holding that lock itself). A half
// written file was never delivered: the effect's attempt is recovered
// from the ledger, and the message is written again under a new name.
func (p *maildirProvider) Sweep(ctx context.Context, now time.Time) ([]string, error) {
	dir := filepath.Join(p.dir, "tmp")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("maildir %s: reading tmp/: %w", p.dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		if !e.Type().IsRegular() || !isMaildirTmpName(e.Name()) {
			continue
		}
		gone, err := sweepOne(filepath.Join(dir, e.Name()), now)
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			removed = append(removed, "tmp/"+e.Name())
		}
	}
	return removed, errors.Join(errs...)
}

// sweepOne removes path when it is old enough and nobody holds its lock.
func sweepOne(path string, now time.Time) (bool, error) {
	info, err := os.Lstat(path)
	if err != nil || now.Sub(info.ModTime()) < MaildirTmpMaxAge {
		return false, nil // gone meanwhile (Send removes its own), or young
	}
	f, err := os.Open(path)
	if err != nil {
		return false, nil
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // a live writer holds it
	}
	// Written to since it was looked at: someone still uses it.
	if again, err := f.Stat(); err != nil || !again.ModTime().Equal(info.ModTime()) {
		return false, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("maildir: removing %s: %w", path, err)
	}
	return true, nil
}
