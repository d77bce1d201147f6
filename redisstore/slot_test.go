package redisstore

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestSlotOf(t *testing.T) {
	// The check value of CRC16/XMODEM, and slots given by the Cluster
	// specification and CLUSTER KEYSLOT.
	require.Equal(t, uint16(0x31c3&16383), slotOf("123456789"))
	require.Equal(t, uint16(12182), slotOf("foo"))
	require.Equal(t, slotOf("user1000"), slotOf("{user1000}.following"))
	require.Equal(t, slotOf("{user1000}.following"), slotOf("{user1000}.followers"))
	require.Equal(t, slotOf("bar"), slotOf("foo{bar}{zap}"), "the first tag")
	require.Equal(t, slotOf("{bar"), slotOf("foo{{bar}}zap"), "a tag up to the first '}'")
	require.NotEqual(t, slotOf("bar"), slotOf("foo{}{bar}"), "an empty tag hashes the whole key")
	require.Equal(t, uint16(0), slotOf(""))

	addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
	if addrs == "" {
		t.Skip("set REDIS_CLUSTER_ADDRS to check against CLUSTER KEYSLOT")
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	defer c.Close()
	keys := []string{"foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}", "}{", "{a}"}
	for i := range 2000 {
		keys = append(keys, "fg:{k"+strconv.Itoa(i*7919)+"}:tb", "k}{"+strconv.Itoa(i)+"{")
	}
	for _, key := range keys {
		want, err := c.ClusterKeySlot(context.Background(), key).Result()
		require.NoError(t, err)
		require.Equal(t, uint16(want), slotOf(key), key)
	}
}
