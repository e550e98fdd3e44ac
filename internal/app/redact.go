package app

import "net/url"

// redact removes a password from a URL before it is logged or shown.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
