package provider_test

import (
	"bytes"
	"context"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/await"
	"github.com/onceplan/onceplan/internal/provider"
)

func newMaildir(t *testing.T) (provider.Provider, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "outbox")
	p, err := provider.Parse("outbox", "maildir://"+dir)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p, dir
}

func send(t *testing.T, p provider.Provider, r provider.Request) ([]byte, provider.Verdict) {
	t.Helper()
	release, err := p.Acquire(context.Background())
	require.NoError(t, err)
	defer release()
	raw, err := p.Send(context.Background(), r)
	require.NoError(t, err)
	require.NotEmpty(t, raw)
	v := p.Classify(raw)
	require.Equal(t, v, p.Classify(raw), "classification is deterministic")
	return raw, v
}

func TestMaildirSendRepeatProbe(t *testing.T) {
	t.Parallel()
	p, dir := newMaildir(t)
	r := testRequest("maildir-send")
	name := provider.MaildirFileName(r.Key, r.Epoch)

	pr, err := p.Probe(context.Background(), r.Key, r.Epoch)
	require.NoError(t, err)
	require.False(t, pr.Found)
	require.Equal(t, "maildir: not found "+name, string(pr.Raw))

	raw, v := send(t, p, r)
	require.Equal(t, "maildir: delivered new/"+name, string(raw))
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: name}, v)
	require.FileExists(t, filepath.Join(dir, "new", name))

	raw, v = send(t, p, r)
	require.Equal(t, "maildir: already present new/"+name, string(raw))
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: name}, v)

	pr, err = p.Probe(context.Background(), r.Key, r.Epoch)
	require.NoError(t, err)
	require.Equal(t, provider.ProbeResult{Found: true, Matches: 1, Raw: []byte("maildir: found new/" + name), Receipt: name}, pr)

	// A mail reader moves the message to cur/ and flags it seen: still one
	// effect, found by a repeat and by a probe.
	require.NoError(t, os.Rename(filepath.Join(dir, "new", name), filepath.Join(dir, "cur", name+":2,S")))
	raw, v = send(t, p, r)
	require.Equal(t, "maildir: already present cur/"+name+":2,S", string(raw))
	require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: name}, v)
	pr, err = p.Probe(context.Background(), r.Key, r.Epoch)
	require.NoError(t, err)
	require.True(t, pr.Found)
	require.Equal(t, name, pr.Receipt)
	require.NoFileExists(t, filepath.Join(dir, "new", name))

	// A copy put back into new/ beside the one read: two messages with
	// the one name, and the probe counts both.
	body, err := os.ReadFile(filepath.Join(dir, "cur", name+":2,S"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "new", name), body, 0o644))
	pr, err = p.Probe(context.Background(), r.Key, r.Epoch)
	require.NoError(t, err)
	require.Equal(t, []any{true, 2, 2}, []any{pr.Found, pr.Matches, pr.Count()})
	require.Equal(t, "maildir: found new/"+name+", cur/"+name+":2,S", string(pr.Raw))
	require.NoError(t, os.Remove(filepath.Join(dir, "new", name)))

	// A bumped epoch is a second, deliberate effect.
	r.Epoch = 1
	_, v = send(t, p, r)
	require.Equal(t, provider.OutcomeDone, v.Outcome)
	require.Equal(t, provider.MaildirFileName(r.Key, 1), v.Receipt)
	require.NotEqual(t, name, v.Receipt)

	entries, err := os.ReadDir(filepath.Join(dir, "tmp"))
	require.NoError(t, err)
	require.Empty(t, entries, "tmp/ is cleaned up")
}

func TestMaildirConcurrentSameKeyMakesOneFile(t *testing.T) {
	t.Parallel()
	p, dir := newMaildir(t)
	r := testRequest("maildir-race")
	name := provider.MaildirFileName(r.Key, r.Epoch)

	var wg sync.WaitGroup
	verdicts := make([]provider.Verdict, 20)
	for i := range verdicts {
		wg.Go(func() {
			raw, err := p.Send(context.Background(), r)
			if err == nil {
				verdicts[i] = p.Classify(raw)
			}
		})
	}
	await.Group(t, &wg, time.Minute, "the 20 concurrent sends to end")
	for _, v := range verdicts {
		require.Equal(t, provider.Verdict{Outcome: provider.OutcomeDone, Receipt: name}, v)
	}
	newFiles, err := os.ReadDir(filepath.Join(dir, "new"))
	require.NoError(t, err)
	require.Len(t, newFiles, 1)
	require.Equal(t, name, newFiles[0].Name())
	tmpFiles, err := os.ReadDir(filepath.Join(dir, "tmp"))
	require.NoError(t, err)
	require.Empty(t, tmpFiles)
}

func TestMaildirMessageIsRFC5322(t *testing.T) {
	t.Parallel()
	p, dir := newMaildir(t)
	r := testRequest("maildir-message")
	send(t, p, r)

	data, err := os.ReadFile(filepath.Join(dir, "new", provider.MaildirFileName(r.Key, r.Epoch)))
	require.NoError(t, err)
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	require.NoError(t, err)
	require.Equal(t, provider.MessageID(r.Key, r.Epoch), msg.Header.Get("Message-ID"))
	require.Equal(t, provider.EffectID(r.Key, r.Epoch), msg.Header.Get("X-Onceplan-Effect"))
	from, err := msg.Header.AddressList("From")
	require.NoError(t, err)
	require.Equal(t, []*mail.Address{{Name: "Onceplan News", Address: "news@onceplan.test"}}, from)
	to, err := msg.Header.AddressList("To")
	require.NoError(t, err)
	require.Equal(t, "ada@example.test", to[0].Address)
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	require.NoError(t, err)
	require.Equal(t, r.Message.Subject, subject)
	_, err = msg.Header.Date()
	require.NoError(t, err)

	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "multipart/alternative", mediaType)
	bodies := map[string]string{}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		ct, _, err := mime.ParseMediaType(part.Header.Get("Content-Type"))
		require.NoError(t, err)
		var body io.Reader = part
		if strings.EqualFold(part.Header.Get("Content-Transfer-Encoding"), "quoted-printable") {
			body = quotedprintable.NewReader(part)
		}
		b, err := io.ReadAll(body)
		require.NoError(t, err)
		bodies[ct] = strings.ReplaceAll(string(b), "\r\n", "\n")
	}
	require.Equal(t, r.Message.Text, bodies["text/plain"])
	require.Equal(t, r.Message.HTML, bodies["text/html"])
}

func TestMaildirTextOnly(t *testing.T) {
	t.Parallel()
	p, dir := newMaildir(t)
	r := testRequest("maildir-text-only")
	r.Message.HTML = ""
	send(t, p, r)
	data, err := os.ReadFile(filepath.Join(dir, "new", provider.MaildirFileName(r.Key, r.Epoch)))
	require.NoError(t, err)
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	require.NoError(t, err)
	mediaType, _, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "text/plain", mediaType)
}

func TestMaildirFailures(t *testing.T) {
	t.Parallel()

	t.Run("directories cannot be made", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tmp"), nil, 0o644)) // a file where tmp/ belongs
		p, err := provider.Parse("outbox", "maildir://"+dir)
		require.NoError(t, err)
		defer p.Close()
		raw, v := send(t, p, testRequest("maildir-mkdir"))
		require.True(t, strings.HasPrefix(string(raw), "maildir: error creating directories: mkdir: "), string(raw))
		require.Equal(t, provider.OutcomeFailed, v.Outcome)
		require.True(t, v.Retryable)
	})

	t.Run("link fails", func(t *testing.T) {
		t.Parallel()
		p, dir := newMaildir(t)
		send(t, p, testRequest("maildir-first"))
		require.NoError(t, os.RemoveAll(filepath.Join(dir, "new")))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "new"), nil, 0o644))
		r := testRequest("maildir-link")
		raw, v := send(t, p, r)
		require.Equal(t, "maildir: error linking new/"+provider.MaildirFileName(r.Key, 0)+": link: not a directory (nothing delivered)", string(raw))
		require.Equal(t, provider.OutcomeFailed, v.Outcome)
		require.True(t, v.Retryable)
		tmpFiles, err := os.ReadDir(filepath.Join(dir, "tmp"))
		require.NoError(t, err)
		require.Empty(t, tmpFiles)
	})

	t.Run("message cannot be built", func(t *testing.T) {
		t.Parallel()
		p, _ := newMaildir(t)
		r := testRequest("maildir-bad-from")
		r.Message.From = "not an address"
		raw, v := send(t, p, r)
		require.True(t, strings.HasPrefix(string(raw), "maildir: error building message: from address"), string(raw))
		require.Equal(t, provider.OutcomeFailed, v.Outcome)
		require.False(t, v.Retryable)
	})

	t.Run("context already done", func(t *testing.T) {
		t.Parallel()
		p, dir := newMaildir(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		raw, err := p.Send(ctx, testRequest("maildir-cancelled"))
		require.ErrorIs(t, err, context.Canceled)
		require.Nil(t, raw)
		require.NoDirExists(t, filepath.Join(dir, "new"))
	})
}

func TestClassifyMaildir(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want provider.Verdict
	}{
		{"maildir: delivered new/abc.onceplan", provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "abc.onceplan"}},
		{"maildir: delivered new/abc.onceplan (syncing new/ failed: sync: input/output error)", provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "abc.onceplan"}},
		{"maildir: already present cur/abc.onceplan:2,RS", provider.Verdict{Outcome: provider.OutcomeDone, Receipt: "abc.onceplan"}},
		{"maildir: error writing tmp/abc.onceplan.1.ff: write: no space left on device (nothing delivered)",
			provider.Verdict{Outcome: provider.OutcomeFailed, Retryable: true, Reason: "error writing tmp/abc.onceplan.1.ff: write: no space left on device (nothing delivered)"}},
		{"maildir: error building message: from address \"x\": bad (nothing delivered)",
			provider.Verdict{Outcome: provider.OutcomeFailed, Reason: "error building message: from address \"x\": bad (nothing delivered)"}},
		{"maildir: exploded", provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unrecognised maildir answer: maildir: exploded"}},
		{"", provider.Verdict{Outcome: provider.OutcomeUnknown, Reason: "unrecognised maildir answer: "}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, provider.ClassifyMaildir([]byte(tt.raw)), tt.raw)
	}
}
