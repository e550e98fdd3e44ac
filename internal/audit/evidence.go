package audit

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/mail"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/onceplan/onceplan/internal/provider"
)

// effectHash names one effect (a key at an epoch) in the outside world: the
// first 16 bytes of SHA-256(provider.EffectID(key, epoch)). Every name the
// providers derive from an effect starts with it: the maildir file name
// (40 hex digits) and the Message-ID (32 hex digits), so evidence that
// carries only one of those still names its effect.
type effectHash [16]byte

func hashOf(key string, epoch int) effectHash {
	sum := sha256.Sum256([]byte(provider.EffectID(key, epoch)))
	var h effectHash
	copy(h[:], sum[:])
	return h
}

// hashFromHex reads the first 32 hex digits of s (lower case).
func hashFromHex(s string) (effectHash, bool) {
	var h effectHash
	if len(s) < 2*len(h) || !isLowerHex(s[:2*len(h)]) {
		return h, false
	}
	_, err := hex.Decode(h[:], []byte(s[:2*len(h)]))
	return h, err == nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// tally is the evidence gathered for one effect (or one key, or one
// provider id), per source: a duplicate is more than one piece in one
// source, since two sources may well describe the same delivery.
type tally struct {
	files int32 // maildir files
	lines int32 // provider log lines
	// line and line2 are the first two log lines naming the effect, in
	// the logs numbered log and log2 (the order they were imported).
	line, line2 int32
	log, log2   uint16
	// used: a target of the audited plan accounted for it.
	used bool
}

func (t *tally) addLine(log, line int) {
	t.lines++
	switch t.lines {
	case 1:
		t.log, t.line = uint16(log), int32(line)
	case 2:
		t.log2, t.line2 = uint16(log), int32(line)
	}
}

// pieces is how many pieces of evidence t holds.
func (t *tally) pieces() int { return int(t.files + t.lines) }

// duplicated: one source shows the effect more than once.
func (t *tally) duplicated() bool { return t.files > 1 || t.lines > 1 }

// Evidence is what the world says happened, gathered from outside the
// ledger: files in a maildir and lines of a provider's delivery log,
// counted per effect. Add sources with [Evidence.ScanMaildir] and
// [Evidence.ImportLog], then hand it to [Reconcile]. It is not safe for
// concurrent use.
type Evidence struct {
	byEffect  map[effectHash]*tally
	byKey     map[string]*tally // log lines naming a key without its epoch
	byReceipt map[string]*tally // log lines naming the provider's own id
	maildirs  []MaildirSummary
	logs      []LogSummary
}

// MaildirSummary says what one maildir held.
type MaildirSummary struct {
	Dir   string `json:"dir"`
	Files int    `json:"files"`
	// Unrecognised counts files that name no Onceplan effect (neither by
	// their name nor by an X-Onceplan-Effect or Message-ID header).
	Unrecognised int `json:"unrecognised"`
}

// LogSummary says what one provider log held.
type LogSummary struct {
	Name  string `json:"name"`
	Lines int    `json:"lines"`
	// ProviderIDs counts lines naming the provider's own message id,
	// matched against the receipts the ledger stored.
	ProviderIDs int `json:"provider_ids"`
}

// NewEvidence returns an empty collection.
func NewEvidence() *Evidence {
	return &Evidence{
		byEffect:  map[effectHash]*tally{},
		byKey:     map[string]*tally{},
		byReceipt: map[string]*tally{},
	}
}

// Sources names the sources gathered, as [Metric.Evidence] lists them.
func (ev *Evidence) Sources() []string {
	var out []string
	if ev == nil {
		return out
	}
	if len(ev.maildirs) > 0 {
		out = append(out, SourceMaildir)
	}
	if len(ev.logs) > 0 {
		out = append(out, SourceProviderLog)
	}
	return out
}

func (ev *Evidence) effect(h effectHash) *tally {
	t := ev.byEffect[h]
	if t == nil {
		t = &tally{}
		ev.byEffect[h] = t
	}
	return t
}

func tallyIn[K comparable](m map[K]*tally, k K) *tally {
	t := m[k]
	if t == nil {
		t = &tally{}
		m[k] = t
	}
	return t
}

// The name provider.MaildirFileName gives an effect: 40 lower-case hex
// digits and ".onceplan".
const (
	maildirHashChars = 40
	maildirSuffix    = ".onceplan"
)

// maildirName returns the effect a file name names, if it is the maildir
// provider's. A mail reader that moved the file to cur/ appended
// ":2,<flags>", which is ignored.
func maildirName(name string) (effectHash, bool) {
	base, _, _ := strings.Cut(name, ":")
	if len(base) != maildirHashChars+len(maildirSuffix) || !strings.HasSuffix(base, maildirSuffix) ||
		!isLowerHex(base[:maildirHashChars]) {
		return effectHash{}, false
	}
	return hashFromHex(base)
}

// ScanMaildir counts the messages in a maildir's new/ and cur/ per effect
// (tmp/ holds deliveries still being written, which are not delivered). A
// file named as the maildir provider names it is counted by its name
// alone; any other file is identified by its X-Onceplan-Effect header, else
// by an Onceplan Message-ID, else counted as unrecognised. Directories are
// read a batch at a time, so a maildir of a million files does not need a
// million names in memory.
func (ev *Evidence) ScanMaildir(ctx context.Context, dir string) error {
	// Tally into maps of its own, merged only when the whole scan worked.
	got := NewEvidence()
	sum := MaildirSummary{Dir: dir}
	found := 0
	for _, sub := range []string{"new", "cur"} {
		err := walkMaildir(ctx, filepath.Join(dir, sub), func(name string) error {
			sum.Files++
			h, ok := maildirName(name)
			if !ok {
				var err error
				h, ok, err = headerEffect(filepath.Join(dir, sub, name))
				if err != nil {
					return err
				}
			}
			if !ok {
				sum.Unrecognised++
				return nil
			}
			got.effect(h).files++
			return nil
		})
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("reading maildir %s: %w", dir, err)
		}
		found++
	}
	if found == 0 {
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("maildir %s: %w", dir, errors.Unwrap(err))
		}
		return fmt.Errorf("%s is not a maildir: it has neither a new/ nor a cur/ directory", dir)
	}
	mergeInto(ev.byEffect, got.byEffect)
	ev.maildirs = append(ev.maildirs, sum)
	return nil
}

// walkMaildir calls fn with the name of every regular file in dir (not
// starting with a dot, as maildir readers skip those).
func walkMaildir(ctx context.Context, dir string, fn func(name string) error) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := d.ReadDir(1024)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") || !(e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0) {
				continue
			}
			if err := fn(e.Name()); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// maxHeaderBytes bounds how much of a message headerEffect reads.
const maxHeaderBytes = 256 << 10

// headerEffect reads a message's header and returns the effect its
// X-Onceplan-Effect header (or, without one, its Onceplan Message-ID)
// names. A file that is not a message names none; only a file that cannot
// be read is an error.
func headerEffect(path string) (effectHash, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return effectHash{}, false, nil // moved away meanwhile (new/ → cur/)
		}
		return effectHash{}, false, err
	}
	defer f.Close()
	msg, err := mail.ReadMessage(bufio.NewReader(io.LimitReader(f, maxHeaderBytes)))
	if err != nil {
		return effectHash{}, false, nil
	}
	if v := strings.TrimSpace(msg.Header.Get("X-Onceplan-Effect")); v != "" {
		if id, err := ParseEvidenceID(v); err == nil && id.Kind == IDEffect {
			return id.hash, true, nil
		}
	}
	if v := strings.TrimSpace(msg.Header.Get("Message-Id")); v != "" {
		if id, err := ParseEvidenceID(v); err == nil && id.Kind == IDMessage {
			return id.hash, true, nil
		}
	}
	return effectHash{}, false, nil
}

// IDKind says what an id in a provider log names.
type IDKind int

// Kinds of evidence ids.
const (
	// IDEffect: an effect id, "v1:<64 hex>:<epoch>" (provider.EffectID,
	// the X-Onceplan-Effect header), or a maildir file name.
	IDEffect IDKind = iota + 1
	// IDMessage: an Onceplan Message-ID, "<32 hex@onceplan>".
	IDMessage
	// IDKey: an effect key without its epoch; it is taken to mean the
	// key's current epoch.
	IDKey
	// IDProvider: anything else: the provider's own id for the message,
	// matched against the receipts the ledger stored.
	IDProvider
)

// EvidenceID is an id parsed from outside evidence.
type EvidenceID struct {
	Kind  IDKind
	Key   string // IDEffect from an effect id, IDKey
	Epoch int    // IDEffect from an effect id
	Raw   string // IDProvider: the id as given (trimmed)
	hash  effectHash
}

// maxEpochDigits bounds the epoch of an effect id (an int32 in the ledger).
const maxEpochDigits = 9

// ParseEvidenceID reads the id column of a provider log (or a header). It
// accepts an effect id, a key, an Onceplan Message-ID (with or without
// angle brackets), a maildir file name, or any other non-empty id (the
// provider's own). Only an empty id is an error.
func ParseEvidenceID(s string) (EvidenceID, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return EvidenceID{}, errors.New("the message id is empty")
	}
	inner := s
	if len(inner) >= 2 && inner[0] == '<' && inner[len(inner)-1] == '>' {
		inner = strings.TrimSpace(inner[1 : len(inner)-1])
	}
	const keyLen = 3 + 64
	if strings.HasPrefix(inner, "v1:") && len(inner) >= keyLen && isLowerHex(inner[3:keyLen]) {
		key := inner[:keyLen]
		rest := inner[keyLen:]
		if rest == "" {
			return EvidenceID{Kind: IDKey, Key: key}, nil
		}
		if digits, ok := strings.CutPrefix(rest, ":"); ok && digits != "" && len(digits) <= maxEpochDigits && isDigits(digits) {
			epoch, _ := strconv.Atoi(digits)
			return EvidenceID{Kind: IDEffect, Key: key, Epoch: epoch, hash: hashOf(key, epoch)}, nil
		}
	}
	if local, ok := strings.CutSuffix(inner, "@onceplan"); ok && len(local) == 32 {
		if h, ok := hashFromHex(local); ok {
			return EvidenceID{Kind: IDMessage, hash: h}, nil
		}
	}
	if h, ok := maildirName(inner); ok && !strings.Contains(inner, ":") {
		return EvidenceID{Kind: IDEffect, hash: h}, nil
	}
	return EvidenceID{Kind: IDProvider, Raw: s}, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// LogError refuses a provider log, naming the line (1 is the header) and
// why, in one sentence.
type LogError struct {
	Name   string
	Line   int
	Reason string
}

func (e *LogError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("provider log %s: %s", e.Name, e.Reason)
	}
	return fmt.Sprintf("provider log %s line %d: %s", e.Name, e.Line, e.Reason)
}

// Log column names, compared after lower-casing and turning '-' and ' '
// into '_'.
var (
	logIDColumns        = []string{"message_id", "messageid", "msg_id", "id", "key", "effect", "effect_id", "x_onceplan_effect"}
	logRecipientColumns = []string{"recipient", "rcpt", "rcpt_to", "to", "email", "address"}
	logTimeColumns      = []string{"timestamp", "time", "date", "delivered_at", "sent_at", "at"}
)

// logTimeLayouts are the timestamp forms a delivery log may use; a bare
// number is Unix seconds.
var logTimeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	time.RFC1123Z,
	time.RFC1123,
}

func parseLogTime(s string) (time.Time, bool) {
	if isDigits(s) && len(s) <= 12 {
		n, err := strconv.ParseInt(s, 10, 64)
		return time.Unix(n, 0).UTC(), err == nil
	}
	for _, l := range logTimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// maxLogLines and maxLogs bound what a tally's line references hold.
const (
	maxLogLines = 1 << 30
	maxLogs     = 1 << 15
)

// ImportLog reads a provider's delivery log: CSV with a header line naming
// a message id (or key) column, a recipient column and a timestamp column,
// in any order (other columns are ignored). Each line is one delivery. The
// id may be anything ParseEvidenceID accepts. A log with a bad line is
// refused as a whole — a line skipped could be the duplicate — with a
// *LogError naming the line; nothing of it is kept. name is how errors and
// the report refer to the log (its file name).
func (ev *Evidence) ImportLog(r io.Reader, name string) error {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1 // checked below, with a better message
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return &LogError{Name: name, Reason: "the file is empty; it needs a header line naming the message id (or key), recipient and timestamp columns"}
	}
	if err != nil {
		return csvLogError(name, err)
	}
	idCol, rcptCol, timeCol := -1, -1, -1
	var names []string
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\uFEFF")
		}
		n := strings.NewReplacer("-", "_", " ", "_").Replace(strings.ToLower(strings.TrimSpace(h)))
		names = append(names, shownColumn(n))
		switch {
		case idCol < 0 && slices.Contains(logIDColumns, n):
			idCol = i
		case rcptCol < 0 && slices.Contains(logRecipientColumns, n):
			rcptCol = i
		case timeCol < 0 && slices.Contains(logTimeColumns, n):
			timeCol = i
		}
	}
	var missing []string
	if idCol < 0 {
		missing = append(missing, "a message id or key column (message_id, key, …)")
	}
	if rcptCol < 0 {
		missing = append(missing, "a recipient column (recipient, to, …)")
	}
	if timeCol < 0 {
		missing = append(missing, "a timestamp column (timestamp, date, …)")
	}
	if len(missing) > 0 {
		return &LogError{Name: name, Line: 1, Reason: fmt.Sprintf("the header (%s) lacks %s", strings.Join(names, ", "), andList(missing))}
	}
	width := len(header)

	// Tally into maps of its own, merged only when the whole log is good.
	if len(ev.logs) >= maxLogs {
		return &LogError{Name: name, Reason: fmt.Sprintf("at most %d provider logs can be reconciled at once", maxLogs)}
	}
	logNo := len(ev.logs)
	got := NewEvidence()
	sum := LogSummary{Name: name}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return csvLogError(name, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != width {
			return &LogError{Name: name, Line: line, Reason: fmt.Sprintf("it has %d fields but the header has %d", len(rec), width)}
		}
		if line >= maxLogLines {
			return &LogError{Name: name, Line: line, Reason: "the log is too long; split it"}
		}
		id, err := ParseEvidenceID(rec[idCol])
		if err != nil {
			return &LogError{Name: name, Line: line, Reason: err.Error()}
		}
		if strings.TrimSpace(rec[rcptCol]) == "" {
			return &LogError{Name: name, Line: line, Reason: "the recipient is empty"}
		}
		if ts := strings.TrimSpace(rec[timeCol]); ts == "" {
			return &LogError{Name: name, Line: line, Reason: "the timestamp is empty"}
		} else if _, ok := parseLogTime(ts); !ok {
			return &LogError{Name: name, Line: line, Reason: fmt.Sprintf("the timestamp %q is not RFC 3339 (2006-01-02T15:04:05Z), \"2006-01-02 15:04:05\" or Unix seconds", short(ts))}
		}
		sum.Lines++
		switch id.Kind {
		case IDEffect, IDMessage:
			got.effect(id.hash).addLine(logNo, line)
		case IDKey:
			tallyIn(got.byKey, id.Key).addLine(logNo, line)
		case IDProvider:
			sum.ProviderIDs++
			tallyIn(got.byReceipt, id.Raw).addLine(logNo, line)
		}
	}
	mergeInto(ev.byEffect, got.byEffect)
	mergeInto(ev.byKey, got.byKey)
	mergeInto(ev.byReceipt, got.byReceipt)
	ev.logs = append(ev.logs, sum)
	return nil
}

// mergeInto adds the files and log lines of src to dst.
func mergeInto[K comparable](dst, src map[K]*tally) {
	for k, t := range src {
		d := dst[k]
		if d == nil {
			dst[k] = t
			continue
		}
		d.files += t.files
		switch d.lines {
		case 0:
			d.log, d.line, d.log2, d.line2 = t.log, t.line, t.log2, t.line2
		case 1:
			d.log2, d.line2 = t.log, t.line
		}
		d.lines += t.lines
	}
}

func csvLogError(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &LogError{Name: name, Line: pe.StartLine, Reason: pe.Err.Error()}
	}
	return fmt.Errorf("reading provider log %s: %w", name, err)
}

// shownColumn is a header name as an error shows it: quoted when it holds
// anything that would confuse the sentence.
func shownColumn(n string) string {
	n = short(n)
	if n == "" || strings.ContainsAny(n, ",()\"") || strings.ContainsFunc(n, func(r rune) bool { return r < ' ' || r == 0x7f || r == utf8.RuneError }) {
		return strconv.Quote(n)
	}
	return n
}

func andList(items []string) string {
	if len(items) <= 1 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

func short(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
