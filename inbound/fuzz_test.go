package inbound_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/onceplan/onceplan/inbound"
)

// FuzzParse: no payload makes a parser panic, and every event it returns
// is bounded and complete (a recipient, an event id, one of the three
// types), whatever the provider (or anyone who got past authentication)
// sends. The seeds are the documented examples.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		kind, _, _ := strings.Cut(filepath.Base(name), "_")
		for i, k := range inbound.Kinds {
			if string(k) == kind {
				f.Add(uint8(i), b)
			}
		}
	}
	f.Add(uint8(2), []byte(`[{"event":"bounce","email":"a@b.c"},{"event":"spamreport"}]`))
	f.Fuzz(func(t *testing.T, k uint8, body []byte) {
		kind := inbound.Kinds[int(k)%len(inbound.Kinds)]
		events, err := inbound.Parse(kind, body)
		if err != nil {
			if events != nil {
				t.Fatalf("events with an error")
			}
			return
		}
		if len(events) > inbound.MaxEventsPerRequest {
			t.Fatalf("%d events", len(events))
		}
		for _, e := range events {
			switch e.Type {
			case inbound.HardBounce, inbound.SoftBounce, inbound.Complaint:
			default:
				t.Fatalf("type %q", e.Type)
			}
			if e.Address == "" || len(e.Address) > 320 || e.ProviderEventID == "" || len(e.ProviderEventID) > 300 {
				t.Fatalf("unbounded or incomplete event %+v", e)
			}
			if strings.Contains(e.Address+e.ProviderEventID+e.MessageID+e.ProviderMessageID+e.Detail, "\x00") {
				t.Fatalf("NUL in %+v", e)
			}
			if len(e.Detail) > 500 || !utf8.ValidString(e.Detail) || strings.ContainsAny(e.Detail, "\r\n") {
				t.Fatalf("detail %q", e.Detail)
			}
			if e.MessageID != "" && (!strings.HasPrefix(e.MessageID, "<") || !strings.HasSuffix(e.MessageID, ">")) {
				t.Fatalf("message id %q", e.MessageID)
			}
		}
	})
}
