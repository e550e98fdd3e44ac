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
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// Text PostgreSQL cannot store: a NUL character (U+0000) is valid in a URL
// (%00), a form and a JSON string (\u0000), and in Go strings, and so are
// bytes that are not UTF-8 (%B8), but PostgreSQL's text and jsonb hold
// neither: left to reach the database, each is a 500 from whichever query
// meets it first. No field of Onceplan's has a use for them, so they are
// refused where the request is read, once for every route: the path and
// query by RefuseBadText (every route of the server), a form by
// BadTextInForm (the UI's forms), a JSON body by BadTextInJSON (the API's
// one decoder; encoding/json already turns invalid UTF-8 in a string into
// U+FFFD). Each answer is a 400 naming the field, before any database
// call.

// badText says what is wrong with s for PostgreSQL, if anything: as is how
// a NUL looks where s came from.
func badText(s, as string) (string, bool) {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character (" + as + ")", true
	case !utf8.ValidString(s):
		return "is not valid UTF-8 text", true
	}
	return "", false
}

// textError is the one answer to bad text: 400, code "invalid", the field,
// and a sentence in the shape of the domain's own field errors
// (onceplan.FieldError: "subject: contains a NUL character (\u0000); remove
// it"); where says where the field is when it is not the JSON body.
func textError(field, where, what string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid", Field: field,
		Message: fmt.Sprintf("%s: %s%s; remove it", field, where, what)}
}

// ctxTextChecked marks a request whose path and query were checked, so
// that the API mounted on the UI's server does not check them twice.
const ctxTextChecked = "httperr.text-checked"

// RefuseBadText is a middleware refusing a request whose path or query
// holds a NUL (raw or percent-encoded) or bytes that are not UTF-8: 400
// naming the path parameter or the query parameter.
func RefuseBadText(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := BadTextInRequest(c); err != nil {
			return err
		}
		return next(c)
	}
}

// BadTextInRequest checks the path (each route parameter, raw and
// decoded) and the query string (each name and value).
func BadTextInRequest(c echo.Context) error {
	if checked, _ := c.Get(ctxTextChecked).(bool); checked {
		return nil
	}
	r := c.Request()
	values := c.ParamValues()
	for i, name := range c.ParamNames() {
		if i >= len(values) {
			break
		}
		if name == "*" {
			name = "path"
		}
		decoded, err := url.PathUnescape(values[i])
		if err != nil {
			decoded = values[i]
		}
		for _, v := range []string{values[i], decoded} {
			if what, bad := badText(v, "%00"); bad {
				return textError(name, "the path segment ", what)
			}
		}
	}
	if what, bad := badText(r.URL.Path, "%00"); bad {
		return textError("path", "the path ", what)
	}
	// Parsed here rather than by c.QueryParams, which drops what it
	// cannot parse: what parsed is what a handler may read.
	q, _ := url.ParseQuery(r.URL.RawQuery)
	for _, name := range slices.Sorted(maps.Keys(q)) {
		for _, v := range append([]string{name}, q[name]...) {
			if what, bad := badText(v, "%00"); bad {
				return textError(name, "the query parameter ", what)
			}
		}
	}
	c.Set(ctxTextChecked, true)
	return nil
}

// BadTextInForm parses a request's form body (urlencoded or multipart, as
// c.FormValue would) and checks each field's name and values, and each
// uploaded file's name (its content is the importer's to judge). A body
// that does not parse is left to the handler, which reads the same parse:
// whatever did parse is checked.
func BadTextInForm(c echo.Context) error {
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
	fields := r.PostForm
	if r.MultipartForm != nil {
		fields = r.MultipartForm.Value
	}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		for _, v := range append([]string{name}, fields[name]...) {
			if what, bad := badText(v, "%00"); bad {
				return textError(name, "the form field ", what)
			}
		}
	}
	if r.MultipartForm != nil {
		for _, name := range slices.Sorted(maps.Keys(r.MultipartForm.File)) {
			for _, fh := range r.MultipartForm.File[name] {
				for _, v := range []string{name, fh.Filename} {
					if what, bad := badText(v, "%00"); bad {
						return textError(name, "the file's name ", what)
					}
				}
			}
		}
	}
	return nil
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// BadTextInJSON checks every string of v, a value json.Decoder filled, for
// a NUL, and names the first it finds by its JSON path ("reason",
// "target.value", "to[1]"). A json.RawMessage (a target list, a tool
// call's args), kept as the client sent it, is checked as JSON text: for a
// \u0000 escape, and for bytes that are not UTF-8; it is named as a whole.
func BadTextInJSON(v any) error {
	if field, what, bad := findBadText(reflect.ValueOf(v), ""); bad {
		return textError(field, "", what)
	}
	return nil
}

func findBadText(v reflect.Value, path string) (field, what string, bad bool) {
	if !v.IsValid() {
		return "", "", false
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "", "", false
		}
		return findBadText(v.Elem(), path)
	case reflect.String:
		what, bad := badText(v.String(), `\u0000`)
		return path, what, bad
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
			if field, what, bad := findBadText(v.Field(i), sub); bad {
				return field, what, true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type() == rawMessageType {
			switch raw := v.Bytes(); {
			case rawHasNUL(raw):
				return path, `contains a NUL character (\u0000)`, true
			case !utf8.Valid(raw):
				return path, "is not valid UTF-8 text", true
			}
			return "", "", false
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "", "", false // bytes (base64 in JSON), not text
		}
		for i := range v.Len() {
			if field, what, bad := findBadText(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); bad {
				return field, what, true
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			k := fmt.Sprint(iter.Key().Interface())
			if what, bad := badText(k, `\u0000`); bad {
				return path, what, true
			}
			if field, what, bad := findBadText(iter.Value(), join(path, k)); bad {
				return field, what, true
			}
		}
	}
	return "", "", false
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
