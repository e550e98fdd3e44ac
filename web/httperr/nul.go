package httperr

import (
	"encoding/json"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

// A NUL character (U+0000) is valid in a URL (%00), a form and a JSON
// string (\u0000), and in Go strings, but PostgreSQL's text and jsonb
// cannot hold it: left to reach the database it is a 500 from whichever
// query meets it first. No field of Onceplan's has a use for it, so it is
// refused where the request is read, once for every route: the path and
// query by RefuseNUL (every route of the server), a form by NULInForm
// (the UI's forms), a JSON body by NULInJSON (the API's one decoder).
// Each answer is a 400 naming the field, before any database call.

// nulError is the one answer to a NUL: 400, code "invalid", the field,
// and a sentence in the shape of the domain's own field errors
// (plan.FieldError: "subject: contains a NUL character (\u0000); remove
// it"), where says where the field is when it is not the JSON body.
func nulError(field, where, as string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid", Field: field,
		Message: fmt.Sprintf("%s: %scontains a NUL character (%s); remove it", field, where, as)}
}

// ctxNULChecked marks a request whose path and query were checked, so
// that the API mounted on the UI's server does not check them twice.
const ctxNULChecked = "httperr.nul-checked"

// RefuseNUL is a middleware refusing a request whose path or query holds a
// NUL, raw or percent-encoded: 400 naming the path parameter or the query
// parameter.
func RefuseNUL(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := NULInRequest(c); err != nil {
			return err
		}
		return next(c)
	}
}

// NULInRequest checks the path (each route parameter, raw and decoded)
// and the query string (each name and value) for a NUL.
func NULInRequest(c echo.Context) error {
	if checked, _ := c.Get(ctxNULChecked).(bool); checked {
		return nil
	}
	r := c.Request()
	values := c.ParamValues()
	for i, name := range c.ParamNames() {
		if i >= len(values) {
			break
		}
		v := values[i]
		decoded, _ := url.PathUnescape(v)
		if strings.ContainsRune(v, 0) || strings.ContainsRune(decoded, 0) {
			if name == "*" {
				name = "path"
			}
			return nulError(name, "the path segment ", "%00")
		}
	}
	if strings.ContainsRune(r.URL.Path, 0) || strings.Contains(strings.ToLower(r.URL.RawPath), "%00") {
		return nulError("path", "the path ", "%00")
	}
	// Parsed here rather than by c.QueryParams, which drops what it
	// cannot parse: what parsed is what a handler may read.
	q, _ := url.ParseQuery(r.URL.RawQuery)
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if strings.ContainsRune(name, 0) || slices.ContainsFunc(q[name], func(v string) bool { return strings.ContainsRune(v, 0) }) {
			return nulError(name, "the query parameter ", "%00")
		}
	}
	c.Set(ctxNULChecked, true)
	return nil
}

// NULInForm parses a request's form body (urlencoded or multipart, as
// c.FormValue would) and checks each field's name and values, and each
// uploaded file's name, for a NUL. A body that does not parse is left to
// the handler, which reads the same parse: whatever did parse is checked.
func NULInForm(c echo.Context) error {
	r := c.Request()
	media, _, _ := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
	switch media {
	case echo.MIMEMultipartForm:
		_ = r.ParseMultipartForm(32 << 20) // the memory c.FormValue uses
	case echo.MIMEApplicationForm:
		_ = r.ParseForm()
	default:
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(r.PostForm)) {
		if strings.ContainsRune(name, 0) || slices.ContainsFunc(r.PostForm[name], func(v string) bool { return strings.ContainsRune(v, 0) }) {
			return nulError(name, "the form field ", "%00")
		}
	}
	if r.MultipartForm != nil {
		for _, name := range slices.Sorted(maps.Keys(r.MultipartForm.Value)) {
			if strings.ContainsRune(name, 0) || slices.ContainsFunc(r.MultipartForm.Value[name], func(v string) bool { return strings.ContainsRune(v, 0) }) {
				return nulError(name, "the form field ", "%00")
			}
		}
		for _, name := range slices.Sorted(maps.Keys(r.MultipartForm.File)) {
			for _, fh := range r.MultipartForm.File[name] {
				if strings.ContainsRune(name, 0) || strings.ContainsRune(fh.Filename, 0) {
					return nulError(name, "the file's name ", "%00")
				}
			}
		}
	}
	return nil
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// NULInJSON checks every string of v, a value json.Decoder filled, for a
// NUL, and names the first it finds by its JSON path ("reason",
// "target.value", "to[1]"). A json.RawMessage (a target list, a tool
// call's args) is checked as its JSON text, for a \u0000 escape, and
// named as a whole.
func NULInJSON(v any) error {
	if field, ok := findNUL(reflect.ValueOf(v), ""); ok {
		return nulError(field, "", `\u0000`)
	}
	return nil
}

func findNUL(v reflect.Value, path string) (string, bool) {
	if !v.IsValid() {
		return "", false
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", false
		}
		return findNUL(v.Elem(), path)
	case reflect.String:
		return path, strings.ContainsRune(v.String(), 0)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			sub := path
			switch {
			case f.Anonymous && name == "":
				// An embedded struct's fields are its parent's in JSON.
			case name == "":
				sub = join(path, f.Name)
			default:
				sub = join(path, name)
			}
			if p, ok := findNUL(v.Field(i), sub); ok {
				return p, true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type() == rawMessageType {
			return path, rawHasNUL(v.Bytes())
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", false // bytes (base64 in JSON), not text
		}
		for i := range v.Len() {
			if p, ok := findNUL(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, true
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			k := fmt.Sprint(iter.Key().Interface())
			if strings.ContainsRune(k, 0) {
				return path, true
			}
			if p, ok := findNUL(iter.Value(), join(path, k)); ok {
				return p, true
			}
		}
	}
	return "", false
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// rawHasNUL reports whether valid JSON text holds a \u0000 escape (a raw
// NUL byte cannot be in valid JSON: the decoder refused it already). In
// valid JSON a backslash appears only as an escape inside a string, so
// each one starts an escape that the scan steps over whole.
func rawHasNUL(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+5 < len(b) && b[i+1] == 'u' && string(b[i+2:i+6]) == "0000" {
			return true
		}
		i++ // the escaped character
	}
	return false
}
