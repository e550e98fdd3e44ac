package api

import "net/http"

// OpenAPI is the API's OpenAPI 3.1 document, as GET /openapi.yaml serves
// it.
func OpenAPI() []byte { return openAPI }

// Routes lists "METHOD /path" of every API route (with {param} syntax),
// the document's own route included.
func Routes() []string {
	var out []string
	for _, r := range routes() {
		out = append(out, r.Method+" "+Prefix+r.Path)
	}
	out = append(out, http.MethodGet+" "+Prefix+"/openapi.yaml")
	return out
}
