package shard

import "math/bits"

// Slotter is what a Store that places keys on hash slots, as
// *redisstore.Store does on a Redis Cluster, tells the shards: the slot of
// a key's state, 0 to Slots-1, or -1 when the store cannot say. New uses
// it when the inner Store has this method.
type Slotter interface {
	Slot(key string) int
}

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Each shard key is a suffix of sfxLen bytes, then ':' and the user's key.
// A suffix byte is '@' (0x40) with a nibble in its low bits ('@' to 'O'),
// so that the bytes are the nibbles XOR a constant and a CRC of the key
// (Redis' CRC16, which has no final XOR) is an affine function of the
// suffix's sfxBits bits.
const (
	sfxLen  = 5
	sfxBits = 4 * sfxLen
)

// shardKey returns the key of the suffix s for key.
func shardKey(s uint32, key string) string {
	var b [sfxLen + 1]byte
	for j := range sfxLen {
		b[j] = 0x40 | byte(s>>(4*j))&0xF
	}
	b[sfxLen] = ':'
	return string(b[:]) + key
}

// place returns the keys of k shards of key whose slots under sl are
// spread evenly: shard i's slot is (c + ⌊i·Slots/k⌋) mod Slots, c the
// slot of shard 0, exactly when sl's slot is an affine function of the
// suffix (Redis' CRC16 of a hash tag holding it: redisstore without
// HashKeys), and within ±1% of Slots/k of it (at least ±1 slot) otherwise
// (a search over suffixes: redisstore with HashKeys). Without sl, or when
// sl cannot place key, the shards take suffixes 0 to k-1.
func place(sl Slotter, key string, k int) []string {
	keys := make([]string, k)
	if sl == nil {
		return plain(keys, key)
	}
	c := sl.Slot(shardKey(0, key))
	if c < 0 || c >= Slots {
		return plain(keys, key)
	}
	targets := make([]int, k)
	for i := range targets {
		targets[i] = (c + i*Slots/k) % Slots
	}
	if s, ok := solve(sl, key, c, targets); ok {
		for i := range keys {
			keys[i] = shardKey(s[i], key)
		}
		return keys
	}
	return search(sl, keys, key, targets)
}

// plain sets keys to the suffixes 0 to len(keys)-1 of key.
func plain(keys []string, key string) []string {
	for i := range keys {
		keys[i] = shardKey(uint32(i), key)
	}
	return keys
}

// solve finds, for each target slot, the suffix whose key sl places there,
// treating the slot as the affine function of the suffix's bits that a
// CRC of a hash tag holding the suffix is: c XOR the XOR of the columns
// of the bits set, column j being the slot of bit j alone XOR c. It checks
// that the function is affine on a few suffixes, and fails when it is not
// or when the columns do not span every slot.
func solve(sl Slotter, key string, c int, targets []int) ([]uint32, bool) {
	var cols [sfxBits]int
	for j := range cols {
		v := sl.Slot(shardKey(1<<j, key))
		if v < 0 || v >= Slots {
			return nil, false
		}
		cols[j] = v ^ c
	}
	eval := func(s uint32) int {
		v := c
		for s != 0 {
			j := bits.TrailingZeros32(s)
			v ^= cols[j]
			s &= s - 1
		}
		return v
	}
	for _, s := range [...]uint32{0x5a5a5, 0xfffff, 0x13579, 0xc0ffe} {
		if sl.Slot(shardKey(s, key)) != eval(s) {
			return nil, false
		}
	}
	// Gaussian elimination over GF(2): basis[p] is a column combination
	// whose highest set bit is p, and combo[p] the suffix bits it sums.
	var basis, combo [14]int
	have := 0
	for j, v := range cols {
		m := 1 << j
		for p := 13; p >= 0 && v != 0; p-- {
			if v&(1<<p) == 0 {
				continue
			}
			if basis[p] == 0 {
				basis[p], combo[p] = v, m
				have++
				break
			}
			v ^= basis[p]
			m ^= combo[p]
		}
	}
	if have < 14 {
		return nil, false
	}
	out := make([]uint32, len(targets))
	for i, t := range targets {
		x, m := t^c, 0
		for p := 13; p >= 0; p-- {
			if x&(1<<p) != 0 {
				x ^= basis[p]
				m ^= combo[p]
			}
		}
		out[i] = uint32(m)
	}
	return out, true
}

// searchBudget bounds the suffixes search tries for one key: at 16 shards
// a shard's window holds 21 of the 16,384 slots, found in about 780 tries.
const searchBudget = 1 << sfxBits

// search sets keys[i] to the first suffix, after those of the shards
// before it, whose slot under sl is within ±1% of Slots/len(keys) (at
// least ±1 slot) of targets[i]; or the closest it saw, if none is within
// searchBudget tries in all; or, once they are spent, the next suffix.
func search(sl Slotter, keys []string, key string, targets []int) []string {
	k := len(keys)
	w := max(Slots/k/100, 1)
	s, tries := uint32(0), 0
	for i := range keys {
		best, bestD := uint32(0), Slots+1
		for ; tries < searchBudget; tries++ {
			s++
			v := sl.Slot(shardKey(s, key))
			if v < 0 {
				continue
			}
			d := v - targets[i]
			if d < 0 {
				d = -d
			}
			d = min(d, Slots-d)
			if d < bestD {
				best, bestD = s, d
			}
			if d <= w {
				break
			}
		}
		if bestD > Slots {
			// sl placed none (or the budget is spent): a suffix no shard
			// has, since s only grows.
			s++
			best = s
		}
		keys[i] = shardKey(best, key)
	}
	return keys
}
