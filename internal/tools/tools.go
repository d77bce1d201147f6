//go:build tools

// Package tools pins modules that packages under construction will import,
// so that go mod tidy keeps them. It is never built.
package tools

import (
	_ "github.com/alicebob/miniredis/v2"
	_ "github.com/puzpuzpuz/xsync/v4"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/sony/gobreaker/v2"
)
