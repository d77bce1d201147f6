//go:build nofg_redisstore

package bench

func floodgateRedis() []remoteLib {
	skip := notBuilt("github.com/floodgate-go/floodgate/redisstore")
	return []remoteLib{
		{name: "floodgate", skip: skip},
		{name: "floodgate-unbatched", skip: skip},
		{name: "floodgate-fixedwindow", skip: skip},
	}
}

func floodgateRedisAlgorithms() []remoteLib {
	skip := notBuilt("github.com/floodgate-go/floodgate/redisstore")
	return []remoteLib{
		{name: "floodgate", skip: skip},
		{name: "floodgate-leakybucket", skip: skip},
		{name: "floodgate-fixedwindow", skip: skip},
		{name: "floodgate-slidingwindow", skip: skip},
		{name: "floodgate-slidinglog", skip: skip},
	}
}
