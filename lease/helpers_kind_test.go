package lease_test

import (
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// kindOf returns the Kind of one of the five configurations.
func kindOf(alg floodgate.Algorithm) step.Kind {
	k, err := step.KindOf(alg)
	if err != nil {
		panic(err)
	}
	return k
}
