package sink_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/smtp"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/onceplan/onceplan/internal/sink"
)

// The request of Postmark's documented "send a single email" example,
// with the metadata of its custom-metadata example.
const postmarkExampleEmail = `{
  "From": "sender@example.com",
  "To": "receiver@example.com",
  "Subject": "Postmark test",
  "TextBody": "Hello dear Postmark user.",
  "HtmlBody": "<html><body><strong>Hello</strong> dear Postmark user.</body></html>",
  "MessageStream": "outbound",
  "Metadata": {"color": "blue", "client-id": "12345"}
}`

func pmDo(t *testing.T, method, u, token, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Postmark-Server-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, resp.Header
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestPostmarkSendAndSearchAsDocumented(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	pm := sink.NewPostmark(sink.PostmarkOpts{Retention: 45 * 24 * time.Hour, NowFunc: clock.Now})
	t.Cleanup(pm.Close)
	tok := pm.Token()

	st, body, _ := pmDo(t, "POST", pm.Endpoint()+"/email", "", postmarkExampleEmail)
	require.Equal(t, 401, st, "no token")
	require.EqualValues(t, 10, body["ErrorCode"])
	st, body, _ = pmDo(t, "POST", pm.Endpoint()+"/email", tok, `{"To":"receiver@example.com","TextBody":"x"}`)
	require.Equal(t, 422, st)
	require.EqualValues(t, 300, body["ErrorCode"])

	st, body, _ = pmDo(t, "POST", pm.Endpoint()+"/email", tok, postmarkExampleEmail)
	require.Equal(t, 200, st)
	require.EqualValues(t, 0, body["ErrorCode"])
	require.Equal(t, "OK", body["Message"])
	require.Equal(t, "receiver@example.com", body["To"])
	id := body["MessageID"].(string)
	require.NotEmpty(t, id)
	require.Equal(t, map[string]int{"receiver@example.com": 1}, pm.CountByRecipient())

	search := func(q string) (int, map[string]any) {
		st, body, _ := pmDo(t, "GET", pm.Endpoint()+"/messages/outbound?"+q, tok, "")
		return st, body
	}
	st, _ = search("metadata_color=blue")
	require.Equal(t, 422, st, "count and offset are required")
	st, body = search("count=50&offset=0&metadata_color=blue")
	require.Equal(t, 200, st)
	require.EqualValues(t, 1, body["TotalCount"])
	msg := body["Messages"].([]any)[0].(map[string]any)
	require.Equal(t, id, msg["MessageID"])
	require.Equal(t, map[string]any{"color": "blue", "client-id": "12345"}, msg["Metadata"])
	_, body = search("count=50&offset=0&metadata_color=red")
	require.EqualValues(t, 0, body["TotalCount"])
	_, body = search("count=50&offset=1&metadata_color=blue")
	require.EqualValues(t, 1, body["TotalCount"])
	require.Empty(t, body["Messages"])
	_, body = search("count=50&offset=0&metadata_color=blue&messagestream=broadcast")
	require.EqualValues(t, 0, body["TotalCount"], "another stream")

	clock.Add(45 * 24 * time.Hour)
	_, body = search("count=50&offset=0&metadata_color=blue")
	require.EqualValues(t, 0, body["TotalCount"], "past the retention, the search finds nothing")
	require.Len(t, pm.Messages(), 1, "but it was sent")
}

func TestPostmarkFailsOnCommand(t *testing.T) {
	t.Parallel()
	pm := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(pm.Close)
	tok := pm.Token()
	send := func() (int, http.Header, error) {
		req, _ := http.NewRequest("POST", pm.Endpoint()+"/email", strings.NewReader(postmarkExampleEmail))
		req.Header.Set("X-Postmark-Server-Token", tok)
		c := &http.Client{Timeout: time.Second}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header, nil
	}
	pm.FailNext(1, 429, map[string]string{"Retry-After": "30"}, `{"ErrorCode":429,"Message":"Rate limit exceeded"}`)
	st, h, err := send()
	require.NoError(t, err)
	require.Equal(t, 429, st)
	require.Equal(t, "30", h.Get("Retry-After"))
	require.Empty(t, pm.Messages(), "a 429 accepts nothing")

	pm.AcceptThenFail(1, 500)
	st, _, err = send()
	require.NoError(t, err)
	require.Equal(t, 500, st)
	pm.AcceptThenDrop(1)
	_, _, err = send()
	require.Error(t, err, "the answer is lost")
	pm.AcceptThenHang(1, 3*time.Second)
	_, _, err = send()
	require.Error(t, err, "the answer never comes in time")
	require.Len(t, pm.Messages(), 3, "each of them was accepted")

	pm.SearchLag(time.Hour)
	_, body, _ := pmDo(t, "GET", pm.Endpoint()+"/messages/outbound?count=10&offset=0", tok, "")
	require.EqualValues(t, 0, body["TotalCount"], "the search lags")
	pm.SearchLag(0)
	_, body, _ = pmDo(t, "GET", pm.Endpoint()+"/messages/outbound?count=10&offset=0", tok, "")
	require.EqualValues(t, 3, body["TotalCount"])
	require.Equal(t, 4, pm.Requests())

	// A send accepted twice: two messages with its metadata, both counted
	// by the search; the answer names the first, the newest is listed first.
	pm.AcceptTwice(1)
	st, body, _ = pmDo(t, "POST", pm.Endpoint()+"/email", tok, strings.Replace(postmarkExampleEmail, `"blue"`, `"green"`, 1))
	require.Equal(t, 200, st)
	first := body["MessageID"]
	_, body, _ = pmDo(t, "GET", pm.Endpoint()+"/messages/outbound?count=1&offset=0&metadata_color=green", tok, "")
	require.EqualValues(t, 2, body["TotalCount"])
	require.Len(t, body["Messages"], 1, "count=1 lists one of the two")
	require.NotEqual(t, first, body["Messages"].([]any)[0].(map[string]any)["MessageID"])
	_, body, _ = pmDo(t, "GET", pm.Endpoint()+"/messages/outbound?count=10&offset=0&metadata_color=green", tok, "")
	require.Len(t, body["Messages"], 2)
	require.Equal(t, 5, pm.Requests(), "one request made the two messages")
	require.Len(t, pm.Messages(), 5)
}

// TestPostmarkAndMailjetSearchTheSMTPRelay: messages the SMTP sink accepted
// with X-PM-Metadata-* (Postmark) or X-MJ-CustomID (Mailjet) headers are
// found by each API stand-in.
func TestPostmarkAndMailjetSearchTheSMTPRelay(t *testing.T) {
	t.Parallel()
	relay, err := sink.NewSMTP()
	require.NoError(t, err)
	t.Cleanup(relay.Close)
	pm := sink.NewPostmark(sink.PostmarkOpts{SMTP: relay})
	t.Cleanup(pm.Close)
	mj := sink.NewMailjet(sink.MailjetOpts{SMTP: relay})
	t.Cleanup(mj.Close)

	msg := "From: a@example.com\r\nTo: b@example.com\r\nSubject: hi\r\nX-PM-Metadata-onceplan_effect: v1:aa:0\r\nX-MJ-CustomID: v1:aa:0\r\n\r\nhello\r\n"
	require.NoError(t, smtp.SendMail(relay.Addr(), nil, "a@example.com", []string{"b@example.com"}, []byte(msg)))
	require.Equal(t, map[string]int{"v1:aa:0": 1}, pm.Effects())
	require.Equal(t, map[string]int{"v1:aa:0": 1}, mj.Effects())

	_, body, _ := pmDo(t, "GET", pm.Endpoint()+"/messages/outbound?count=1&offset=0&metadata_onceplan_effect="+url.QueryEscape("v1:aa:0"), pm.Token(), "")
	require.EqualValues(t, 1, body["TotalCount"])

	get := func(user, pass, customID string) (int, map[string]any) {
		req, _ := http.NewRequest("GET", mj.Endpoint()+"/v3/REST/message?CustomID="+url.QueryEscape(customID), nil)
		req.SetBasicAuth(user, pass)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	st, _ := get("nobody", "wrong", "v1:aa:0")
	require.Equal(t, 401, st)
	st, out := get(sink.MailjetAPIKey, sink.MailjetAPISecret, "v1:aa:0")
	require.Equal(t, 200, st)
	require.EqualValues(t, 1, out["Count"])
	require.EqualValues(t, 1, out["Total"])
	require.Len(t, out["Data"], 1)
	_, out = get(sink.MailjetAPIKey, sink.MailjetAPISecret, "v1:bb:0")
	require.EqualValues(t, 0, out["Count"])
	mj.SearchLag(time.Hour)
	_, out = get(sink.MailjetAPIKey, sink.MailjetAPISecret, "v1:aa:0")
	require.EqualValues(t, 0, out["Count"], "the API lags behind the relay")
}

// TestPostmarkBatchAsDocumented: POST /email/batch answers 200 with one
// result per message, in order, even when one of them is invalid (that
// one ErrorCode 300, not sent); each accepted message keeps its own
// Metadata, so the search finds it alone; more than 500 is refused.
func TestPostmarkBatchAsDocumented(t *testing.T) {
	t.Parallel()
	pm := sink.NewPostmark(sink.PostmarkOpts{})
	t.Cleanup(pm.Close)
	second := strings.Replace(strings.Replace(postmarkExampleEmail, "receiver@", "second@", 1), `"color": "blue"`, `"color": "green"`, 1)
	batch := "[" + postmarkExampleEmail + "," + `{"From":"sender@example.com","To":"","TextBody":"x"}` + "," + second + "]"
	req, err := http.NewRequest("POST", pm.Endpoint()+"/email/batch", strings.NewReader(batch))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Postmark-Server-Token", pm.Token())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "a batch with an invalid message is still a 200")
	var results []map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&results))
	require.Len(t, results, 3)
	require.EqualValues(t, 0, results[0]["ErrorCode"])
	require.Equal(t, "receiver@example.com", results[0]["To"])
	require.EqualValues(t, 300, results[1]["ErrorCode"])
	require.Nil(t, results[1]["MessageID"])
	require.EqualValues(t, 0, results[2]["ErrorCode"])
	require.Equal(t, map[string]int{"receiver@example.com": 1, "second@example.com": 1}, pm.CountByRecipient())

	st, body, _ := pmDo(t, "GET", pm.Endpoint()+"/messages/outbound?count=50&offset=0&metadata_color=green", pm.Token(), "")
	require.Equal(t, 200, st)
	require.EqualValues(t, 1, body["TotalCount"])
	require.Equal(t, results[2]["MessageID"], body["Messages"].([]any)[0].(map[string]any)["MessageID"])

	many := "[" + strings.TrimSuffix(strings.Repeat(postmarkExampleEmail+",", 501), ",") + "]"
	st, _, _ = pmDo(t, "POST", pm.Endpoint()+"/email/batch", pm.Token(), many)
	require.Equal(t, 422, st)
	require.Len(t, pm.Messages(), 2, "an oversized batch sends nothing")
}
