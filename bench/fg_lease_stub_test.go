//go:build nofg_lease || nofg_redisstore

package bench

func floodgateLease() remoteLib {
	return remoteLib{name: "floodgate-lease", skip: notBuilt("github.com/floodgate-go/floodgate/lease")}
}
