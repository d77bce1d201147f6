package floodgate

import (
	_ "github.com/alicebob/miniredis/v2"
	_ "github.com/puzpuzpuz/xsync/v4"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/sony/gobreaker/v2"
	_ "github.com/stretchr/testify/require"
	_ "go.uber.org/goleak"
	_ "pgregory.net/rapid"
	_ "golang.org/x/time/rate"
)
