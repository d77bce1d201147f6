//go:build !nopeer_httprate

package bench

import (
	"net/http"
	"net/http/httptest"

	"github.com/go-chi/httprate"
)

// httprateLib is github.com/go-chi/httprate's RateLimiter with its local
// counter: a sliding window counter behind one limiter-wide mutex. Its
// decision is OnLimit(w, r, key), which also writes response headers; the
// headers are turned off (WithResponseHeaders of empty names) so that it is
// compared on the decision alone, and one request and one recorder are
// reused.
func httprateLib() inProc {
	return inProc{name: "httprate", open: func(q quota) (func(string) bool, func(), error) {
		rl := httprate.NewRateLimiter(int(q.Limit), q.Period, httprate.WithResponseHeaders(httprate.ResponseHeaders{}))
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		allow := func(key string) bool { return !rl.OnLimit(w, r, key) }
		return allow, func() {}, nil
	}}
}
