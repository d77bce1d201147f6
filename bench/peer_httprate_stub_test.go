//go:build nopeer_httprate

package bench

func httprateLib() inProc {
	return inProc{name: "httprate", skip: notBuilt("github.com/go-chi/httprate")}
}
