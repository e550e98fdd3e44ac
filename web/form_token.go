package web

// One-time form tokens: a form sent twice (a reload after the POST, the
// back button, a double click) acts once. Every form the pages render
// carries a fresh token beside the CSRF token (view.WithFormTokens); the
// first POST that carries it runs, and every later one with the same token
// is answered with the first one's redirect, without running again. Only a
// POST that ended in a redirect keeps its token: one that was refused (an
// error, or a form shown again with its field errors, which changed
// nothing) may be sent again.
//
// The tokens live in this process's memory for formTokenTTL: a restart
// forgets them. Creating a campaign also passes the token to the workflow
// as its idempotency key (approval.CreateParams.IdempotencyKey), which the
// database keeps, so that the one form whose repetition would make a
// second something is safe across restarts too.

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

const (
	// formTokenField is the hidden field that carries a form's token.
	formTokenField = "form_token"
	// formTokenTTL is how long a used token is remembered.
	formTokenTTL = time.Hour
	// formTokenMax bounds the tokens remembered; past it the oldest go.
	formTokenMax = 100_000
)

// formUse is a token's first POST: done is closed once it finished, and
// location is then its redirect ("" when it was refused: the entry is gone
// and the form may be sent again).
type formUse struct {
	done     chan struct{}
	location string
}

// formTokens remembers the used tokens, per user.
type formTokens = recent[*formUse]

func newFormTokens() *formTokens { return newRecent[*formUse](formTokenTTL, formTokenMax) }

// onceForm runs a signed-in user's state-changing request once per form
// token. A request without a token (a script, an old page) runs as it is.
func (s *Server) onceForm(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		token := c.FormValue(formTokenField)
		a, signed := actorOf(c)
		if token == "" || len(token) > 64 || !signed {
			return next(c)
		}
		key := strconv.FormatInt(a.UserID, 10) + ":" + token
		for {
			use, used := s.forms.getOrPut(key, s.cfg.Now(), func() *formUse { return &formUse{done: make(chan struct{})} })
			if !used {
				return s.firstUse(c, next, key, use)
			}
			// The same form again: wait for the first to finish, then
			// answer as it did.
			select {
			case <-use.done:
			case <-c.Request().Context().Done():
				return c.Request().Context().Err()
			}
			if use.location != "" {
				return c.Redirect(http.StatusSeeOther, use.location)
			}
			// The first was refused: this one runs (or waits) anew.
		}
	}
}

// firstUse runs the first POST of a form token and records its redirect;
// when it ends otherwise (an error, a page, a panic) the token is
// forgotten, so that the form may be sent again.
func (s *Server) firstUse(c echo.Context, next echo.HandlerFunc, key string, use *formUse) (err error) {
	defer func() {
		if use.location == "" {
			s.forms.take(key, s.cfg.Now())
		}
		close(use.done)
	}()
	err = next(c)
	if res := c.Response(); err == nil && res.Status == http.StatusSeeOther {
		use.location = res.Header().Get(echo.HeaderLocation)
	}
	return err
}

// formTokenOf is the request's form token ("" without one).
func formTokenOf(c echo.Context) string { return c.FormValue(formTokenField) }
