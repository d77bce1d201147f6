//go:build nopeer_xtimerate

package bench

func xtimerateLib() inProc {
	return inProc{name: "xtimerate", skip: notBuilt("golang.org/x/time/rate")}
}
