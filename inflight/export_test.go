package inflight

// LocalShards is the number of shards of a LocalStore's table.
func LocalShards() int { return localShards() }
