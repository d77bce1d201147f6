//go:build nopeer_ulule

package bench

func ululeLib() inProc {
	return inProc{name: "ulule", skip: notBuilt("github.com/ulule/limiter/v3")}
}

func ululeRedisLib() remoteLib {
	return remoteLib{name: "ulule", skip: notBuilt("github.com/ulule/limiter/v3")}
}
