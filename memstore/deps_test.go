package memstore_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMemstoreLinksNoFeature: a program of memstore and the root package
// links none of floodgate's features (in-flight limits, observation, the
// lease layer, Redis): a store imports no feature, so that the smallest
// program stays small (bench/cmd/binsize measures it).
func TestMemstoreLinksNoFeature(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/floodgate-go/floodgate/memstore").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case "github.com/floodgate-go/floodgate/inflight",
			"github.com/floodgate-go/floodgate/observe",
			"github.com/floodgate-go/floodgate/lease",
			"github.com/floodgate-go/floodgate/redisstore",
			"github.com/redis/go-redis/v9":
			t.Errorf("memstore depends on %s", dep)
		}
	}
}
