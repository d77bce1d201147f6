//go:build nopeer_redisrate

package bench

func redisrateLib() remoteLib {
	return remoteLib{name: "redis_rate", skip: notBuilt("github.com/go-redis/redis_rate/v10")}
}
