// Package apiclient talks to a running Onceplan's JSON API (/api/v1) with a
// bearer token. The command line (`onceplan campaign …`) and the MCP server
// (`onceplan mcp`) use it, so both see exactly what the API allows: an agent
// token can never approve, whatever the client.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls one server with one token.
type Client struct {
	// Server is the base URL, e.g. http://127.0.0.1:8080.
	Server string
	Token  string
	HTTP   *http.Client
}

// New checks the server URL and returns a client.
func New(server, token string) (*Client, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("the server URL %q is not an http(s) URL like http://127.0.0.1:8080", server)
	}
	if strings.TrimSpace(token) == "" {
		return nil, errors.New("no API token: pass --token or set ONCEPLAN_TOKEN (create one with `onceplan token create`)")
	}
	return &Client{Server: strings.TrimSuffix(server, "/"), Token: strings.TrimSpace(token), HTTP: &http.Client{Timeout: 10 * time.Minute}}, nil
}

// Error is an error answer of the API.
type Error struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
	Line    int    `json:"line"`
}

func (e *Error) Error() string {
	return e.Message
}

// Request is one call.
type Request struct {
	Method      string
	Path        string // under /api/v1, e.g. "/campaigns"
	Query       url.Values
	Body        io.Reader // raw body (with ContentType), or
	JSON        any       // a value to send as JSON
	ContentType string
	Header      http.Header
}

// Do performs r and decodes a 2xx JSON answer into out (when not nil).
func (c *Client) Do(ctx context.Context, r Request, out any) error {
	u := c.Server + "/api/v1" + r.Path
	if len(r.Query) > 0 {
		u += "?" + r.Query.Encode()
	}
	body, ctype := r.Body, r.ContentType
	if r.JSON != nil {
		b, err := json.Marshal(r.JSON)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u, body)
	if err != nil {
		return err
	}
	for k, vs := range r.Header {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Accept", "application/json")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the Onceplan server at %s: %w", c.Server, unwrapURLError(err))
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the server's answer: %w", err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		var eb struct {
			Error Error `json:"error"`
		}
		if json.Unmarshal(raw, &eb) != nil || eb.Error.Message == "" {
			return &Error{Status: res.StatusCode, Code: "http", Message: fmt.Sprintf("the server answered %s (is %s an Onceplan server?)", res.Status, c.Server)}
		}
		eb.Error.Status = res.StatusCode
		return &eb.Error
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("the server's answer is not the JSON expected: %w", err)
	}
	return nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
