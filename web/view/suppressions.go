package view

import (
	"net/url"
	"strconv"
)

// suppressionsURL is a page of the suppression list.
func suppressionsURL(query string, includeRemoved bool, after int64) string {
	v := url.Values{}
	if query != "" {
		v.Set("address", query)
	}
	if includeRemoved {
		v.Set("include_removed", "true")
	}
	if after > 0 {
		v.Set("after", strconv.FormatInt(after, 10))
	}
	if len(v) == 0 {
		return "/suppressions"
	}
	return "/suppressions?" + v.Encode()
}
