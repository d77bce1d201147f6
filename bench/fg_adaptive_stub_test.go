//go:build nofg_adaptive

package bench

func floodgateAdaptive() []concLib {
	skip := notBuilt("github.com/floodgate-go/floodgate/adaptive")
	return []concLib{
		{name: "floodgate-vegas", skip: skip},
		{name: "floodgate-gradient2", skip: skip},
		{name: "floodgate-aimd", skip: skip},
	}
}
