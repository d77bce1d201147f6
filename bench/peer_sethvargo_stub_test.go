//go:build nopeer_sethvargo

package bench

func sethvargoLib() inProc {
	return inProc{name: "sethvargo", skip: notBuilt("github.com/sethvargo/go-limiter")}
}
