package audit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/audit"
	"github.com/onceplan/onceplan/internal/provider"
)

const testKey = "v1:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseEvidenceID(t *testing.T) {
	t.Parallel()
	msgID := provider.MessageID(testKey, 2) // "<32 hex@onceplan>"
	for _, tc := range []struct {
		in   string
		kind audit.IDKind
		key  string
		ep   int
	}{
		{testKey + ":0", audit.IDEffect, testKey, 0},
		{" " + testKey + ":12 ", audit.IDEffect, testKey, 12},
		{"<" + testKey + ":3>", audit.IDEffect, testKey, 3},
		{testKey, audit.IDKey, testKey, 0},
		{msgID, audit.IDMessage, "", 0},
		{strings.Trim(msgID, "<>"), audit.IDMessage, "", 0},
		{provider.MaildirFileName(testKey, 0), audit.IDEffect, "", 0},
		{"0100018c-abc@email.amazonses.com", audit.IDProvider, "", 0},
		{testKey + ":x", audit.IDProvider, "", 0},
		{testKey + ":1234567890", audit.IDProvider, "", 0}, // epoch out of range
		{strings.ToUpper(testKey), audit.IDProvider, "", 0},
	} {
		id, err := audit.ParseEvidenceID(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.kind, id.Kind, tc.in)
		require.Equal(t, tc.key, id.Key, tc.in)
		require.Equal(t, tc.ep, id.Epoch, tc.in)
	}
	_, err := audit.ParseEvidenceID("  ")
	require.EqualError(t, err, "the message id is empty")
}

func TestImportLogRefusesBadLines(t *testing.T) {
	t.Parallel()
	good := "message_id,recipient,timestamp\n" + testKey + ":0,ann@example.com,2026-03-01T10:00:00Z\n"
	for _, tc := range []struct {
		log  string
		line int
		msg  string
	}{
		{"", 0, "provider log d.csv: the file is empty; it needs a header line naming the message id (or key), recipient and timestamp columns"},
		{"id,when\nx,2026-03-01T10:00:00Z\n", 1, "provider log d.csv line 1: the header (id, when) lacks a recipient column (recipient, to, …) and a timestamp column (timestamp, date, …)"},
		{good + "x,bob@example.com,yesterday\n", 3, `provider log d.csv line 3: the timestamp "yesterday" is not RFC 3339 (2006-01-02T15:04:05Z), "2006-01-02 15:04:05" or Unix seconds`},
		{good + ",bob@example.com,1700000000\n", 3, "provider log d.csv line 3: the message id is empty"},
		{good + "x,,1700000000\n", 3, "provider log d.csv line 3: the recipient is empty"},
		{good + "x,bob@example.com\n", 3, "provider log d.csv line 3: it has 2 fields but the header has 3"},
		{good + "\n\nx,bob@example.com,\n", 5, "provider log d.csv line 5: the timestamp is empty"},
		{good + "x,bo\"b,1700000000\n", 3, `provider log d.csv line 3: bare " in non-quoted-field`},
	} {
		ev := audit.NewEvidence()
		err := ev.ImportLog(strings.NewReader(tc.log), "d.csv")
		var le *audit.LogError
		require.True(t, errors.As(err, &le), "%q: %v", tc.log, err)
		require.Equal(t, tc.line, le.Line, tc.log)
		require.Equal(t, tc.msg, err.Error())
		require.NotContains(t, err.Error(), "\n")
		require.Empty(t, ev.Sources(), "a refused log adds nothing")
	}
}

func TestImportLogFormats(t *testing.T) {
	t.Parallel()
	ev := audit.NewEvidence()
	log := "\uFEFFDate;Ignored;To;Message-ID\n" // semicolons are not separators: one column
	err := ev.ImportLog(strings.NewReader(log), "semi.csv")
	require.Error(t, err)

	log = "\uFEFFDate,Ignored,To,Message-ID\n" +
		"2026-03-01T10:00:00.123+01:00,x,ann@example.com," + provider.MessageID(testKey, 0) + "\n" +
		"2026-03-01 10:00:00,x,ann@example.com," + testKey + ":1\n" +
		"1767225600,x,ann@example.com," + testKey + "\n" +
		"\"Sun, 01 Mar 2026 10:00:00 +0000\",x,ann@example.com,queue-42\n"
	require.NoError(t, ev.ImportLog(strings.NewReader(log), "ok.csv"))
	require.Equal(t, []string{audit.SourceProviderLog}, ev.Sources())
}

func FuzzParseEvidenceID(f *testing.F) {
	for _, s := range []string{testKey + ":0", testKey, provider.MessageID(testKey, 1), provider.MaildirFileName(testKey, 1), "abc", "<>", "v1::", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := audit.ParseEvidenceID(s)
		if err != nil {
			require.Empty(t, strings.TrimSpace(s))
			return
		}
		switch id.Kind {
		case audit.IDEffect, audit.IDMessage, audit.IDKey:
		case audit.IDProvider:
			require.Equal(t, strings.TrimSpace(s), id.Raw)
		default:
			t.Fatalf("kind %d for %q", id.Kind, s)
		}
		if id.Key != "" {
			// What was read back names the same effect when printed again.
			again, err := audit.ParseEvidenceID(provider.EffectID(id.Key, id.Epoch))
			require.NoError(t, err)
			require.Equal(t, audit.IDEffect, again.Kind)
			require.Equal(t, id.Key, again.Key)
			require.Equal(t, id.Epoch, again.Epoch)
		}
	})
}

func FuzzImportLog(f *testing.F) {
	f.Add("message_id,recipient,timestamp\n" + testKey + ":0,ann@example.com,2026-03-01T10:00:00Z\n")
	f.Add("key,to,date\n\"" + testKey + "\",\"a\"\"b\",1700000000\r\n")
	f.Add("id,rcpt,at\nx,y\n")
	f.Add("\uFEFFid,rcpt,at\n\"unclosed,y,z\n")
	f.Fuzz(func(t *testing.T, log string) {
		ev := audit.NewEvidence()
		err := ev.ImportLog(strings.NewReader(log), "f.csv")
		if err == nil {
			require.Equal(t, []string{audit.SourceProviderLog}, ev.Sources())
			return
		}
		var le *audit.LogError
		require.True(t, errors.As(err, &le), "%v", err)
		require.NotContains(t, err.Error(), "\n")
		require.Empty(t, ev.Sources())
	})
}
