package sink

import "strings"

// WithOption adds a provider option ("concurrency=1", "probe=URL") to a
// provider URL, such as one made from a sink's address, with "?" or "&"
// as the URL needs. An empty opt leaves the URL as it is.
func WithOption(u, opt string) string {
	if opt == "" {
		return u
	}
	if strings.Contains(u, "?") {
		return u + "&" + opt
	}
	return u + "?" + opt
}
