package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/inflight"
)

func ExampleNewInflight() {
	lim, _ := inflight.New(inflight.NewLocalStore(), 1, nil) // one export per API key at a time
	defer lim.Close()
	mw, err := httplimit.NewInflight(lim, &httplimit.InflightOptions{
		Key: httplimit.KeyByAPIKey("X-API-Key"),
	})
	if err != nil {
		panic(err)
	}
	var inner *httptest.ResponseRecorder
	var export http.Handler
	export = mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// While this export runs, another by the same key is refused.
		inner = httptest.NewRecorder()
		export.ServeHTTP(inner, r)
		fmt.Fprintln(w, "exported")
	}))

	req := httptest.NewRequest(http.MethodGet, "/export", nil)
	req.Header.Set("X-API-Key", "secret")
	rec := httptest.NewRecorder()
	export.ServeHTTP(rec, req)
	fmt.Println(rec.Code, inner.Code, inner.Header().Get("Retry-After"))
	// Output:
	// 200 429 1
}
