package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/onceplan/onceplan/web/view"
)

//go:embed static
var staticFS embed.FS

// asset is one embedded static file, served at a URL that carries its
// checksum so that it can be cached for good.
type asset struct {
	body        []byte
	contentType string
}

// assets maps checksummed names ("app.1a2b3c4d5e.css") to files, and the
// plain names to their checksummed URLs.
type assets struct {
	byName map[string]asset
	urls   map[string]string
}

func loadAssets() *assets {
	a := &assets{byName: map[string]asset{}, urls: map[string]string{}}
	err := fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		base := path.Base(p)
		ext := path.Ext(base)
		name := strings.TrimSuffix(base, ext) + "." + hex.EncodeToString(sum[:5]) + ext
		ct := mime.TypeByExtension(ext)
		if ct == "" {
			ct = "application/octet-stream"
		}
		a.byName[name] = asset{body: body, contentType: ct}
		a.urls[base] = "/static/" + name
		return nil
	})
	if err != nil {
		// The files are compiled in: failing to read them is a build bug.
		panic("web: reading embedded assets: " + err.Error())
	}
	return a
}

func (a *assets) view() view.Assets {
	return view.Assets{CSS: a.urls["app.css"], JS: a.urls["app.js"]}
}

// handleStatic serves an embedded file by its checksummed name.
func (s *Server) handleStatic(c echo.Context) error {
	f, ok := s.assets.byName[c.Param("name")]
	if !ok {
		return echo.NewHTTPError(http.StatusNotFound, "no such file")
	}
	h := c.Response().Header()
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	return c.Blob(http.StatusOK, f.contentType, f.body)
}
