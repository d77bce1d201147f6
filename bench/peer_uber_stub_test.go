//go:build nopeer_uber

package bench

func uberLib() inProc {
	return inProc{name: "uber", skip: notBuilt("go.uber.org/ratelimit")}
}
